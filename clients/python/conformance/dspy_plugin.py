"""pytest plugin of the conformance run: DSPy's own interpreter tests, on its
PythonInterpreter (Deno and Pyodide) or on rljail.

``RLJAIL_CONFORMANCE_EXECUTOR=rljail`` puts :class:`rljail.adapters.dspy.RljailInterpreter`
in the place of ``PythonInterpreter``: in ``dspy.primitives.python_interpreter``, in
``dspy.primitives`` and ``dspy``, and in the modules that make one by default
(``dspy.predict.rlm``, ``program_of_thought``, ``code_act``)."""

import os
import re

import dspy_stubs

dspy_stubs.install()

EXECUTOR = os.environ.get("RLJAIL_CONFORMANCE_EXECUTOR", "native")


def pytest_configure(config):
    if EXECUTOR != "rljail":
        return
    import importlib

    from rljail.adapters.dspy import RljailInterpreter

    from dspy.primitives.python_interpreter import PythonInterpreter as original

    for name in ("dspy", "dspy.primitives", "dspy.primitives.python_interpreter", "dspy.predict.rlm",
                 "dspy.predict.program_of_thought", "dspy.predict.code_act"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "PythonInterpreter"):
            module.PythonInterpreter = RljailInterpreter
        # RLM(interpreter_factory=PythonInterpreter), ProgramOfThought's and CodeAct's
        # defaults were bound when the classes were defined.
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == name:
                for fn in vars(cls).values():
                    _swap_defaults(fn, original, RljailInterpreter)


def _swap_defaults(fn, old, new):
    fn = getattr(fn, "__func__", fn)
    if getattr(fn, "__defaults__", None):
        fn.__defaults__ = tuple(new if d is old else d for d in fn.__defaults__)
    if getattr(fn, "__kwdefaults__", None):
        fn.__kwdefaults__ = {k: (new if d is old else d) for k, d in fn.__kwdefaults__.items()}


# A test whose source names one of these exercises PythonInterpreter's own machinery
# (the Deno process, Pyodide, its JSON-RPC framing, the bytes of its instructions),
# which RljailInterpreter does not have: not applicable, on either executor.
NOT_APPLICABLE = (
    ("deno", "the Deno process PythonInterpreter runs (its command, permissions, cache, version)"),
    ("pyodide", "Pyodide, the WebAssembly Python of PythonInterpreter"),
    ("_write_message", "PythonInterpreter's JSON-RPC framing to its Deno process"),
    ("_read_message", "PythonInterpreter's JSON-RPC framing to its Deno process"),
    ("snapshot", "a snapshot of the bytes of PythonInterpreter's own instructions to the model"),
    (r"runner\.js", "PythonInterpreter's JavaScript runner"),
    (r"\bimport js\b|\bfrom js import", "Pyodide's js module (the JavaScript side of PythonInterpreter)"),
    ("_extract_parameters", "a private helper of PythonInterpreter (its tool signature reader)"),
    ("_inject_variables", "a private helper of PythonInterpreter (how it ships variables to Deno)"),
    ("_serialize_value", "a private helper of PythonInterpreter (its JSON encoding for Deno)"),
    ("_to_json_compatible", "a private helper of PythonInterpreter (its JSON encoding for Deno)"),
    ("_handle_out_of_band_message", "PythonInterpreter's JSON-RPC message loop"),
)


def pytest_collection_modifyitems(config, items):
    import inspect

    import pytest

    for item in items:
        fn = getattr(item, "function", None)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        # The body only: the decorators (pytest.mark.deno marks every test that needs
        # some interpreter, rljail's included) say nothing of what a test exercises.
        body = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("@")).lower()
        for marker, reason in NOT_APPLICABLE:
            if re.search(marker, body):
                item.add_marker(pytest.mark.skip(reason="not applicable: exercises " + reason))
                break


def pytest_report_header(config):
    return "rljail conformance: DSPy's tests on %s" % (
        "rljail (RljailInterpreter)" if EXECUTOR == "rljail" else "PythonInterpreter")
