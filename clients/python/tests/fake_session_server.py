"""TEST ONLY: a fake of ``rljail session`` that runs cells with ``exec`` in its own process.

It is NOT a jail and must never be used as an executor: no namespace, no seccomp, no
limits, the cell shares this process with the "supervisor".  It exists so that the
Python package's unit tests can exercise the session protocol (docs/session-protocol.md,
as the package README describes it) before the real ``rljail session`` is available, and
it follows the wire format the lead engineer decided.  Started as

    python3 fake_session_server.py session [flags of rljail session]

it reads JSON lines on stdin continuously (a reader thread: ``interrupt`` and
``call_result`` arrive while a cell runs), runs cells on the main thread, and writes
replies and call events on stdout.  Budgets are enforced here simply, as the real
supervisor does in Go.  Volumes ``-v SRC:DST`` are emulated by translating paths under
DST to SRC in ``load_context`` and in the cells' ``open``.
"""

import base64
import builtins
import io
import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

PROTOCOL = 1


class Config:
    def __init__(self, argv, fake_tmp=None):
        self.fake_tmp = fake_tmp
        self.cell_timeout = None
        self.cell_grace = 1.0
        self.max_cells = None
        self.max_output_chars = 10000
        self.max_llm_calls = 50
        self.max_tool_calls = None
        self.max_llm_prompt_chars = None
        self.llm = "client"
        self.tools = {}
        self.volumes = []  # (host, jail, mode)
        self.env = {}
        self.flags = {}
        i = 0
        while i < len(argv):
            arg = argv[i]
            if not arg.startswith("-"):
                i += 1
                continue
            if arg == "--strict-limits" or arg == "-q":
                self.flags[arg] = True
                i += 1
                continue
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 2
            if arg == "--cell-timeout":
                self.cell_timeout = seconds(value)
            elif arg == "--cell-grace":
                self.cell_grace = seconds(value)
            elif arg == "--max-cells":
                self.max_cells = int(value)
            elif arg == "--max-output-chars":
                self.max_output_chars = int(value)
            elif arg == "--max-llm-calls":
                self.max_llm_calls = int(value)
            elif arg == "--max-tool-calls":
                self.max_tool_calls = int(value)
            elif arg == "--max-llm-prompt-chars":
                self.max_llm_prompt_chars = int(value)
            elif arg == "--llm":
                self.llm = value
            elif arg == "--tool":
                name, _, params = value.partition(":")
                self.tools[name] = [p for p in params.split(",") if p]
            elif arg in ("-v", "--volume"):
                parts = value.split(":")
                mode = parts[2] if len(parts) > 2 else "ro"
                self.volumes.append((parts[0], parts[1], mode))
            elif arg in ("-e", "--env"):
                key, _, val = value.partition("=")
                self.env[key] = val
            else:
                self.flags[arg] = value


def seconds(text):
    text = str(text)
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


class LLMBudgetExceeded(Exception):
    """Raised in the cell when a call would exceed the session's budget."""


class Server:
    def __init__(self, cfg):
        self.cfg = cfg
        # The protocol keeps a descriptor of its own; descriptor 1 becomes stderr, so a
        # cell's os.write(1, ...) cannot put the protocol out of step.
        self.out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)
        self.write_lock = threading.Lock()
        self.requests = queue.Queue()
        self.calls = {}          # call id -> [event, value, error]
        self.calls_lock = threading.Lock()
        self.next_call = 1
        self.counts = {"llm_calls": 0, "tool_calls": 0}
        self.cells = 0
        self.lost = None
        self.running = False
        self.tmp = tempfile.mkdtemp(prefix="fake-rljail-", dir=cfg.fake_tmp)
        os.chdir(self.tmp)  # the "jail's" working directory: its own
        self.contexts = 0
        self.ns = {"__name__": "__main__", "__builtins__": self._builtins()}
        self.bridge = {}
        self._install_bridge()

    # ------------------------------------------------------------ output

    def send(self, obj):
        line = json.dumps(obj, ensure_ascii=False)
        with self.write_lock:
            self.out.write(line + "\n")
            self.out.flush()

    def reply(self, rid, **fields):
        msg = {"id": rid, "ok": True}
        msg.update(fields)
        self.send(msg)

    def fail(self, rid, etype, message, **extra):
        err = {"type": etype, "message": message}
        err.update(extra)
        self.send({"id": rid, "ok": False, "error": err})

    # ------------------------------------------------------------ paths

    def host_path(self, path, writable=False):
        path = os.path.normpath(path)
        best = None
        for host, jail, mode in self.cfg.volumes:
            jail = os.path.normpath(jail)
            if path == jail or path.startswith(jail + "/"):
                if best is None or len(jail) > len(best[1]):
                    best = (host, jail, mode)
        if best is not None:
            if writable and best[2] != "rw":
                raise PermissionError("read-only volume: %s" % path)
            return best[0] + path[len(best[1]):]
        if path == "/tmp" or path.startswith("/tmp/"):
            return os.path.join(self.tmp, path[5:])
        if writable:
            raise PermissionError("not a writable place in the jail: %s" % path)
        raise FileNotFoundError(path)

    def _builtins(self):
        table = dict(builtins.__dict__)
        real_open = builtins.open
        server = self

        def jail_open(file, mode="r", *args, **kwargs):
            if isinstance(file, str) and file.startswith("/"):
                file = server.host_path(file, writable=any(c in mode for c in "wax+"))
            return real_open(file, mode, *args, **kwargs)

        table["open"] = jail_open
        return table

    # ------------------------------------------------------------ the bridge

    def _install_bridge(self):
        server = self

        def call(name, args, prompts=0, chars=0):
            # Counted before the call leaves, under one lock: threads racing in one cell
            # cannot get past the budget.
            with server.calls_lock:
                if prompts:
                    cfg = server.cfg
                    if cfg.max_llm_prompt_chars is not None and chars > cfg.max_llm_prompt_chars:
                        raise LLMBudgetExceeded("prompt of %d chars over --max-llm-prompt-chars %d"
                                                % (chars, cfg.max_llm_prompt_chars))
                    if server.counts["llm_calls"] + prompts > cfg.max_llm_calls:
                        raise LLMBudgetExceeded("%d + %d llm calls over --max-llm-calls %d"
                                                % (server.counts["llm_calls"], prompts, cfg.max_llm_calls))
                    server.counts["llm_calls"] += prompts
                else:
                    if (server.cfg.max_tool_calls is not None
                            and server.counts["tool_calls"] + 1 > server.cfg.max_tool_calls):
                        raise LLMBudgetExceeded("tool calls over --max-tool-calls %d" % server.cfg.max_tool_calls)
                    server.counts["tool_calls"] += 1
                cid = server.next_call
                server.next_call += 1
                slot = [threading.Event(), None, None]
                server.calls[cid] = slot
            server.send({"event": "call", "call": cid, "name": name, "args": args})
            try:
                slot[0].wait()
            finally:
                with server.calls_lock:
                    server.calls.pop(cid, None)
            if slot[2] is not None:
                raise RuntimeError(slot[2])
            return slot[1]

        def llm_query(prompt, model=None):
            return call("llm_query", {"prompt": prompt, "model": model}, 1, len(str(prompt)))

        def llm_query_batched(prompts, model=None):
            prompts = list(prompts)
            return call("llm_query_batched", {"prompts": prompts, "model": model},
                        len(prompts), max([len(str(p)) for p in prompts] or [0]))

        def rlm_query(prompt, model=None):
            return call("rlm_query", {"prompt": prompt, "model": model}, 1, len(str(prompt)))

        def rlm_query_batched(prompts, model=None):
            prompts = list(prompts)
            return call("rlm_query_batched", {"prompts": prompts, "model": model},
                        len(prompts), max([len(str(p)) for p in prompts] or [0]))

        self.bridge = {"llm_query": llm_query, "llm_query_batched": llm_query_batched,
                       "rlm_query": rlm_query, "rlm_query_batched": rlm_query_batched,
                       "LLMBudgetExceeded": LLMBudgetExceeded}
        for tname, params in self.cfg.tools.items():
            self.bridge[tname] = _make_tool(call, tname, params)
        self.ns.update(self.bridge)

    def answer_call(self, rid, msg):
        cid = msg.get("call")
        with self.calls_lock:
            slot = self.calls.get(cid)
        if slot is None:
            self.fail(rid, "UnknownCall", "no call %r is waiting" % (cid,))
            return
        if "error" in msg:
            slot[2] = str(msg["error"])
        else:
            slot[1] = msg.get("value")
        slot[0].set()
        self.reply(rid)

    # ------------------------------------------------------------ reading

    def read_loop(self):
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline(1 << 20)
            if not line:
                if self.lost is not None:
                    os._exit(0)  # the cell that would not stop dies with the "jail"
                self.requests.put(None)
                return
            try:
                msg = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                self.fail(None, "BadRequest", "not a JSON line")
                continue
            if not isinstance(msg, dict) or "id" not in msg:
                self.fail(None, "BadRequest", "a request needs an id")
                continue
            rid, op = msg.get("id"), msg.get("op")
            if self.lost is not None:
                self.fail(rid, "SessionLost", "the session is lost", reason=self.lost)
                if op == "close":
                    os._exit(0)
                continue
            if op == "interrupt":
                if self.running:
                    os.kill(os.getpid(), signal.SIGINT)
                self.reply(rid)
            elif op == "call_result":
                self.answer_call(rid, msg)
            else:
                self.requests.put(msg)

    # ------------------------------------------------------------ ops

    def on_sigint(self, signum, frame):
        # Only a running cell is interrupted; a late signal after it ended is dropped.
        if self.running:
            raise KeyboardInterrupt

    def serve(self):
        signal.signal(signal.SIGINT, self.on_sigint)
        threading.Thread(target=self.read_loop, daemon=True).start()
        while True:
            msg = self.requests.get()
            if msg is None or msg.get("op") == "close":
                if msg is not None:
                    self.reply(msg["id"])
                return
            rid, op = msg["id"], msg.get("op")
            try:
                handler = getattr(self, "op_" + str(op), None)
                if handler is None:
                    self.fail(rid, "UnknownOp", "unknown op %r" % (op,))
                else:
                    handler(rid, msg)
            except KeyboardInterrupt:
                self.fail(rid, "Interrupted", "interrupted outside a cell")
            except Exception as e:
                self.fail(rid, type(e).__name__, str(e))

    def op_hello(self, rid, msg):
        self.reply(rid, protocol=PROTOCOL, version="fake-0",
                   limits={"cell_timeout_ms": None if self.cfg.cell_timeout is None
                           else int(self.cfg.cell_timeout * 1000),
                           "max_output_chars": self.cfg.max_output_chars,
                           "max_llm_calls": self.cfg.max_llm_calls,
                           "tools": sorted(self.cfg.tools)})

    def op_set(self, rid, msg):
        self.ns[str(msg["name"])] = msg.get("value")
        self.reply(rid)

    def op_get(self, rid, msg):
        name = str(msg["name"])
        if name not in self.ns:
            self.fail(rid, "NameError", "name %r is not defined" % name)
            return
        value = self.ns[name]
        try:
            json.dumps(value, allow_nan=False)
            self.reply(rid, value=value)
        except (TypeError, ValueError):
            self.reply(rid, value=repr(value), repr=True)

    def op_load_context(self, rid, msg):
        if "path" in msg:
            path = self.host_path(str(msg["path"]))
            with open(path, encoding="utf-8") as f:
                value = json.load(f) if path.endswith(".json") else f.read()
        else:
            value = msg.get("value")
        name = "context_%d" % self.contexts
        self.ns[name] = value
        if self.contexts == 0:
            self.ns["context"] = value
        self.contexts += 1
        self.reply(rid, name=name)

    def op_put_file(self, rid, msg):
        path = self.host_path(str(msg["path"]), writable=True)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(msg.get("data") or ""))
        self.reply(rid)

    def op_get_file(self, rid, msg):
        path = self.host_path(str(msg["path"]), writable=True)
        with open(path, "rb") as f:
            self.reply(rid, data=base64.b64encode(f.read()).decode("ascii"))

    def op_exec(self, rid, msg):
        if self.cfg.max_cells is not None and self.cells >= self.cfg.max_cells:
            self.fail(rid, "CellBudgetExceeded", "--max-cells %d reached" % self.cfg.max_cells)
            return
        self.cells += 1
        code = msg.get("code")
        out, err = io.StringIO(), io.StringIO()
        error = None
        timed_out = threading.Event()
        done = threading.Event()

        def watchdog():
            if done.wait(self.cfg.cell_timeout):
                return
            timed_out.set()
            os.kill(os.getpid(), signal.SIGINT)
            if done.wait(self.cfg.cell_grace):
                return
            # The cell ignored the interrupt: the real supervisor kills the jail here.
            self.lost = "cell_timeout"
            self.fail(rid, "SessionLost", "the cell did not stop within the grace",
                      reason="cell_timeout")

        if self.cfg.cell_timeout is not None:
            threading.Thread(target=watchdog, daemon=True).start()
        start, cpu0 = time.monotonic(), time.process_time()
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        self.running = True
        try:
            exec(compile(code, "<cell>", "exec"), self.ns)
        except KeyboardInterrupt:
            if timed_out.is_set():
                error = {"type": "CellTimeout", "message": "the cell ran past --cell-timeout %gs"
                         % self.cfg.cell_timeout, "traceback": ""}
            else:
                error = {"type": "KeyboardInterrupt", "message": "", "traceback": traceback.format_exc()}
        except BaseException as e:  # SystemExit too: the cell's, not the session's
            error = {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}
        finally:
            self.running = False
            done.set()
            sys.stdout, sys.stderr = old
        if self.lost is not None:
            return
        stdout, scut = self.cap(out.getvalue())
        stderr, ecut = self.cap(err.getvalue())
        variables = sorted(k for k, v in self.ns.items()
                           if not k.startswith("_") and self.bridge.get(k) is not v)
        self.reply(rid, stdout=stdout, stderr=stderr, stdout_truncated=scut, stderr_truncated=ecut,
                   error=error, wall_ms=round((time.monotonic() - start) * 1000, 3),
                   cpu_ms=round((time.process_time() - cpu0) * 1000, 3), variables=variables,
                   calls=dict(self.counts))

    def cap(self, text):
        limit = self.cfg.max_output_chars
        if len(text) <= limit:
            return text, 0
        head = limit // 2
        tail = limit - head
        cut = len(text) - limit
        return text[:head] + "\n[... %d characters cut ...]\n" % cut + text[-tail:], cut


def _make_tool(call, name, params):
    def tool(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s() takes %d arguments" % (name, len(params)))
        values = dict(zip(params, args))
        for key, value in kwargs.items():
            if key not in params:
                raise TypeError("%s() got an unexpected keyword argument %r" % (name, key))
            values[key] = value
        return call(name, values)

    tool.__name__ = name
    return tool


def main(argv):
    fake_tmp = None
    if argv[:1] == ["--fake-tmp"]:
        fake_tmp, argv = argv[1], argv[2:]
    if not argv or argv[0] != "session":
        sys.stderr.write("fake rljail: only 'session' is faked\n")
        return 125
    server = Server(Config(argv[1:], fake_tmp))
    try:
        server.serve()
    finally:
        shutil.rmtree(server.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
