"""rljail's own cases for smolagents, run by the conformance plugin on the local executor
and on rljail alike: a CodeAgent driven by a scripted Model over two runs (reset=False),
what the agent shows the model when the code raises, a tool's image handed to
final_answer, the agent's variables' types, the executor's exception types, and
smolagents' own suite of its remote executors, on RljailExecutor made as one."""

import pytest
from smolagents.agents import CodeAgent
from smolagents.models import ChatMessage, MessageRole, Model


class ScriptedModel(Model):
    def __init__(self, script):
        super().__init__(model_id="scripted")
        self.script = list(script)
        self.prompts = []

    def generate(self, messages, stop_sequences=None, **kwargs):
        self.prompts.append(messages)
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.script.pop(0))


def code(body):
    return "Thought: go\n<code>\n%s\n</code>" % body


def test_trajectory_two_runs_reset_false():
    model = ScriptedModel([
        code("import math\nprint('step one')\ntotal = math.factorial(5)"),
        code("final_answer(total + 1)"),
        code("print('kept', total)\nfinal_answer(str(total * 2))"),
    ])
    agent = CodeAgent(tools=[], model=model, max_steps=4)
    try:
        assert agent.run("first") == 121
        assert agent.run("second", reset=False) == "240"
        assert not model.script
        observations = [getattr(s, "observations", None) or "" for s in agent.memory.steps]
        assert any("step one" in o for o in observations), observations
        assert any("kept 120" in o for o in observations), observations
    finally:
        agent.cleanup()


def test_error_names_the_line_and_keeps_what_was_printed():
    model = ScriptedModel([
        code("print('before')\nx = 1\nraise ValueError('bad ' + str(x))"),
        code("final_answer('done')"),
    ])
    agent = CodeAgent(tools=[], model=model, max_steps=3)
    try:
        assert agent.run("go") == "done"
        step = agent.memory.steps[1]
        assert "Code execution failed at line 'raise ValueError('bad ' + str(x))' due to: ValueError: bad 1" in str(
            step.error), str(step.error)
        assert "before" in str(step.observations), step.observations
    finally:
        agent.cleanup()


def test_unauthorized_import_is_refused_with_the_local_words():
    model = ScriptedModel([code("import shutil"), code("final_answer('ok')")])
    agent = CodeAgent(tools=[], model=model, max_steps=3)
    try:
        agent.run("go")
        assert "Import of shutil is not allowed. Authorized imports are:" in str(agent.memory.steps[1].error)
    finally:
        agent.cleanup()


def test_tool_image_reaches_final_answer_as_the_image():
    from PIL import Image
    from smolagents import tool

    @tool
    def make_image() -> Image.Image:
        """Makes an image."""
        return Image.new("RGB", (8, 8), color="red")

    model = ScriptedModel([code("img = make_image()\nprint(str(img)[:10])\nfinal_answer(img)")])
    agent = CodeAgent(tools=[make_image], model=model, max_steps=2)
    try:
        out = agent.run("draw")
        raw = out.to_raw() if hasattr(out, "to_raw") else out  # an AgentImage wraps it
        assert isinstance(raw, Image.Image) and raw.size == (8, 8) and raw.getpixel((0, 0)) == (255, 0, 0), out
    finally:
        agent.cleanup()


def test_variables_keep_their_python_types():
    """The agent's state (additional_args) reaches the code as the objects it holds:
    a tuple, a set, an int key, bytes, dates and a Decimal stay what they are (each
    line of the code works on its own type only)."""
    import datetime
    import decimal

    model = ScriptedModel([code(
        "print(pair + (3,), sorted(tags | {'c'}), table[1], blob[1], day.isoformat(), when - day_start,"
        " price * 2, z * 2)\nfinal_answer(pair)")])
    agent = CodeAgent(tools=[], model=model, max_steps=2)
    try:
        out = agent.run("go", additional_args={
            "pair": (1, 2), "tags": {"b", "a"}, "table": {1: "one"}, "blob": b"\x00\xffab",
            "day": datetime.date(2024, 2, 3), "day_start": datetime.datetime(2024, 2, 3),
            "when": datetime.datetime(2024, 2, 3, 4, 5), "price": decimal.Decimal("1.10"),
            "z": complex(1, 2)})
        logs = str(agent.memory.steps[1].observations)
    finally:
        agent.cleanup()
    assert out == (1, 2), out
    assert "(1, 2, 3) ['a', 'b', 'c'] one 255 2024-02-03 4:05:00 2.20 (2+4j)" in logs, logs


def test_executor_errors_are_the_local_executors_types():
    """Called directly (as a runner drives an executor), a failing or overrunning code
    raises what LocalPythonExecutor raises: InterpreterError (a ValueError), and
    ExecutionTimeoutError; rljail's are AgentExecutionErrors too, as the remote
    executors' AgentErrors."""
    import os

    import pytest
    from smolagents.local_python_executor import ExecutionTimeoutError, InterpreterError
    from smolagents.utils import AgentExecutionError

    agent = CodeAgent(tools=[], model=ScriptedModel([]), executor_kwargs={"timeout_seconds": 1})
    executor = agent.python_executor
    try:
        executor.send_variables({})
        executor.send_tools(agent.tools)
        with pytest.raises(InterpreterError, match="due to: ZeroDivisionError") as failed:
            executor("x = 1\n1/0")
        with pytest.raises(ExecutionTimeoutError, match="maximum execution time of 1 seconds") as overran:
            executor("import time\ntime.sleep(2)")
        assert executor("x + 1").output == 2
    finally:
        agent.cleanup()
    if os.environ.get("RLJAIL_CONFORMANCE_EXECUTOR") == "rljail":
        assert isinstance(failed.value, AgentExecutionError) and isinstance(overran.value, AgentExecutionError)
        assert failed.value.dict()["message"] == str(failed.value)


def test_dataframe_variable_stays_a_dataframe():
    """A pandas DataFrame in additional_args is a DataFrame in the code (the data rootfs
    has pandas), and one handed to final_answer a DataFrame for the caller."""
    import pandas as pd

    frame = pd.DataFrame({"city": ["Oslo", "Lima", "Oslo"], "amount": [3, 4, 5],
                          "day": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"])})
    model = ScriptedModel([code(
        "print(int(df[df.city == 'Oslo'].amount.sum()), df.day.max().day, len(df))\n"
        "final_answer(df[df.amount > 3])")])
    agent = CodeAgent(tools=[], model=model, max_steps=2, additional_authorized_imports=["pandas"])
    try:
        out = agent.run("go", additional_args={"df": frame})
        logs = str(agent.memory.steps[1].observations)
    finally:
        agent.cleanup()
    assert "8 3 3" in logs, logs
    assert isinstance(out, pd.DataFrame) and list(out.amount) == [4, 5], out
    assert str(out.day.dtype).startswith("datetime64"), out.dtypes


def _remote_suite():
    """smolagents' own suite of the remote executors (Docker's, Modal's), which takes
    the executor from a fixture; its module imports docker, which is not needed here."""
    import sys
    import types

    if "docker" not in sys.modules:
        try:
            import docker  # noqa: F401
        except ImportError:
            sys.modules["docker"] = types.ModuleType("docker")
    from tests.test_remote_executors import CommonDockerExecutorIntegration
    return CommonDockerExecutorIntegration


class TestAsRemoteExecutor(_remote_suite()):
    """RljailExecutor made as a remote executor is made (imports to have, a logger) and
    judged by smolagents' own tests of its Docker and Modal executors: state, final
    answers (a PIL image made in the jail too), a syntax error as an AgentError, and
    ``delete()`` at the end.  On the local executor's run there is no remote executor:
    not run there."""

    @pytest.fixture
    def custom_executor(self):
        import io
        import os

        from rich.console import Console
        from smolagents.monitoring import AgentLogger, LogLevel

        if os.environ.get("RLJAIL_CONFORMANCE_EXECUTOR") != "rljail":
            pytest.skip("a remote executor's suite: there is none on the local executor's run")
        from rljail.adapters.smolagents import RljailExecutor

        rootfs = os.environ.get("RLJAIL_DATA_ROOTFS")  # numpy and PIL
        executor = RljailExecutor(additional_imports=["pillow", "numpy"],
                                  logger=AgentLogger(LogLevel.INFO, Console(force_terminal=False, file=io.StringIO())),
                                  **({"rootfs": rootfs} if rootfs else {}))
        yield executor
        executor.delete()


def test_authorized_module_not_installed_is_refused():
    """An authorized import that the executor cannot import is LocalPythonExecutor's
    InterpreterError ("Non-installed authorized modules: ...") before any code runs (at
    the local executor's construction; at rljail's session start, the agent's run)."""
    from smolagents.local_python_executor import InterpreterError

    model = ScriptedModel([code("final_answer(1)")])
    with pytest.raises(InterpreterError, match="Non-installed authorized modules: rljail_no_such_module"):
        agent = CodeAgent(tools=[], model=model, additional_authorized_imports=["math", "rljail_no_such_module.*"])
        try:
            agent.run("go")
        finally:
            agent.cleanup()
    assert model.script, "no code ran"


def test_large_variable_reaches_the_code():
    """A variable over rljail's 1 MiB protocol bound (a file the session grants) is
    bound as a small one is, under the authorized-imports rule of the code."""
    model = ScriptedModel([code("final_answer((sum(big), len(words), words[-1]))")])
    agent = CodeAgent(tools=[], model=model, max_steps=2)
    try:
        out = agent.run("go", additional_args={"big": list(range(300000)),
                                               "words": ["w%d" % i for i in range(100000)]})
    finally:
        agent.cleanup()
    assert out == (sum(range(300000)), 100000, "w99999"), out


def test_output_keeps_its_python_type():
    """The value of the code's last expression or assignment, CodeOutput.output, is the
    object (a tuple stays a tuple, a set a set, a date a date), as the local executor
    returns it."""
    agent = CodeAgent(tools=[], model=ScriptedModel([]))
    executor = agent.python_executor
    try:
        executor.send_variables({})
        executor.send_tools(agent.tools)
        assert executor("pair = (1, 'a')").output == (1, "a")
        assert executor("{3, 1}").output == {1, 3}
        out = executor("import datetime\ndatetime.date(2024, 2, 3)").output
        assert out == __import__("datetime").date(2024, 2, 3), out
    finally:
        agent.cleanup()
