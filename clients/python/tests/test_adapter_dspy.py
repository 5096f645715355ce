"""The DSPy adapter, driven the way dspy.RLM drives a CodeInterpreter.

The fake follows dspy/predict/rlm.py (stanfordnlp/dspy 3.3.1): the factory is validated
and called once per forward pass, RLM puts its own llm_query/llm_query_batched (with a
call counter and max_llm_calls) and the user's tools into ``interpreter.tools``, sets
``output_fields`` and resets ``_tools_registered``, calls ``start()``, then for each
iteration ``execute(code, variables=dict(input_args))``; CodeExecutionError and
SyntaxError become "[Error] ..." history entries, FinalOutput ends the run, and the
interpreter is shut down at the end."""

import sys
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

    def test_small_variable_keeps_keys_that_are_not_strings(self):
        # python_interpreter.py injects a small variable as a Python literal
        # (_serialize_value): {1: "a"} keeps its int key, a tuple is a list, inf a float.
        interp = adapter.RljailInterpreter(binary=FAKE)
        self.addCleanup(interp.shutdown)
        out = interp.execute("[d[1], d[None], t, n > 1e308, sorted(k for k in d if k is not None)]",
                             variables={"d": {1: "a", 2.5: {True: [float("inf")]}, None: "n"},
                                        "t": (1, 2), "n": float("inf")})
        self.assertEqual(out, ["a", "n", [1, 2], True, [1, 2.5]])
        self.assertEqual(interp.execute("d[2.5][True][0] > 1e308"), True)

    def test_large_variable_goes_through_a_file(self):
        big = "y" * (3 << 20)
        rlm = ScriptedDSPyRLM(self.factory())
        _, history = rlm.forward(["print(len(context))", "print(context[:3])"], context=big)
        self.assertEqual(history, ["%d\n" % len(big), "yyy\n"])

    def test_dspy_call_limit_raises_in_the_cell(self):
        rlm = ScriptedDSPyRLM(self.factory(), max_llm_calls=2)
        _, history = rlm.forward(["a = llm_query('a'); b = llm_query('b')", "llm_query('c')"])
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
        # A tool added after code ran (dspy.RLM adds its tools to a caller-owned
        # interpreter at each forward, rlm.py:505-517): the state is kept, the tool works
        # through the late-tool bridge, positionally and by keyword.
        interp.execute("kept = 5")
        interp.tools["another"] = lambda a, b=2: a * b
        self.assertEqual(interp.execute("[another(kept), another(kept, b=3), another(a=1)]"), [10, 15, 2])
        with self.assertRaisesRegex(adapter.CodeExecutionError, "TypeError"):
            interp.execute("another(1, 2, 3)")
        interp.execute("another = None")
        self.assertEqual(interp.execute("another(1)"), 2)  # restored after every execution

    def test_factory_tells_rlm_the_runtime(self):
        factory = self.factory()
        self.assertIn("rljail", factory.execution_instructions)
        self.assertIsInstance(factory(), adapter.RljailInterpreter)

    def test_bad_variable_name(self):
        interp = adapter.RljailInterpreter(binary=FAKE)
        self.addCleanup(interp.shutdown)
        with self.assertRaises(adapter.CodeInterpreterError):
            interp.execute("pass", variables={"not valid": 1})


class PythonInterpreterSurfaceTest(unittest.TestCase):
    """What DSPy's own tests ask of its PythonInterpreter (stanfordnlp/dspy 4ed377e, 3.3.1:
    tests/primitives/test_python_interpreter.py), asked of RljailInterpreter the same way:
    a last expression's value is the result (lines 58-73, 133, 303; runner.js 344-346), a
    None one gives the stdout (151-156), tuples and sets arrive as lists (319-339), an
    exception reports its args (117-124; python_interpreter.py 845), SyntaxError (105-110),
    a tool's positional and default arguments (746-778, 900-910) and its errors as
    RuntimeError in the code (912-928), a tool returning None is '' (1004-1020), a tool
    that executes again is refused (853-864), the default SUBMIT (137-146)."""

    def interp(self, **kwargs):
        interp = adapter.RljailInterpreter(binary=FAKE, **kwargs)
        self.addCleanup(interp.shutdown)
        return interp

    def test_last_expression_value_and_stdout(self):
        interp = self.interp()
        self.assertEqual(interp.execute("print('Hello, World!')"), "Hello, World!\n")
        self.assertEqual(interp.execute("import math\nresult = math.sqrt(4)\nresult"), 2)
        self.assertEqual(interp.execute("result = number + 1\nresult", variables={"number": 4}), 5)
        self.assertEqual(interp.execute("2 + 2"), 4)
        self.assertEqual(interp.execute("print('shown')\nNone"), "shown\n")
        self.assertEqual(interp.execute("x", variables={"x": (1, 2, 3)}), [1, 2, 3])
        self.assertEqual(interp.execute("sorted(x)", variables={"x": {3, 1, 2}}), [1, 2, 3])
        self.assertEqual(interp.execute("(x['a'], 'b')", variables={"x": {"a": 1}}), [1, "b"])
        self.assertEqual(interp.execute("session_value = 41\nsession_value"), 41)
        self.assertEqual(interp.execute("session_value + 1"), 42)

    def test_errors(self):
        interp = self.interp()
        with self.assertRaisesRegex(SyntaxError, "Invalid Python syntax"):
            interp.execute("+++")
        with self.assertRaisesRegex(adapter.CodeExecutionError, "ZeroDivisionError"):
            interp.execute("1+0/0")
        with self.assertRaisesRegex(adapter.CodeExecutionError, r"ValueError: \[4242\]"):
            interp.execute("raise ValueError(4242)")
        with self.assertRaisesRegex(adapter.CodeExecutionError, "CodeInterpreterError"):
            interp.execute("class CodeInterpreterError(Exception):\n    pass\n"
                           "raise CodeInterpreterError('generated failure')")
        self.assertEqual(interp.execute("2 + 2"), 4)

    def test_tools_as_the_sandbox_calls_them(self):
        holder = {}

        def search(query: str, limit: int = 10) -> str:
            return "query=%s, limit=%s" % (query, limit)

        def add(a: int, b: int, c: int) -> str:
            return "%d" % (a + b + c)

        def failing_tool(x: int) -> str:
            raise ValueError("bad value: %s" % x)

        def do_nothing():
            return None

        def nested_execute():
            return holder["interp"].execute("'nested'")

        interp = self.interp(tools={"search": search, "add": add, "failing_tool": failing_tool,
                                    "do_nothing": do_nothing, "nested_execute": nested_execute})
        holder["interp"] = interp
        self.assertEqual(interp.execute('search("hello")'), "query=hello, limit=10")
        self.assertEqual(interp.execute('search(query="hello", limit=5)'), "query=hello, limit=5")
        self.assertEqual(interp.execute("add(1, 2, 3)"), "6")
        self.assertEqual(interp.execute("add(10, 20, c=30)"), "60")
        out = interp.execute("try:\n    failing_tool(42)\n    output = 'no error'\n"
                             "except RuntimeError as e:\n    output = str(e)\noutput")
        self.assertIn("ValueError", out)
        self.assertIn("bad value: 42", out)
        self.assertIn("''", interp.execute("v = do_nothing()\nprint(repr(v))"))
        with self.assertRaisesRegex(adapter.CodeExecutionError, "cannot execute recursively"):
            interp.execute("nested_execute()")
        self.assertEqual(interp.execute("40 + 2"), 42)

    def test_constructor_arguments(self):
        # python_interpreter.py:271-283: a dict deno_command, two files of one basename.
        with self.assertRaisesRegex(TypeError, "deno_command must be a list"):
            adapter.RljailInterpreter(binary=FAKE, deno_command={"invalid": "dict"})
        with self.assertRaisesRegex(adapter.CodeInterpreterError, "unique basenames"):
            adapter.RljailInterpreter(binary=FAKE, enable_read_paths=["/a/x.txt"],
                                      enable_write_paths=["/b/x.txt"])
        # enable_network_access (Deno's --allow-net) is the session's egress allowlist.
        net = adapter.RljailInterpreter(binary=FAKE, enable_network_access=["example.com", "10.0.0.1"],
                                        allow_host=["api.example.org"])
        self.assertEqual(net.session_options["allow_host"], ["api.example.org", "example.com", "10.0.0.1"])
        self.assertEqual(net.enable_network_access, ["example.com", "10.0.0.1"])
        missing = self.interp(enable_read_paths=["/nonexistent/rljail-missing.txt"])
        with self.assertRaises(adapter.CodeInterpreterError):
            missing.execute("1")

    def test_output_is_not_cut_below_what_dspy_rlm_shows(self):
        # dspy/primitives/repl_types.py:112-119: RLM cuts the output itself (max_output_chars,
        # 10000 by default, head and tail) and says its true length.
        self.assertEqual(len(self.interp().execute("print('x' * 30000)")), 30001)

    def test_default_submit(self):
        interp = self.interp()
        result = interp("SUBMIT(['The result is', 7])")
        self.assertIsInstance(result, adapter.FinalOutput)
        self.assertEqual(result.output, {"output": ["The result is", 7]})

    def test_submit_edge_fields(self):
        # test_python_interpreter.py:731-741: a NoneType field, a field named FinalOutput.
        for field, code, expected in [
                ({"name": "nothing", "type": "NoneType"}, "SUBMIT(nothing=None)", {"nothing": None}),
                ({"name": "FinalOutput", "type": "str"}, "SUBMIT(FinalOutput='ok')", {"FinalOutput": "ok"})]:
            interp = self.interp(output_fields=[field])
            self.assertEqual(interp.execute(code), adapter.FinalOutput(expected))
            with self.assertRaisesRegex(adapter.CodeExecutionError, "TypeError"):
                interp.execute("SUBMIT()")

    def test_json_mode_values_through_pydantic(self):
        # python_interpreter.py _to_json_compatible / _make_jsonable: what is not plain JSON
        # goes through pydantic_core.to_jsonable_python (DSPy depends on pydantic).  A
        # stand-in of that function here: /usr/bin/python3 has no pydantic.
        import datetime
        import types
        seen = []

        def to_jsonable_python(value):
            seen.append(value)
            if isinstance(value, dict):
                return {k: to_jsonable_python(v) for k, v in value.items()}
            return value.isoformat() if isinstance(value, datetime.datetime) else value

        saved = sys.modules.get("pydantic_core")
        sys.modules["pydantic_core"] = types.SimpleNamespace(to_jsonable_python=to_jsonable_python)
        self.addCleanup(lambda: sys.modules.pop("pydantic_core") if saved is None
                        else sys.modules.__setitem__("pydantic_core", saved))
        when = datetime.datetime(2026, 1, 1)
        interp = self.interp(tools={"when": lambda: {"t": when}})
        self.assertEqual(interp.execute("v['t']", variables={"v": {"t": when}}), "2026-01-01T00:00:00")
        self.assertEqual(interp.execute("when()['t']"), "2026-01-01T00:00:00")
        self.assertTrue(seen)
        with self.assertRaisesRegex(adapter.CodeInterpreterError, "Unsupported value type"):
            interp.execute("v", variables={"v": object()})

    def test_tools_see_the_callers_contextvars(self):
        # dspy.context(lm=...) is a ContextVar override (dspy/dsp/utils/settings.py:48);
        # DSPy's interpreter calls tools in the executing thread (python_interpreter.py
        # invoke_tool), so a tool, llm_query or an async tool sees it.
        import asyncio
        import contextvars
        override = contextvars.ContextVar("override", default="global")

        async def async_tool():
            await asyncio.sleep(0)
            return override.get()

        interp = self.interp(tools={"sync_tool": lambda: override.get(), "async_tool": async_tool,
                                    "llm_query": lambda prompt: prompt + ":" + override.get(),
                                    "llm_query_batched": lambda prompts: [override.get() for _ in prompts]})
        token = override.set("in context")
        try:
            self.assertEqual(interp.execute("[sync_tool(), async_tool(), llm_query('q'), "
                                            "llm_query_batched(['a', 'b'])]"),
                             ["in context", "in context", "q:in context", ["in context"] * 2])
        finally:
            override.reset(token)
        self.assertEqual(interp.execute("sync_tool()"), "global")


class ThreadOwnershipTest(unittest.TestCase):
    """python_interpreter.py _check_thread_ownership: an interpreter executes on the
    thread that first executed on it; another thread's execute is a RuntimeError."""

    def test_another_thread_is_refused(self):
        interp = adapter.RljailInterpreter(binary=FAKE)
        try:
            self.assertEqual(interp.execute("1 + 1"), 2)
            caught = []
            t = threading.Thread(target=lambda: caught.append(_raises(lambda: interp.execute("2"))))
            t.start()
            t.join()
            self.assertIsInstance(caught[0], RuntimeError)
            self.assertIn("not thread-safe", str(caught[0]))
            self.assertEqual(interp.execute("3"), 3)  # the owner still can
        finally:
            interp.shutdown()


def _raises(fn):
    try:
        fn()
    except Exception as e:
        return e
    return None


class InterpreterCallbacksTest(unittest.TestCase):
    """DSPy 3.3's interpreter callbacks (dspy/utils/callback.py with_callbacks, its
    _INTERPRETER_OPERATIONS: execute, invoke_tool, start, shutdown): a custom
    CodeInterpreter decorates those methods (tests/callback/test_interpreter_callback.py:
    64-104), PythonInterpreter takes ``callbacks=`` and reports every tool call through
    invoke_tool (108-132), nested under the execute (the ACTIVE_CALL_ID contextvar).  A
    stand-in of ``with_callbacks`` here (DSPy is not installed): it records the method's
    name, inputs and the enclosing call, as the real one hands them to callbacks."""

    def setUp(self):
        import contextvars
        import importlib
        import inspect
        import types
        active = contextvars.ContextVar("active", default=None)

        def with_callbacks(fn):
            def wrapper(instance, *args, **kwargs):
                inputs = inspect.getcallargs(fn, instance, *args, **kwargs)
                inputs.pop("self")
                parent = active.get()
                for cb in instance.callbacks:
                    cb.append(("start", fn.__name__, inputs, parent))
                token = active.set(fn.__name__)
                try:
                    out = fn(instance, *args, **kwargs)
                except BaseException as e:
                    for cb in instance.callbacks:
                        cb.append(("end", fn.__name__, type(e).__name__))
                    raise
                finally:
                    active.reset(token)
                for cb in instance.callbacks:
                    cb.append(("end", fn.__name__, out))
                return out
            return wrapper

        names = ("dspy", "dspy.utils", "dspy.utils.callback")
        mods = {n: types.ModuleType(n) for n in names}
        class BaseCallback:
            def on_interpreter_execute_start(self, call_id, instance, inputs):
                pass

        mods["dspy.utils.callback"].with_callbacks = with_callbacks
        mods["dspy.utils.callback"].BaseCallback = BaseCallback
        mods["dspy"].utils, mods["dspy.utils"].callback = mods["dspy.utils"], mods["dspy.utils.callback"]
        sys.modules.update(mods)

        def restore():
            for n in names:
                sys.modules.pop(n, None)
            importlib.reload(adapter)
        self.addCleanup(restore)
        self.adapter = importlib.reload(adapter)

    def test_callbacks_see_execute_start_tools_and_shutdown(self):
        events = []
        interp = self.adapter.RljailInterpreter(binary=FAKE, callbacks=[events],
                                                tools={"echo": lambda value: value})
        self.addCleanup(interp.shutdown)
        self.assertEqual(interp.execute("echo(value=payload)", variables={"payload": "first"}), "first")
        with self.assertRaises(self.adapter.CodeInterpreterError):
            interp.invoke_tool("missing", {})
        interp.shutdown()
        interp.shutdown()
        starts = [(e[1], e[2], e[3]) for e in events if e[0] == "start"]
        self.assertEqual(starts[:3], [
            ("execute", {"code": "echo(value=payload)", "variables": {"payload": "first"}}, None),
            ("start", {}, "execute"),
            ("invoke_tool", {"tool_name": "echo", "kwargs": {"value": "first"}}, "execute"),
        ])
        self.assertIn(("end", "execute", "first"), events)
        self.assertIn(("end", "invoke_tool", "_CodeInterpreterErrorFallback"), events)
        self.assertEqual([e[1] for e in events if e[0] == "start"][-3:],
                         ["invoke_tool", "shutdown", "shutdown"])


if __name__ == "__main__":
    unittest.main()
