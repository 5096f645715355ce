"""A smolagents ``PythonExecutor`` that runs a ``CodeAgent``'s code in rljail.

:class:`RljailExecutor` has the interface that ``CodeAgent`` drives
(``src/smolagents/local_python_executor.py``: ``PythonExecutor`` with ``send_tools``,
``send_variables`` and ``__call__(code) -> CodeOutput``; ``remote_executors.py`` for how
a remote executor returns the final answer and reports errors), as of huggingface/
smolagents e3a5b899.  It differs from the remote executors in one way that matters: the
agent's tools are not re-created in the sandbox from their source.  Each stays on the
host, and the jail gets a function of the same name that calls it through the bridge,
so a tool's credentials and network stay outside the jail.

``final_answer(...)`` in the code calls the host's FinalAnswerTool and then ends the code
with a ``FinalAnswerException`` (a BaseException, as smolagents has it); the executor
returns the host tool's own return value with ``is_final_answer=True``.  The value of a
last expression or assignment is returned as ``output``, as the local executor does.

Use it as ``CodeAgent(tools=[...], model=..., executor=RljailExecutor(memory="1g"))``.
When smolagents is installed, the executor is a ``PythonExecutor`` subclass and returns
smolagents' own ``CodeOutput``; without it, this module needs only its calling convention.
"""

import ast
import base64
import contextvars
import datetime
import decimal
import functools
import io
import json
import pathlib
import re
import threading

from ..session import CellTimeout, SessionError
from ._common import LARGE_VALUE_BYTES, LATE_TOOL_SOURCE, HostInputs, release, start_session, to_json

__all__ = ["RljailExecutor", "CodeOutput", "JailedCodeError", "JailedTimeoutError"]


@functools.lru_cache(maxsize=None)
def _runtime():
    """smolagents' PythonExecutor and CodeOutput when it is installed, else None, None
    (looked up once: a failed import searches the path every time)."""
    try:
        from smolagents.local_python_executor import CodeOutput, PythonExecutor
    except ImportError:
        return None, None
    return PythonExecutor, CodeOutput


class _CodeOutputFallback:
    """smolagents' CodeOutput (output, logs, is_final_answer), as a plain class, for
    when smolagents is not installed; the agent reads only these three attributes."""

    __slots__ = ("output", "logs", "is_final_answer")

    def __init__(self, output, logs, is_final_answer):
        self.output = output
        self.logs = logs
        self.is_final_answer = is_final_answer

    def __eq__(self, other):
        if not isinstance(other, _CodeOutputFallback):
            return NotImplemented
        return (self.output, self.logs, self.is_final_answer) == (
            other.output, other.logs, other.is_final_answer)

    def __repr__(self):
        return "CodeOutput(output=%r, logs=%r, is_final_answer=%r)" % (
            self.output, self.logs, self.is_final_answer)


def _code_output(output, logs, is_final_answer):
    cls = _runtime()[1] or _CodeOutputFallback
    return cls(output=output, logs=logs, is_final_answer=is_final_answer)


def __getattr__(name):
    # CodeOutput is smolagents' own dataclass when smolagents is installed.
    if name == "CodeOutput":
        return _runtime()[1] or _CodeOutputFallback
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


@functools.lru_cache(maxsize=None)
def _error_bases():
    """The bases of the executor's errors: smolagents' InterpreterError (what
    LocalPythonExecutor raises) and AgentExecutionError (an AgentError, as the remote
    executors raise), and ExecutionTimeoutError; plain Exception without smolagents."""
    try:
        from smolagents.local_python_executor import ExecutionTimeoutError, InterpreterError
        from smolagents.utils import AgentExecutionError
    except ImportError:
        return (Exception,), (Exception,)
    return (InterpreterError, AgentExecutionError), (ExecutionTimeoutError,)


class JailedCodeError(*_error_bases()[0]):
    """The agent's code raised in the jail, or did not parse; the session's state is
    kept.  With smolagents installed it is the local executor's InterpreterError and an
    AgentExecutionError (whose ``message`` and ``dict()`` it has; it logs nothing
    itself: CodeAgent logs the AgentExecutionError it makes of it for the model)."""

    def __init__(self, message):
        Exception.__init__(self, message)
        self.message = message


class JailedTimeoutError(JailedCodeError, *_error_bases()[1]):
    """The agent's code ran past its time limit and was interrupted; the state is kept.
    With smolagents installed it is the local executor's ExecutionTimeoutError too."""


_FINAL_EXCEPTION = "FinalAnswerException"
# Declared in every session besides the agent's tools: tools sent once the session started
# (rljail declares tools when a session starts) are called through it by name.
_LATE_TOOL = "_rljail_late_tool"
#: smolagents' DEFAULT_MAX_LEN_OUTPUT: LocalPythonExecutor's print-output cap.
DEFAULT_MAX_LEN_OUTPUT = 50000
#: smolagents' MAX_EXECUTION_TIME_SECONDS (rljail's default cell timeout is the same).
MAX_EXECUTION_TIME_SECONDS = 30

# Runs in the jail after the session starts: final_answer ends the code, and the tools'
# names come back after every execution (LocalPythonExecutor refuses to rebind them).
_SCAFFOLD = r'''
class FinalAnswerException(BaseException):
    """Raised by final_answer(); BaseException, so that `except Exception` keeps it."""

    def __init__(self, value):
        self.value = value


class InterpreterError(ValueError):
    """smolagents' InterpreterError: what the local executor raises for an import
    outside the authorized list."""


class _RljailImportGuard:
    """The agent's authorized imports on the cell's own import statements, with the
    local executor's words (local_python_executor.py evaluate_import), so that the agent
    gives the model its "additional_authorized_imports" advice.  Only the code of the
    cell (<cell>) is checked, not what imported modules import; it is the agent's rule,
    not a boundary: the jail is."""

    def __init__(self, authorized, shown):
        import builtins
        self.tree = {}
        for path in authorized:
            node = self.tree
            for part in path.split("."):
                node = node.setdefault(part, {})
        import sys
        self.shown = shown
        self.frame = sys._getframe  # not imported in __call__: that would call this guard
        self.original = builtins.__import__
        builtins.__import__ = self

    def allowed(self, name):
        node = self.tree
        for part in name.split("."):
            if "*" in node:
                return True
            if part not in node:
                return False
            node = node[part]
        return True

    def __call__(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and self.frame(1).f_code.co_filename == "<cell>" and not self.allowed(name):
            raise InterpreterError("Import %s %s is not allowed. Authorized imports are: %s"
                                   % ("from" if fromlist else "of", name, self.shown))
        return self.original(name, globals, locals, fromlist, level)


class _RljailHostObject(str):
    """A tool's result that JSON cannot carry (a PIL image, any object): its str in the
    jail, and the host's own object again when the code passes it to a tool
    (final_answer(image) gives the agent the image)."""

    def __new__(cls, text, handle):
        self = str.__new__(cls, text)
        self._rljail_handle = handle
        return self


import base64 as _rljail_base64, datetime as _rljail_datetime, decimal as _rljail_decimal
import importlib as _rljail_importlib, pathlib as _rljail_pathlib


def _rljail_typed(value):
    # A variable or a tool's result as the host tagged it (tagged_value): the Python
    # value again; a host object's marker becomes its stand-in.
    if isinstance(value, list):
        return [_rljail_typed(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__rljail_host_object__", "str"}:
        return _RljailHostObject(value["str"], value["__rljail_host_object__"])
    tag = value.get("__rljail_type__")
    if tag is None:
        return {k: _rljail_typed(v) for k, v in value.items()}
    data = value.get("data")
    if tag == "tuple":
        return tuple(_rljail_typed(v) for v in data)
    if tag == "set":
        return {_rljail_typed(v) for v in data}
    if tag == "frozenset":
        return frozenset(_rljail_typed(v) for v in data)
    if tag == "dict":
        return {_rljail_typed(k): _rljail_typed(v) for k, v in data}
    if tag in ("bytes", "bytearray"):
        raw = _rljail_base64.b64decode(data)
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "float":
        return float(data)
    if tag == "complex":
        return complex(data[0], data[1])
    if tag in ("datetime", "date", "time"):
        return getattr(_rljail_datetime, tag).fromisoformat(data)
    if tag == "timedelta":
        return _rljail_datetime.timedelta(days=data[0], seconds=data[1], microseconds=data[2])
    if tag == "Decimal":
        return _rljail_decimal.Decimal(data)
    if tag == "Path":
        return _rljail_pathlib.Path(data)
    if tag == "ndarray":
        try:
            numpy = _rljail_importlib.import_module("numpy")
        except ImportError:  # not in this rootfs: the nested lists
            return _rljail_typed(data)
        return numpy.array(_rljail_typed(data), dtype=value.get("dtype"))
    if tag in ("DataFrame", "Series"):
        try:
            pandas = _rljail_importlib.import_module("pandas")
        except ImportError:  # not in this rootfs: the table's JSON (schema and rows)
            return _rljail_importlib.import_module("json").loads(data)
        frame = pandas.read_json(_rljail_importlib.import_module("io").StringIO(data), orient="table")
        if tag == "DataFrame":
            return frame
        series = frame.iloc[:, 0]
        if value.get("unnamed"):
            series.name = None
        return series
    raise ValueError("unknown variable type %r" % (tag,))


def _rljail_out(value):
    # A tool's argument as the host gets it (untagged_value there): JSON values as they
    # are, the other types the host can rebuild (a tuple, a set, bytes, a date, a
    # numpy array...) tagged as send_variables tags them, a host object's stand-in as
    # its marker, anything else as its repr.
    if isinstance(value, _RljailHostObject):
        return {"__rljail_host_object__": value._rljail_handle}
    if value is None or isinstance(value, (str, bool, int)):
        return value
    tag = "__rljail_type__"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {tag: "float", "data": repr(value)}
        return value
    if isinstance(value, list):
        return [_rljail_out(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and tag not in value and "__rljail_host_object__" not in value:
            return {k: _rljail_out(v) for k, v in value.items()}
        return {tag: "dict", "data": [[_rljail_out(k), _rljail_out(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {tag: "tuple", "data": [_rljail_out(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {tag: "frozenset" if isinstance(value, frozenset) else "set", "data": [_rljail_out(v) for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {tag: "bytearray" if isinstance(value, bytearray) else "bytes",
                "data": _rljail_base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, complex):
        return {tag: "complex", "data": [value.real, value.imag]}
    dt = _rljail_datetime
    if isinstance(value, dt.datetime):
        return {tag: "datetime", "data": value.isoformat()}
    if isinstance(value, dt.date):
        return {tag: "date", "data": value.isoformat()}
    if isinstance(value, dt.time):
        return {tag: "time", "data": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {tag: "timedelta", "data": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, _rljail_decimal.Decimal):
        return {tag: "Decimal", "data": str(value)}
    if isinstance(value, _rljail_pathlib.PurePath):
        return {tag: "Path", "data": str(value)}
    if type(value).__module__ == "numpy":
        if type(value).__name__ == "ndarray" and value.dtype.kind in "biufc":
            return {tag: "ndarray", "data": _rljail_out(value.tolist()), "dtype": str(value.dtype)}
        if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
            return _rljail_out(value.item())
    if type(value).__module__.split(".")[0] == "pandas" and type(value).__name__ in ("DataFrame", "Series"):
        try:
            return {tag: type(value).__name__, "data": value.to_json(orient="table", date_format="iso"),
                    "unnamed": getattr(value, "name", 0) is None}
        except Exception:
            pass
    if type(value).__module__.split(".")[0] == "PIL" and callable(getattr(value, "save", None)):
        # An image made in the jail, as PNG (the remote executors send theirs so too).
        buffer = _rljail_importlib.import_module("io").BytesIO()
        try:
            value.save(buffer, format="PNG")
            return {tag: "PIL.Image", "data": _rljail_base64.b64encode(buffer.getvalue()).decode("ascii")}
        except Exception:
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return _rljail_out(tolist())
        except Exception:
            pass
    return repr(value)


def _rljail_out_safe(value):
    # _rljail_out for a value the code made (its last expression): never raises.
    try:
        return _rljail_out(value)
    except Exception:
        return "<%s>" % type(value).__name__


def _rljail_wrap_tool(fn):
    def tool(*args, **kwargs):
        return _rljail_typed(fn(*[_rljail_out(a) for a in args], **{k: _rljail_out(v) for k, v in kwargs.items()}))
    tool.__name__ = tool.__qualname__ = getattr(fn, "__name__", "tool")
    tool.__doc__ = getattr(fn, "__doc__", None)
    return tool


class _RljailSmolScaffold:
    def __init__(self, ns, names):
        self.ns = ns
        for n in names:
            if n in ns and callable(ns[n]) and n != "_rljail_late_tool":
                ns[n] = _rljail_wrap_tool(ns[n])
        bridge = ns.get("final_answer")
        if bridge is not None:
            def final_answer(*args, **kwargs):
                raise FinalAnswerException(bridge(*args, **kwargs))
            ns["final_answer"] = final_answer
        self.fixed = {n: ns[n] for n in names if n in ns}
        self.fixed["FinalAnswerException"] = FinalAnswerException

    def late(self, name, params):
        # A tool sent once the session started: called through the late-tool bridge.
        tool = _rljail_wrap_tool(_rljail_late_tool_fn(name, params))
        if name == "final_answer":
            bridge = tool

            def tool(*args, **kwargs):
                raise FinalAnswerException(bridge(*args, **kwargs))
        self.ns[name] = self.fixed[name] = tool

    def receive(self, values):
        # send_variables: each value as the host had it (_rljail_typed).
        for name, value in values.items():
            self.ns[name] = _rljail_typed(value)

    def restore(self):
        self.ns.update(self.fixed)
        self.ns["_rljail_last"] = None
''' + LATE_TOOL_SOURCE


def _offsets(code):
    """A function from an ast (lineno, col_offset) to an index into ``code``.  Lines are
    split where the tokenizer splits them (\\n, \\r\\n, \\r), not where str.splitlines
    does (it also splits at form feeds and other separators a string literal may hold);
    ast columns count UTF-8 bytes, the string is indexed by characters."""
    lines = re.split(r"(?<=\r\n)|(?<=\n)|(?<=\r)(?!\n)", code)

    def offset(lineno, col):
        before = sum(len(line) for line in lines[: lineno - 1])
        return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))
    return offset


def capture_last_expression(code, name="_rljail_last"):
    """``code`` with its last statement, when that is an expression, assigned to ``name``
    (so that its value can be returned as the local executor returns it), and whether it
    was.  Code that does not parse is returned as it is: the jail reports its error."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code, False
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code, False
    node = tree.body[-1]
    offset = _offsets(code)
    start = offset(node.lineno, node.col_offset)
    end = offset(node.end_lineno, node.end_col_offset)
    return code[:start] + name + " = (" + code[start:end] + ")" + code[end:], True


def capture_last_value(code, name="_rljail_last"):
    """``code`` rewritten so that ``name`` holds what LocalPythonExecutor returns as the
    output (local_python_executor.py evaluate_python_code: the value of the last top-level
    statement): a last expression's value, or an assignment's (``x = 5``, ``a = b = f()``,
    ``x: int = 5``, ``x += 1``); and whether it does.  Other last statements (loops, ifs,
    defs) give None here, as the remote executors have it."""
    expr_code, captured = capture_last_expression(code, name)
    if captured:
        return expr_code, True
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code, False
    if not tree.body:
        return code, False
    node = tree.body[-1]
    offset = _offsets(code)
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        start = offset(node.value.lineno, node.value.col_offset)
        end = offset(node.value.end_lineno, node.value.end_col_offset)
        return code[:start] + "(" + name + " := (" + code[start:end] + "))" + code[end:], True
    if isinstance(node, ast.AugAssign) and isinstance(node.target, (ast.Name, ast.Attribute, ast.Subscript)):
        start = offset(node.target.lineno, node.target.col_offset)
        end = offset(node.target.end_lineno, node.target.end_col_offset)
        tail = "" if code.endswith("\n") else "\n"
        return code + tail + "%s = (%s)\n" % (name, code[start:end]), True
    return code, False


#: smolagents' BASE_BUILTIN_MODULES (utils.py), for when smolagents is not installed.
_BASE_BUILTIN_MODULES = ["collections", "datetime", "itertools", "math", "queue", "random", "re", "stat",
                         "statistics", "time", "unicodedata"]


def _base_builtin_modules():
    try:
        from smolagents.utils import BASE_BUILTIN_MODULES
    except ImportError:
        return _BASE_BUILTIN_MODULES
    return BASE_BUILTIN_MODULES


_CELL_FRAME = re.compile(r'^  File "<cell>", line (\d+), in <module>$', re.MULTILINE)


def failing_statement(code, traceback):
    """The source of the top-level statement of ``code`` that raised, from the first
    module-level frame of the cell in its ``traceback`` (the local executor names it
    so); the traceback's last line when it names none."""
    match = _CELL_FRAME.search(traceback or "")
    if match:
        line = int(match.group(1))
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        for node in (tree.body if tree is not None else ()):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return ast.get_source_segment(code, node)
    lines = code.strip().splitlines()
    return lines[-1] if lines else ""


_TAG = "__rljail_type__"


def tagged_value(value, keep):
    """``value`` as JSON that the jail's ``_rljail_typed`` turns back into the same
    Python value: JSON values as they are, the other types the local executor keeps
    (a tuple, a set, a dict with keys that are not strings, bytes, a date, a numpy
    array, a pandas DataFrame...) as ``{"__rljail_type__": type, "data": ...}``.  Dataclasses and pydantic models
    become dicts; any other object is ``keep(value)``, a host object's marker."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {_TAG: "float", "data": repr(value)}
        return value
    if isinstance(value, list):
        return [tagged_value(v, keep) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TAG not in value and "__rljail_host_object__" not in value:
            return {k: tagged_value(v, keep) for k, v in value.items()}
        return {_TAG: "dict", "data": [[tagged_value(k, keep), tagged_value(v, keep)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TAG: "tuple", "data": [tagged_value(v, keep) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {_TAG: "frozenset" if isinstance(value, frozenset) else "set",
                "data": [tagged_value(v, keep) for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {_TAG: "bytearray" if isinstance(value, bytearray) else "bytes",
                "data": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, complex):
        return {_TAG: "complex", "data": [value.real, value.imag]}
    if isinstance(value, datetime.datetime):
        return {_TAG: "datetime", "data": value.isoformat()}
    if isinstance(value, datetime.date):
        return {_TAG: "date", "data": value.isoformat()}
    if isinstance(value, datetime.time):
        return {_TAG: "time", "data": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {_TAG: "timedelta", "data": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, decimal.Decimal):
        return {_TAG: "Decimal", "data": str(value)}
    if isinstance(value, pathlib.PurePath):
        return {_TAG: "Path", "data": str(value)}
    if type(value).__module__ == "numpy":
        if type(value).__name__ == "ndarray" and value.dtype.kind in "biufc":
            return {_TAG: "ndarray", "data": tagged_value(value.tolist(), keep), "dtype": str(value.dtype)}
        item = getattr(value, "item", None)
        if callable(item) and getattr(value, "ndim", None) == 0:
            return tagged_value(item(), keep)
    if type(value).__module__.split(".")[0] == "pandas" and type(value).__name__ in ("DataFrame", "Series"):
        # Pandas' table JSON keeps the index and the columns' types (dates too); a
        # frame it cannot write (duplicate columns...) stays on the host.
        try:
            return {_TAG: type(value).__name__, "data": value.to_json(orient="table", date_format="iso"),
                    "unnamed": getattr(value, "name", 0) is None}
        except Exception:
            return keep(value)
    try:
        return to_json(value)  # a dataclass, a pydantic model: a dict
    except (TypeError, ValueError, RecursionError):
        return keep(value)


def _tool_parameters(tool):
    inputs = getattr(tool, "inputs", None)
    if isinstance(inputs, dict):
        return list(inputs)
    from ..session import tool_parameters
    return tool_parameters(tool)


class RljailExecutor(_runtime()[0] or object):
    """smolagents' PythonExecutor over one ``rljail session``.

    The constructor takes both executors' arguments: ``additional_authorized_imports``
    first, then the remote executors' ``logger`` or LocalPythonExecutor's
    ``max_print_outputs_length`` (an int in that place is taken as the latter).  Made
    as LocalPythonExecutor is, the authorized imports are enforced on the code's import
    statements in its words (the agent's rule, not the boundary: the jail is); made as
    a remote executor is (a ``logger``, or ``additional_imports=``, the packages it
    would install), any import the jail's rootfs has works, as in the remote executors'
    kernels.  ``enforce_imports`` chooses either way.
    ``max_print_outputs_length`` becomes the session's per-cell output cap,
    ``timeout_seconds`` its cell timeout (the state is kept when it fires);
    ``additional_functions`` (LocalPythonExecutor's) are host functions callable from
    the jail like tools; ``allow_pickle`` (the remote executors') is accepted and unused:
    nothing from the jail is ever unpickled.  Every other keyword argument is a
    :class:`rljail.Session` option.

    ``output`` is the value of a last expression or assignment, as LocalPythonExecutor
    returns it (:func:`capture_last_value`).  Tools run in a copy of the caller's
    contextvars, as in the agent's thread.

    The session starts at the first :meth:`send_tools` (tools are declared when a
    session starts) or the first execution; variables sent before are bound then.  A
    lost session raises :class:`rljail.SessionLost` from every later call (CodeAgent
    shows it to the model as an execution error; :attr:`lost_reason` says it).
    """

    def __init__(self, additional_authorized_imports=(), logger=None,
                 max_print_outputs_length=None, timeout_seconds=None, include_stderr=False,
                 additional_functions=None, allow_pickle=False, additional_imports=None,
                 enforce_imports=None, **session_options):
        if isinstance(logger, int) and not isinstance(logger, bool) and max_print_outputs_length is None:
            # LocalPythonExecutor(additional_authorized_imports, max_print_outputs_length, ...)
            logger, max_print_outputs_length = None, logger
        # RemotePythonExecutor(additional_imports, logger, allow_pickle): packages to
        # install, not a rule on imports (remote_executors.py:70-80).
        remote = logger is not None or additional_imports is not None
        self.additional_imports = list(additional_imports or ())
        self.enforce_imports = (not remote) if enforce_imports is None else bool(enforce_imports)
        self.additional_authorized_imports = list(additional_authorized_imports or ()) + self.additional_imports
        # LocalPythonExecutor's: the base modules and the additional ones, enforced on
        # the cell's import statements (_RljailImportGuard).
        self.authorized_imports = list(set(_base_builtin_modules()) | set(self.additional_authorized_imports))
        # What the agent reads of LocalPythonExecutor's state: "_print_outputs", the
        # logs of the last execution, which it keeps in memory when the code raised;
        # and its "__name__" (the jail's namespace is __main__ too).
        self.state = {"__name__": "__main__", "_print_outputs": ""}
        self.static_tools = None
        self.logger = logger
        self.additional_functions = dict(additional_functions or {})
        self.allow_pickle = allow_pickle
        self.timeout_seconds = timeout_seconds
        self.include_stderr = include_stderr
        self.session_options = dict(session_options)
        if max_print_outputs_length is None:
            # LocalPythonExecutor's default (DEFAULT_MAX_LEN_OUTPUT, local_python_executor.py:1718).
            max_print_outputs_length = DEFAULT_MAX_LEN_OUTPUT
        self.max_print_outputs_length = max_print_outputs_length
        self.session_options.setdefault("max_output_chars", max_print_outputs_length)
        if timeout_seconds is not None:
            self.session_options.setdefault("cell_timeout", timeout_seconds)
        self.session = None
        self._tools = {}
        self._declared = None
        self._late = {}
        self._pending_vars = {}
        self._cells = 0
        self._inputs = None
        self._final = None           # (value,) from the host's final_answer in this cell
        self._final_lock = threading.Lock()
        self._host_objects = []      # tools' results the jail holds by handle (the session's life)
        self._context = None         # the contextvars of the call running now

    @property
    def lost_reason(self):
        return self.session.lost_reason if self.session is not None else None

    # ------------------------------------------------------------ PythonExecutor

    def send_tools(self, tools):
        """Makes ``tools`` (name -> smolagents Tool, managed agent or callable) callable
        by name in the jail, each running on the host."""
        self._tools = dict(tools)
        # As LocalPythonExecutor's (its BASE_PYTHON_TOOLS are the jail's own builtins).
        self.static_tools = self._callables()
        if self.session is None:
            self._start()
            return
        # The session is running (it may hold variables already): new tools join it
        # through the late-tool bridge; a tool no longer sent is refused on the host.
        late = {n: _tool_parameters(t) for n, t in self._callables().items()
                if n not in self._declared and n not in self._late}
        for name, params in sorted(late.items()):
            self._scaffold("_rljail_smol.late(%r, %r)" % (name, params))
        self._late.update(late)

    def send_variables(self, variables):
        """Binds each of ``variables`` in the jail's namespace as the Python value it
        is, as the local executor has it (the agent's ``additional_args``): JSON
        values, and tuples, sets, dicts with keys that are not strings, bytes,
        dates and times, ``Decimal``, ``Path``, complex numbers, numpy arrays and
        pandas DataFrames and Series (:func:`tagged_value`); any other object stays on the host and the jail holds
        its ``str``, which is that object again when passed to a tool."""
        if self.session is None:
            self._pending_vars.update(variables)
            return
        if not variables:
            return
        values = {str(k): tagged_value(v, self._keep_host_object) for k, v in variables.items()}
        if len(json.dumps(values)) > LARGE_VALUE_BYTES:
            # Through a file the session grants (not the protocol), read by the
            # scaffold's code: the json import is not the agent's, for the import rule.
            self._scaffold("exec(compile(%r, '<rljail-scaffold>', 'exec'))"
                           % self._inputs.write("_rljail_vars", values))
        else:
            self.session.set("_rljail_vars", values)
        self._scaffold("_rljail_smol.receive(_rljail_vars)\ndel _rljail_vars")

    def __call__(self, code_action):
        """Runs the agent's code; returns a CodeOutput, or raises JailedCodeError."""
        if self.session is None:
            self._start()
        self.state["_print_outputs"] = ""
        try:
            ast.parse(code_action)
        except SyntaxError as e:
            # evaluate_python_code's words for code that does not parse; nothing runs.
            raise JailedCodeError("Code parsing failed on line %s due to: %s\n%s%s^\nError: %s"
                                  % (e.lineno, type(e).__name__, e.text, " " * (e.offset or 0), e))
        code, captured = capture_last_value(code_action)
        with self._final_lock:
            self._final = None
        self._context = contextvars.copy_context()
        try:
            result = self.session.run(code)
        except CellTimeout as e:
            self._cells += 1
            self._restore()
            # local_python_executor.py timeout(): its ExecutionTimeoutError's words.
            limit = self.timeout_seconds if self.timeout_seconds is not None else MAX_EXECUTION_TIME_SECONDS
            self.state["_print_outputs"] = self._logs(e.result)
            raise JailedTimeoutError("Code execution exceeded the maximum execution time of %s seconds "
                                  "(CellTimeout: %s)" % (limit, e.result.error.message))
        self._cells += 1
        logs = self._logs(result)
        self.state["_print_outputs"] = logs
        error = result.error
        with self._final_lock:
            final, self._final = self._final, None
        if error is not None and error.type == _FINAL_EXCEPTION and final is not None:
            self._restore()
            return _code_output(final[0], logs, True)
        output = None
        if error is None and captured:
            # The value as the host can rebuild it (a tuple, a set, a date, a
            # DataFrame...; a host object's stand-in is that object), as tools' results.
            self._scaffold("_rljail_last = _rljail_out_safe(_rljail_last)")
            output = self._host_value(self.session.get("_rljail_last"))
        self._restore()
        if error is not None:
            # As LocalPythonExecutor: the logs are in state["_print_outputs"] (the agent
            # puts them in the step's observations), the error names the top-level
            # statement that raised.
            raise JailedCodeError("Code execution failed at line '%s' due to: %s: %s"
                                  % (failing_statement(code_action, error.traceback), error.type, error.message))
        return _code_output(output, logs, False)

    def cleanup(self):
        """Ends the session (CodeAgent.cleanup calls this)."""
        release(self)
        self._declared = None
        self._cells = 0

    def delete(self):
        """The remote executors' end of the sandbox: :meth:`cleanup`."""
        self.cleanup()

    def run_code_raise_errors(self, code):
        """The remote executors' way to run code: as :meth:`__call__`."""
        return self(code)

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

    # ------------------------------------------------------------ plumbing

    def _logs(self, result):
        if self.include_stderr and result.stderr:
            return result.stdout + result.stderr
        return result.stdout

    def _start(self):
        declared = {}
        for name, tool in self._callables().items():
            declared[name] = (self._handler(name), _tool_parameters(tool))
        names = sorted(declared)
        declared[_LATE_TOOL] = (self._late_tool, ["name", "kwargs"])
        self._inputs = HostInputs()
        self.session = start_session(self.session_options, declared, inputs=self._inputs)
        self._declared = set(names)
        self._late = {}
        self._cells = 0
        # Compiled under a name of its own: the import guard judges the imports of the
        # cell's code ("<cell>"), not those the scaffold's functions make on its behalf
        # (numpy's own, when a tool's argument is an array).
        guard = ("_rljail_import_guard = _RljailImportGuard(%r, %r)\n"
                 % (self.authorized_imports, str(self.authorized_imports)) if self.enforce_imports else "")
        self._scaffold("exec(compile(%r, '<rljail-scaffold>', 'exec'))\n"
                       "_rljail_smol = _RljailSmolScaffold(globals(), %r)\n%s"
                       % (_SCAFFOLD, names + [_LATE_TOOL], guard))
        if self.enforce_imports:
            self._check_authorized_installed()
        pending, self._pending_vars = self._pending_vars, {}
        self.send_variables(pending)

    def _check_authorized_installed(self):
        # LocalPythonExecutor's check at its construction (local_python_executor.py
        # _check_authorized_imports_are_installed), made in the jail, whose rootfs is what
        # the code can import: its words, before any code runs.
        bases = sorted({imp.split(".")[0] for imp in self.authorized_imports if imp != "*"})
        self._scaffold("_rljail_missing = [m for m in %r if _rljail_importlib.import_module("
                       "'importlib.util').find_spec(m) is None]" % (bases,))
        missing = self.session.get("_rljail_missing")
        if missing:
            self.cleanup()
            raise JailedCodeError("Non-installed authorized modules: %s. Please install these modules or "
                                  "remove them from the authorized imports list (the jail's rootfs has not "
                                  "them)." % ", ".join(str(m) for m in missing))

    def _restore(self):
        self._scaffold("_rljail_smol.restore()")

    def _scaffold(self, code):
        try:
            result = self.session.run(code)
        except CellTimeout as e:
            result = e.result
        if result.error is not None:
            raise SessionError("the executor's scaffold failed in the jail: %s" % result.error)

    def _late_tool(self, name=None, kwargs=None):
        if name not in self._late:
            raise LookupError("no tool named %r" % (name,))
        if not isinstance(kwargs, dict):
            raise TypeError("kwargs must be a dict")
        return self._handler(name)(**kwargs)

    def _callables(self):
        # As LocalPythonExecutor.send_tools: the tools, then the additional functions.
        return dict(self._tools, **self.additional_functions)

    def _handler(self, name):
        def handler(**kwargs):
            tool = self._callables().get(name)
            if tool is None:
                raise LookupError("no tool named %r" % name)
            args = ()
            kwargs = {k: self._host_value(v) for k, v in kwargs.items()}
            params = _tool_parameters(tool)
            if len(kwargs) == 1 and params and params[0] in kwargs and isinstance(kwargs[params[0]], dict):
                # tool({...}) as the code wrote it: Tool.__call__ takes a lone dict of its
                # inputs as keyword arguments (tools.py), so it gets it positionally.
                args, kwargs = (kwargs[params[0]],), {}
            context = self._context
            if context is not None:
                value = context.copy().run(tool, *args, **kwargs)
            else:
                value = tool(*args, **kwargs)
            if name == "final_answer":
                # The answer the agent gets is the host tool's own value, not what the
                # jail makes of it.
                with self._final_lock:
                    self._final = (value,)
            # What is neither JSON nor rebuilt in the jail is kept here; the jail gets
            # its str, which hands this object back when passed to a tool (an image
            # given to final_answer).
            return tagged_value(value, self._keep_host_object)
        return handler

    def _keep_host_object(self, value):
        with self._final_lock:
            self._host_objects.append(value)
            handle = len(self._host_objects) - 1
        return {"__rljail_host_object__": handle, "str": str(value)}

    def _host_value(self, value):
        # A tool's argument from the jail (its _rljail_out): a host object's marker is
        # that object again, a tagged value the Python value it stands for.
        if isinstance(value, list):
            return [self._host_value(v) for v in value]
        if not isinstance(value, dict):
            return value
        if set(value) == {"__rljail_host_object__"} and isinstance(value["__rljail_host_object__"], int):
            with self._final_lock:
                objects = self._host_objects
                handle = value["__rljail_host_object__"]
                if 0 <= handle < len(objects):
                    return objects[handle]
            raise LookupError("no host object %r" % (handle,))
        tag = value.get(_TAG)
        if tag is None:
            return {k: self._host_value(v) for k, v in value.items()}
        data = value.get("data")
        if tag in ("tuple", "set", "frozenset"):
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](self._host_value(v) for v in data)
        if tag == "dict":
            return {self._host_value(k): self._host_value(v) for k, v in data}
        if tag in ("bytes", "bytearray"):
            raw = base64.b64decode(data)
            return raw if tag == "bytes" else bytearray(raw)
        if tag == "float":
            return float(data)
        if tag == "complex":
            return complex(data[0], data[1])
        if tag in ("datetime", "date", "time"):
            return getattr(datetime, tag).fromisoformat(data)
        if tag == "timedelta":
            return datetime.timedelta(days=data[0], seconds=data[1], microseconds=data[2])
        if tag == "Decimal":
            return decimal.Decimal(data)
        if tag == "Path":
            return pathlib.Path(data)
        if tag == "ndarray":
            try:
                import numpy
            except ImportError:  # the host has none: the nested lists
                return self._host_value(data)
            return numpy.array(self._host_value(data), dtype=value.get("dtype"))
        if tag == "PIL.Image":
            raw = base64.b64decode(data)
            try:
                from PIL import Image
            except ImportError:  # the host has none: the PNG's bytes
                return raw
            image = Image.open(io.BytesIO(raw))
            image.load()
            return image
        if tag in ("DataFrame", "Series"):
            try:
                import pandas
            except ImportError:  # the host has none: the table's JSON
                return json.loads(data)
            frame = pandas.read_json(io.StringIO(data), orient="table")
            if tag == "DataFrame":
                return frame
            series = frame.iloc[:, 0]
            if value.get("unnamed"):
                series.name = None
            return series
        raise ValueError("unknown value type %r from the jail" % (tag,))
