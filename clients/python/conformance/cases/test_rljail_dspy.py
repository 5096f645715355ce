"""rljail's own cases for DSPy, run by the conformance plugin on PythonInterpreter and on
rljail alike: dspy.RLM end to end with DSPy's scripted DummyLM, letting the RLM make its
interpreter by default (RljailInterpreter on the rljail run), with a tool, a large
input, an error the model recovers from, and SUBMIT.  (Without Deno, PythonInterpreter
cannot run it: it is then marked deno and not run there, as DSPy's own are.)"""

import shutil

import pytest

import dspy
from dspy.utils.dummies import DummyLM

needs_interpreter = pytest.mark.skipif(
    __import__("os").environ.get("RLJAIL_CONFORMANCE_EXECUTOR") != "rljail" and shutil.which("deno") is None,
    reason="PythonInterpreter needs Deno, which this host lacks")


def lookup(key: str) -> str:
    """A host tool."""
    return {"alpha": "1", "beta": "2"}.get(key, "?")


@needs_interpreter
def test_rlm_trajectory_with_dummy_lm():
    lm = DummyLM([
        {"reasoning": "look at the input",
         "code": "import os\nprint(len(document), os.path.exists('/rljail'))\nn = len(document)"},
        {"reasoning": "this fails", "code": "undefined_name + 1"},
        {"reasoning": "use the tool and finish",
         "code": "v = int(lookup(key='alpha')) + int(lookup(key='beta'))\nSUBMIT(answer=n + v)"},
    ])
    with dspy.context(lm=lm):
        rlm = dspy.RLM("document, question -> answer: int", tools=[lookup], max_iters=5)
        result = rlm(document="x" * 150_000, question="length plus lookups?")
    assert result.answer == 150_003
    assert len(result.trajectory) == 3
    # rljail's jail has /rljail (its inputs); DSPy's own sandbox has not.
    jailed = __import__("os").environ.get("RLJAIL_CONFORMANCE_EXECUTOR") == "rljail"
    assert "150000 %s" % jailed in str(result.trajectory[0]), result.trajectory[0]
    assert "NameError" in str(result.trajectory[1])


@needs_interpreter
def test_top_level_await_in_a_cell():
    """DSPy's interpreter runs a cell as async code (runPythonAsync): top-level await."""
    from dspy.primitives.python_interpreter import PythonInterpreter  # RljailInterpreter on rljail

    with PythonInterpreter() as interp:
        code = "import asyncio\nasync def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\nv = await twice(21)\nv"
        assert interp.execute(code) == 42
        assert interp.execute("await twice(v)") == 84


@needs_interpreter
def test_uncaught_tool_error_reads_as_runtime_error():
    """DSPy's sandbox raises a tool's error as RuntimeError("ValueError: ...")."""
    from dspy.primitives.code_interpreter import CodeInterpreterError
    from dspy.primitives.python_interpreter import PythonInterpreter

    def bad(n: int) -> int:
        raise ValueError("bad %d" % n)

    with PythonInterpreter(tools={"bad": bad}) as interp:
        with pytest.raises(CodeInterpreterError, match=r"RuntimeError: \['ValueError: bad 3'\]"):
            interp.execute("bad(3)")
        assert interp.execute("try:\n    bad(4)\nexcept RuntimeError as e:\n    r = str(e)\nr") == "ValueError: bad 4"


def test_unserializable_variable_fails_before_the_interpreter_starts():
    """A variable that cannot be JSON (a pydantic model holding an arbitrary object) is
    the interpreter's CodeInterpreterError, in DSPy's words, before anything starts."""
    from pydantic import BaseModel, ConfigDict

    from dspy.primitives.code_interpreter import CodeInterpreterError
    from dspy.primitives.python_interpreter import PythonInterpreter

    class Opaque:
        pass

    class Holder(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        value: Opaque

    interp = PythonInterpreter()
    try:
        with pytest.raises(CodeInterpreterError, match="Unable to serialize Holder as JSON") as raised:
            interp.execute("value", variables={"value": Holder(value=Opaque())})
        assert type(raised.value) is CodeInterpreterError
        assert getattr(interp, "session", None) is None  # RljailInterpreter started no jail
    finally:
        interp.shutdown()
