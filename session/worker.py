# rljail's session worker: one persistent Python namespace in the jail.
#
# rljail starts it as the jail's payload (python3 -I -S -c THIS) and talks to
# it over descriptor 3, a socket of its own, one JSON object a line. Every
# request carries a token "t" that its reply repeats; the supervisor accepts
# only the reply with the token of the request in flight. Nothing here is
# trusted: the cells run in this very process and can reach all of it. The
# supervisor measures what matters (time, output, kills) itself; what this
# worker says (an exception, a value) is its claim only. See
# docs/session-protocol.md.
# Only what every session needs is imported at the start (a session's
# start counts); traceback, base64 and mmap come when first used.
import json
import os
import signal
import sys

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


def _send(obj):
    data = (json.dumps(obj, ensure_ascii=False, default=repr) + "\n").encode("utf-8", "replace")
    view = memoryview(data)
    while view:
        n = os.write(CHANNEL, view)
        view = view[n:]


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

        text = "".join(traceback.format_exception(type(exc), exc, tb))
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


def _names(ns):
    out = []
    for k in ns:
        if isinstance(k, str) and not k.startswith("_"):
            out.append(k)
            if len(out) >= MAX_NAMES:
                break
    return out


class Worker:
    def __init__(self):
        self.ns = {"__name__": "__main__", "__builtins__": __builtins__}
        self.contexts = 0

    def exec(self, req):
        global _running
        err = None
        try:
            code = compile(req["code"], "<cell>", "exec")
            # A cell may have changed the handler; each cell gets the
            # supervisor's interrupt again.
            signal.signal(signal.SIGINT, _on_sigint)
            _running = True
            exec(code, self.ns)
            _running = False
        except BaseException as e:
            _running = False
            err = _error(e, skip_frames=1)
        _mark(req["t"])
        return {"error": err, "names": _names(self.ns)}

    def set(self, req):
        self.ns[req["name"]] = req["value"]
        return {}

    def get(self, req):
        value = self.ns[req["name"]]
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
            if len(text) > MAX_VALUE:
                raise ValueTooLarge("%s is %d characters of JSON, over the %d a reply holds: read it in pieces" % (req["name"], len(text), MAX_VALUE))
            return {"value": json.loads(text), "json": True}
        except (TypeError, ValueError, RecursionError):
            r = repr(value)
            return {"repr": r[:MAX_REPR], "repr_truncated": len(r) > MAX_REPR, "json": False}

    def load_context(self, req):
        if "path" in req:
            path = req["path"]
            if path.endswith(".json"):
                with open(path, "rb") as f:
                    value = json.load(f)
                kind = "json"
            else:
                with open(path, "rb") as f:
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
        fd = os.open(req["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return {"size": len(data)}

    def get_file(self, req):
        fd = os.open(req["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
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


def main():
    signal.signal(signal.SIGINT, _on_sigint)
    # Line by line, so that print and os.write(1, ...) keep their order.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    # The cells' stdin reads as empty; their stdout and stderr are the
    # supervisor's pumps.
    w = Worker()
    ops = {"exec": w.exec, "set": w.set, "get": w.get, "load_context": w.load_context,
           "put_file": w.put_file, "get_file": w.get_file}
    reader = open(CHANNEL, "rb", buffering=1 << 16, closefd=False)
    _send({"t": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})
    while True:
        line = reader.readline()
        if not line:
            os._exit(0)  # the supervisor is gone
        token = None
        try:
            req = json.loads(line)
            token = req["t"]
            reply = ops[req["op"]](req)
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
