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


if __name__ == "__main__":
    unittest.main()
