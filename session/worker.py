# rljail's session worker: one persistent Python namespace in the jail.
#
# rljail starts it as the jail's payload (python3 -I -S -c THIS; the cells'
# import path is then made as `python3 -c`'s, _import_path) and talks to
# it over descriptor 3, a socket of its own, one JSON object a line. Every
# request carries a token "t" that its reply repeats; the supervisor accepts
# only the reply with the token of the request in flight. Nothing here is
# trusted: the cells run in this very process and can reach all of it. The
# supervisor measures what matters (time, output, kills) itself; what this
# worker says (an exception, a value) is its claim only. See
# docs/session-protocol.md.
#
# The channel carries two streams, multiplexed here: the supervisor's
# requests (answered by the main loop) and the calls a cell makes to the
# host (llm_query, llm_query_batched, rlm_query, rlm_query_batched and the
# runner's tools), {"c":"call","n":N,...} answered by {"c":"result","n":N,...}.
# Between cells the main loop reads the channel itself (a request wakes the
# thread that runs it, and no other); while calls are in flight a reader
# thread reads their results. One of the two reads at a time (_read_lock);
# writes are under one lock, so that lines of several threads never
# interleave.
# Only what every session needs is imported at the start (a session's
# start counts); traceback, base64 and mmap come when first used.
#
# The C modules, not json, signal and threading: those import re, enum,
# functools and collections, some 11 ms of every session's start in the
# jail (measured: python3 -I -S importing them, 20.3 ms against 9.7 ms).
# Cells that want them import them as usual. The protocol's JSON is the
# json package's own C scanner and encoder (_json), as json.loads and
# json.dumps(ensure_ascii=False) use them.
import _json
import _signal
import _thread
import os
import sys


class _ScanContext:
    # What _json.make_scanner reads of json.JSONDecoder.
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo = {}

    @staticmethod
    def parse_constant(name):
        raise ValueError("%s is not JSON" % name)


_scan = _json.make_scanner(_ScanContext())


def _loads(data):
    """json.loads of one line (bytes or str)."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    i = 0
    while i < len(data) and data[i] in " \t\r\n":
        i += 1
    try:
        obj, end = _scan(data, i)
    except StopIteration:
        raise ValueError("not JSON") from None
    if data[end:].strip():
        raise ValueError("extra data after the JSON value")
    return obj


def _not_serializable(o):
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


def _dumps(obj, default=_not_serializable, allow_nan=True):
    """json.dumps(obj, ensure_ascii=False, default=default, allow_nan=allow_nan), compact."""
    enc = _json.make_encoder({}, default, _json.encode_basestring, None, ":", ",", False, False, allow_nan)
    return "".join(enc(obj, 0))


_MAIN_THREAD = _thread.get_ident()


CHANNEL = 3
# A text file up to this size is read into a str; a larger one is bound as
# a read-only mmap (bytes-like), so that a context of gigabytes is never
# copied whole (docs/session-protocol.md, load_context).
INLINE_CONTEXT_MAX = 256 << 20
MAX_NAMES = 1000
MAX_REPR = 64 << 10
# The supervisor takes a line of at most 16 MiB from the worker and ends the
# session over it: an exception's text and a get's value stay below.
MAX_ERROR_TEXT = 64 << 10
MAX_VALUE = 12 << 20

_running = False


def _on_sigint(signum, frame):
    # SIGINT is the supervisor's interrupt (a cell timeout, or the runner's
    # interrupt request): a KeyboardInterrupt in the cell, and nothing
    # between cells, where it would end the worker.
    if _running:
        raise KeyboardInterrupt


_wlock = _thread.allocate_lock()


def _write_line(data):
    # A line larger than the socket's buffer takes several writes: in the
    # main thread SIGINT (the supervisor's interrupt) is held until the
    # line is whole, so that a KeyboardInterrupt never leaves half a line
    # for the next one to be glued to.
    hold = len(data) > (64 << 10) and _thread.get_ident() == _MAIN_THREAD
    view = memoryview(data)
    with _wlock:
        if hold:
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
        try:
            while view:
                n = os.write(CHANNEL, view)
                view = view[n:]
        finally:
            if hold:
                _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})


def _send(obj):
    _write_line((_dumps(obj, default=repr) + "\n").encode("utf-8", "replace"))


# The bridge's error types (bridge/bridge.go): a refused or failed call
# raises one of these in the cell, which may catch it.
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


CALL_ERRORS = {c.__name__: c for c in (LLMBudgetExceeded, ToolBudgetExceeded, BadCall, CallTimeout, CallFailed)}
# The supervisor refuses a call line over its cap (the command's second
# argument): a call that would not fit is refused here, before it is sent.
MAX_CALL_LINE = 8 << 20

_calls_lock = _thread.allocate_lock()
# The worker's call number -> [a lock the reader releases, the result,
# whether the call was sent (counted in _outstanding)].
_calls = {}
_call_seq = 0
_outstanding = 0  # calls sent whose result has not come (under _calls_lock)
# The channel, read by one thread at a time: whoever holds _read_lock. The
# main loop between cells (where SIGINT raises nothing, so no readline is
# cut short and no half line lost), the call reader while calls wait.
_chan = None
_read_lock = _thread.allocate_lock()
_pending = []  # requests the call reader read, for the main loop
# Released to wake the call reader when a call is sent. The reader starts
# with the session's first call: until then the worker is one thread, whose
# CPU time the supervisor reads without listing its tasks (rootless).
_calls_sent = _thread.allocate_lock()
_calls_sent.acquire()
_call_reader_started = False


def _call(name, args):
    """Sends one call to the supervisor and blocks for its result."""
    global _call_seq, _outstanding, _call_reader_started
    if not _running:
        raise BadCall("%s: no cell is running (a thread left over from an earlier cell?)" % name)
    with _calls_lock:
        if not _call_reader_started:
            try:
                _thread.start_new_thread(_call_reader, ())
            except RuntimeError as e:  # no thread to be had (the pids limit)
                raise CallFailed("%s: the worker could not start its reader of call results: %s" % (name, e)) from None
            _call_reader_started = True
        _call_seq += 1
        n = _call_seq
        slot = [_thread.allocate_lock(), None, False]
        slot[0].acquire()
        _calls[n] = slot
    try:
        line = (_dumps({"c": "call", "n": n, "name": name, "args": args}) + "\n").encode("utf-8", "replace")
        if len(line) > MAX_CALL_LINE:
            raise BadCall("%s: the call is %d bytes of JSON, over the %d one call may be" % (name, len(line), MAX_CALL_LINE))
        with _calls_lock:
            _outstanding += 1
            slot[2] = True
        try:
            _calls_sent.release()
        except RuntimeError:
            pass  # the call reader is awake already
        _write_line(line)
        slot[0].acquire()
    finally:
        with _calls_lock:
            _calls.pop(n, None)
            if slot[2] and slot[1] is None:
                _outstanding -= 1  # given up (an interrupt): its result is dropped
    res = slot[1]
    if res.get("error_type") or "error" in res:
        raise CALL_ERRORS.get(res.get("error_type"), CallFailed)(str(res.get("error", "")))
    return res.get("value")


def llm_query(prompt, model=None):
    """Asks the host's model; returns its answer (a str)."""
    return _call("llm_query", {"prompt": prompt, "model": model})


def llm_query_batched(prompts, model=None):
    """Asks the host's model once per prompt, concurrently; returns the answers in order
    (no prompts: no answers, without a call, as the runtimes' own REPLs answer [])."""
    prompts = list(prompts)
    if not prompts:
        return []
    return _call("llm_query_batched", {"prompts": prompts, "model": model})


def rlm_query(prompt, model=None):
    """Asks the runner's child RLM; returns its answer (a str)."""
    return _call("rlm_query", {"prompt": prompt, "model": model})


def rlm_query_batched(prompts, model=None):
    """Asks the runner's child RLM once per prompt; returns the answers in order (none
    for no prompts, without a call)."""
    prompts = list(prompts)
    if not prompts:
        return []
    return _call("rlm_query_batched", {"prompts": prompts, "model": model})


def _tool(name, params):
    def tool(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s() takes %d arguments but %d were given" % (name, len(params), len(args)))
        call = dict(zip(params, args))
        for k, v in kwargs.items():
            if k in call:
                raise TypeError("%s() got multiple values for argument %r" % (name, k))
            if k not in params:
                raise TypeError("%s() got an unexpected keyword argument %r" % (name, k))
            call[k] = v
        return _call(name, call)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = "The runner's tool %s(%s), called on the host." % (name, ", ".join(params))
    return tool


def _bridge_names(tools):
    names = {"llm_query": llm_query, "llm_query_batched": llm_query_batched,
             "rlm_query": rlm_query, "rlm_query_batched": rlm_query_batched}
    names.update(CALL_ERRORS)
    for t in tools:
        names[t["name"]] = _tool(t["name"], list(t.get("params") or []))
    return names


def _mark(token):
    # The end of this cell's output on each stream: the supervisor
    # attributes what came before it to the cell.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    marker = ("\x00rljail-end:" + token + "\x00").encode()
    for fd in (1, 2):
        try:
            os.write(fd, marker)
        except OSError:
            pass


def _error(exc, skip_frames=0):
    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None:
            tb = tb.tb_next
    try:
        import traceback

        te = traceback.TracebackException(type(exc), exc, tb)
        # The worker's own frames (its source is "<string>": python3 -c),
        # such as the SIGINT handler a cell timeout's KeyboardInterrupt is
        # raised in, are not the cell's: they leave its traceback, in
        # every exception of the chain.
        seen = set()
        todo = [te]
        while todo:
            t = todo.pop()
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            t.stack[:] = [f for f in t.stack if f.filename != "<string>"]
            todo += [t.__cause__, t.__context__]
        text = "".join(te.format())
    except BaseException:
        text = ""
    try:
        message = str(exc)
    except BaseException:
        message = ""
    if len(text) > MAX_ERROR_TEXT:
        text = text[: MAX_ERROR_TEXT // 2] + "\n[... cut ...]\n" + text[-MAX_ERROR_TEXT // 2 :]
    return {"type": type(exc).__name__[:200], "message": message[:MAX_ERROR_TEXT], "traceback": text}


class ValueTooLarge(Exception):
    pass


class FileContext:
    """A large file read on demand, bytes-like where an mmap cannot be made:
    len(), indexing and slicing (bytes), find() and iter_lines()."""

    def __init__(self, path, size):
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = size

    def __len__(self):
        return self._size

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._size)
            if step != 1:
                raise ValueError("FileContext slices take no step")
            return os.pread(self._fd, max(0, stop - start), start)
        if key < 0:
            key += self._size
        if not 0 <= key < self._size:
            raise IndexError("FileContext index out of range")
        return os.pread(self._fd, 1, key)[0]

    def find(self, sub, start=0, end=None):
        end = self._size if end is None else min(end, self._size)
        chunk = 1 << 20
        pos = start
        while pos < end:
            block = os.pread(self._fd, min(chunk + len(sub), end - pos), pos)
            i = block.find(sub)
            if i >= 0:
                return pos + i
            if len(block) < len(sub):
                break
            pos += chunk
        return -1

    def iter_lines(self):
        pos, rest = 0, b""
        while pos < self._size:
            block = os.pread(self._fd, 1 << 20, pos)
            if not block:
                break
            pos += len(block)
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            yield from lines
        if rest:
            yield rest

    def __repr__(self):
        return "<FileContext of %d bytes>" % self._size


def _names(ns, own):
    # The session's own names (llm_query, the tools, the error types) are
    # not listed while they are the session's.
    out = []
    for k in ns:
        if isinstance(k, str) and not k.startswith("_") and own.get(k, own) is not ns[k]:
            out.append(k)
            if len(out) >= MAX_NAMES:
                break
    return out


def _require_regular(fd, path):
    # A FIFO or a device a cell made would block the worker's main thread,
    # where no interrupt reaches it, until the session ends (red-team
    # pass): requests take regular files only, opened without blocking.
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("%s is not a regular file" % path)


def _open_regular(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    _require_regular(fd, path)
    return os.fdopen(fd, "rb")


class Worker:
    def __init__(self, tools):
        self.ns = {"__name__": "__main__", "__builtins__": __builtins__}
        self.own = _bridge_names(tools)
        self.ns.update(self.own)
        # The error types as builtins too: `except LLMBudgetExceeded:` works
        # in any function a cell defines, whatever its globals.
        import builtins

        for k, v in CALL_ERRORS.items():
            setattr(builtins, k, v)
        self.contexts = 0

    def exec(self, req):
        global _running
        err = None
        result = None
        try:
            # A last expression's value is the cell's result, as a REPL
            # shows it (Jupyter's execute_result): the cell runs without
            # it, then it is evaluated on its own. (_ast on the first cell:
            # its import costs a session's start 0.8 ms.)
            import _ast

            tree = compile(req["code"], "<cell>", "exec", _ast.PyCF_ONLY_AST)
            last = None
            if tree.body and type(tree.body[-1]) is _ast.Expr:
                last = compile(_ast.Expression(tree.body.pop().value), "<cell>", "eval")
            code = compile(tree, "<cell>", "exec")
            # A cell may have changed the handler; each cell gets the
            # supervisor's interrupt again.
            if _signal.getsignal(_signal.SIGINT) is not _on_sigint:
                _signal.signal(_signal.SIGINT, _on_sigint)
            _running = True
            exec(code, self.ns)
            if last is not None:
                value = eval(last, self.ns)
                if value is not None:
                    r = repr(value)
                    result = {"repr": r[:MAX_REPR], "truncated": len(r) > MAX_REPR}
            _running = False
        except BaseException as e:
            _running = False
            err = _error(e, skip_frames=1)
            result = None
        # The worker's handler between cells too: an interrupt that comes
        # late (a cell timeout's, as the cell ends) must not raise where the
        # main loop waits for its next request.
        if _signal.getsignal(_signal.SIGINT) is not _on_sigint:
            _signal.signal(_signal.SIGINT, _on_sigint)
        _mark(req["t"])
        return {"error": err, "names": _names(self.ns, self.own), "result": result}

    def set(self, req):
        self.ns[req["name"]] = req["value"]
        return {}

    def get(self, req):
        value = self.ns[req["name"]]
        try:
            text = _dumps(value, allow_nan=False)
            if len(text) > MAX_VALUE:
                raise ValueTooLarge("%s is %d characters of JSON, over the %d a reply holds: read it in pieces" % (req["name"], len(text), MAX_VALUE))
            return {"value": _loads(text), "json": True}
        except (TypeError, ValueError, RecursionError):
            r = repr(value)
            return {"repr": r[:MAX_REPR], "repr_truncated": len(r) > MAX_REPR, "json": False}

    def load_context(self, req):
        if "path" in req:
            path = req["path"]
            if path.endswith(".json"):
                import json

                with _open_regular(path) as f:
                    value = json.load(f)
                kind = "json"
            else:
                with _open_regular(path) as f:
                    size = os.fstat(f.fileno()).st_size
                    if size > INLINE_CONTEXT_MAX:
                        import mmap

                        try:
                            value = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                            kind = "mmap"
                        except OSError:
                            # RLIMIT_AS (the memory limit's fallback)
                            # leaves no room to map it: read on demand.
                            value = FileContext(path, size)
                            kind = "file"
                    else:
                        value = f.read().decode("utf-8", "replace")
                        kind = "str"
        else:
            value = req["value"]
            kind = "value"
        n = self.contexts
        name = "context_%d" % n
        self.ns[name] = value
        names = [name]
        if n == 0:
            self.ns["context"] = value
            names.insert(0, "context")
        self.contexts += 1
        return {"names": names, "kind": kind}

    def put_file(self, req):
        import base64

        data = base64.b64decode(req["data"], validate=True)
        fd = os.open(req["path"], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        _require_regular(fd, req["path"])
        os.ftruncate(fd, 0)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return {"size": len(data)}

    def get_file(self, req):
        fd = os.open(req["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        _require_regular(fd, req["path"])
        try:
            chunks, size, cap = [], 0, int(req["max"]) + 1
            while size < cap:
                b = os.read(fd, min(1 << 20, cap - size))
                if not b:
                    break
                chunks.append(b)
                size += len(b)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        import base64

        return {"size": len(data), "data": base64.b64encode(data).decode()}


def _deliver(line):
    # A call's result goes to the thread waiting for it; one for no call in
    # flight (its thread gave up) is dropped.
    global _outstanding
    try:
        res = _loads(line)
        with _calls_lock:
            slot = _calls.get(res["n"])
            if slot is not None and slot[1] is None:
                slot[1] = res
                if slot[2]:
                    _outstanding -= 1
                slot[0].release()
    except BaseException:
        pass


def _read_line():
    line = _chan.readline()
    if not line:
        os._exit(0)  # the supervisor is gone
    return line


def _take_pending():
    with _calls_lock:
        return _pending.pop(0) if _pending else None


def _next_request():
    # The main loop's read, between cells: results that come meanwhile (of
    # a call a cell's thread left) are delivered, a request is returned. A
    # request the call reader read is taken from _pending, also while the
    # call reader holds the channel (it waits there for a result that a
    # refused late call gets soon after).
    while True:
        line = _take_pending()
        if line is not None:
            return line
        if not _read_lock.acquire(timeout=0.05):
            continue
        try:
            line = _take_pending()
            if line is not None:
                return line
            line = _read_line()
        finally:
            _read_lock.release()
        if line.startswith(b'{"c":"result"'):
            _deliver(line)
            continue
        return line


def _call_reader():
    # Reads the channel while calls wait for their results (the main loop
    # runs a cell meanwhile, or a call of its own waits). A request read
    # here (the next one, once a cell ended with a call of one of its
    # threads in flight) waits in _pending for the main loop.
    while True:
        _calls_sent.acquire()
        while True:
            with _read_lock:
                with _calls_lock:
                    if _outstanding <= 0:
                        break
                line = _read_line()
                if line.startswith(b'{"c":"result"'):
                    _deliver(line)
                else:
                    with _calls_lock:
                        _pending.append(line)


def _token_of(line):
    # The supervisor's requests are objects with sorted keys whose values
    # before "t" are strings ("code", "name", "op", "path"), where a quote
    # is always escaped: the first '"t":"' is the top-level token.
    i = line.find(b'"t":"')
    if i < 0:
        return None
    j = line.find(b'"', i + 5)
    return line[i + 5:j].decode("ascii", "replace") if j > 0 else None


def _import_path():
    # The cells import what `python3 -c` imports in this rootfs: the worker
    # runs as python3 -I -S (nothing of the environment, the user's site or
    # a script's directory changes what the worker itself imports), so the
    # rootfs's packages (its dist-packages, with their .pth files) come
    # from site.main() here, and only where the rootfs has a packages
    # directory: the default rootfs has none and pays nothing (site costs
    # some 5 ms of a start). Then, as for `python3 -c`, the working
    # directory ('') and the jail's PYTHONPATH (empty unless the runner
    # granted it with -e) lead the path. The user's site stays off (-I).
    version = "python%d.%d" % sys.version_info[:2]
    prefix = sys.prefix
    candidates = (prefix + "/local/lib/" + version + "/dist-packages", prefix + "/lib/python3/dist-packages",
                  prefix + "/lib/" + version + "/dist-packages", prefix + "/lib/" + version + "/site-packages")
    if any(os.path.isdir(c) for c in candidates):
        import site
        site.main()
    lead = [""] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:0] = lead


def main():
    global _running, MAX_CALL_LINE, _chan
    _import_path()
    _signal.signal(_signal.SIGINT, _on_sigint)
    # Line by line, so that print and os.write(1, ...) keep their order.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    # The cells' stdin reads as empty; their stdout and stderr are the
    # supervisor's pumps. The tools the runner declared come as the
    # command's argument (the supervisor's, checked identifiers), then
    # the supervisor's cap on one call's line.
    tools = _loads(sys.argv[1]) if len(sys.argv) > 1 else []
    if len(sys.argv) > 2:
        MAX_CALL_LINE = int(sys.argv[2])
    w = Worker(tools)
    ops = {"exec": w.exec, "set": w.set, "get": w.get, "load_context": w.load_context,
           "put_file": w.put_file, "get_file": w.get_file}
    _chan = open(CHANNEL, "rb", buffering=1 << 16, closefd=False)
    _send({"t": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})
    while True:
        # A SIGINT between cells raises nothing (_on_sigint): the wait
        # goes on.
        line = _next_request()
        token = None
        try:
            try:
                req = _loads(line)
            except BaseException:
                # A request that does not decode here (nested deeper than
                # the recursion limit, an integer of more digits than
                # int() takes) is answered all the same, or the
                # supervisor would wait for its reply for ever.
                token = _token_of(line)
                raise
            token = req["t"]
            op = ops[req["op"]]
            if op != w.exec:
                # The supervisor's SIGINT at --cell-timeout interrupts a
                # cell's code that get, set or a file runs (a __repr__,
                # a FIFO at the path) as it does a cell's.
                _running = True
            try:
                reply = op(req)
            finally:
                _running = False
            reply["t"] = token
            reply["ok"] = True
        except KeyboardInterrupt as e:
            reply = {"t": token, "ok": False, "error": _error(e)}
        except BaseException as e:
            reply = {"t": token, "ok": False, "error": _error(e)}
        try:
            _send(reply)
        except KeyboardInterrupt:
            _send(reply)


main()
