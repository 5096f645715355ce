"""An environment for the reference RLM library (github.com/alexzhang13/rlm) in rljail.

:class:`RljailREPL` is what ``rlm.environments.LocalREPL`` is to an ``RLM`` (the same
constructor, ``setup``, ``load_context``, ``execute_code -> REPLResult`` and the
``SupportsPersistence`` methods), except that every cell runs in one persistent jailed
Python instead of ``exec`` in the runner's own process.  Names and behaviour follow
``rlm/environments/local_repl.py``, ``base_env.py`` and ``docker_repl.py``,
``rlm/core/types.py`` and ``rlm/core/comms_utils.py`` as of commit 72d6940; nothing of
the library is imported until a result is built, and then only its types.

Inside the jail, ``llm_query``/``llm_query_batched`` reach the runtime's own LM handler
(the ``(host, port)`` it gives the environment, over its length-prefixed JSON socket
protocol), ``rlm_query``/``rlm_query_batched`` its ``subcall_fn`` (a child RLM), and
callable ``custom_tools`` run on the host through the bridge.  The final answer is the
``answer`` dict (``answer["content"] = ...; answer["ready"] = True``) or, where the rlm
that drives the adapter has it (:func:`runtime_has_final_var`), ``FINAL_VAR(name)``.  The reserved names (``RESERVED_TOOL_NAMES``:
the query functions, ``SHOW_VARS``, ``answer``, ``context``, ``history``) are restored
after every cell, as the local REPL does.

To make an unchanged ``RLM`` use it::

    from rljail.adapters import rlm as rljail_rlm
    with rljail_rlm.install(memory="1g", cell_timeout=60):
        rlm = RLM(backend="openai", backend_kwargs={...}, environment="local",
                  persistent=True, max_depth=2)
        rlm.completion(long_document)

:func:`install` routes the library's ``"local"`` environment to this class (the RLM
checks persistence and passes ``subcall_fn`` by that name, so both keep working, child
RLMs included); per-RLM options go in ``environment_kwargs={"rljail": {...}}``.
"""

import contextlib
import copy
import json
import logging
import socket
import struct
import sys
import threading
import time

from ..session import CellTimeout
from ._common import RUNTIME_OUTPUT_BYTES, HostInputs, bind, faithful_tool, release, start_session

__all__ = ["RljailREPL", "install", "REPLResult"]

log = logging.getLogger("rljail.adapters.rlm")

# rlm/environments/base_env.py: RESERVED_TOOL_NAMES (FINAL_VAR is the older runtime's).
RESERVED_NAMES = frozenset({"llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched",
                            "SHOW_VARS", "answer", "context", "history"})

# Runs once in the jail: the scaffold that LocalREPL keeps in its globals, written for a
# namespace the host cannot reach into.  Everything it binds starts with "_" or is a
# reserved name, so that it stays out of the variables the model sees.
_SETUP = r'''
class _AnswerDict(dict):
    """answer["ready"] = True hands answer["content"] to the runner as the final answer."""

    def __init__(self, on_ready=None):
        dict.__init__(self, content="", ready=False)
        self._on_ready = on_ready

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, value)
        if key == "ready" and value and self._on_ready is not None:
            self._on_ready(self.get("content", ""))


class _RljailRLMScaffold:
    def __init__(self, ns, tool_names, compaction, final_var):
        self.ns = ns
        self.compaction = compaction
        self.fixed = {}
        for name in ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched") + tuple(tool_names):
            if name in ns:
                self.fixed[name] = ns[name]
        self.fixed["SHOW_VARS"] = self.show_vars
        if final_var:
            self.fixed["FINAL_VAR"] = self.final_var
        # The bridge's exceptions are in the namespace too (the worker defines them).
        self.hidden = set(self.fixed) | {"LLMBudgetExceeded", "ToolBudgetExceeded", "BadCall",
                                         "CallTimeout", "CallFailed", "answer"}
        self.final = None
        ns.update(self.fixed)
        ns["answer"] = _AnswerDict(self._capture)
        if compaction:
            ns["history"] = []

    def _capture(self, content):
        self.final = str(content)

    def user_vars(self):
        return {k: v for k, v in self.ns.items() if not k.startswith("_") and k not in self.hidden}

    def show_vars(self):
        available = {k: type(v).__name__ for k, v in self.user_vars().items()}
        if not available:
            return "No variables created yet. Use ```repl``` blocks to create variables."
        return "Available variables: %s" % available

    def final_var(self, variable_name):
        if not isinstance(variable_name, str):
            self.final = str(variable_name)
            return self.final
        variable_name = variable_name.strip().strip("\"'")
        values = self.user_vars()
        if variable_name in values:
            self.final = str(values[variable_name])
            return self.final
        available = sorted(values)
        if available:
            return ("Error: Variable '%s' not found. Available variables: %s. You must create and "
                    "assign a variable BEFORE calling FINAL_VAR on it." % (variable_name, available))
        return ("Error: Variable '%s' not found. No variables have been created yet. You must create "
                "and assign a variable in a REPL block BEFORE calling FINAL_VAR on it." % variable_name)

    def restore(self, value_chars, total_chars):
        ns = self.ns
        ns.update(self.fixed)
        current = ns.get("answer")
        if not isinstance(current, _AnswerDict):
            replacement = _AnswerDict(self._capture)
            if isinstance(current, dict):
                for k, v in current.items():
                    dict.__setitem__(replacement, k, v)
                if current.get("ready") and self.final is None:
                    self.final = str(current.get("content", ""))
            ns["answer"] = replacement
        if "context_0" in ns:
            ns["context"] = ns["context_0"]
        if self.compaction:
            ns["history"] = ns.get("_rljail_compaction", [])
        elif "history_0" in ns:
            ns["history"] = ns["history_0"]
        final, self.final = self.final, None
        ns["_rljail_report"] = {"final": final, "locals": self.snapshot(value_chars, total_chars)}

    def snapshot(self, value_chars, total_chars):
        # Each value's JSON up to value_chars, all of them up to total_chars (the reply
        # that carries them holds 12 MiB); the others stay here, named by type and repr.
        import json
        ns = self.ns
        shown = {}
        used = 0
        # As LocalREPL's locals: the user's variables and the answer dict.
        current = ns.get("answer")
        first = [("answer", dict(current))] if isinstance(current, dict) else []
        for k, v in first + list(self.user_vars().items()):
            entry = [type(v).__name__, None, None]
            # A long string (a context of megabytes) is not even dumped: it stays here.
            room = min(value_chars, total_chars - used)
            if not (isinstance(v, str) and len(v) > room):
                try:
                    text = json.dumps(v)
                    if len(text) <= room:
                        entry[1] = v
                        entry[2] = True
                        used += len(text)
                except (TypeError, ValueError, RecursionError):
                    pass
            if entry[2] is None:
                try:
                    entry[2] = repr(v)[:200]
                except Exception:
                    entry[2] = "<%s>" % type(v).__name__
            shown[k] = entry
        return shown
'''


class JailedValue:
    """Stands in :attr:`REPLResult.locals` for a value that stays in the jail (too large,
    or not JSON): its type name and the start of its repr.

    For a ``str``, ``int``, ``float``, ``list``, ``dict`` or ``tuple`` it is an (empty)
    instance of that type as well, so that what a runtime makes of the locals by their
    types stays as on LocalREPL: rlm's ``format_execution_result`` lists a variable in
    "REPL variables:" only when it is one of those, and a 90 KB ``context`` must be
    listed there as LocalREPL lists it.  Its value is not: read it with :attr:`locals`
    or in a cell."""

    def __init__(self, type_name, preview):
        self.type_name = type_name
        self.preview = preview

    def __repr__(self):
        return self.preview

    __str__ = __repr__


def _typed_jailed(base):
    class Typed(JailedValue, base):
        def __new__(cls, type_name, preview):
            return base.__new__(cls)

        __repr__ = JailedValue.__repr__
        __str__ = JailedValue.__str__
        __hash__ = object.__hash__

    Typed.__name__ = Typed.__qualname__ = "Jailed" + base.__name__.capitalize()
    return Typed


_JAILED_TYPED = {b.__name__: _typed_jailed(b) for b in (str, int, float, list, dict, tuple)}


def jailed_value(type_name, preview):
    """The :class:`JailedValue` of a value of ``type_name`` (typed when it can be)."""
    return _JAILED_TYPED.get(type_name, JailedValue)(type_name, preview)


class _REPLResultFallback:
    """rlm.core.types.REPLResult's shape, for when the library is not installed."""

    def __init__(self, stdout, stderr, locals, execution_time=None, rlm_calls=None,
                 final_answer=None):
        self.stdout = stdout
        self.stderr = stderr
        self.locals = locals
        self.execution_time = execution_time
        self.rlm_calls = rlm_calls or []
        self.final_answer = final_answer

    def __repr__(self):
        return "REPLResult(stdout=%r, stderr=%r, final_answer=%r)" % (
            self.stdout, self.stderr, self.final_answer)


def REPLResult(**fields):
    """The runtime's own REPLResult when ``rlm`` is installed, else a look-alike."""
    try:
        from rlm.core.types import REPLResult as cls
    except ImportError:
        cls = _REPLResultFallback
    return cls(**fields)


def _completion(data):
    """A chat completion from the LM handler as the runtime's RLMChatCompletion (a dict
    when the library is not installed)."""
    try:
        from rlm.core.types import RLMChatCompletion
    except ImportError:
        return data
    try:
        return RLMChatCompletion.from_dict(data)
    except Exception:  # a handler's odd reply must not fail the cell after the fact
        return data


def lm_request(address, payload, timeout=300):
    """One request to the runtime's LM handler: a 4-byte big-endian length, then UTF-8
    JSON, each way (rlm/core/comms_utils.py socket_send/socket_recv)."""
    with socket.create_connection(tuple(address), timeout=timeout) as sock:
        body = json.dumps(payload).encode("utf-8")
        sock.sendall(struct.pack(">I", len(body)) + body)
        head = _recv_exactly(sock, 4)
        if not head:
            return {}
        (length,) = struct.unpack(">I", head)
        return json.loads(_recv_exactly(sock, length).decode("utf-8"))


def _recv_exactly(sock, n):
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if got == 0 and n == 4:
                return b""
            raise ConnectionError("the LM handler closed the connection mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _decode_locals(shown):
    """The scaffold's snapshot ({name: [type, value, True or repr]}) as locals."""
    locals_ = {}
    for name, (type_name, value, is_value) in (shown if isinstance(shown, dict) else {}).items():
        locals_[name] = value if is_value is True else jailed_value(type_name, str(is_value))
    return locals_


def _tool_value(entry):
    # base_env.extract_tool_value: {"tool": value, "description": ...} or the value itself.
    if isinstance(entry, dict) and "tool" in entry:
        return entry["tool"]
    return entry


def runtime_has_final_var():
    """Whether the rlm that drives the adapter has ``FINAL_VAR``: its reserved names
    (rlm/environments/base_env.py) or its answer parsing (rlm/utils/parsing.py) name it.
    The rlm of 72d6940 has neither (a turn ends on ``answer["ready"]``), and there a
    ``FINAL_VAR`` in the namespace would end a turn early where LocalREPL raises
    NameError.  Without rlm installed (the adapter driven by a runner of its own) it is
    provided, as the older runtimes had it."""
    try:
        import rlm.environments.base_env as base_env
    except ImportError:
        return True
    if "FINAL_VAR" in getattr(base_env, "RESERVED_TOOL_NAMES", ()):
        return True
    try:
        import inspect

        import rlm.utils.parsing as parsing
        return "FINAL_VAR" in inspect.getsource(parsing)
    except (ImportError, OSError, TypeError):
        return False


def _register_with_runtime():
    """Makes RljailREPL one of rlm's NonIsolatedEnv (and so BaseEnv) environments, as
    LocalREPL is, for a runner that checks with isinstance: a virtual subclass (ABC
    registration), once rlm is imported by whoever drives the adapter; it is not
    imported here (importing rlm loads a .env into the environment)."""
    base_env = sys.modules.get("rlm.environments.base_env")
    cls = getattr(base_env, "NonIsolatedEnv", None)
    if cls is not None and not issubclass(RljailREPL, cls):
        cls.register(RljailREPL)


class RljailREPL:
    """The RLM library's REPL environment, jailed: one ``rljail session`` per instance.

    Takes LocalREPL's arguments (``lm_handler_address``, ``context_payload``,
    ``setup_code``, ``persistent``, ``depth``, ``subcall_fn``, ``custom_tools``,
    ``custom_sub_tools``, ``compaction``, ``max_concurrent_subcalls``) plus ``rljail``,
    a dict of :class:`rljail.Session` options (``memory``, ``cell_timeout``,
    ``volumes``, ``max_llm_calls``...).  ``values_chars`` (64 KiB) bounds the JSON of
    each variable copied back into :attr:`REPLResult.locals` after every cell (4 MiB in
    all); larger ones (a context of megabytes) stay in the jail and appear as
    :class:`JailedValue`.  :attr:`locals` reads the namespace on demand with larger
    bounds, as rlm's own tests read LocalREPL's.

    Every cell is followed by one short scaffold cell (restoring the reserved names and
    reporting the final answer and the variables), which ``--max-cells`` counts too.
    A cell timeout is reported like an exception (its type in ``stderr``; the state is
    kept); a lost session raises :class:`rljail.SessionLost`.
    """

    def __init__(self, lm_handler_address=None, context_payload=None, setup_code=None,
                 persistent=False, depth=1, subcall_fn=None, custom_tools=None,
                 custom_sub_tools=None, compaction=False, max_concurrent_subcalls=4,
                 rljail=None, values_chars=64 << 10, final_var=None, cell_timeout=None, **kwargs):
        _register_with_runtime()
        reserved = set(custom_tools or {}) & RESERVED_NAMES
        if reserved:
            # As rlm/environments/base_env.py validate_custom_tools words it.
            raise ValueError("Custom tools cannot override reserved REPL functions: %s. "
                             "Reserved names: %s" % (sorted(reserved), sorted(RESERVED_NAMES)))
        self.persistent = persistent
        self.depth = depth
        self.max_concurrent_subcalls = max_concurrent_subcalls
        self.kwargs = kwargs
        self.lm_handler_address = lm_handler_address
        self.subcall_fn = subcall_fn
        self.custom_tools = custom_tools or {}
        self.custom_sub_tools = custom_sub_tools if custom_sub_tools is not None else self.custom_tools
        self.compaction = compaction
        self.options = dict(rljail or {})
        # IPythonREPL's cell_timeout (seconds; 0 or None is none): the session's, unless
        # the rljail options give one.  Without either the session's default holds (a
        # jailed cell always has a time limit).
        self.cell_timeout = cell_timeout if cell_timeout and cell_timeout > 0 else None
        if self.cell_timeout is not None:
            self.options.setdefault("cell_timeout", self.cell_timeout)
        self.values_chars = values_chars
        self.final_var = runtime_has_final_var() if final_var is None else bool(final_var)
        self._context_count = 0
        self._history_count = 0
        self._compaction_history = []
        self._pending_calls = []
        self._calls_lock = threading.Lock()
        # One cell (with its scaffold cells) at a time, from any thread; the sub-calls
        # a subcall_fn makes must not re-enter it (they would wait for the very cell
        # that waits for them).
        self._exec_lock = threading.RLock()
        self._in_subcall = threading.local()
        self.session = None
        self._inputs = None
        self.temp_dir = None
        self.setup()
        if context_payload is not None:
            self.load_context(context_payload)
        if setup_code:
            self.execute_code(setup_code)

    # ------------------------------------------------------------ lifecycle

    def setup(self):
        """Starts the jailed session and installs the scaffold in it."""
        tools, values = {}, {}
        for name, entry in self.custom_tools.items():
            value = _tool_value(entry)
            if callable(value):
                # A result JSON cannot carry (a set, an object) reaches the cell as the
                # nearest JSON value (a list, its repr), not as a failed call.
                tools[name] = faithful_tool(value)
            else:
                values[name] = value
        self._inputs = HostInputs()
        # LocalREPL.temp_dir's counterpart: the host directory of large inputs, removed
        # by cleanup (the jail's own scratch is gone with the jail).
        self.temp_dir = self._inputs.dir
        options = dict(self.options)
        options.setdefault("max_output_chars", RUNTIME_OUTPUT_BYTES)
        self.session = start_session(
            options, tools, llm=self._llm_query, llm_batched=self._llm_query_batched,
            rlm=self._rlm_query, rlm_batched=self._rlm_query_batched, inputs=self._inputs)
        self._scaffold("%s\n_rljail_rlm = _RljailRLMScaffold(globals(), %r, %r, %r)\n"
                       % (_SETUP, sorted(tools), bool(self.compaction), bool(self.final_var)))
        for name, value in values.items():
            try:
                bind(self.session, self._inputs, name, value)
            except TypeError as e:
                log.warning("custom tool %r is not JSON and stays out of the jail: %s", name, e)

    def cleanup(self):
        """Ends the session and removes what it left on the host."""
        release(self)

    @property
    def locals(self):
        """The jail's namespace as LocalREPL.locals shows it (the user's variables,
        ``context``..., non-callable custom tools, ``answer``), read from the jail at each
        access, each value in full up to 4 MiB of JSON and 8 MiB in all (the rest, a
        context of megabytes, are :class:`JailedValue`).
        Empty once cleaned up, as LocalREPL's is.  rlm's own tests read it
        (tests/test_local_repl.py, tests/test_local_repl_persistent.py at 72d6940)."""
        with self._exec_lock:
            if self.session is None:
                return {}
            self._scaffold("_rljail_locals = _rljail_rlm.snapshot(%d, %d)" % (4 << 20, 8 << 20))
            return _decode_locals(self.session.get("_rljail_locals"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def __del__(self):
        try:
            self.cleanup()
        except Exception:
            pass

    # ------------------------------------------------------------ contexts and histories

    def load_context(self, context_payload):
        """Loads the context as ``context_0`` (and ``context``)."""
        self.add_context(context_payload, 0)

    def add_context(self, context_payload, context_index=None):
        """Binds ``context_N`` (``context`` too for N = 0); returns N."""
        with self._exec_lock:
            if context_index is None:
                context_index = self._context_count
            name = "context_%d" % context_index
            bind(self.session, self._inputs, name, context_payload)
            if context_index == 0:
                self._scaffold("context = context_0")
            self._context_count = max(self._context_count, context_index + 1)
            return context_index

    def get_context_count(self):
        return self._context_count

    def add_history(self, message_history, history_index=None):
        """Binds ``history_N`` to a copy of ``message_history`` (``history`` too for
        N = 0, unless compaction owns it); returns N."""
        with self._exec_lock:
            if history_index is None:
                history_index = self._history_count
            name = "history_%d" % history_index
            bind(self.session, self._inputs, name, copy.deepcopy(message_history))
            if history_index == 0 and not self.compaction:
                self._scaffold("history = history_0")
            self._history_count = max(self._history_count, history_index + 1)
            return history_index

    def get_history_count(self):
        return self._history_count

    def append_compaction_entry(self, entry):
        """Appends a trajectory segment or summary to ``history`` (compaction mode)."""
        with self._exec_lock:
            if not self.compaction:
                return
            self._compaction_history.append(copy.deepcopy(entry))
            bind(self.session, self._inputs, "_rljail_compaction", self._compaction_history)
            self._scaffold("history = _rljail_compaction")

    def update_handler_address(self, address):
        """The LM handler of the next completion (each RLM.completion starts its own)."""
        self.lm_handler_address = address

    # ------------------------------------------------------------ cells

    def execute_code(self, code):
        """Runs one cell; returns a REPLResult (stdout, stderr, locals, execution_time,
        the sub-calls made, final_answer)."""
        if getattr(self._in_subcall, "active", False):
            raise RuntimeError("Reentrant execute_code: a subcall (rlm_query's subcall_fn) cannot "
                               "re-enter the environment whose cell is waiting for it")
        with self._exec_lock:
            return self._execute_code(code)

    def _execute_code(self, code):
        start = time.perf_counter()
        with self._calls_lock:
            self._pending_calls = []
        timed_out = False
        try:
            result = self.session.run(code)
        except CellTimeout as e:
            result, timed_out = e.result, True
        stdout, stderr = result.stdout, result.stderr
        if timed_out:
            # IPythonREPL's words for a cell past its cell_timeout; the state is kept.
            limit = self.session.limits.get("cell_timeout_ms")
            limit = "%gs" % (limit / 1000.0) if isinstance(limit, (int, float)) else "its time limit"
            stderr = stderr + "\nTimeoutError: cell execution exceeded %s and was interrupted (CellTimeout: %s)" % (
                limit, result.error.message)
        elif result.error is not None:
            # As LocalREPL: the exception's type and message after the cell's stderr.
            stderr = stderr + "\n%s: %s" % (result.error.type, result.error.message)
        report = self._restore()
        locals_ = _decode_locals(report.get("locals"))
        with self._calls_lock:
            calls = [_completion(c) if isinstance(c, dict) else c for c in self._pending_calls]
            self._pending_calls = []
        return REPLResult(stdout=stdout, stderr=stderr, locals=locals_,
                          execution_time=time.perf_counter() - start, rlm_calls=calls,
                          final_answer=report.get("final"))

    def _restore(self):
        self._scaffold("_rljail_rlm.restore(%d, %d)" % (int(self.values_chars), 4 << 20))
        report = self.session.get("_rljail_report")
        return report if isinstance(report, dict) else {}

    def _scaffold(self, code):
        try:
            result = self.session.run(code)
        except CellTimeout as e:
            result = e.result
        if result.error is not None:
            raise RuntimeError("the RLM scaffold failed in the jail: %s\n%s"
                               % (result.error, result.error.traceback))

    # ------------------------------------------------------------ calls from the jail

    def _record(self, completion):
        with self._calls_lock:
            self._pending_calls.append(completion)

    def _llm_query(self, prompt, model=None):
        if not self.lm_handler_address:
            return "Error: No LM handler configured"
        payload = {"prompt": prompt, "depth": self.depth}
        if model is not None:
            payload["model"] = model
        try:
            data = lm_request(self.lm_handler_address, payload)
        except Exception as e:
            # comms_utils.send_lm_request's words, as LocalREPL shows them.
            return "Error: Request failed: %s" % e
        if data.get("error") is not None:
            return "Error: %s" % data["error"]
        completion = data.get("chat_completion") or {}
        self._record(completion)
        return completion.get("response", "")

    def _llm_query_batched(self, prompts, model=None):
        if not self.lm_handler_address:
            return ["Error: No LM handler configured"] * len(prompts)
        payload = {"prompts": prompts, "depth": self.depth}
        if model is not None:
            payload["model"] = model
        try:
            data = lm_request(self.lm_handler_address, payload)
        except Exception as e:
            return ["Error: Request failed: %s" % e] * len(prompts)
        if data.get("error") is not None:
            return ["Error: %s" % data["error"]] * len(prompts)
        completions = data.get("chat_completions")
        if not completions:
            return ["Error: No completions returned"] * len(prompts)
        results = []
        for c in completions:
            if c.get("error"):
                results.append("Error: %s" % c["error"])
            else:
                self._record(c)
                results.append(c.get("response", ""))
        return results

    def _rlm_query(self, prompt, model=None):
        if self.subcall_fn is None:
            return self._llm_query(prompt, model)
        try:
            completion = self._subcall(prompt, model)
            # Inside the try, as LocalREPL's: a result without .response is the
            # error string too (and, as the Docker and IPython REPLs have it, not
            # recorded).
            response = completion.response
            self._record(completion)
            return response
        except Exception as e:
            return "Error: RLM query failed - %s" % e

    def _subcall(self, prompt, model):
        # subcall_fn on this thread, marked as a sub-call (execute_code refuses it).
        self._in_subcall.active = True
        try:
            return self.subcall_fn(prompt, model)
        finally:
            self._in_subcall.active = False

    def _rlm_query_batched(self, prompts, model=None):
        if self.subcall_fn is None:
            return self._llm_query_batched(prompts, model)
        results = [""] * len(prompts)
        done = [None] * len(prompts)

        def one(i):
            try:
                completion = self._subcall(prompts[i], model)
                results[i] = completion.response
                done[i] = completion
            except Exception as e:
                results[i] = "Error: RLM query failed - %s" % e

        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrent_subcalls, len(prompts)))) as pool:
            list(pool.map(one, range(len(prompts))))
        for completion in done:  # in prompt order, as LocalREPL records them
            if completion is not None:
                self._record(completion)
        return results


class _Installed(contextlib.AbstractContextManager):
    def __init__(self, patched):
        self._patched = patched  # [(module, original get_environment)]

    def uninstall(self):
        patched, self._patched = self._patched, []
        for module, original in reversed(patched):
            module.get_environment = original

    def __exit__(self, *exc):
        self.uninstall()
        return False


def install(environment="local", **session_options):
    """Makes the RLM library's ``environment`` (``"local"`` by default) an RljailREPL.

    Replaces ``rlm.core.rlm.get_environment``, the one name through which an ``RLM``
    makes its environments, by a function that builds an :class:`RljailREPL` for
    ``environment`` and passes every other type to the original; and
    ``rlm.environments.get_environment`` alike, for a runner's own loop that calls it.  Keeping the name
    ``"local"`` is what keeps the runtime's own checks true: persistent mode accepts it,
    and ``subcall_fn`` is passed for it when ``max_depth > 1``, so persistence and
    recursion (child RLMs, jailed alike) work unchanged.  ``session_options`` are
    :class:`rljail.Session` options for every such environment; an RLM's
    ``environment_kwargs={"rljail": {...}}`` adds to them.

    Returns a handle: ``handle.uninstall()``, or use it as a context manager."""
    import importlib

    import rlm.core.rlm as rlm_module  # the runtime, imported only when asked for

    _register_with_runtime()
    modules = [rlm_module]
    try:
        modules.append(importlib.import_module("rlm.environments"))
    except ImportError:
        pass
    patched = []
    for module in modules:
        original = getattr(module, "get_environment", None)
        if original is None:
            continue

        def get_environment(env_type, environment_kwargs, _original=original):
            if env_type != environment:
                return _original(env_type, environment_kwargs)
            kwargs = dict(environment_kwargs)
            options = dict(session_options)
            options.update(kwargs.pop("rljail", None) or {})
            return RljailREPL(rljail=options, **kwargs)

        module.get_environment = get_environment
        patched.append((module, original))
    return _Installed(patched)
