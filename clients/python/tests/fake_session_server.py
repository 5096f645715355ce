"""TEST ONLY: a fake of ``rljail session`` that runs cells with ``exec`` in its own process.

It is NOT a jail and must never be used as an executor: no namespace, no seccomp, no
limits, the cell shares this process with the "supervisor".  It exists so that the
Python package's unit tests can exercise the session protocol quickly and without root:
it answers as docs/session-protocol.md says the real ``rljail session`` does (its reply
fields, error types and SessionLost reasons, and the bridge's call events and
``call_result``), and tests/test_real_binary.py runs the same contract against the real
binary, so that a difference between the two shows there.  Started as

    python3 fake_session_server.py session [flags of rljail session]

it reads JSON lines on stdin continuously (a reader thread answers ``hello``,
``interrupt``, ``call_result``, malformed lines, ``close`` with ``now`` and ``Busy`` for
a full queue at once), runs worker requests and ``close`` in order on the main thread, and writes replies and call events on stdout.
Budgets are enforced here simply, as the real bridge does in Go.  Volumes ``-v
SRC:DST`` (and rljail's workspace: the current directory at ``/workspace`` unless
``--no-workspace``) are emulated by translating paths under DST to SRC in
``load_context``, the file requests and the cells' ``open`` and ``os.chdir``, and the
working directory (``-w``; ``/workspace``, or ``/tmp`` without one) too; ``os._exit`` in a cell is the worker's exit
(``SessionLost`` ``worker_exited``), not the fake's.
"""

import ast
import base64
import binascii
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

PROTOCOL = 2
# The requests for the worker that wait behind the one running, at most.
MAX_QUEUED = 64
def cell_error(etype, message, tb):
    """A cell's exception as rljail reports it: origin "cell", or the supervisor's
    WorkerError when the cell named it after a type only rljail gives."""
    if etype in SUPERVISOR_TYPES:
        return {"type": "WorkerError", "origin": "rljail", "traceback": tb,
                "message": "the worker claimed %s (a type only rljail gives): %s" % (etype, message)}
    return {"type": etype, "origin": "cell", "message": message, "traceback": tb}


# The error types only rljail gives (origin "rljail"); any other is a cell's exception.
SUPERVISOR_TYPES = frozenset(("BadRequest", "RequestTooLarge", "UnknownOp", "Busy", "CellTimeout",
                              "CellLimit", "SessionLost", "BadPath", "FileTooLarge", "WorkerError",
                              "UnknownCall"))
MAX_REQUEST_BYTES = 16 << 20
MAX_FILE_BYTES = 8 << 20
MAX_REPR = 64 << 10
MAX_BATCH = 1024
MAX_CALLS_IN_FLIGHT = 64
_real_exit = os._exit


class Config:
    def __init__(self, argv, fake_tmp=None):
        self.fake_tmp = fake_tmp
        # rljail session's defaults.
        self.cell_timeout = 30.0
        self.cell_grace = 1.0
        self.idle_timeout = 0.0
        self.max_cells = 0
        self.max_output_chars = 10000
        self.max_llm_calls = 50
        self.max_tool_calls = 100
        self.max_llm_prompt_chars = 1 << 20
        self.call_timeout = 120.0
        self.llm = "client"
        self.tools = {}
        self.volumes = []  # (host, jail, mode)
        self.env = {}
        self.flags = {}
        self.no_workspace = False
        self.workdir = None
        i = 0
        while i < len(argv):
            arg = argv[i]
            if not arg.startswith("-"):
                i += 1
                continue
            if arg == "--no-workspace":
                self.no_workspace = True
                i += 1
                continue
            if arg in ("--strict-limits", "-q", "--quiet", "--verbose", "--audit-prompts"):
                self.flags[arg] = True
                i += 1
                continue
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 2
            if arg == "--cell-timeout":
                self.cell_timeout = seconds(value)
            elif arg == "--cell-grace":
                self.cell_grace = seconds(value)
            elif arg == "--idle-timeout":
                self.idle_timeout = seconds(value)
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
            elif arg == "--call-timeout":
                self.call_timeout = seconds(value)
            elif arg == "--llm":
                self.llm = value
            elif arg == "--tool":
                name, _, params = value.partition(":")
                self.tools[name] = [p for p in params.split(",") if p]
            elif arg in ("-v", "--volume"):
                parts = value.split(":")
                mode = parts[2] if len(parts) > 2 else "ro"
                self.volumes.append((parts[0], parts[1], mode))
            elif arg in ("-w", "--workdir"):
                self.workdir = value
            elif arg in ("-e", "--env"):
                key, _, val = value.partition("=")
                self.env[key] = val
            else:
                self.flags[arg] = value
        if not self.no_workspace:
            # rljail mounts its current directory read-only at /workspace, its working
            # directory then, unless --no-workspace.
            self.volumes.append((os.getcwd(), "/workspace", "ro"))
        if self.workdir is None:
            self.workdir = "/tmp" if self.no_workspace else "/workspace"


def seconds(text):
    text = str(text)
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


# The bridge's error types, raised in the cell as the real worker does: subclasses of
# RuntimeError, in the namespace and as builtins.
class LLMBudgetExceeded(RuntimeError):
    pass


class ToolBudgetExceeded(RuntimeError):
    pass


class BadCall(RuntimeError):
    pass


class CallTimeout(RuntimeError):
    pass


class CallFailed(RuntimeError):
    pass


CALL_ERRORS = {c.__name__: c for c in (LLMBudgetExceeded, ToolBudgetExceeded, BadCall,
                                       CallTimeout, CallFailed)}


class WorkerExit(BaseException):
    """os._exit in a cell: the worker ends (the real worker's process would)."""


class Refused(Exception):
    def __init__(self, etype, message):
        self.etype, self.message = etype, message
        super().__init__(message)


class Server:
    def __init__(self, cfg):
        self.cfg = cfg
        self.start = time.monotonic()
        # The protocol keeps a descriptor of its own; descriptor 1 becomes stderr, so a
        # cell's os.write(1, ...) cannot put the protocol out of step.
        self.out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)
        self.write_lock = threading.Lock()
        self.state = threading.Lock()
        self.requests = queue.Queue()
        self.calls = {}          # call id -> [event, value, error]
        self.calls_lock = threading.Lock()
        self.next_call = 1
        self.counts = {"llm_calls": 0, "tool_calls": 0, "prompt_chars": 0, "refused": 0}
        self.cells = 0
        self.lost = None
        self.queued = 0  # requests for the worker queued or running
        self.running = False
        self.last_request = time.monotonic()
        self.tmp = tempfile.mkdtemp(prefix="fake-rljail-", dir=cfg.fake_tmp)
        self.shm = os.path.join(self.tmp, ".shm")
        os.makedirs(os.path.join(self.tmp, "tmp"))
        os.makedirs(self.shm)
        # The "jail's" working directory: --workdir, its /tmp or /workspace by default.
        os.chdir(self.host_path(cfg.workdir)[0] or os.path.join(self.tmp, "tmp"))
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
        err = {"type": etype, "origin": "rljail" if etype in SUPERVISOR_TYPES else "cell",
               "message": message}
        err.update(extra)
        msg = {"id": rid, "ok": False, "error": err}
        self.send(msg)

    def lost_reply(self, rid, **fields):
        msg = {"id": rid, "ok": False, "error": {
            "type": "SessionLost", "origin": "rljail", "reason": self.lost,
            "message": "the session's jail is gone, and its namespace with it: %s" % self.lost}}
        msg.update(fields)
        self.send(msg)

    # ------------------------------------------------------------ paths

    def places(self):
        """The jail's writable places: /tmp, /dev/shm and the rw volumes."""
        return ["/tmp", "/dev/shm"] + [os.path.normpath(j) for _, j, m in self.cfg.volumes if m == "rw"]

    def check_writable(self, path):
        if not path.startswith("/") or os.path.normpath(path) != path or "//" in path:
            raise Refused("BadPath", "path %s is not absolute and clean" % path)
        for place in self.places():
            if path.startswith(place + "/"):
                return
        raise Refused("BadPath", "path %s is outside the jail's writable places (%s)"
                      % (path, ", ".join(self.places())))

    def host_path(self, path):
        path = os.path.normpath(path)
        best = None
        for host, jail, mode in self.cfg.volumes:
            jail = os.path.normpath(jail)
            if path == jail or path.startswith(jail + "/"):
                if best is None or len(jail) > len(best[1]):
                    best = (host, jail, mode)
        if best is not None:
            return best[0] + path[len(best[1]):], best[2] == "rw"
        for place, host in (("/tmp", os.path.join(self.tmp, "tmp")), ("/dev/shm", self.shm)):
            if path == place or path.startswith(place + "/"):
                return host + path[len(place):], True
        return None, False

    def _builtins(self):
        table = dict(builtins.__dict__)
        real_open = builtins.open
        server = self

        def jail_open(file, mode="r", *args, **kwargs):
            if isinstance(file, str) and file.startswith("/"):
                host, writable = server.host_path(file)
                if host is None:
                    raise FileNotFoundError(2, "No such file or directory (in the fake)", file)
                if not writable and any(c in mode for c in "wax+"):
                    raise OSError(30, "Read-only file system", file)
                file = host
            return real_open(file, mode, *args, **kwargs)

        table["open"] = jail_open
        table.update(CALL_ERRORS)
        return table

    # ------------------------------------------------------------ the bridge

    def _install_bridge(self):
        server = self
        cfg = self.cfg

        def refuse(cls, message):
            with server.calls_lock:
                server.counts["refused"] += 1
            raise cls(message)

        def call(name, args, prompts=None):
            if not server.running:
                refuse(BadCall, "%s: no cell is running (a thread left over from an earlier cell)" % name)
            # Counted before the call leaves, under one lock: threads racing in one cell
            # cannot get past the budget.
            with server.calls_lock:
                refused = None
                if prompts is not None:
                    lengths = [len(p) for p in prompts]
                    over = [i for i, n in enumerate(lengths) if n > cfg.max_llm_prompt_chars]
                    if over:
                        refused = (LLMBudgetExceeded, "%s: prompt %d has %d characters, more than "
                                   "--max-llm-prompt-chars %d" % (name, over[0], lengths[over[0]],
                                                                  cfg.max_llm_prompt_chars))
                    elif cfg.max_llm_calls < 0 or server.counts["llm_calls"] + len(prompts) > cfg.max_llm_calls:
                        refused = (LLMBudgetExceeded, "%s: %d prompts asked, %d of the session's %d "
                                   "model calls left" % (name, len(prompts), max(cfg.max_llm_calls - server.counts["llm_calls"], 0),
                                                         max(cfg.max_llm_calls, 0)))
                    else:
                        server.counts["llm_calls"] += len(prompts)
                        server.counts["prompt_chars"] += sum(lengths)
                else:
                    if cfg.max_tool_calls < 0 or server.counts["tool_calls"] + 1 > cfg.max_tool_calls:
                        refused = (ToolBudgetExceeded, "the session's %d tool calls are spent"
                                   % max(cfg.max_tool_calls, 0))
                    else:
                        server.counts["tool_calls"] += 1
                if refused is None and len(server.calls) >= MAX_CALLS_IN_FLIGHT:
                    refused = (BadCall, "%d calls of this cell are waiting already, the most at once"
                               % MAX_CALLS_IN_FLIGHT)
                if refused is not None:
                    server.counts["refused"] += 1
                    raise refused[0](refused[1])
                cid = server.next_call
                server.next_call += 1
                slot = [threading.Event(), None, None]
                server.calls[cid] = slot
            server.send({"event": "call", "call": cid, "cell": server.cells, "name": name, "args": args})
            try:
                answered = slot[0].wait(cfg.call_timeout)
            finally:
                with server.calls_lock:
                    server.calls.pop(cid, None)
            if not answered:
                refuse(CallTimeout, "%s got no answer within %gs" % (name, cfg.call_timeout))
            if slot[2] is not None:
                refuse(CallFailed, slot[2])
            value = slot[1]
            if prompts is not None and name.endswith("_batched"):
                if not isinstance(value, list) or len(value) != len(prompts):
                    refuse(CallFailed, "the runner's result for %s is not a list of %d answers"
                           % (name, len(prompts)))
            return value

        def check_model(name, model):
            if model is not None and not isinstance(model, str):
                refuse(BadCall, "%s: model must be a string or None" % name)

        def one(name):
            def query(prompt, model=None):
                if not isinstance(prompt, str):
                    refuse(BadCall, "%s(prompt): prompt must be a string" % name)
                check_model(name, model)
                return call(name, {"prompt": prompt, "model": model}, [prompt])
            query.__name__ = name
            return query

        def batched(name):
            def query(prompts, model=None):
                prompts = list(prompts)
                if not all(isinstance(p, str) for p in prompts):
                    refuse(BadCall, "%s(prompts): prompts must be a list of strings" % name)
                if len(prompts) > MAX_BATCH:
                    refuse(BadCall, "%s: %d prompts, more than the %d one call may carry"
                           % (name, len(prompts), MAX_BATCH))
                check_model(name, model)
                return call(name, {"prompts": prompts, "model": model}, prompts)
            query.__name__ = name
            return query

        self.bridge = {"llm_query": one("llm_query"), "llm_query_batched": batched("llm_query_batched"),
                       "rlm_query": one("rlm_query"), "rlm_query_batched": batched("rlm_query_batched")}
        for tname, params in self.cfg.tools.items():
            self.bridge[tname] = _make_tool(call, tname, params)
        self.bridge.update(CALL_ERRORS)
        self.ns.update(self.bridge)

    def cancel_calls(self):
        """The cell ended: the calls it left waiting fail (their late call_result gets
        UnknownCall), before its reply, as the real supervisor does."""
        with self.calls_lock:
            pending, self.calls = self.calls, {}
        for slot in pending.values():
            slot[2] = "context canceled: the cell ended"
            slot[0].set()

    def answer_call(self, rid, msg):
        cid = msg.get("call")
        with self.calls_lock:
            slot = self.calls.pop(cid, None) if isinstance(cid, int) else None
        if slot is None:
            if rid is not None:
                self.fail(rid, "UnknownCall", "no call %r is waiting for its result (answered "
                          "already, timed out, or never made)" % (cid,))
            return
        if msg.get("error") is not None:
            slot[2] = str(msg["error"])
        else:
            slot[1] = msg.get("value")
        slot[0].set()
        if rid is not None:
            self.reply(rid)

    # ------------------------------------------------------------ reading

    def read_loop(self):
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline(MAX_REQUEST_BYTES + 1)
            if not line:
                self.requests.put(None)  # EOF: end once the request in flight is answered
                return
            with self.state:
                self.last_request = time.monotonic()
            if len(line) > MAX_REQUEST_BYTES:
                while line and not line.endswith(b"\n"):
                    line = stdin.readline(MAX_REQUEST_BYTES + 1)
                self.fail(None, "RequestTooLarge", "the request is longer than the cap of %d bytes"
                          % MAX_REQUEST_BYTES)
                continue
            try:
                msg = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError:
                self.fail(None, "BadRequest", "the request is not valid UTF-8")
                continue
            except ValueError:
                self.fail(None, "BadRequest", "the request is not JSON")
                continue
            if not isinstance(msg, dict) or ("id" not in msg and msg.get("op") != "call_result"):
                self.fail(None, "BadRequest", "a request is a JSON object with an id")
                continue
            rid, op = msg.get("id"), msg.get("op")
            if op == "call_result":
                # Optional id: without one, no reply.
                if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int, float))):
                    self.fail(rid, "BadRequest", "the id is neither a string nor a number")
                    continue
                self.answer_call(rid, msg)
                continue
            if isinstance(rid, bool) or not isinstance(rid, (str, int, float)):
                self.fail(rid, "BadRequest", "the id is neither a string nor a number")
                continue
            if op == "close":
                if msg.get("now") or self.lost is not None:
                    self.op_close(rid)
                with self.state:
                    self.queued += 1
                self.requests.put(msg)  # in order, behind the queued requests
                continue
            if self.lost is not None:
                self.lost_reply(rid)
                continue
            if op == "hello":
                self.op_hello(rid)
            elif op == "interrupt":
                running = self.running
                if running:
                    os.kill(os.getpid(), signal.SIGINT)
                self.reply(rid, interrupted=running)
            elif op in WORKER_OPS:
                try:
                    self.check(msg)
                except Refused as e:
                    self.fail(rid, e.etype, e.message)
                    continue
                with self.state:
                    full = self.queued > MAX_QUEUED  # the one running and MAX_QUEUED behind it
                    if not full:
                        self.queued += 1
                        if op == "exec":
                            self.cells += 1
                if full:
                    self.fail(rid, "Busy", "%d requests for the worker are queued already, the most "
                              "the queue holds" % MAX_QUEUED)
                    continue
                self.requests.put(msg)
            else:
                self.fail(rid, "UnknownOp", "unknown op %r (hello, exec, set, get, load_context, "
                          "put_file, get_file, interrupt, close)" % (op,))

    def check(self, msg):
        """What the supervisor refuses before anything reaches the worker."""
        op = msg["op"]
        if op == "exec":
            if not isinstance(msg.get("code"), str):
                raise Refused("BadRequest", "exec needs code, a string")
            if self.cfg.max_cells > 0 and self.cells >= self.cfg.max_cells:
                raise Refused("CellLimit", "the session's budget of %d cells is spent" % self.cfg.max_cells)
        elif op in ("set", "get"):
            name = msg.get("name")
            if not isinstance(name, str) or not name.isascii() or not name.isidentifier():
                raise Refused("BadRequest", "name %r is not an identifier" % (name,))
            if op == "set" and "value" not in msg:
                raise Refused("BadRequest", "set needs a value")
        elif op == "load_context":
            if ("path" in msg and msg["path"]) == ("value" in msg):
                raise Refused("BadRequest", "load_context needs a value or a path, one of them")
        elif op in ("put_file", "get_file"):
            self.check_writable(str(msg.get("path") or ""))
            if op == "put_file":
                data = msg.get("data")
                if not isinstance(data, str):
                    raise Refused("BadRequest", "put_file needs data, base64")
                if len(data) * 3 // 4 > MAX_FILE_BYTES + 2:
                    raise Refused("FileTooLarge", "the file is over the cap of %d bytes" % MAX_FILE_BYTES)
                try:
                    base64.b64decode(data, validate=True)
                except (binascii.Error, ValueError) as e:
                    raise Refused("BadRequest", "data is not base64: %s" % e)

    # ------------------------------------------------------------ ops

    def on_sigint(self, signum, frame):
        # Only a running cell is interrupted; a late signal after it ended is dropped.
        if self.running:
            raise KeyboardInterrupt

    def idle_loop(self):
        while True:
            time.sleep(min(self.cfg.idle_timeout / 10, 0.05))
            with self.state:
                idle = not self.queued and time.monotonic() - self.last_request >= self.cfg.idle_timeout
            if idle:
                self.send({"id": None, "event": "closed", "reason": "idle_timeout"})
                self.exit()

    def exit(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        _real_exit(0)

    def serve(self):
        signal.signal(signal.SIGINT, self.on_sigint)
        threading.Thread(target=self.read_loop, daemon=True).start()
        if self.cfg.idle_timeout > 0:
            threading.Thread(target=self.idle_loop, daemon=True).start()
        while True:
            msg = self.requests.get()
            if msg is None:
                return
            rid, op = msg["id"], msg["op"]
            try:
                if op == "close":
                    self.op_close(rid)
                    continue
                getattr(self, "op_" + op)(rid, msg)
            except Refused as e:
                self.fail(rid, e.etype, e.message)
            except KeyboardInterrupt:
                self.fail(rid, "WorkerError", "interrupted outside a cell")
            except Exception as e:
                self.send({"id": rid, "ok": False, "error": cell_error(type(e).__name__, str(e), "")})
            finally:
                with self.state:
                    self.queued -= 1
                    self.last_request = time.monotonic()

    def op_close(self, rid):
        fields = {"cells": self.cells, "wall_ms": round((time.monotonic() - self.start) * 1000, 3),
                  "cpu_ms": round(time.process_time() * 1000, 3), "memory_peak_bytes": 0}
        if self.lost is not None:
            fields["lost"] = self.lost
        self.reply(rid, **fields)
        self.exit()  # the "jail" goes, and a cell still running with it

    def op_hello(self, rid):
        cfg = self.cfg
        self.reply(rid, protocol=PROTOCOL, rljail="fake-0", session_id="fake%012x" % os.getpid(),
                   start_ms=0.0, tools=[{"name": n, "params": p} for n, p in cfg.tools.items()],
                   limits={"cell_timeout_ms": int(cfg.cell_timeout * 1000),
                           "cell_grace_ms": int(cfg.cell_grace * 1000),
                           "max_output_chars": cfg.max_output_chars, "max_cells": cfg.max_cells,
                           "idle_timeout_ms": int(cfg.idle_timeout * 1000),
                           "max_request_bytes": MAX_REQUEST_BYTES, "max_file_bytes": MAX_FILE_BYTES,
                           "max_llm_calls": cfg.max_llm_calls, "max_tool_calls": cfg.max_tool_calls,
                           "max_llm_prompt_chars": cfg.max_llm_prompt_chars,
                           "call_timeout_ms": int(cfg.call_timeout * 1000), "llm": cfg.llm,
                           "jail": {"memory_bytes": {"value": 0, "mechanism": "none"}}})

    def op_set(self, rid, msg):
        self.ns[msg["name"]] = msg["value"]
        self.reply(rid)

    def op_get(self, rid, msg):
        name = msg["name"]
        if name not in self.ns:
            self.fail(rid, "KeyError", repr(name), traceback="")
            return
        value = self.ns[name]
        try:
            json.dumps(value, allow_nan=False)
            self.reply(rid, json=True, value=value)
        except (TypeError, ValueError):
            text = repr(value)
            self.reply(rid, json=False, repr=text[:MAX_REPR], repr_truncated=len(text) > MAX_REPR)

    def op_load_context(self, rid, msg):
        if msg.get("path"):
            path = str(msg["path"])
            host, _ = self.host_path(path)
            if host is None or not os.path.exists(host):
                raise FileNotFoundError(2, "No such file or directory", path)
            if path.endswith(".json"):
                with open(host, encoding="utf-8") as f:
                    value, kind = json.load(f), "json"
            else:
                with open(host, encoding="utf-8", errors="replace") as f:
                    value, kind = f.read(), "str"
        else:
            value, kind = msg["value"], "value"
        names = ["context_%d" % self.contexts]
        if self.contexts == 0:
            names.insert(0, "context")
        for n in names:
            self.ns[n] = value
        self.contexts += 1
        self.reply(rid, names=names, kind=kind)

    def op_put_file(self, rid, msg):
        path = msg["path"]
        data = base64.b64decode(msg["data"])
        host, writable = self.host_path(path)
        if not writable:
            raise OSError(30, "Read-only file system", path)
        with open(host, "wb") as f:
            f.write(data)
        self.reply(rid, size=len(data))

    def op_get_file(self, rid, msg):
        path = msg["path"]
        host, _ = self.host_path(path)
        if os.path.isdir(host):
            raise IsADirectoryError(21, "Is a directory", path)
        if not os.path.exists(host):
            raise FileNotFoundError(2, "No such file or directory", path)
        if os.path.getsize(host) > MAX_FILE_BYTES:
            raise Refused("FileTooLarge", "%s is over the cap of %d bytes" % (path, MAX_FILE_BYTES))
        with open(host, "rb") as f:
            data = f.read()
        self.reply(rid, size=len(data), data=base64.b64encode(data).decode("ascii"))

    def op_exec(self, rid, msg):
        cell = self.cells
        code = msg["code"]
        out, err = io.StringIO(), io.StringIO()
        error = None
        timed_out = threading.Event()
        done = threading.Event()
        start, cpu0 = time.monotonic(), time.process_time()

        def measured():
            stdout, stderr = self.cap(out.getvalue()), self.cap(err.getvalue())
            return {"cell": cell, "stdout": stdout[0], "stderr": stderr[0],
                    "stdout_truncated": stdout[1], "stderr_truncated": stderr[1],
                    "stdout_bytes": stdout[2], "stderr_bytes": stderr[2],
                    "output_between_cells_bytes": 0,
                    "wall_ms": round((time.monotonic() - start) * 1000, 3),
                    "cpu_ms": round((time.process_time() - cpu0) * 1000, 3)}

        def watchdog():
            if done.wait(self.cfg.cell_timeout):
                return
            timed_out.set()
            os.kill(os.getpid(), signal.SIGINT)
            if done.wait(self.cfg.cell_grace):
                return
            # The cell ignored the interrupt: the real supervisor kills the jail here.
            self.lost = "cell_timeout"
            self.lost_reply(rid, **measured())

        threading.Thread(target=watchdog, daemon=True).start()
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        self.running = True
        lost = None
        result = None
        try:
            # A last expression's value is the cell's result, as rljail's worker gives it.
            tree = ast.parse(code, "<cell>")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, "<cell>", "exec"), self.ns)
            if last is not None:
                value = eval(compile(last, "<cell>", "eval"), self.ns)
                if value is not None:
                    r = repr(value)
                    result = {"repr": r[:65536], "truncated": len(r) > 65536}
        except KeyboardInterrupt:
            error = {"type": "KeyboardInterrupt", "origin": "cell", "traceback": traceback.format_exc()}
        except WorkerExit:
            lost = "worker_exited"
        except BaseException as e:  # SystemExit too: the cell's, not the session's
            error = cell_error(type(e).__name__, str(e), traceback.format_exc())
        finally:
            self.running = False
            done.set()
            sys.stdout, sys.stderr = old
            self.cancel_calls()
        if self.lost is not None:
            return
        if lost is not None:
            self.lost = lost
            self.lost_reply(rid, **measured())
            return
        if timed_out.is_set():
            error = {"type": "CellTimeout", "origin": "rljail", "message": "the cell overran its timeout of %gs and was "
                     "interrupted; the namespace is kept" % self.cfg.cell_timeout,
                     "traceback": (error or {}).get("traceback", "")}
        names = sorted(k for k in self.ns if not k.startswith("_"))[:1000]
        if error is not None:
            result = None
        self.reply(rid, error=error, names=names, result=result, calls=dict(self.counts), **measured())

    def cap(self, text):
        """Head and tail of text's UTF-8 within --max-output-chars bytes, as rljail cuts."""
        data = text.encode("utf-8")
        limit = self.cfg.max_output_chars
        if len(data) <= limit:
            return text, False, len(data)
        head, tail = limit // 2, limit - limit // 2
        cut = len(data) - head - tail
        kept = (data[:head].decode("utf-8", "replace") + "\n[... %d bytes cut by rljail ...]\n" % cut
                + data[-tail:].decode("utf-8", "replace"))
        return kept, True, len(data)


WORKER_OPS = ("exec", "set", "get", "load_context", "put_file", "get_file")


def _make_tool(call, name, params):
    def tool(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s() takes %d arguments" % (name, len(params)))
        values = dict(zip(params, args))
        for key, value in kwargs.items():
            if key not in params:
                raise TypeError("%s() got an unexpected keyword argument %r" % (name, key))
            if key in values:
                raise TypeError("%s() got multiple values for argument %r" % (name, key))
            values[key] = value
        return call(name, values)

    tool.__name__ = name
    return tool


def _cell_exit(status=0):
    raise WorkerExit(status)


def main(argv):
    fake_tmp = None
    if argv[:1] == ["--fake-tmp"]:
        fake_tmp, argv = argv[1], argv[2:]
    if not argv or argv[0] != "session":
        sys.stderr.write("fake rljail: only 'session' is faked\n")
        return 125
    server = Server(Config(argv[1:], fake_tmp))
    os._exit = _cell_exit  # a cell's os._exit ends the "worker", as it ends the real one
    real_chdir = os.chdir

    def jail_chdir(path):
        # The "jail's" /tmp is the fake's own, as a cell's open() sees it.
        if isinstance(path, str) and path.startswith("/"):
            path = server.host_path(path)[0] or path
        real_chdir(path)

    os.chdir = jail_chdir
    try:
        server.serve()
    finally:
        shutil.rmtree(server.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
