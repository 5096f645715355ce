"""A DSPy ``CodeInterpreter`` that runs ``dspy.RLM``'s code in rljail.

:class:`RljailInterpreter` follows the protocol of ``dspy/primitives/code_interpreter.py``
(``tools``, idempotent ``start``, ``execute(code, variables)``, ``shutdown``) and the
behaviour of its reference implementation ``dspy/primitives/python_interpreter.py`` and
``runner.js`` (stanfordnlp/dspy 4ed377e, 3.3.1): variables injected before each
execution, the value of a last expression as the result when it is not None (else the
stdout), a typed ``SUBMIT`` built from ``output_fields`` that ends the run with
``FinalOutput``, recoverable ``CodeExecutionError`` for an exception in the code (``"Type:
[args]"``), ``SyntaxError`` for code that does not parse, and a terminal
``CodeInterpreterError`` once the session is lost; PythonInterpreter's file and
environment grants; DSPy 3.3's interpreter callbacks.  Unlike DSPy's own interpreter it
has a per-execute timeout (``execute_timeout``: the session's cell timeout; the state is
kept).

The runner's tools, and the ``llm_query``/``llm_query_batched`` that ``dspy.RLM`` puts in
``tools`` with its own call counter, run on the host (through :meth:`invoke_tool`, in a
copy of the executing caller's contextvars): the jail calls them through the bridge, and
the supervisor's budgets (``max_llm_calls``...) hold besides DSPy's.  Tools added once
code ran are called through one more declared tool (``_rljail_late_tool``).  DSPy is
imported only when installed, for its own exception and FinalOutput classes and its
``with_callbacks``; pydantic's ``to_jsonable_python`` for values that are not plain JSON.

Use it as ``dspy.RLM(..., interpreter_factory=RljailInterpreter.factory(memory="1g"))``
(or pass the class itself, or an instance as the caller-owned interpreter).
"""

import ast
import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import inspect
import json
import keyword
import os
import shutil
import tempfile
import threading

from ..session import CellTimeout, RequestError, SessionError, SessionLost
from ._common import (HostInputs, INPUTS_IN_JAIL, LARGE_VALUE_BYTES, LATE_TOOL_SOURCE,
                      RUNTIME_OUTPUT_BYTES, release, start_session, to_json)

__all__ = ["RljailInterpreter", "FinalOutput", "CodeInterpreterError", "CodeExecutionError"]

# The names dspy.RLM reserves in the sandbox (RLM._RESERVED_SANDBOX_NAMES) that the
# bridge serves rather than declaring them as tools.
_BRIDGE_TOOLS = ("llm_query", "llm_query_batched")
# The one tool every session declares besides the runner's: tools added after a session
# ran code (rljail declares tools when a session starts; dspy.RLM may add its tools to a
# caller-owned interpreter at any forward) are called through it by name.
_LATE_TOOL = "_rljail_late_tool"
_SUBMIT_EXCEPTION = "_RljailFinalOutput"
_SIMPLE_TYPES = ("str", "int", "float", "bool", "list", "dict", "NoneType")


class _FinalOutputFallback:
    """dspy's FinalOutput, for when DSPy is not installed."""

    def __init__(self, output):
        self.output = output

    def __repr__(self):
        return "FinalOutput(%r)" % (self.output,)

    def __eq__(self, other):
        if not isinstance(other, _FinalOutputFallback):
            return NotImplemented
        return self.output == other.output


class _CodeInterpreterErrorFallback(RuntimeError):
    """dspy's CodeInterpreterError (terminal for the session), without DSPy."""


class _CodeExecutionErrorFallback(_CodeInterpreterErrorFallback):
    """dspy's CodeExecutionError (recoverable), without DSPy."""


@functools.lru_cache(maxsize=None)
def _types():
    # Looked up once: a failed import searches the path every time.
    try:
        from dspy.primitives.code_interpreter import (
            CodeExecutionError, CodeInterpreterError, FinalOutput)
    except ImportError:
        return _FinalOutputFallback, _CodeInterpreterErrorFallback, _CodeExecutionErrorFallback
    return FinalOutput, CodeInterpreterError, CodeExecutionError


def __getattr__(name):
    # FinalOutput, CodeInterpreterError and CodeExecutionError are DSPy's own classes when
    # DSPy is installed (so that dspy.RLM catches what this module raises), else stand-ins.
    names = ("FinalOutput", "CodeInterpreterError", "CodeExecutionError")
    if name in names:
        return _types()[names.index(name)]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _final_output(output):
    return _types()[0](output)


def _interpreter_error(message):
    return _types()[1](message)


def _execution_error(message):
    return _types()[2](message)


# Runs in the jail whenever the tools or outputs change: SUBMIT with the signature's
# outputs, and the names the cell must not be able to take away for good.
_SCAFFOLD = r'''
class _RljailFinalOutput(BaseException):
    """SUBMIT's control flow (a BaseException, so that `except Exception` keeps it)."""


def _rljail_submit_value(value):
    import json
    return json.loads(json.dumps(value, default=str))


class _RljailDSPyScaffold:
    def __init__(self, ns, names):
        self.ns = ns
        self.fixed = {n: ns[n] for n in names if n in ns}
        self.fixed["print"] = print
        ns["_rljail_submitted"] = None

    def run(self, code):
        # As runner.js runs a cell (pyodide.runPythonAsync): the value of a last
        # expression is the result when it is not None, and an exception's args are
        # what the host reports.
        # Top-level await works, as in runPythonAsync: a cell that awaits is compiled to
        # a coroutine and run on the session's one event loop.
        import ast
        import inspect
        ns = self.ns
        ns["_rljail_value"] = ns["_rljail_exc_args"] = None
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = ast.parse(code, "<cell>", "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, "<cell>", "exec", flags=flags)
            done = eval(body, ns)
            if body.co_flags & inspect.CO_COROUTINE:
                self.await_(done)
            if last is not None:
                expr = compile(last, "<cell>", "eval", flags=flags)
                value = eval(expr, ns)
                if expr.co_flags & inspect.CO_COROUTINE:
                    value = self.await_(value)
                ns["_rljail_value"] = value
        except _RljailFinalOutput:
            raise
        except BaseException as e:
            error = e
            if type(e).__name__ == "CallFailed" and isinstance(e, RuntimeError):
                # A tool's uncaught error reads as in runner.js, whose tool wrapper raises
                # RuntimeError("ValueError: ...") (CallFailed is a RuntimeError too).
                error = RuntimeError(*e.args).with_traceback(e.__traceback__)
            try:
                ns["_rljail_exc_args"] = _rljail_submit_value(list(error.args))
            except BaseException:
                pass
            if error is e:
                raise
            raise error from None

    def await_(self, coroutine):
        import asyncio
        loop = getattr(self, "loop", None)
        if loop is None:
            loop = self.loop = asyncio.new_event_loop()
        return loop.run_until_complete(coroutine)

    def restore(self):
        self.ns.update(self.fixed)
        self.ns["_rljail_submitted"] = self.ns["_rljail_value"] = None
''' + LATE_TOOL_SOURCE


def _submit_code(output_fields):
    if not output_fields:
        return ("def SUBMIT(output):\n"
                "    global _rljail_submitted\n"
                "    _rljail_submitted = _rljail_submit_value({'output': output})\n"
                "    raise _RljailFinalOutput()\n")
    params, items = [], []
    for field in output_fields:
        name = field["name"]
        if not str(name).isidentifier() or keyword.iskeyword(name):
            raise _interpreter_error("Invalid output field name: %r" % (name,))
        ftype = field.get("type")
        if ftype in _SIMPLE_TYPES:
            params.append("%s: %s" % (name, "type(None)" if ftype == "NoneType" else ftype))
        else:
            params.append(name)
        items.append("%r: %s" % (name, name))
    return ("def SUBMIT(%s):\n"
            "    global _rljail_submitted\n"
            "    _rljail_submitted = _rljail_submit_value({%s})\n"
            "    raise _RljailFinalOutput()\n" % (", ".join(params), ", ".join(items)))


def _with_callbacks(fn):
    """``fn`` under DSPy's ``dspy.utils.callback.with_callbacks`` when DSPy is installed
    (resolved at the first call, so that DSPy is imported only when used): DSPy 3.3's
    interpreter callbacks (on_interpreter_execute/startup/shutdown/tool_call) then fire
    for this interpreter as for its own, with the instance's ``callbacks`` and
    dspy.settings' (tests/callback/test_interpreter_callback.py)."""
    wrapped = []

    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        if not wrapped:
            try:
                from dspy.utils.callback import BaseCallback, with_callbacks
            except ImportError:
                wrapped.append(fn)
            else:
                # A DSPy before the interpreter events (dspy b11cfe87) would report these
                # methods as a module's: no callbacks there, as for its own interpreter.
                has_events = hasattr(BaseCallback, "on_interpreter_execute_start")
                wrapped.append(with_callbacks(fn) if has_events else fn)
        return wrapped[0](self, *args, **kwargs)
    return method


class _Factory:
    """A zero-argument interpreter factory for ``dspy.RLM(interpreter_factory=...)``."""

    execution_instructions = None

    def __init__(self, cls, kwargs):
        self._cls = cls
        self._kwargs = kwargs
        self.execution_instructions = cls.execution_instructions

    def __call__(self):
        return self._cls(**self._kwargs)


class RljailInterpreter:
    """DSPy's CodeInterpreter protocol over one ``rljail session``.

    ``tools`` maps names to host callables (keyword arguments in, a JSON-able value
    out); ``dspy.RLM`` adds its own before each forward pass.  ``output_fields`` is the
    typed SUBMIT's signature (``[{"name": ..., "type": ...}]``), set by ``dspy.RLM``.
    ``execute_timeout`` (seconds) bounds each ``execute``; ``include_stderr`` appends
    the cell's stderr to the output it returns (DSPy's interpreter returns stdout only).
    Every other keyword argument is a :class:`rljail.Session` option.

    Variables are bound before each execution, as DSPy's interpreter does: small ones
    over the protocol, large ones (over 1 MiB of JSON) through a file the session
    grants read-only.  Each execution is followed by a short scaffold cell that puts
    back SUBMIT, the bridge's functions and ``print`` (``--max-cells`` counts it).
    """

    execution_instructions = (
        "Python (CPython) runs in an rljail jail: state persists across executions; the standard "
        "library and subprocesses work; there is no network (but the hosts granted) and no "
        "host file but the ones granted; each execution has a time limit."
    )

    @classmethod
    def factory(cls, **kwargs):
        """A zero-argument factory for ``interpreter_factory`` that makes instances with
        these arguments, and tells ``dspy.RLM`` about the runtime."""
        return _Factory(cls, kwargs)

    def __init__(self, tools=None, output_fields=None, execute_timeout=None,
                 include_stderr=False, large_value_bytes=LARGE_VALUE_BYTES, callbacks=None,
                 enable_read_paths=None, enable_write_paths=None, enable_env_vars=None,
                 enable_network_access=None, sync_files=True, deno_command=None,
                 **session_options):
        # PythonInterpreter's arguments (python_interpreter.py:243-345): files granted at
        # /sandbox/<basename>, read-only or (a private copy, synced back after each
        # execution that succeeds, as _sync_files does) writable; environment variables by
        # name; hosts the code may reach (Deno's --allow-net) through the session's egress
        # allowlist (--allow-host: HOST[:PORT], ports 443 and 80 without one; an IP or a
        # CIDR).  deno_command has no meaning here.
        if isinstance(deno_command, dict):
            raise TypeError("deno_command must be a list of strings, not a dict")
        self.enable_network_access = [str(h) for h in (enable_network_access or [])]
        if self.enable_network_access:
            given = session_options.get("allow_host") or []
            given = [given] if isinstance(given, str) else list(given)
            session_options["allow_host"] = given + self.enable_network_access
        self.enable_read_paths = list(enable_read_paths or [])
        self.enable_write_paths = list(enable_write_paths or [])
        self.enable_env_vars = list(enable_env_vars or [])
        self.sync_files = sync_files
        mounts = {}
        for path in self.enable_read_paths + self.enable_write_paths:
            if path:
                name = os.path.basename(os.fspath(path))
                real = os.path.realpath(os.path.expanduser(os.fspath(path)))
                if mounts.get(name, real) != real:
                    raise _interpreter_error("Mounted files must have unique basenames inside the sandbox.")
                mounts[name] = real
        self._files = None           # the private directory of the writable copies
        self.tools = dict(tools) if tools else {}
        self.callbacks = list(callbacks or [])
        self.output_fields = output_fields
        self.execute_timeout = execute_timeout
        self.include_stderr = include_stderr
        self.large_value_bytes = large_value_bytes
        self.session_options = session_options
        self.session = None
        self._tools_registered = False
        self._declared = None        # the tool names the running session was started with
        self._registered_outputs = None
        self._cells = 0
        self._ended = False
        self._busy = threading.Lock()
        self._inputs = None
        self._large = {}             # name -> (sha256, in-jail code) of a large value's file
        self._context = None         # the contextvars of the execute() running now
        self._late = {}              # tools added after code ran: name -> parameters
        self._owner_thread = None    # the thread that executes here (DSPy's rule)
        self._registered_late = None

    # ------------------------------------------------------------ lifecycle

    @_with_callbacks
    def start(self):
        """Starts the session (idempotent).  A lost or shut-down session cannot be
        restarted: its state is gone, so this raises CodeInterpreterError."""
        self._check_active()
        if self.session is None:
            self._spawn()
        elif not self.session.alive:
            self._terminal("the rljail session was lost (%s); its state is gone. "
                           "Create a new interpreter." % self.session.lost_reason)

    @_with_callbacks
    def shutdown(self):
        """Ends the session; the interpreter cannot be used again."""
        self._ended = True
        self._owner_thread = None
        release(self)
        files, self._files = self._files, None
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __call__(self, code, variables=None):
        return self.execute(code, variables)

    def _check_active(self):
        if self._ended:
            raise _interpreter_error("RljailInterpreter session has ended; create a new "
                                       "interpreter for a fresh session.")

    def _terminal(self, message):
        self._ended = True
        session, self.session = self.session, None
        if session is not None:
            try:
                session.close(wait=2)
            except SessionError:
                pass
        raise _interpreter_error(message)

    def _user_tools(self):
        return {n: f for n, f in self.tools.items() if n not in _BRIDGE_TOOLS}

    def _spawn(self):
        declared = {}
        for name, func in self._user_tools().items():
            if not name.isidentifier() or keyword.iskeyword(name):
                raise _interpreter_error("Invalid tool name: %r" % (name,))
            declared[name] = (self._tool_handler(name), _parameters(func))
        user_tools = set(declared)
        declared[_LATE_TOOL] = (self._late_tool, ["name", "kwargs"])
        # Both directories are the new session's, removed with it (an interpreter that
        # is never shut down leaves nothing either: the session's finalizer removes
        # them when it is collected or at exit).  The previous session's copies went
        # with it.
        self._inputs = HostInputs()
        self._files = None
        options = dict(self.session_options, cell_timeout=self.execute_timeout)
        options.setdefault("max_output_chars", RUNTIME_OUTPUT_BYTES)
        try:
            options["volumes"] = list(options.get("volumes") or ()) + self._mounts()
            if self.enable_env_vars:
                env = dict(options.get("env") or {})
                env.update({n: os.environ[n] for n in map(str, self.enable_env_vars) if n in os.environ})
                options["env"] = env
            self.session = start_session(
                options, declared,
                llm=self._llm_query, llm_batched=self._llm_query_batched, inputs=self._inputs,
                temp_dirs=[self._files] if self._files is not None else [])
        except BaseException as e:
            # start_session removes them when the session fails; not a failure before it
            # (a write path that cannot be copied).
            self._inputs.remove()
            if self._files is not None:
                shutil.rmtree(self._files, ignore_errors=True)
            if isinstance(e, (SessionError, OSError)):
                self._ended = True
                raise _interpreter_error("cannot start rljail session: %s" % e)
            raise
        self._declared = user_tools
        self._registered_outputs = None
        self._tools_registered = False
        self._cells = 0
        self._late = {}

    def _mounts(self):
        """The volumes of enable_read_paths and enable_write_paths."""
        volumes = []
        for path in self.enable_read_paths:
            if not path:
                continue
            if not os.path.exists(path):
                raise FileNotFoundError("Cannot mount non-existent file: %s" % path)
            volumes.append("%s:/sandbox/%s:ro" % (os.path.realpath(path), os.path.basename(os.fspath(path))))
        if self.enable_write_paths and self._files is None:
            self._files = tempfile.mkdtemp(prefix="rljail-dspy-files-")
        for path in self.enable_write_paths:
            if not path:
                continue
            if not os.path.exists(path):
                open(path, "a").close()
            name = os.path.basename(os.fspath(path))
            copy = os.path.join(self._files, name)
            shutil.copyfile(path, copy)
            os.chmod(copy, 0o666)  # the jail's user writes it; the directory is ours alone
            volumes.append("%s:/sandbox/%s:rw" % (copy, name))
        return volumes

    def _sync_files(self):
        if not self.sync_files or self._files is None:
            return
        for path in self.enable_write_paths:
            if path:
                copy = os.path.join(self._files, os.path.basename(os.fspath(path)))
                with open(copy, "rb") as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)

    # ------------------------------------------------------------ execution

    @_with_callbacks
    def execute(self, code, variables=None):
        """Runs ``code`` after binding ``variables``; returns the output (a str),
        or FinalOutput when the code called SUBMIT."""
        if not self._busy.acquire(blocking=False):
            # python_interpreter.py's words: "cannot execute recursively from one of its tools".
            raise _interpreter_error("RljailInterpreter cannot execute recursively from one of "
                                     "its tools (or from two threads at once).")
        try:
            return self._execute(code, variables or {})
        finally:
            self._busy.release()

    def _execute(self, code, variables):
        self._check_active()
        # As python_interpreter.py's _check_thread_ownership: the first thread to execute
        # owns the interpreter until shutdown; another thread's execute is refused.
        current = threading.get_ident()
        if self._owner_thread is None:
            self._owner_thread = current
        elif self._owner_thread != current:
            raise RuntimeError("RljailInterpreter is not thread-safe and cannot be shared across threads. "
                               "Create a separate interpreter instance for each thread.")
        for key in variables:
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
                raise _interpreter_error("Invalid variable name: '%s'" % (key,))
        # As python_interpreter.py's _inject_variables: every value is JSON before
        # anything starts; one that cannot be is the caller's CodeInterpreterError.
        variables = {name: _variable_value(value) for name, value in variables.items()}
        # As python_interpreter.py's _ensure_deno_process: start() (and with it the
        # startup callbacks) only when there is no session yet, once per process, not
        # at every execute.
        if self.session is None:
            self.start()
        elif not self.session.alive:
            self._terminal("the rljail session was lost (%s); its state is gone. "
                           "Create a new interpreter." % self.session.lost_reason)
        tools = self._user_tools()
        if set(tools) - self._declared and not self._cells:
            # No state to lose yet (a pre-warmed interpreter): start again with the tools.
            self.session.close()
            self._inputs.remove()
            self.session = None
            self._spawn()
        late = {}
        for name in sorted(set(tools) - self._declared):
            if not name.isidentifier() or keyword.iskeyword(name):
                raise _interpreter_error("Invalid tool name: %r" % (name,))
            late[name] = _parameters(tools[name])
        self._late = late
        if (not self._tools_registered or self._registered_outputs != self.output_fields
                or self._registered_late != late):
            self._register()
        # DSPy's PythonInterpreter calls tools in the thread that executes, so they see
        # its contextvars (dspy.context(lm=...) overrides: dspy/dsp/utils/settings.py);
        # the session's handlers run on its pool, each in a copy of these.
        self._context = contextvars.copy_context()
        try:
            for name, value in variables.items():
                self._bind(name, value)
            result = self.session.run("_rljail_dspy.run(%r)" % (code,))
            self._cells += 1
        except CellTimeout as e:
            self._cells += 1
            self._restore()
            raise _execution_error("CellTimeout: %s (the state is kept)" % e.result.error.message)
        except SessionLost as e:
            self._terminal("the rljail session was lost (%s); interpreter state was lost. "
                           "Create a new interpreter for a fresh session." % e.reason)
        except RequestError as e:
            self._terminal("rljail refused the execution: %s" % e)
        error = result.error
        submitted = value = args = None
        if error is None:
            if _ends_with_expression(code):
                value = self._get("_rljail_value")
        elif error.type == _SUBMIT_EXCEPTION:
            submitted = self._get("_rljail_submitted")
        elif error.type != "SyntaxError":
            args = self._get("_rljail_exc_args")
        self._restore()
        if error is None or error.type == _SUBMIT_EXCEPTION:
            self._sync_files()
        if error is None:
            # runner.js: the last expression's value when it is not None, else the
            # captured stdout (python_interpreter.py returns it as it comes).
            if value is not None:
                return value
            output = result.stdout
            if self.include_stderr and result.stderr:
                output = output + result.stderr
            return output
        if error.type == _SUBMIT_EXCEPTION:
            return _final_output(submitted)
        if error.type == "SyntaxError":
            raise SyntaxError("Invalid Python syntax. message: %s" % error.message)
        # python_interpreter.py execute: f"{error_type}: {args or message}", args the
        # exception's args as a list (JSON from the sandbox).
        raise _execution_error("%s: %s" % (error.type, args or error.message))

    def _register(self):
        late = dict(self._late)
        names = (list(_BRIDGE_TOOLS) + sorted(self._declared) + sorted(late)
                 + ["SUBMIT", _LATE_TOOL])
        wrappers = "".join("%s = _rljail_late_tool_fn(%r, %r)\n" % (n, n, p) for n, p in sorted(late.items()))
        code = "%s\n%s\n%s_rljail_dspy = _RljailDSPyScaffold(globals(), %r)\n" % (
            _SCAFFOLD, _submit_code(self.output_fields), wrappers, names)
        self._scaffold(code)
        self._registered_outputs = self.output_fields
        self._registered_late = late
        self._tools_registered = True

    def _restore(self):
        self._scaffold("_rljail_dspy.restore()")

    def _scaffold(self, code):
        try:
            result = self.session.run(code)
        except CellTimeout as e:
            result = e.result
        except (SessionLost, RequestError) as e:
            self._terminal("the rljail session failed: %s" % e)
        if result.error is not None:
            self._terminal("the interpreter's scaffold failed in the jail: %s" % result.error)

    def _get(self, name):
        try:
            return self.session.get(name)
        except (SessionLost, RequestError) as e:
            self._terminal("the rljail session failed: %s" % e)

    def _bind(self, name, value):
        # value: a _variable_value.
        if isinstance(value, str):
            text = value
        else:
            text = json.dumps(value)
        if len(text) <= self.large_value_bytes:
            if _has_scalar_keys(value):
                # python_interpreter.py binds a small value as a Python literal: keys
                # that are numbers, bools or None stay so ({1: "a"}[1]).
                result = self.session.run("%s = %s\n" % (name, _literal(value)))
                if result.error is not None:
                    raise _interpreter_error("binding %s failed: %s" % (name, result.error))
                return
            try:
                json.dumps(value, allow_nan=False)
            except ValueError:
                # inf, -inf and nan, which DSPy passes as float('inf')...: the protocol
                # is strict JSON, Python's json.loads reads its Infinity and NaN.
                result = self.session.run("import json as _rljail_json\n%s = _rljail_json.loads(%r)\n"
                                          % (name, text))
                if result.error is not None:
                    raise _interpreter_error("binding %s failed: %s" % (name, result.error))
                return
            self.session.set(name, value)
            return
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._large.get(name)
        if cached is None or cached[0] != digest:
            cached = (digest, self._inputs.write(name, value))
            self._large[name] = cached
        result = self.session.run(cached[1])
        if result.error is not None:
            raise _interpreter_error("binding %s from %s failed: %s" % (name, INPUTS_IN_JAIL, result.error))

    # ------------------------------------------------------------ calls from the jail

    @_with_callbacks
    def invoke_tool(self, tool_name, kwargs):
        """Calls the host tool ``tool_name`` with ``kwargs`` and returns its raw result
        (an async tool's awaited), as PythonInterpreter.invoke_tool does; every call
        from the jail comes through here (llm_query and llm_query_batched too)."""
        func = self.tools.get(tool_name)
        if func is None:
            raise _interpreter_error("Unknown tool: %s" % tool_name)
        return _await(func(**kwargs))

    def _in_caller_context(self, call):
        context = self._context
        if context is None:
            return call()
        return context.copy().run(call)

    def _tool_handler(self, name):
        def handler(**kwargs):
            return _jsonable(self._in_caller_context(lambda: self.invoke_tool(name, kwargs)))
        return handler

    def _late_tool(self, name=None, kwargs=None):
        if name not in self._late:
            raise LookupError("Unknown tool: %s" % (name,))
        if not isinstance(kwargs, dict):
            raise TypeError("kwargs must be a dict")
        return self._tool_handler(name)(**kwargs)

    def _llm_query(self, prompt, model=None):
        if "llm_query" not in self.tools:
            raise LookupError("llm_query is not configured (dspy.RLM provides it)")
        return self._in_caller_context(lambda: self.invoke_tool("llm_query", {"prompt": prompt}))

    def _llm_query_batched(self, prompts, model=None):
        if "llm_query_batched" not in self.tools:
            raise LookupError("llm_query_batched is not configured (dspy.RLM provides it)")
        return self._in_caller_context(
            lambda: self.invoke_tool("llm_query_batched", {"prompts": prompts}))


def _parameters(func):
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        raise _interpreter_error("cannot read the parameters of tool %r" % (func,))
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)]


def _await(result):
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


def _coerce(value, allow_nonfinite=False, scalar_keys=False):
    """``value`` as JSON data, as python_interpreter.py's _to_json_compatible makes it:
    plain JSON, models, dataclasses, tuples and sets, and else what pydantic's
    ``to_jsonable_python`` makes of it (datetimes, enums, UUIDs...; pydantic is there
    wherever DSPy is).  TypeError when neither can."""
    try:
        return to_json(value, allow_nonfinite, scalar_keys)
    except TypeError as first:
        try:
            from pydantic_core import to_jsonable_python
        except ImportError:
            raise first
        try:
            return to_json(to_jsonable_python(value), allow_nonfinite, scalar_keys)
        except Exception:
            raise first


def _variable_value(value):
    """A variable as JSON data (inf and nan kept), as python_interpreter.py makes it
    before it injects it: a pydantic model that cannot be dumped is
    CodeInterpreterError("Unable to serialize <Model> as JSON: ..."), as its
    _dump_pydantic words it, and a value of another type "Unsupported value type"."""
    try:
        return _coerce(_dump_models(value), allow_nonfinite=True, scalar_keys=True)
    except TypeError as e:
        raise _interpreter_error("Unsupported value type: %s" % e)


def _has_scalar_keys(value):
    # Whether a _variable_value holds a dict key that is not a string.
    if isinstance(value, dict):
        return any(not isinstance(k, str) or _has_scalar_keys(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_scalar_keys(v) for v in value)
    return False


def _literal(value):
    """The Python literal of a _variable_value (JSON data with scalar keys), as
    python_interpreter.py's _serialize_value writes one: inf and nan as float('inf')."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return "float(%r)" % repr(value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (_literal(k), _literal(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(_literal(v) for v in value)
    return repr(value)


def _dump_models(value):
    # The pydantic models in value dumped (model_dump(mode="json")), the outermost
    # first, so that a failure names the model the caller passed.
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json")
        except Exception as e:
            raise _interpreter_error("Unable to serialize %s as JSON: %s" % (type(value).__name__, e)) from e
    if isinstance(value, dict):
        return {k: _dump_models(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dump_models(v) for v in value]
    return value


def _ends_with_expression(code):
    """Whether the code's last statement is an expression (whose value the jail kept);
    True when the host cannot parse it (the jail's Python may be newer)."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return bool(body) and isinstance(body[-1], ast.Expr)


def _structured(value):
    """python_interpreter.py's _make_jsonable, for a tool's result: a pydantic model by
    model_dump(mode="json") (one that cannot be is the interpreter's error, "Unable to
    serialize ... as JSON", which the cell sees), dataclasses as dicts, namedtuples as
    dicts (``_asdict``), containers element by element."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return _structured(dump(mode="json"))
        except Exception as e:
            raise _interpreter_error("Unable to serialize %s as JSON: %s" % (type(value).__name__, e)) from e
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return _structured(dataclasses.asdict(value))
        except Exception:
            return value
    if isinstance(value, tuple) and hasattr(value, "_fields") and hasattr(value, "_asdict"):
        return _structured(value._asdict())
    if isinstance(value, dict):
        return {k: _structured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_structured(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_structured(v) for v in value)
    return value


def _jsonable(value):
    # python_interpreter._handle_tool_call: None is "", JSON passes, anything else its str.
    if value is None:
        return ""
    value = _structured(value)
    try:
        return _coerce(value)
    except TypeError:
        return str(value)
