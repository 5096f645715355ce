"""One persistent jailed Python per trajectory, driven over ``rljail session``.

A :class:`Session` starts ``rljail session`` as a child process and speaks its JSON-lines
protocol (docs/session-protocol.md in the rljail repository) on the child's stdin and
stdout.  Each session is its own process tree with its own namespace, working directory
and output: many sessions may run side by side in threads of one process without sharing
anything, which is the failure mode of in-process REPLs (``exec`` in the runner, where
concurrent trajectories race on ``os.chdir`` and ``sys.stdout``).

While a cell runs, the jail may call back to the host (``llm_query``, ``rlm_query`` and
the tools the runner declared).  The supervisor forwards each such call as an event; a
reader thread here hands it to the runner's callable on a small thread pool and answers
with ``call_result``, so a slow or failing handler never blocks the protocol.  Budgets
(how many calls, how long a prompt) are the supervisor's to enforce: this module never
counts, and the jail can neither see the host's keys nor answer its own calls.

Everything the supervisor says is trusted (it is rljail on the host); everything the
cell's code chooses (its output, its variables, the arguments of its calls) is data.
"""

import base64
import inspect
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

from ._wire import Tail, is_id, is_number, line_problem, read_lines, scalar_fields

__all__ = [
    "Session", "CellResult", "ErrorInfo", "Repr", "ContextName",
    "SessionError", "SessionLost", "CellTimeout", "RequestError", "ProtocolError",
    "UndecodableReply", "find_binary", "PROTOCOL_VERSION",
]

log = logging.getLogger("rljail")

#: The version of the session protocol this module speaks (``hello`` reports the other side's).
PROTOCOL_VERSION = 2

# The names of the bridge's own calls; every other call name is a tool the runner declared.
LLM_CALLS = ("llm_query", "llm_query_batched")
RLM_CALLS = ("rlm_query", "rlm_query_batched")

# Names the session defines in the cell namespace itself, that a tool may not take
# (bridge.ParseTool refuses them too).
_SESSION_NAMES = ("SUBMIT", "FINAL", "FINAL_VAR", "print")
#: The exceptions a refused or failed call raises in the cell (subclasses of RuntimeError,
#: builtins in the jail): the bridge's error types.
CALL_ERRORS = ("LLMBudgetExceeded", "ToolBudgetExceeded", "BadCall", "CallTimeout", "CallFailed")

# Flags whose numeric values are durations (seconds) or sizes (bytes) when given as numbers.
_DURATION_FLAGS = {"timeout", "cell_timeout", "cell_grace", "idle_timeout", "cpu_time",
                   "stop_grace", "call_timeout", "egress_idle_timeout"}
_SIZE_FLAGS = {"memory", "tmp_size", "file_size", "output_limit"}

# How long close() waits for rljail to end after "close" before it stops it.
_CLOSE_WAIT = 10.0
# How long a request whose write found rljail's stdin closed waits for rljail's exit
# status, which says more than the broken pipe (rljail closes it only as it exits).
_EXIT_WAIT = 5.0
# Lines from the supervisor longer than this are a broken session, not data to buffer.
_MAX_LINE = 256 << 20
# The last bytes of rljail's stderr kept for error messages.
_STDERR_TAIL = 64 << 10
#: Where ``workspace=`` puts its directory in the jail (rljail's own workspace's place).
WORKSPACE_IN_JAIL = "/workspace"


class SessionError(Exception):
    """Base class of the errors this package raises."""


class SessionLost(SessionError):
    """The jail is gone and its namespace with it.  Every later request raises this too;
    start a new Session to go on.  ``reason`` is the supervisor's word for why
    (docs/session-protocol.md): ``cell_timeout`` (a cell that did not stop at its
    interrupt), ``request_timeout`` (the same for ``get``, ``set``, ``load_context`` or a
    file request), ``memory_limit``, ``seccomp``, ``cpu_limit``, ``timeout`` (the
    session's), ``worker_protocol``, ``worker_exited`` (a cell ended the worker:
    ``os._exit``, a signal), ``setup_error``, ``killed``, ``closed``, ``idle_timeout``;
    or this package's own: ``exited`` (rljail ended without saying why: its stderr is
    in ``stderr``), ``no_reply`` (no reply within the deadline; rljail was stopped),
    ``protocol`` (a line from rljail over the package's cap, or one that is not a reply
    or event of this protocol and names no request this package can fail alone: not
    JSON, not an object, an id of the wrong type; rljail was stopped).  ``reply`` is the
    supervisor's reply when there was one: a lost ``exec`` still carries what the
    supervisor measured (``stdout``, ``stderr``, ``wall_ms``)."""

    def __init__(self, reason, message="", stderr="", reply=None):
        self.reason = reason or "unknown"
        self.stderr = stderr
        self.reply = reply
        text = "session lost: %s" % self.reason
        if message:
            text += ": " + message
        super().__init__(text)


class CellTimeout(SessionError):
    """A cell ran past ``cell_timeout`` and was interrupted; the session and its state
    are kept.  ``result`` is the cell's :class:`CellResult` (its output so far)."""

    def __init__(self, result):
        self.result = result
        super().__init__(result.error.message if result.error else "cell timed out")


class RequestError(SessionError):
    """A request was not done (``ok: false``) and the session goes on.  ``type`` is
    rljail's (``BadRequest``, ``RequestTooLarge``, ``UnknownOp``, ``Busy``,
    ``CellLimit`` after ``--max-cells``, ``BadPath``, ``FileTooLarge``,
    ``WorkerError``) or the name of the Python exception the worker met (``KeyError``
    for ``get`` of an unknown name, ``ValueTooLarge``, ``FileNotFoundError``,
    ``PermissionError``, ``OSError``...); ``message`` says why."""

    def __init__(self, type, message, reply=None, origin=None):
        self.type = type
        self.message = message
        self.reply = reply
        #: ``"rljail"`` for the supervisor's own verdict, ``"cell"`` for what the worker
        #: reported of the cell's code (which the cell can make say anything).
        self.origin = origin
        super().__init__("%s: %s" % (type, message))


class ProtocolError(SessionError):
    """The other side does not speak this protocol (a wrong version, a malformed reply)."""


class UndecodableReply(ProtocolError):
    """The reply to a request could not be decoded here, and that request fails with
    this; the session goes on.  rljail passes some of what the worker claims as it
    is (``get``'s value), so a cell can make a reply that is well-formed JSON and
    still beyond this process: nested deeper than Python's recursion limit, too large
    for its memory.  ``op`` is the request's; the exception that stopped the decoding
    is ``__cause__``."""

    def __init__(self, op, message):
        self.op = op
        super().__init__("the reply to %s cannot be decoded: %s" % (op, message))


class Repr(str):
    """What :meth:`Session.get` returns for a value that is not JSON-serialisable: the
    value's ``repr`` inside the jail (at most 64 KiB: ``truncated`` says when cut), as a
    string that says what it is."""

    truncated = False

    def __repr__(self):
        return "Repr(%s)" % str.__repr__(self)


class ContextName(str):
    """What :meth:`Session.load_context` returns: the numbered name bound
    (``context_0``, ``context_1``...), with ``names`` (every name bound: the first
    context is ``context`` too) and ``kind`` (``value``, ``json``, ``str``, ``mmap``
    or ``file``: how the worker bound a file; its claim, not the supervisor's)."""

    names = ()
    kind = None


class ErrorInfo:
    """An exception raised in a cell (the session goes on): its type name, message and
    traceback as the worker formatted them, or ``CellTimeout`` for an interrupted cell."""

    __slots__ = ("type", "message", "traceback", "raw", "origin")

    def __init__(self, type, message="", traceback="", raw=None, origin="cell"):
        self.type = type
        self.message = message
        self.traceback = traceback
        self.raw = raw
        #: ``"rljail"`` when the supervisor decided it (``CellTimeout``, ``WorkerError``),
        #: ``"cell"`` for the cell's own exception, type name included.
        self.origin = origin

    @classmethod
    def from_reply(cls, obj):
        if obj is None:
            return None
        if not isinstance(obj, dict):
            return cls("Error", str(obj), "", obj)
        return cls(str(obj.get("type") or "Error"), str(obj.get("message") or ""),
                   str(obj.get("traceback") or ""), obj,
                   "rljail" if obj.get("origin") == "rljail" else "cell")

    def __str__(self):
        return "%s: %s" % (self.type, self.message) if self.message else self.type

    def __repr__(self):
        return "ErrorInfo(type=%r, message=%r)" % (self.type, self.message)


class CellResult:
    """What one cell did.

    ``stdout`` and ``stderr`` are what the cell wrote to descriptors 1 and 2 (``print``,
    ``os.write`` and subprocesses alike) as the supervisor kept them: head and tail when
    longer than ``--max-output-chars`` bytes, ``stdout_truncated`` and
    ``stderr_truncated`` true then, ``stdout_bytes`` and ``stderr_bytes`` what the cell
    wrote in all.  ``cell`` is the session's number for the cell.  ``error`` is
    ``None`` or an :class:`ErrorInfo` for an exception in the cell.  ``ok`` is true when
    the cell raised nothing.  ``timed_out`` is true for a cell stopped at
    ``cell_timeout`` (``error.type == "CellTimeout"``, state kept).  ``lost`` and
    ``lost_reason`` are only ever set when the Session was made with
    ``errors="result"``; otherwise a lost session raises :class:`SessionLost`.
    ``names`` (also ``variables``) are the namespace's names not starting with ``_``
    after the cell (the worker's claim); ``calls`` holds the session's call counts so
    far (``llm_calls``, ``tool_calls``, ``prompt_chars``, ``refused``) when the session
    has the bridge; ``wall_ms`` and ``cpu_ms`` (``None`` when unreadable) are the
    supervisor's measures.  ``result`` is the ``repr`` of the cell's last expression
    when it is one whose value is not ``None`` (as a REPL shows it; at most 64 KiB,
    ``result_truncated`` then true), else ``None``.  ``raw`` is the reply as received.
    """

    def __init__(self, reply, lost_reason=None):
        reply = reply or {}
        self.raw = reply
        res = reply.get("result")
        self.result = res.get("repr") if isinstance(res, dict) and isinstance(res.get("repr"), str) else None
        self.result_truncated = isinstance(res, dict) and res.get("truncated") is True
        self.lost_reason = lost_reason
        self.lost = lost_reason is not None
        self.stdout = _text(reply.get("stdout"))
        self.stderr = _text(reply.get("stderr"))
        self.stdout_truncated = reply.get("stdout_truncated") is True
        self.stderr_truncated = reply.get("stderr_truncated") is True
        self.stdout_bytes = _count(reply.get("stdout_bytes"), len(self.stdout.encode("utf-8")))
        self.stderr_bytes = _count(reply.get("stderr_bytes"), len(self.stderr.encode("utf-8")))
        self.output_between_cells_bytes = _count(reply.get("output_between_cells_bytes"), 0)
        self.cell = reply.get("cell")
        if self.lost:
            err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
            self.error = ErrorInfo("SessionLost", str(err.get("message") or lost_reason), "", err, "rljail")
        else:
            self.error = ErrorInfo.from_reply(reply.get("error"))
        self.wall_ms = reply.get("wall_ms")
        self.cpu_ms = reply.get("cpu_ms")
        names = reply.get("names")
        self.names = [str(v) for v in names] if isinstance(names, list) else []
        calls = reply.get("calls")
        self.calls = dict(calls) if isinstance(calls, dict) else {}

    @property
    def variables(self):
        return self.names

    @property
    def ok(self):
        return self.error is None

    @property
    def timed_out(self):
        return (self.error is not None and self.error.type == "CellTimeout"
                and self.error.origin == "rljail")

    def __repr__(self):
        state = "ok" if self.ok else str(self.error)
        return "CellResult(%s, stdout=%r)" % (state, _preview(self.stdout))


def _text(value):
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _count(value, default):
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def _preview(text, n=60):
    return text if len(text) <= n else text[:n] + "..."


def find_binary(binary=None):
    """The argv prefix that starts rljail: ``binary`` (a path, or a list such as
    ``[sys.executable, "wrapper.py"]``), else ``$RLJAIL_BIN``, else ``rljail`` on PATH."""
    if binary is not None:
        if isinstance(binary, (list, tuple)):
            return [os.fspath(b) for b in binary]
        return [os.fspath(binary)]
    env = os.environ.get("RLJAIL_BIN")
    if env:
        return [env]
    found = shutil.which("rljail")
    if found:
        return [found]
    raise SessionError("rljail not found: pass binary=, set RLJAIL_BIN, or put rljail on PATH")


def _flag_name(key):
    return "--" + key.replace("_", "-")


def _duration(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if float(value).is_integer():
        return "%ds" % int(value)
    return "%dms" % round(value * 1000)


def _size(value):
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    return "%db" % value


def build_flags(limits):
    """Maps keyword arguments to ``rljail session`` flags: ``cell_timeout=30`` is
    ``--cell-timeout 30s``, ``memory=1 << 30`` is ``--memory 1073741824b``,
    ``strict_limits=True`` is ``--strict-limits`` (``False`` and ``None`` are left
    out), a list repeats the flag.  Strings pass as they are, so every flag of
    ``rljail session`` can be given, including ones this module has never heard of."""
    argv = []
    for key, value in limits.items():
        if value is None or value is False:
            continue
        flag = _flag_name(key)
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is True:
                argv.append(flag)
            elif key in _DURATION_FLAGS:
                argv += [flag, _duration(v)]
            elif key in _SIZE_FLAGS:
                argv += [flag, _size(v)]
            else:
                argv += [flag, str(v)]
    return argv


def tool_parameters(func):
    """The parameter names of a host tool, for ``--tool NAME:a,b``: its signature's
    positional-or-keyword and keyword-only parameters.  A function that takes only
    ``*args``/``**kwargs`` needs its names given: ``tools={"f": (f, ["a", "b"])}``."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        raise SessionError("cannot read the parameters of tool %r: give them as (func, [names])" % (func,))
    names = []
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY):
            names.append(p.name)
    return names


class _Waiter:
    """One request waiting for its reply: ``reply`` (the decoded object) or ``error``
    (an :class:`UndecodableReply` the reader made of a reply it could not decode)."""

    __slots__ = ("op", "event", "reply", "error")

    def __init__(self, op):
        self.op = op
        self.event = threading.Event()
        self.reply = None
        self.error = None


class Session:
    """One ``rljail session``: a persistent jailed Python whose state lasts from cell to cell.

    ``binary`` is rljail's path (or an argv prefix list); by default ``$RLJAIL_BIN`` or
    ``rljail`` on PATH.  ``memory``, ``cell_timeout``, ``timeout`` and every other
    keyword argument become flags of ``rljail session`` (see :func:`build_flags`):
    ``max_cells=100``, ``max_output_chars=10000``, ``max_llm_calls=50``,
    ``idle_timeout="5m"``, ``audit_log="/var/log/rlm.jsonl"``, ``profile="python"``...
    ``volumes`` is a list of ``"SRC:DST[:ro|rw]"`` strings or ``(src, dst[, mode])``
    tuples; ``env`` a dict of variables to set in the jail.

    No host directory is granted but the ``volumes``: the current directory of this
    process is not mounted (``rljail`` itself mounts it at ``/workspace``; a runner's
    directory holds its own scripts and, often, a ``.env``: not the model's to read).
    ``workspace`` grants one directory read-only at ``/workspace`` when given.  The
    jail's working directory is ``/tmp``, its private tmpfs, so that a cell's relative
    paths (``open("notes.txt", "w")``) work as in an in-process REPL's temporary
    directory; ``workdir`` chooses another (``workdir="/workspace"``).

    ``temp_dirs`` are host directories made for this session (the sources of volumes
    granted to it): they are removed when it ends, whichever way: :meth:`close`, the
    end of a ``with``, the Session collected unclosed, the interpreter's exit, or its
    failing to start.

    Calls from the jail are served on the host:

    - ``llm`` answers ``llm_query(prompt, model=None)``: a callable taking
      ``(prompt, model)`` and returning a string; ``llm_batched`` optionally answers
      ``llm_query_batched(prompts, model)`` as a whole (otherwise each prompt goes to
      ``llm``, ``batch_concurrency`` at once).  ``llm="openai"`` instead has the
      supervisor call an OpenAI-compatible endpoint itself (``llm_endpoint=``,
      ``llm_model=``, ``llm_key_env=``): the key never reaches this process or the jail.
    - ``rlm`` and ``rlm_batched`` answer ``rlm_query`` and ``rlm_query_batched`` (a
      child RLM); without them those calls go to ``llm``.
    - ``tools`` maps a name to a callable (its parameter names are read from its
      signature) or to ``(callable, [parameter names])``; the jail gets a function of
      that name (positional arguments in that order, or keywords) whose arguments
      arrive here as JSON keywords.

    An LLM handler returns a ``str`` (a batched one a list of ``str``, one per prompt), a
    tool any JSON value; an exception in a handler, or an answer of another shape, is a
    ``CallFailed`` in the cell (the session goes on).  rljail enforces the budgets and
    the per-call timeout; a refused call raises ``LLMBudgetExceeded``,
    ``ToolBudgetExceeded``, ``BadCall`` or ``CallTimeout`` in the cell.

    ``errors`` chooses how a lost session and a cell timeout reach the caller of
    :meth:`run`: ``"raise"`` (the default) raises :class:`SessionLost` and
    :class:`CellTimeout`; ``"result"`` returns a :class:`CellResult` with ``lost`` or
    ``timed_out`` set instead.  Exceptions in the cell are always result fields.

    ``stderr`` is where rljail's own diagnostics go: ``None`` keeps the last 64 KiB for
    error messages (:attr:`stderr_tail`), or a file object / descriptor to pass them on.

    A session serves one caller at a time (calls from several threads are serialised);
    :meth:`interrupt` and :meth:`close` may be called from any thread, also while a cell
    runs.  Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, binary=None, *, memory=None, cell_timeout=None, timeout=None,
                 volumes=(), env=None, workspace=None, tools=None, llm=None, llm_batched=None,
                 rlm=None, rlm_batched=None, errors="raise", stderr=None, call_workers=8,
                 batch_concurrency=8, reply_margin=30.0, extra_args=(), temp_dirs=(),
                 **limits):
        # First, so that whatever fails below still removes the caller's directories
        # and stops rljail once started (_procs gets it).
        self._procs = []
        self._finalizer = weakref.finalize(self, _end_session, self._procs,
                                           [os.fspath(d) for d in temp_dirs])
        try:
            self._configure(binary, memory, cell_timeout, timeout, volumes, env, workspace,
                            tools, llm, llm_batched, rlm, rlm_batched, errors, call_workers,
                            batch_concurrency, reply_margin, extra_args, limits)
            self._stderr_arg = stderr
            self._start(stderr)
        except BaseException:
            self._finalizer()
            raise

    def _configure(self, binary, memory, cell_timeout, timeout, volumes, env, workspace,
                   tools, llm, llm_batched, rlm, rlm_batched, errors, call_workers,
                   batch_concurrency, reply_margin, extra_args, limits):
        """Checks the arguments and builds rljail's argv; starts nothing."""
        if errors not in ("raise", "result"):
            raise ValueError("errors must be 'raise' or 'result', not %r" % (errors,))
        self.errors = errors
        self._argv0 = find_binary(binary)
        self._tools = {}
        tool_flags = []
        for name, spec in (tools or {}).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError("tool name %r is not a Python identifier" % (name,))
            if name in LLM_CALLS + RLM_CALLS + _SESSION_NAMES:
                raise ValueError("tool name %r is a name the session defines itself" % name)
            if isinstance(spec, tuple):
                func, params = spec
                params = list(params)
            else:
                func, params = spec, tool_parameters(spec)
            if not callable(func):
                raise TypeError("tool %r is not callable" % name)
            self._tools[name] = func
            tool_flags.append("%s:%s" % (name, ",".join(params)))
        self._llm_mode = None
        if isinstance(llm, str):
            self._llm_mode, llm = llm, None
        elif llm is not None or rlm is not None:
            self._llm_mode = "client"
        self._llm, self._llm_batched = llm, llm_batched
        self._rlm, self._rlm_batched = rlm, rlm_batched
        self._batch_concurrency = max(1, int(batch_concurrency))

        flags = dict(memory=memory, cell_timeout=cell_timeout, timeout=timeout)
        # rljail mounts its current directory (this process's) unless told not to: a
        # runner's directory is the runner's, not the model's (its scripts, its .env).
        flags["no_workspace"] = True
        if "workdir" not in limits:
            flags["workdir"] = "/tmp"  # writable, private to the jail, gone with it
        flags.update(limits)
        if self._llm_mode:
            flags["llm"] = self._llm_mode
        if tool_flags:
            flags["tool"] = tool_flags
        argv = self._argv0 + ["session"] + build_flags(flags)
        volumes = list(volumes or ())
        if workspace is not None:
            # A volume, not rljail's own workspace (its current directory): the grant
            # is the caller's, of the directory named, read-only.
            path = os.path.abspath(os.fspath(workspace))
            if ":" in path:
                raise ValueError("workspace %r: a path with ':' cannot be a volume's source" % path)
            volumes.append((path, WORKSPACE_IN_JAIL, "ro"))
        for vol in volumes:
            argv += ["-v", vol if isinstance(vol, str) else ":".join(os.fspath(p) for p in vol)]
        for key, value in (env or {}).items():
            argv += ["-e", "%s=%s" % (key, value)]
        argv += list(extra_args)
        self.argv = argv
        # Until hello says what the supervisor holds, the deadline of a reply is the
        # flags' (or rljail's defaults: 30 s and 1 s).
        self._cell_timeout = _seconds(cell_timeout)
        if self._cell_timeout is None:
            self._cell_timeout = 30.0
        self._cell_grace = _seconds(limits.get("cell_grace"))
        if self._cell_grace is None:
            self._cell_grace = 1.0
        self._reply_margin = reply_margin
        self.close_info = None
        self._restarting = False  # restart's close keeps the pool and the temp_dirs

        self._ids = itertools.count(1)
        self._waiters = {}
        self._state_lock = threading.Lock()   # guards _waiters, _lost, _closed
        self._write_lock = threading.Lock()   # one line at a time on rljail's stdin
        self._op_lock = threading.RLock()     # one caller at a time
        self._lost = None                     # (reason, message) once the session is gone
        self._closed = False
        self._eof = False                     # the reader saw rljail's stdout end
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(call_workers)),
                                        thread_name_prefix="rljail-call")
        self._stderr = Tail(_STDERR_TAIL)
        self.hello = None
        self.protocol = self.version = self.session_id = None
        self.limits = {}
        self.tools = []
        self._proc = self._reader = self._stderr_reader = None

    def _start(self, stderr):
        """Starts rljail and its reader threads, and says hello."""
        self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE if stderr is None else stderr)
        # From here the finalizer stops rljail: when this object is collected or the
        # interpreter exits.  The reader threads hold no reference to the Session (a
        # weak one, or none), or it could never be collected while rljail runs.
        self._procs.append(self._proc)
        self._reader = threading.Thread(target=read_lines, name="rljail-reader", daemon=True,
                                        args=(weakref.ref(self), self._proc.stdout, _MAX_LINE))
        self._reader.start()
        if stderr is None:
            self._stderr_reader = threading.Thread(target=self._stderr.read_from,
                                                   args=(self._proc.stderr,),
                                                   name="rljail-stderr", daemon=True)
            self._stderr_reader.start()
        try:
            self.hello = self._request("hello", timeout=60.0)
        except BaseException:
            self.close(wait=5.0, ask=False)
            raise
        self.protocol = self.hello.get("protocol")
        if self.protocol != PROTOCOL_VERSION:
            # Not a peer to send close to: the end of its stdin ends rljail.
            self.close(wait=5.0, ask=False)
            raise ProtocolError("rljail speaks session protocol %r, this package %d"
                                % (self.protocol, PROTOCOL_VERSION))
        self.version = self.hello.get("rljail")
        self.session_id = self.hello.get("session_id")
        self.start_ms = self.hello.get("start_ms")
        limits = self.hello.get("limits")
        self.limits = limits if isinstance(limits, dict) else {}
        tools = self.hello.get("tools")
        self.tools = tools if isinstance(tools, list) else []
        # The supervisor's own cell timer and grace bound how long a reply may take.
        for key, attr in (("cell_timeout_ms", "_cell_timeout"), ("cell_grace_ms", "_cell_grace")):
            value = self.limits.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                setattr(self, attr, value / 1000.0)

    # ----------------------------------------------------------------- requests

    def run(self, code, *, timeout=None):
        """Runs one cell in the session's namespace and returns its :class:`CellResult`.

        ``timeout`` is how long this process waits for the reply at most (the cell
        timeout itself is the supervisor's, ``cell_timeout``); by default the
        supervisor's cell timeout plus its grace (from ``hello``) plus
        ``reply_margin``.  A reply that never comes is a lost session."""
        if not isinstance(code, str):
            raise TypeError("code must be a str, not %s" % type(code).__name__)
        if timeout is None:
            timeout = self._cell_timeout + self._cell_grace + self._reply_margin
        try:
            reply = self._request("exec", timeout=timeout, code=code)
        except SessionLost as e:
            if self.errors == "result":
                lost = dict(e.reply) if isinstance(e.reply, dict) else {}
                lost["error"] = {"message": str(e)}
                return CellResult(lost, lost_reason=e.reason)
            raise
        result = CellResult(reply)
        if result.timed_out and self.errors == "raise":
            raise CellTimeout(result)
        return result

    def set(self, name, value):
        """Binds ``name`` in the namespace to ``value`` (any JSON value)."""
        json.dumps(value, allow_nan=False)  # refuse here what the wire cannot carry
        self._request("set", name=name, value=value)

    def get(self, name):
        """The value of ``name`` in the namespace: decoded JSON, or a :class:`Repr`
        when the value is not JSON-serialisable."""
        reply = self._request("get", name=name)
        if reply.get("json") is True:
            return reply.get("value")
        r = Repr(_text(reply.get("repr")))
        r.truncated = reply.get("repr_truncated") is True
        return r

    def load_context(self, value=None, *, path=None):
        """Binds the next context: ``context`` (and ``context_0``) the first time,
        ``context_1``, ``context_2``, ... after.  Give a JSON ``value``, or the ``path``
        of a file inside the jail (a granted read-only volume: the worker reads it
        there; a ``.json`` file is decoded, a text file up to 256 MiB read into a
        ``str``, a larger one mapped without being read): a large context should never
        pass through the protocol.  Returns the numbered name bound, a
        :class:`ContextName` with ``names`` and ``kind``."""
        if (value is None) == (path is None):
            raise ValueError("give exactly one of value and path")
        if path is not None:
            reply = self._request("load_context", path=os.fspath(path))
        else:
            json.dumps(value, allow_nan=False)
            reply = self._request("load_context", value=value)
        names = reply.get("names")
        names = [str(n) for n in names] if isinstance(names, list) else []
        numbered = [n for n in names if n.startswith("context_")]
        result = ContextName(numbered[-1] if numbered else (names[-1] if names else ""))
        result.names = tuple(names)
        result.kind = reply.get("kind")
        return result

    def put_file(self, path, data):
        """Writes ``data`` (bytes, or str as UTF-8; at most ``max_file_bytes``, 8 MiB)
        to ``path``, absolute, below the jail's writable places (``/tmp``, ``/dev/shm``,
        a volume granted rw; else ``RequestError`` ``BadPath``).  Returns the size
        written."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        reply = self._request("put_file", path=os.fspath(path),
                              data=base64.b64encode(bytes(data)).decode("ascii"))
        return reply.get("size")

    def get_file(self, path):
        """The bytes of ``path`` inside the jail's writable places."""
        reply = self._request("get_file", path=os.fspath(path))
        try:
            return base64.b64decode(reply.get("data") or "", validate=True)
        except (ValueError, TypeError) as e:
            raise ProtocolError("get_file: the reply's data is not base64: %s" % e)

    def interrupt(self):
        """Interrupts the running cell (a KeyboardInterrupt in it; the session goes on).
        May be called from any thread while :meth:`run` waits.  Returns False when no
        cell ran."""
        reply = self._request("interrupt", serialise=False, timeout=30.0)
        return reply.get("interrupted") is True

    @property
    def alive(self):
        """False once the session is lost or closed."""
        return self._lost is None and not self._closed

    @property
    def lost_reason(self):
        """The reason the session was lost, or None."""
        return self._lost[0] if self._lost else None

    @property
    def stderr_tail(self):
        """The last bytes rljail wrote on its stderr (when ``stderr`` was not given)."""
        return self._stderr.text()

    def close(self, wait=_CLOSE_WAIT, ask=True):
        """Ends the session: asks rljail to remove the jail (its reply, once nothing
        of the jail is left, is :attr:`close_info`: ``cells``, ``wall_ms``, ``cpu_ms``,
        ``memory_peak_bytes``, and ``lost`` for a lost session), then closes its stdin;
        a session that has not ended within ``wait`` seconds is stopped.  Returns
        rljail's exit status.  Safe to call more than once and from any thread.
        ``ask=False`` skips the close request (the end of stdin ends the session too,
        once the request in flight is answered)."""
        if sys.is_finalizing():
            return self._close_at_exit()
        with self._state_lock:
            first = not self._closed
            self._closed = True
            waiter = None
            if ask and first and not self._eof and self._proc.poll() is None:
                rid = "close-%d" % next(self._ids)
                waiter = self._waiters[rid] = _Waiter("close")
        proc = self._proc
        if waiter is not None:
            try:
                self._send({"id": rid, "op": "close"})
                if (waiter.event.wait(wait) and waiter.reply is not None
                        and waiter.reply.get("ok") is True):
                    self.close_info = waiter.reply
            except (OSError, ValueError):
                pass
        if first:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            status = proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.terminate()  # rljail removes the jail on SIGTERM
            try:
                status = proc.wait(wait)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
        self._reader.join(5.0)
        if self._stderr_reader is not None:
            self._stderr_reader.join(5.0)
        # A pipe whose reader thread still runs is left to it: closing it would
        # wait for the lock the reading thread holds (at interpreter exit, where
        # daemon threads stop where they are, a fatal error).
        for pipe, reader in ((proc.stdout, self._reader), (proc.stderr, self._stderr_reader)):
            if pipe is not None and not (reader is not None and reader.is_alive()):
                try:
                    pipe.close()
                except OSError:
                    pass
        self._fail_all("closed", "the session was closed")
        if not self._restarting:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._finalizer()  # rljail has ended: this removes the temp_dirs
        return status

    def _close_at_exit(self):
        """close() at the interpreter's exit (a ``__del__`` run by its last
        collection, as an adapter's is): the reader threads, daemons, were stopped
        where they stood, perhaps in a read that holds their pipe's lock (or this
        Session's locks), and their thread states are gone, so ``is_alive()`` says
        False.  Asking rljail, joining them or closing a pipe would wait for a lock
        no thread will release: at shutdown a fatal error.  Only the finalizer runs
        (it stops rljail and removes the temp_dirs, once); the pipes go with the
        process."""
        self._closed = True
        self._finalizer()
        proc = self._proc
        return proc.returncode if proc is not None else None

    def restart(self):
        """Ends this session's jail, if it still runs, and starts a fresh one with the
        same flags, tools and handlers: a new namespace, nothing of the old one's state
        (its variables, files in ``/tmp``, processes).  A session lost to ``os._exit``
        in a cell, a memory kill or its timeout goes on this way; ``temp_dirs`` stay
        until :meth:`close`.  Returns the new session's ``hello``."""
        with self._op_lock:
            self._restarting = True
            try:
                self.close(wait=5.0, ask=self._lost is None)
            finally:
                self._restarting = False
            with self._state_lock:
                self._lost = None
                self._closed = False
                self._eof = False
                self._waiters = {}
            self.close_info = None
            self._stderr = Tail(_STDERR_TAIL)
            try:
                self._start(self._stderr_arg)
            except BaseException:
                self.close(wait=5.0, ask=False)
                raise
            return self.hello

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "alive" if self.alive else ("lost: %s" % self.lost_reason if self._lost else "closed")
        return "<rljail.Session pid=%s %s>" % (self._proc.pid, state)

    # ----------------------------------------------------------------- plumbing

    def _request(self, op, timeout=None, serialise=True, **fields):
        if timeout is None:
            # The supervisor bounds every request for the worker by the cell timeout
            # and its grace (get runs a cell's __repr__, a file request may meet a
            # FIFO); a reply later than that, with the margin, is a wedged session.
            timeout = self._cell_timeout + self._cell_grace + self._reply_margin
        lock = self._op_lock if serialise else _NoLock
        with lock:
            waiter = _Waiter(op)
            with self._state_lock:
                if self._lost is not None:
                    raise SessionLost(self._lost[0], self._lost[1], self.stderr_tail)
                if self._closed:
                    raise SessionError("the session is closed")
                rid = next(self._ids)
                self._waiters[rid] = waiter
            msg = {"id": rid, "op": op}
            msg.update(fields)
            try:
                self._send(msg)
            except (OSError, ValueError) as e:
                with self._state_lock:
                    self._waiters.pop(rid, None)
                # A closed pipe is rljail gone or going (a bad flag: exit 125): the
                # reader, at its end of output, says so with the exit status and
                # rljail's last line, which tell more than the write's error.
                if threading.current_thread() is not self._reader:
                    self._reader.join(_EXIT_WAIT)
                self._lose("exited", "cannot write to rljail: %s" % e)
                raise SessionLost(self._lost[0], self._lost[1], self.stderr_tail)
            if not waiter.event.wait(timeout):
                with self._state_lock:
                    self._waiters.pop(rid, None)
                # The supervisor owes every request a reply; one that never comes means it
                # is wedged, and the jail is stopped rather than left behind.
                self._lose("no_reply", "no reply to %s within %.0f s" % (op, timeout))
                _stop_process(self._proc)
                raise SessionLost(self._lost[0], self._lost[1], self.stderr_tail)
            if waiter.error is not None:
                raise waiter.error
            reply = waiter.reply
            if reply.get("ok") is True:
                return reply
            err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
            etype = str(err.get("type") or "Error")
            origin = "rljail" if err.get("origin") == "rljail" else "cell"
            if etype == "SessionLost" and origin == "rljail":
                reason = str(err.get("reason") or "unknown")
                self._lose(reason, str(err.get("message") or ""))
                raise SessionLost(reason, str(err.get("message") or ""), self.stderr_tail, reply)
            raise RequestError(etype, str(err.get("message") or ""), reply, origin)

    def _send(self, msg):
        line = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        data = line.encode("utf-8") + b"\n"
        with self._write_lock:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()

    def _take_line(self, line):
        """Hands one line from rljail to the request it answers or to the call pool.
        Returns False when reading cannot go on (the session is lost)."""
        if len(line) > _MAX_LINE:
            self._lose("protocol", "a line from rljail longer than %d bytes" % _MAX_LINE)
            _stop_process(self._proc)
            return False
        try:
            msg = json.loads(line.decode("utf-8"))
        except (RecursionError, ValueError, MemoryError) as e:
            # ValueError: not JSON (JSONDecodeError) or not UTF-8 (UnicodeDecodeError).
            # RecursionError: nested deeper than the recursion limit; rljail passes a
            # worker's claim (get's value) and a cell's call arguments as deep as Go
            # decodes them, far deeper than Python's 1000.
            return self._undecodable(line, "%s: %s" % (type(e).__name__, e), e)
        problem = line_problem(msg)
        if problem is not None:
            return self._undecodable(line, problem, None)
        if "event" in msg:
            if msg["event"] == "closed":
                # The supervisor ended the session (--idle-timeout).
                self._lose(str(msg.get("reason") or "closed"), "the session was closed by rljail")
            elif msg["event"] == "call":
                self._on_call(msg)
            else:
                log.debug("rljail session: unknown event %r", msg["event"])
            return True
        rid = msg["id"]
        with self._state_lock:
            waiter = self._waiters.pop(rid, None) if rid is not None else None
        if waiter is not None:
            waiter.reply = msg
            waiter.event.set()
        elif msg["ok"] is False:
            if msg["error"].get("type") == "SessionLost" and msg["error"].get("origin") == "rljail":
                self._lose(str(msg["error"].get("reason") or "unknown"),
                           str(msg["error"].get("message") or ""))
            else:
                # A refused call_result (a stale call after a cell timeout, say).
                log.debug("rljail session: refused request %r: %s", rid, msg["error"])
        return True

    def _undecodable(self, line, what, cause):
        """A line that json.loads could not decode, or whose fields are not the
        protocol's (``what`` says why): the request it answers fails with
        UndecodableReply, and a call event is answered with an error (the cell gets
        CallFailed), found by the fields that a scan without recursion still reads;
        a line that names neither loses the session.  Returns False then."""
        log.debug("rljail session: a line from rljail cannot be decoded (%s): %r", what, line[:200])
        try:
            fields = scalar_fields(line.decode("utf-8", "replace"), ("id", "event", "call", "reason"))
        except (MemoryError, RecursionError, ValueError):
            fields = {}
        event, rid = fields.get("event"), fields.get("id")
        if event == "call":
            if is_number(fields.get("call")):
                self._answer_call(fields["call"], "the host cannot decode this call (%s)" % what)
                return True
        elif event == "closed":
            self._lose(str(fields.get("reason") or "closed"), "the session was closed by rljail")
            return True
        elif isinstance(event, str):
            return True  # an event this package does not know: nothing waits for it
        elif event is None and is_id(rid):
            with self._state_lock:
                waiter = self._waiters.pop(rid, None)
            if waiter is not None:
                waiter.error = UndecodableReply(waiter.op, what)
                waiter.error.__cause__ = cause
                waiter.event.set()
            return True
        elif event is None and "id" in fields and rid is None:
            return True  # rljail's answer to a request it could not read: never ours
        self._lose("protocol", "a line from rljail that is no reply or event of the protocol (%s)" % what)
        _stop_process(self._proc)
        return False

    def _reader_done(self):
        """rljail's stdout ended: the session is lost (or closed), with its status."""
        with self._state_lock:
            self._eof = True
        status = self._proc.wait()
        if self._closed and self._lost is None:
            self._fail_all("closed", "the session was closed")
        else:
            if self._stderr_reader is not None:
                self._stderr_reader.join(2.0)
            last = [l for l in self.stderr_tail.splitlines() if l.strip()]
            self._lose("exited", "rljail exited with status %s%s"
                       % (status, (": " + last[-1]) if last else ""))

    def _break(self, message):
        """The session cannot go on reading rljail's lines: lost ("protocol"), and
        rljail stopped."""
        self._lose("protocol", message)
        _stop_process(self._proc)

    def _lose(self, reason, message):
        with self._state_lock:
            if self._lost is None:
                self._lost = (reason, message)
        self._fail_all(*self._lost)

    def _fail_all(self, reason, message):
        with self._state_lock:
            waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.reply = {"ok": False, "error": {"type": "SessionLost", "origin": "rljail", "reason": reason,
                                                   "message": message}}
            waiter.event.set()

    # ----------------------------------------------------------------- calls from the jail

    def _on_call(self, msg):
        """A call event: served on the pool, never on the reader thread (a handler may
        take its time, and replies must keep flowing meanwhile)."""
        try:
            self._pool.submit(self._serve_call, msg)
        except RuntimeError:
            pass  # the pool is shut down: the session is closing

    def _serve_call(self, msg):
        call, name, args = msg["call"], msg["name"], msg["args"]  # typed by line_problem
        try:
            value = self._dispatch(name, args)
            _check_answer(name, args, value)
            answer = {"op": "call_result", "call": call, "value": value}
        except BaseException as e:  # a handler's failure is the cell's exception, not ours
            # The cell gets it as CallFailed with this message.
            answer = {"op": "call_result", "call": call, "error": "%s: %s" % (type(e).__name__, e)}
        self._send_result(answer)

    def _answer_call(self, call, error):
        """Answers call ``call`` with ``error`` (from the pool: a write may block, and
        the reader must not), so that the cell's call fails now, not at its timeout."""
        try:
            self._pool.submit(self._send_result, {"op": "call_result", "call": call, "error": error})
        except RuntimeError:
            pass  # the pool is shut down: the session is closing

    def _send_result(self, answer):
        # No id: a call_result without one gets no reply, and one for a call that is gone
        # (answered, timed out at the supervisor, never made) is dropped there.
        try:
            self._send(answer)
        except (OSError, ValueError):
            pass  # the session is gone; its reader says so

    def _dispatch(self, name, args):
        model = args.get("model")
        if name == "llm_query" or (name == "rlm_query" and self._rlm is None):
            if self._llm is None:
                raise LookupError("no llm handler on the host")
            return self._llm(args.get("prompt"), model)
        if name == "llm_query_batched" or (name == "rlm_query_batched" and self._rlm is None
                                           and self._rlm_batched is None):
            return self._batch(self._llm_batched, self._llm, args.get("prompts"), model, "llm")
        if name == "rlm_query":
            return self._rlm(args.get("prompt"), model)
        if name == "rlm_query_batched":
            return self._batch(self._rlm_batched, self._rlm, args.get("prompts"), model, "rlm")
        func = self._tools.get(name)
        if func is None:
            raise LookupError("no host tool named %r" % (name,))
        return func(**args)

    def _batch(self, batched, single, prompts, model, what):
        if not isinstance(prompts, list):
            raise TypeError("prompts must be a list")
        if batched is not None:
            return batched(prompts, model)
        if single is None:
            raise LookupError("no %s handler on the host" % what)
        if len(prompts) <= 1:
            return [single(p, model) for p in prompts]
        # A pool of its own: the session's pool may be full of calls waiting on this one.
        with ThreadPoolExecutor(max_workers=min(self._batch_concurrency, len(prompts))) as pool:
            return list(pool.map(lambda p: single(p, model), prompts))


def _check_answer(name, args, value):
    """Refuses on the host what the call's caller cannot use: an LLM answer is a str, a
    batch's a list of str, one per prompt; a tool's any JSON value."""
    if name in ("llm_query", "rlm_query"):
        if not isinstance(value, str):
            raise TypeError("the %s handler returned %s, not str" % (name, type(value).__name__))
    elif name in ("llm_query_batched", "rlm_query_batched"):
        prompts = args.get("prompts")
        if (not isinstance(value, list) or not all(isinstance(v, str) for v in value)
                or not isinstance(prompts, list) or len(value) != len(prompts)):
            raise TypeError("the %s handler must return a list of str, one per prompt" % name)
    json.dumps(value, allow_nan=False)


def _end_session(procs, dirs):
    """A Session's finalizer, run once: at close, when the Session is collected, at
    the interpreter's exit, or when it failed to start.  Stops rljail if it still
    runs (it removes the jail on SIGTERM), then removes the Session's temp_dirs."""
    for proc in procs:
        _stop_process(proc)
        try:
            proc.stdin.close()  # its readers close stdout and stderr at their end
        except OSError:
            pass
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


class _NoLockType:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NoLock = _NoLockType()


def _seconds(value):
    """A duration flag's value in seconds, for the host-side reply deadline."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * scale
            except ValueError:
                return None
    try:
        return float(text)
    except ValueError:
        return None


def _stop_process(proc):
    """Stops rljail if it still runs (SIGTERM: it removes the jail), without waiting long."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        except OSError:
            pass
