"""The DSPy adapter, driven the way dspy.RLM drives a CodeInterpreter.

The fake follows dspy/predict/rlm.py (stanfordnlp/dspy 3.3.1): the factory is validated
and called once per forward pass, RLM puts its own llm_query/llm_query_batched (with a
call counter and max_llm_calls) and the user's tools into ``interpreter.tools``, sets
``output_fields`` and resets ``_tools_registered``, calls ``start()``, then for each
iteration ``execute(code, variables=dict(input_args))``; CodeExecutionError and
SyntaxError become "[Error] ..." history entries, FinalOutput ends the run, and the
interpreter is shut down at the end."""

import threading
import unittest

from support import FAKE

from rljail.adapters import dspy as adapter


class ScriptedDSPyRLM:
    def __init__(self, factory, tools=(), max_llm_calls=50, output_fields=None):
        if not callable(factory) or not isinstance(factory, type) and hasattr(factory, "execute"):
            raise TypeError("interpreter_factory must be a zero-argument callable")
        self.factory = factory
        self.user_tools = {t.__name__: t for t in tools}
        self.max_llm_calls = max_llm_calls
        self.output_fields = output_fields or [{"name": "answer", "type": "str"}]
        self.sub_prompts = []

    def _llm_tools(self):
        state = {"n": 0}
        lock = threading.Lock()

        def check(n):
            with lock:
                if state["n"] + n > self.max_llm_calls:
                    raise RuntimeError("LLM call limit exceeded: %d + %d > %d"
                                       % (state["n"], n, self.max_llm_calls))
                state["n"] += n

        def llm_query(prompt):
            if not prompt:
                raise ValueError("prompt cannot be empty")
            check(1)
            self.sub_prompts.append(prompt)
            return "sub: " + prompt

        def llm_query_batched(prompts):
            check(len(prompts))
            self.sub_prompts.extend(prompts)
            return ["sub: " + p for p in prompts]

        return {"llm_query": llm_query, "llm_query_batched": llm_query_batched}

    def forward(self, codes, **input_args):
        interp = self.factory()
        for attr in ("tools", "start", "execute", "shutdown"):
            if not hasattr(interp, attr):
                raise TypeError("not a CodeInterpreter: no " + attr)
        history = []
        try:
            interp.tools.update(self._llm_tools())
            interp.tools.update(self.user_tools)
            interp.output_fields = self.output_fields
            interp._tools_registered = False
            interp.start()
            for code in codes:
                try:
                    result = interp.execute(code, variables=dict(input_args))
                except (adapter.CodeExecutionError, SyntaxError) as e:
                    result = "[Error] %s" % e
                if isinstance(result, adapter.FinalOutput):
                    return result.output, history
                history.append(result)
            return None, history
        finally:
            interp.shutdown()


def lookup_population(city):
    """A host tool."""
    return {"paris": 2100000, "oslo": 700000}[city]


class DSPyTrajectoryTest(unittest.TestCase):
    def factory(self, **kwargs):
        return adapter.RljailInterpreter.factory(binary=FAKE, **kwargs)

    def test_whole_trajectory(self):
        rlm = ScriptedDSPyRLM(self.factory(), tools=[lookup_population],
                              output_fields=[{"name": "answer", "type": "str"},
                                             {"name": "total", "type": "int"}])
        out, history = rlm.forward([
            "print(len(context), query)",
            "pops = {c: lookup_population(city=c) for c in ['paris', 'oslo']}\nprint(pops)",
            "notes = llm_query_batched([c for c in pops])\nprint(notes)",
            "undefined_name",
            "def broken(:",
            "SUBMIT(answer=llm_query('sum'), total=sum(pops.values()))",
        ], context="x" * 1000, query="how many?")
        self.assertEqual(out, {"answer": "sub: sum", "total": 2800000})
        self.assertEqual(history[0], "1000 how many?\n")
        self.assertEqual(history[1], "{'paris': 2100000, 'oslo': 700000}\n")
        self.assertEqual(history[2], "['sub: paris', 'sub: oslo']\n")
        self.assertTrue(history[3].startswith("[Error] NameError"), history[3])
        self.assertTrue(history[4].startswith("[Error] Invalid Python syntax"), history[4])
        self.assertEqual(rlm.sub_prompts, ["paris", "oslo", "sum"])

    def test_variables_are_injected_before_each_execution(self):
        rlm = ScriptedDSPyRLM(self.factory())
        out, history = rlm.forward(["context = 'changed'; print(context)", "print(context)",
                                    "SUBMIT('done')"], context="original")
        self.assertEqual(history, ["changed\n", "original\n"])
        self.assertEqual(out, {"answer": "done"})

    def test_large_variable_goes_through_a_file(self):
        big = "y" * (3 << 20)
        rlm = ScriptedDSPyRLM(self.factory())
        _, history = rlm.forward(["print(len(context))", "print(context[:3])"], context=big)
        self.assertEqual(history, ["%d\n" % len(big), "yyy\n"])

    def test_dspy_call_limit_raises_in_the_cell(self):
        rlm = ScriptedDSPyRLM(self.factory(), max_llm_calls=2)
        _, history = rlm.forward(["llm_query('a'); llm_query('b')", "llm_query('c')"])
        self.assertEqual(history[0], "")
        self.assertIn("LLM call limit exceeded", history[1])

    def test_submit_is_restored_and_except_exception_does_not_catch_it(self):
        rlm = ScriptedDSPyRLM(self.factory())
        out, history = rlm.forward([
            "SUBMIT = None\nprint = None",
            "try:\n    SUBMIT(answer='kept')\nexcept Exception:\n    print('swallowed')",
        ])
        self.assertEqual(out, {"answer": "kept"})

    def test_execute_timeout_is_recoverable(self):
        rlm = ScriptedDSPyRLM(self.factory(execute_timeout=0.3))
        _, history = rlm.forward(["x = 4", "while True:\n    pass", "print(x)"])
        self.assertIn("CellTimeout", history[1])
        self.assertEqual(history[2], "4\n")

    def test_lost_session_is_terminal(self):
        interp = adapter.RljailInterpreter(binary=FAKE)
        self.addCleanup(interp.shutdown)
        interp.start()
        interp.start()  # idempotent
        with self.assertRaises(adapter.CodeInterpreterError) as cm:
            interp.execute("import os\nos._exit(1)")
        self.assertNotIsInstance(cm.exception, adapter.CodeExecutionError)
        with self.assertRaises(adapter.CodeInterpreterError):
            interp.execute("pass")
        with self.assertRaises(adapter.CodeInterpreterError):
            interp.start()

    def test_prewarmed_interpreter_gets_tools_declared_late(self):
        interp = adapter.RljailInterpreter(binary=FAKE)
        self.addCleanup(interp.shutdown)
        interp.start()  # a pool pre-warms before RLM injects its tools
        interp.tools.update({"lookup_population": lookup_population})
        self.assertEqual(interp.execute("print(lookup_population(city='oslo'))"), "700000\n")
        interp.tools["another"] = lambda: 1
        with self.assertRaises(adapter.CodeInterpreterError):
            interp.execute("pass")

    def test_factory_tells_rlm_the_runtime(self):
        factory = self.factory()
        self.assertIn("rljail", factory.execution_instructions)
        self.assertIsInstance(factory(), adapter.RljailInterpreter)

    def test_bad_variable_name(self):
        interp = adapter.RljailInterpreter(binary=FAKE)
        self.addCleanup(interp.shutdown)
        with self.assertRaises(adapter.CodeInterpreterError):
            interp.execute("pass", variables={"not valid": 1})


if __name__ == "__main__":
    unittest.main()
