"""The smolagents adapter, driven the way CodeAgent drives a PythonExecutor.

The fake follows src/smolagents/agents.py (huggingface/smolagents e3a5b899): at run()
the agent calls ``send_variables(variables=self.state)`` then
``send_tools({**self.tools, **self.managed_agents})``; each step parses a code blob from
the model and calls ``executor(code_action)``; an exception becomes an error the model
sees on the next step; ``is_final_answer`` ends the run with ``output``.  Tools are
smolagents-like objects (``name``, ``inputs``, ``output_type``, ``forward``, called with
keyword arguments)."""

import unittest

from support import FAKE

from rljail.adapters import smolagents as adapter


class FakeTool:
    def __init__(self, name, inputs, forward):
        self.name = name
        self.inputs = inputs
        self.output_type = "any"
        self._forward = forward

    def __call__(self, *args, sanitize_inputs_outputs=False, **kwargs):
        return self._forward(*args, **kwargs)


class HostAnswer:
    """Not JSON: the agent must get this very object back from final_answer."""

    def __init__(self, text):
        self.text = text


def final_answer_tool():
    return FakeTool("final_answer", {"answer": {"type": "any", "description": "the answer"}},
                    lambda answer: HostAnswer(answer))


class ScriptedCodeAgent:
    def __init__(self, executor, tools, managed_agents=None):
        self.executor = executor
        self.tools = {t.name: t for t in tools}
        self.managed_agents = managed_agents or {}
        self.state = {}
        self.observations = []

    def run(self, codes, additional_args=None):
        self.state.update(additional_args or {})
        self.executor.send_variables(variables=self.state)
        self.executor.send_tools({**self.tools, **self.managed_agents})
        for code in codes:
            try:
                out = self.executor(code)
            except Exception as e:  # AgentExecutionError(str(e)) in smolagents
                self.observations.append("Error: " + str(e))
                continue
            self.observations.append("Execution logs:\n%sLast output from code snippet:\n%s"
                                     % (out.logs, out.output))
            if out.is_final_answer:
                return out.output
        return None


class SmolagentsTrajectoryTest(unittest.TestCase):
    def executor(self, **kwargs):
        ex = adapter.RljailExecutor(["numpy"], None, binary=FAKE, **kwargs)
        self.addCleanup(ex.cleanup)
        return ex

    def test_whole_trajectory(self):
        calls = []
        weather = FakeTool("get_weather", {"city": {"type": "string", "description": "c"}},
                           lambda city: calls.append(city) or {"city": city, "temp": 21})
        agent = ScriptedCodeAgent(self.executor(), [weather, final_answer_tool()])
        result = agent.run([
            "w = get_weather(city='Oslo')\nprint(w['temp'])",
            "w['temp'] * 2",
            "1/0",
            "final_answer(f\"{w['city']} is {w['temp']} degrees\")",
        ], additional_args={"units": "C"})
        self.assertIsInstance(result, HostAnswer)
        self.assertEqual(result.text, "Oslo is 21 degrees")
        self.assertEqual(calls, ["Oslo"])
        self.assertEqual(agent.observations[0], "Execution logs:\n21\nLast output from code snippet:\nNone")
        self.assertTrue(agent.observations[1].endswith("Last output from code snippet:\n42"))
        self.assertIn("ZeroDivisionError", agent.observations[2])

    def test_variables_and_state(self):
        agent = ScriptedCodeAgent(self.executor(), [final_answer_tool()])
        result = agent.run(["n = len(document)", "final_answer(n + extra)"],
                           additional_args={"document": "abcdef", "extra": 1})
        self.assertEqual(result.text, 7)

    def test_state_has_the_local_executors_name(self):
        # LocalPythonExecutor's state starts as {"__name__": "__main__"} (smolagents'
        # test_state_name); the jail's namespace is __main__ too.
        ex = self.executor()
        self.assertEqual(ex.state.get("__name__"), "__main__")
        self.assertEqual(ex("__name__").output, "__main__")

    def test_final_answer_cannot_be_faked_or_swallowed(self):
        agent = ScriptedCodeAgent(self.executor(), [final_answer_tool()])
        result = agent.run([
            "raise FinalAnswerException('forged')",           # no host call: not final
            "try:\n    final_answer('real')\nexcept Exception:\n    print('swallowed')",
        ])
        self.assertIn("FinalAnswerException", agent.observations[0])
        self.assertEqual(result.text, "real")

    def test_tools_are_restored(self):
        ex = self.executor()
        ex.send_tools({"final_answer": final_answer_tool(),
                       "double": FakeTool("double", {"x": {}}, lambda x: 2 * x)})
        ex("double = None\nfinal_answer = None")
        self.assertEqual(ex("double(x=4)").output, 8)
        self.assertTrue(ex("final_answer(1)").is_final_answer)

    def test_timeout_keeps_state(self):
        ex = self.executor(timeout_seconds=0.3)
        ex.send_tools({"final_answer": final_answer_tool()})
        ex("x = 9")
        with self.assertRaises(adapter.JailedCodeError) as cm:
            ex("while True:\n    pass")
        self.assertIn("CellTimeout", str(cm.exception))
        # test_local_python_executor.py:2290-2300: ExecutionTimeoutError's words.
        self.assertIn("Code execution exceeded the maximum execution time of 0.3", str(cm.exception))
        self.assertEqual(ex("x").output, 9)

    def test_managed_agent_runs_on_the_host(self):
        tasks = []

        class ManagedAgent:
            name = "researcher"
            inputs = {"task": {}, "additional_args": {}}

            def __call__(self, task, additional_args=None):
                tasks.append(task)
                return "report on " + task

        agent = ScriptedCodeAgent(self.executor(), [final_answer_tool()],
                                  {"researcher": ManagedAgent()})
        result = agent.run(["final_answer(researcher(task='bees'))"])
        self.assertEqual(result.text, "report on bees")
        self.assertEqual(tasks, ["bees"])

    def test_capture_last_expression(self):
        self.assertEqual(adapter.capture_last_expression("x = 1\nx + 1"),
                         ("x = 1\n_rljail_last = (x + 1)", True))
        self.assertEqual(adapter.capture_last_expression("é = 'ü'; é"),
                         ("é = 'ü'; _rljail_last = (é)", True))
        self.assertEqual(adapter.capture_last_expression("x = 1"), ("x = 1", False))
        self.assertEqual(adapter.capture_last_expression("def (:"), ("def (:", False))


class ExecutorSurfaceTest(unittest.TestCase):
    """How smolagents 1.27.0.dev0 (e3a5b899) makes and drives an executor, asked of
    RljailExecutor: LocalPythonExecutor's constructor (local_python_executor.py:1708-1715,
    as agents.py:1603-1606 calls it: imports, then max_print_outputs_length) and the
    remote executors' (remote_executors.py:72-77, agents.py:1616-1618: imports, logger,
    allow_pickle); additional_functions next to the tools (local_python_executor.py:1763-1765);
    agents.py:490-492 at every run(), also after the agent's cleanup (agents.py:1593-1596);
    CodeOutput being smolagents' own dataclass (local_python_executor.py:1671-1674)."""

    def test_local_executor_constructor_and_additional_functions(self):
        ex = adapter.RljailExecutor(["numpy"], 200, additional_functions={"helper": lambda x: x + 1},
                                    timeout_seconds=5, binary=FAKE)
        self.addCleanup(ex.cleanup)
        self.assertEqual((ex.max_print_outputs_length, ex.timeout_seconds, ex.logger), (200, 5, None))
        ex.send_tools({"final_answer": final_answer_tool()})
        self.assertEqual(ex("helper(41)").output, 42)
        logs = ex("print('HEAD' + 'x' * 5000 + 'TAIL')").logs
        self.assertLess(len(logs), 1000)
        self.assertTrue(logs.startswith("HEAD"))

    def test_default_output_cap_and_a_lone_dict_argument(self):
        class DictTool(FakeTool):
            # As smolagents' Tool.__call__: a lone dict of its inputs is its keyword arguments.
            def __call__(self, *args, sanitize_inputs_outputs=False, **kwargs):
                if len(args) == 1 and not kwargs and isinstance(args[0], dict) and \
                        all(k in self.inputs for k in args[0]):
                    args, kwargs = (), args[0]
                return self._forward(*args, **kwargs)

        ex = adapter.RljailExecutor(binary=FAKE)
        self.addCleanup(ex.cleanup)
        self.assertEqual(ex.max_print_outputs_length, 50000)
        search = DictTool("search", {"query": {}, "limit": {}}, lambda query, limit=1: "%s/%s" % (query, limit))
        ex.send_tools({"final_answer": final_answer_tool(), "search": search})
        self.assertEqual(ex("search({'query': 'q', 'limit': 3})").output, "q/3")
        self.assertEqual(ex("search('q', 2)").output, "q/2")
        logs = ex("print('x' * 200000)").logs
        self.assertLess(len(logs), 51000)

    def test_remote_executor_constructor(self):
        class Logger:
            def log(self, *args, **kwargs):
                pass

        logger = Logger()
        ex = adapter.RljailExecutor([], logger, allow_pickle=False, binary=FAKE)
        self.addCleanup(ex.cleanup)
        self.assertIs(ex.logger, logger)
        ex.send_tools({"final_answer": final_answer_tool()})
        self.assertEqual(ex("3 * 3").output, 9)

    def test_output_is_the_last_statements_value(self):
        # tests/test_local_python_executor.py at e3a5b899: "result = 'completed'" gives
        # "completed" (2304-2313), chained assignments (2376-2406), isinstance (2429-2437).
        ex = adapter.RljailExecutor([], binary=FAKE)
        self.addCleanup(ex.cleanup)
        ex.send_tools({})
        for code in ["a = b = 1; b", "a, b = c, d = 1, 1; c", "a = b = (lambda: 1)(); b",
                     "d = {'func': lambda x: x - 10}; func = d['func']; func(11)",
                     "import time\ntime.sleep(0.01)\nresult = 1", "n: int = 1", "n = 0\nn += 1",
                     "k = {'v': 0}\nk['v'] += 1\nk['v']", "x = [\n    1,\n][0]  # trailing comment"]:
            self.assertEqual(ex(code).output, 1, code)
        self.assertIs(ex("isinstance(5, str)").output, False)
        self.assertIsNone(ex("for i in range(3):\n    pass").output)
        self.assertIsNone(ex("print('x')").output)
        self.assertEqual(adapter.capture_last_value("x = f(1)"), ("x = (_rljail_last := (f(1)))", True))
        self.assertEqual(adapter.capture_last_value("def (:"), ("def (:", False))
        # A form feed in a string is no line break to the tokenizer (str.splitlines says it is).
        self.assertEqual(ex("s = 'a\\x0cb'\nt = 'é\x0c' + s\nlen(t)").output, 5)
        self.assertEqual(ex("u = 'a\x0cb'\r\nlen(u)").output, 3)

    def test_runs_again_and_after_cleanup(self):
        ex = adapter.RljailExecutor(binary=FAKE)
        self.addCleanup(ex.cleanup)
        agent = ScriptedCodeAgent(ex, [final_answer_tool()])
        self.assertEqual(agent.run(["kept = n * 2", "final_answer(kept)"], {"n": 2}).text, 4)
        self.assertEqual(agent.run(["final_answer(kept + n)"], {"n": 3}).text, 7)
        ex.cleanup()  # CodeAgent.cleanup
        self.assertEqual(agent.run(["final_answer(n)"], {"n": 5}).text, 5)

    def test_tools_sent_after_the_session_started(self):
        # LocalPythonExecutor.send_tools replaces its tools whenever it is called
        # (local_python_executor.py:1763-1765); its tests run code before send_tools
        # (tests/test_local_python_executor.py:2369-2372).  State and variables are kept.
        ex = adapter.RljailExecutor(binary=FAKE)
        self.addCleanup(ex.cleanup)
        self.assertEqual(ex("kept = 20").output, 20)
        ex.send_variables({"extra": 1})
        ex.send_tools({"final_answer": final_answer_tool(),
                       "double": FakeTool("double", {"x": {}}, lambda x: 2 * x)})
        self.assertEqual(ex("double(kept) + double(x=extra)").output, 42)
        out = ex("final_answer(double(kept))")
        self.assertTrue(out.is_final_answer)
        self.assertEqual(out.output.text, 40)
        ex("double = None")
        self.assertEqual(ex("double(1)").output, 2)
        ex.send_tools({"final_answer": final_answer_tool()})
        with self.assertRaises(adapter.JailedCodeError):
            ex("double(1)")

    def test_tools_see_the_callers_contextvars(self):
        import contextvars
        var = contextvars.ContextVar("var", default="unset")
        ex = adapter.RljailExecutor(binary=FAKE)
        self.addCleanup(ex.cleanup)
        ex.send_tools({"final_answer": final_answer_tool(),
                       "read": FakeTool("read", {}, lambda: var.get())})
        token = var.set("caller's")
        try:
            self.assertEqual(ex("read()").output, "caller's")
        finally:
            var.reset(token)

    def test_runtime_types_when_smolagents_is_installed(self):
        import abc
        import dataclasses
        import importlib
        import sys
        import types
        from typing import Any

        self.assertIs(adapter.CodeOutput, adapter._CodeOutputFallback)

        @dataclasses.dataclass
        class CodeOutput:
            output: Any
            logs: str
            is_final_answer: bool

        class PythonExecutor(abc.ABC):
            @abc.abstractmethod
            def send_tools(self, tools): ...

            @abc.abstractmethod
            def send_variables(self, variables): ...

            @abc.abstractmethod
            def __call__(self, code_action): ...

        pkg = types.ModuleType("smolagents")
        mod = types.ModuleType("smolagents.local_python_executor")
        mod.CodeOutput, mod.PythonExecutor, pkg.local_python_executor = CodeOutput, PythonExecutor, mod
        sys.modules.update({"smolagents": pkg, "smolagents.local_python_executor": mod})
        try:
            reloaded = importlib.reload(adapter)
            ex = reloaded.RljailExecutor(binary=FAKE)
            self.addCleanup(ex.cleanup)
            self.assertIsInstance(ex, PythonExecutor)
            ex.send_tools({"final_answer": final_answer_tool()})
            out = ex("print('x')\n1 + 1")
            self.assertEqual(out, CodeOutput(output=2, logs="x\n", is_final_answer=False))
            self.assertIs(reloaded.CodeOutput, CodeOutput)
        finally:
            del sys.modules["smolagents"], sys.modules["smolagents.local_python_executor"]
            importlib.reload(adapter)


if __name__ == "__main__":
    unittest.main()
