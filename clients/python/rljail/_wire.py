"""Reading rljail's output: its stdout's lines, and the tail of its stderr.

The threads that read them hold no reference to the Session (a weak one, or none), so
that a Session dropped unclosed is collected.  A line is decoded by json.loads whole,
then checked for the fields the session acts on (:func:`line_problem`).  A line that
json.loads cannot decode (nested past its recursion limit, too large for memory, not
UTF-8) is still read for the request or call it names (:func:`scalar_fields`, without
recursion), so that only that request fails.
"""

import collections
import json
import logging
import re
import threading

log = logging.getLogger("rljail")


def is_id(value):
    """A request id this package sends: a str or an int (not a bool, nor a float that
    would hash as the int it equals)."""
    return isinstance(value, str) or is_number(value)


def is_number(value):
    return isinstance(value, int) and not isinstance(value, bool)


def line_problem(msg):
    """What makes a decoded line from rljail no reply or event of the protocol, or None.
    The fields every line is read by must have their types: an id is matched to a
    request, a call's name and arguments are dispatched."""
    if not isinstance(msg, dict):
        return "not a JSON object but a JSON %s" % type(msg).__name__
    if "event" in msg:
        if not isinstance(msg["event"], str):
            return "an event that is not a string"
        if msg["event"] == "call":
            if not is_number(msg.get("call")):
                return "a call event whose call number is not an integer"
            if not isinstance(msg.get("name"), str):
                return "a call event whose name is not a string"
            if not isinstance(msg.get("args"), dict):
                return "a call event whose args are not an object"
        return None
    if "id" not in msg:
        return "neither a reply (no id) nor an event"
    if msg["id"] is not None and not is_id(msg["id"]):
        return "a reply whose id is neither a string nor an integer"
    if not isinstance(msg.get("ok"), bool):
        return "a reply whose ok is not a boolean"
    if msg["ok"] is False and not isinstance(msg.get("error"), dict):
        return "a failed reply whose error is not an object"
    return None


_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(r"[^,}\]\s]+")
# Inside a nested value: a string (whose brackets do not count), a bracket, or a run
# of anything else.
_NESTED_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]|[\]}]|[^"\[\]{}]+', re.S)


def scalar_fields(text, names):
    """The fields among ``names`` of the JSON object ``text`` whose values are scalars
    (a string, number, true, false, null), read without decoding anything else: a
    nested value is skipped by counting its brackets, with no recursion and without
    building it.  For a line that json.loads could not decode whole (nested past the
    recursion limit, too large for memory, not UTF-8), this still tells which request
    it answers or which call it is.  Stops at the first malformation, with what it
    read until then."""
    found = {}
    pos = _WS.match(text).end()
    if not text.startswith("{", pos):
        return found
    pos = _WS.match(text, pos + 1).end()
    while pos < len(text) and text[pos] != "}":
        m = _STRING.match(text, pos)
        if m is None:
            return found
        key = json.loads(m.group())
        pos = _WS.match(text, m.end()).end()
        if not text.startswith(":", pos):
            return found
        pos = _WS.match(text, pos + 1).end()
        if text.startswith(("[", "{"), pos):
            depth = 0
            for tok in _NESTED_TOKEN.finditer(text, pos):
                c = text[tok.start()]
                if c in "[{":
                    depth += 1
                elif c in "]}":
                    depth -= 1
                    if depth == 0:
                        pos = tok.end()
                        break
            else:
                return found
        else:
            m = _STRING.match(text, pos) or _SCALAR.match(text, pos)
            if m is None:
                return found
            if key in names and key not in found:
                try:
                    found[key] = json.loads(m.group())
                except ValueError:
                    return found
            pos = m.end()
        if all(n in found for n in names):
            return found
        pos = _WS.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
        elif not text.startswith("}", pos):
            return found
    return found


def read_lines(ref, stdout, max_line):
    """The reader thread of the Session that ``ref`` (a weak reference) names: hands
    it each line of rljail's stdout, then the end.  It holds the Session only while
    it hands it a line, never while it waits for one, so that a Session dropped
    unclosed is collected, and its finalizer stops rljail (whose stdout then ends
    here).  Whatever a line holds, this thread lives to say so: every request
    waits for its reply on it, and one that died would leave each of them to its
    timeout."""
    while True:
        try:
            line = stdout.readline(max_line + 1)
        except MemoryError:
            line = None
        except (OSError, ValueError) as e:
            log.debug("rljail session: reading stopped: %s", e)
            break
        session = ref()
        if session is None:
            stdout.close()  # collected: nothing else reads it
            return
        try:
            if line is None:
                session._break("out of memory reading a line from rljail")
                going = False
            else:
                going = bool(line) and session._take_line(line)
        except Exception as e:
            session._break("a line from rljail could not be handled: %s: %s" % (type(e).__name__, e))
            going = False
        del session
        if not going:
            break
    session = ref()
    if session is not None:
        session._reader_done()
    else:
        stdout.close()


class Tail:
    """The last ``limit`` bytes of a stream (rljail's stderr), read by
    :meth:`read_from` on a thread of its own, which holds no reference to the
    Session."""

    def __init__(self, limit):
        self._limit = limit
        self._chunks = collections.deque()
        self._len = 0
        self._lock = threading.Lock()

    def read_from(self, pipe):
        try:
            while True:
                chunk = pipe.read1(8192) if hasattr(pipe, "read1") else pipe.read(8192)
                if not chunk:
                    break
                with self._lock:
                    self._chunks.append(chunk)
                    self._len += len(chunk)
                    while self._len > self._limit and len(self._chunks) > 1:
                        self._len -= len(self._chunks.popleft())
            pipe.close()  # at its end: nothing else reads it
        except (OSError, ValueError):
            pass

    def text(self):
        with self._lock:
            data = b"".join(self._chunks)
        return data.decode("utf-8", "replace")
