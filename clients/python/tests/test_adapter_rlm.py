"""The RLM library's environment, driven the way rlm.core.rlm.RLM drives its environments.

The fakes here follow github.com/alexzhang13/rlm at 72d6940: an LM handler speaking the
4-byte length-prefixed JSON of rlm/core/comms_utils.py, and a scripted root model whose
responses carry ```repl blocks (rlm/utils/parsing.py find_code_blocks), run one by one
through execute_code until a block's REPLResult.final_answer is set (RLM.completion).
Persistent mode calls update_handler_address and add_context between completions; the
older runtimes found ``FINAL_VAR(name)`` in the response and ran
``print(FINAL_VAR('name'))`` (parsing.find_final_answer before 51c25b0)."""

import json
import os
import re
import shutil
import socketserver
import struct
import sys
import tempfile
import textwrap
import threading
import unittest

from support import FAKE

from rljail.adapters import rlm as adapter


class FakeLMHandler:
    """rlm.core.lm_handler.LMHandler's socket side: records each request's prompts."""

    def __init__(self, answer=lambda prompt: "lm: " + str(prompt)):
        self.requests = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                head = self.request.recv(4)
                (n,) = struct.unpack(">I", head)
                body = b""
                while len(body) < n:
                    body += self.request.recv(n - len(body))
                req = json.loads(body)
                outer.requests.append(req)

                def completion(p):
                    return {"root_model": req.get("model") or "fake", "prompt": p,
                            "response": answer(p), "usage_summary": {"model_usage_summaries": {}},
                            "execution_time": 0.0}

                if req.get("prompts"):
                    out = {"chat_completions": [completion(p) for p in req["prompts"]]}
                else:
                    out = {"chat_completion": completion(req["prompt"])}
                data = json.dumps(out).encode()
                self.request.sendall(struct.pack(">I", len(data)) + data)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.address = self.server.server_address

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def find_code_blocks(text):
    return [m.group(1).strip() for m in re.finditer(r"```repl\s*\n(.*?)\n```", text, re.DOTALL)]


class ScriptedRLM:
    """RLM.completion's loop around one environment, with a scripted root model."""

    def __init__(self, env_factory, persistent=False):
        self.env_factory = env_factory
        self.persistent = persistent
        self.env = None

    def completion(self, prompt, responses, handler):
        if self.persistent and self.env is not None:
            self.env.update_handler_address(handler.address)
            self.env.add_context(prompt)
        else:
            self.env = self.env_factory(lm_handler_address=handler.address, context_payload=prompt,
                                        depth=1)
        iterations = []
        try:
            for response in responses:
                results = [self.env.execute_code(code) for code in find_code_blocks(response)]
                iterations.append(results)
                for r in results:
                    if r.final_answer is not None:
                        return r.final_answer, iterations
                legacy = re.search(r"^\s*FINAL_VAR\((.*?)\)", response, re.MULTILINE)
                if legacy:
                    name = legacy.group(1).strip().strip("\"'")
                    out = self.env.execute_code("print(FINAL_VAR(%r))" % name).stdout.strip()
                    if out and "not found" not in out:
                        return out, iterations
            return None, iterations
        finally:
            if not self.persistent:
                self.env.cleanup()


def env_factory(**extra):
    def make(**kwargs):
        kwargs.update(extra)
        return adapter.RljailREPL(rljail={"binary": FAKE}, **kwargs)
    return make


class RLMTrajectoryTest(unittest.TestCase):
    def setUp(self):
        self.lm = FakeLMHandler()
        self.addCleanup(self.lm.stop)

    def test_whole_trajectory_with_answer_dict(self):
        rlm = ScriptedRLM(env_factory())
        doc = "alpha beta gamma " * 100
        answer, its = rlm.completion(doc, [
            "Let me look.\n```repl\nprint(len(context), context[:11])\n```",
            "```repl\nchunks = [context[i:i+500] for i in range(0, len(context), 500)]\n"
            "notes = llm_query_batched(['summarize: ' + c[:20] for c in chunks])\nprint(len(notes))\n```",
            "```repl\nsummary = llm_query('combine: ' + str(len(notes)))\n```\n"
            "```repl\nanswer['content'] = summary\nanswer['ready'] = True\n```",
        ], self.lm)
        self.assertEqual(answer, "lm: combine: 4")
        self.assertEqual(its[0][0].stdout, "1700 alpha beta \n")
        self.assertEqual(its[1][0].stdout, "4\n")
        self.assertEqual(len(its[1][0].rlm_calls), 4)
        self.assertEqual(self.lm.requests[0]["prompts"][0], "summarize: alpha beta gamma alp")
        self.assertEqual(self.lm.requests[0]["depth"], 1)
        locals_ = its[2][0].locals
        self.assertEqual(locals_["summary"], "lm: combine: 4")
        self.assertIn("context", locals_)

    def test_legacy_final_var(self):
        rlm = ScriptedRLM(env_factory())
        answer, _ = rlm.completion("text", [
            "```repl\nresult = context.upper()\n```\nFINAL_VAR(result)",
        ], self.lm)
        self.assertEqual(answer, "TEXT")
        answer, _ = ScriptedRLM(env_factory()).completion("t", ["FINAL_VAR(missing)"], self.lm)
        self.assertIsNone(answer)

    def test_reserved_names_restored_after_every_cell(self):
        env = adapter.RljailREPL(lm_handler_address=self.lm.address, context_payload="orig",
                                 rljail={"binary": FAKE})
        self.addCleanup(env.cleanup)
        r = env.execute_code("context = 'clobbered'\nllm_query = None\nSHOW_VARS = 1\nanswer = {}")
        self.assertEqual(r.stderr, "")
        r = env.execute_code("print(context, llm_query('q'), SHOW_VARS())")
        self.assertTrue(r.stdout.startswith("orig lm: q Available variables:"), r.stdout)
        # A plain dict answer with ready set is still taken as the final answer.
        r = env.execute_code("answer = {'content': 'plain', 'ready': True}")
        self.assertEqual(r.final_answer, "plain")
        self.assertIsNone(env.execute_code("x = 1").final_answer)

    def test_exception_and_timeout_are_in_stderr(self):
        env = adapter.RljailREPL(lm_handler_address=self.lm.address,
                                 rljail={"binary": FAKE, "cell_timeout": 0.3})
        self.addCleanup(env.cleanup)
        r = env.execute_code("x = 2\n1/0")
        self.assertTrue(r.stderr.endswith("\nZeroDivisionError: division by zero"), r.stderr)
        r = env.execute_code("while True:\n    pass")
        self.assertIn("CellTimeout", r.stderr)
        self.assertEqual(env.execute_code("print(x)").stdout, "2\n")

    def test_cell_timeout_as_an_environment_argument(self):
        # rlm's IPythonREPL takes cell_timeout (seconds; 0 or None: none) and reports an
        # overrun as "TimeoutError: cell execution exceeded Ns and was interrupted"; an
        # RLM's environment_kwargs={"cell_timeout": ...} means the same here.
        env = adapter.RljailREPL(lm_handler_address=self.lm.address, cell_timeout=0.3,
                                 rljail={"binary": FAKE})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.cell_timeout, 0.3)
        r = env.execute_code("x = 1\nwhile True:\n    pass")
        self.assertIn("\nTimeoutError: cell execution exceeded 0.3s and was interrupted", r.stderr)
        self.assertEqual(env.execute_code("print(x)").stdout, "1\n")
        off = adapter.RljailREPL(cell_timeout=0, rljail={"binary": FAKE})
        self.addCleanup(off.cleanup)
        self.assertIsNone(off.cell_timeout)

    def test_threads_share_one_environment(self):
        # As rlm's IPythonREPL tests have it: cells run one at a time from any thread,
        # each reporting its own sub-calls; add_context gives distinct indices; a
        # subcall_fn that re-enters execute_code on its own REPL is a RuntimeError in
        # the subcall (the cell sees rlm_query's error string), not a deadlock.
        class Completion:
            response = "x"

        env = adapter.RljailREPL(subcall_fn=lambda prompt, model=None: Completion(),
                                 persistent=True, rljail={"binary": FAKE})
        self.addCleanup(env.cleanup)
        counts, indices = [], []

        def worker(i):
            for _ in range(3):
                counts.append(len(env.execute_code("rlm_query('p')").rlm_calls))
            indices.append(env.add_context("payload-%d" % i))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(counts, [1] * 12)
        self.assertEqual(sorted(indices), [0, 1, 2, 3])
        seen = []

        def reenter(prompt, model=None):
            try:
                env.execute_code("print('inner')")
            except RuntimeError as e:
                seen.append(str(e))
                raise
            return Completion()

        env.subcall_fn = reenter
        r = env.execute_code("print(rlm_query('p')[:22])")
        self.assertEqual(r.stdout, "Error: RLM query faile\n")
        self.assertEqual(len(seen), 1)
        self.assertIn("re-enter", seen[0])

    def test_persistent_multi_turn(self):
        rlm = ScriptedRLM(env_factory(persistent=True), persistent=True)
        a1, _ = rlm.completion("first doc", [
            "```repl\nseen = [context]\nanswer['content'] = 'one'; answer['ready'] = True\n```"], self.lm)
        self.addCleanup(rlm.env.cleanup)
        lm2 = FakeLMHandler(lambda p: "second handler: " + p)
        self.addCleanup(lm2.stop)
        rlm.env.add_history([{"role": "user", "content": "first doc"}])
        a2, its = rlm.completion("second doc", [
            "```repl\nseen.append(context_1)\nprint(seen, context, history[0]['content'], llm_query('x'))\n"
            "answer['content'] = 'two'; answer['ready'] = True\n```"], lm2)
        self.assertEqual((a1, a2), ("one", "two"))
        self.assertEqual(its[0][0].stdout,
                         "['first doc', 'second doc'] first doc first doc second handler: x\n")
        self.assertEqual(rlm.env.get_context_count(), 2)
        self.assertEqual(rlm.env.get_history_count(), 1)

    def test_recursion_through_subcall_fn(self):
        calls = []

        class Completion:
            def __init__(self, response):
                self.response = response

        def subcall(prompt, model=None):
            calls.append((prompt, model))
            # A child RLM: its own jailed environment, answering through the same handler.
            child = ScriptedRLM(env_factory())
            answer, _ = child.completion(prompt, [
                "```repl\nanswer['content'] = 'child saw ' + context; answer['ready'] = True\n```"], self.lm)
            return Completion(answer)

        rlm = ScriptedRLM(env_factory(subcall_fn=subcall, max_concurrent_subcalls=2))
        answer, its = rlm.completion("root", [
            "```repl\nparts = rlm_query_batched(['a', 'b', 'c'])\nanswer['content'] = '|'.join(parts)\n"
            "answer['ready'] = True\n```"], self.lm)
        self.assertEqual(answer, "child saw a|child saw b|child saw c")
        self.assertEqual(sorted(calls), [("a", None), ("b", None), ("c", None)])
        self.assertEqual(len(its[0][0].rlm_calls), 3)

    def test_custom_tools_run_on_the_host(self):
        host_only = {"secret": "stays here"}
        env = adapter.RljailREPL(
            lm_handler_address=self.lm.address, rljail={"binary": FAKE},
            custom_tools={"lookup": {"tool": lambda key: len(host_only[key]), "description": "d"},
                          "LIMIT": 3})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute_code("print(lookup('secret'), LIMIT)").stdout, "10 3\n")
        with self.assertRaises(ValueError):
            adapter.RljailREPL(rljail={"binary": FAKE}, custom_tools={"context": 1})

    def test_large_context_goes_through_a_file(self):
        big = "z" * (2 << 20)
        env = adapter.RljailREPL(lm_handler_address=self.lm.address, context_payload=big,
                                 rljail={"binary": FAKE})
        self.addCleanup(env.cleanup)
        r = env.execute_code("print(len(context))")
        self.assertEqual(r.stdout, "%d\n" % len(big))
        self.assertIsInstance(r.locals["context"], adapter.JailedValue)
        self.assertEqual(r.locals["context"].type_name, "str")


class LocalREPLSurfaceTest(unittest.TestCase):
    """What rlm's own tests read off a LocalREPL (alexzhang13/rlm 72d6940), asked of
    RljailREPL the same way: ``env.locals`` (tests/test_local_repl.py:16, 132, 171-187,
    197; tests/test_local_repl_persistent.py:18-20, 83-86), ``temp_dir`` (test_local_repl.py
    temp-dir test), the reserved-name error (tests/repl/test_custom_tools.py:72-86), a
    failing host tool in stderr (test_custom_tools.py:252-254), llm_query with no or a
    dead handler (test_local_repl.py:160, comms_utils.send_lm_request's words)."""

    def env(self, **kwargs):
        env = adapter.RljailREPL(rljail={"binary": FAKE}, **kwargs)
        self.addCleanup(env.cleanup)
        return env

    def test_locals_as_local_repl_shows_them(self):
        env = self.env(context_payload={"key": "value", "number": 42})
        self.assertEqual(env.locals["context"]["number"], 42)
        self.assertEqual(env.locals["answer"], {"content": "", "ready": False})
        self.assertEqual(env.execute_code("x = 1 + 2").stderr, "")
        self.assertEqual(env.locals["x"], 3)
        env.execute_code("import math\ny = math.pi\nsquares = [i**2 for i in range(5)]")
        self.assertAlmostEqual(env.locals["y"], 3.14159, places=3)
        self.assertEqual(env.locals["squares"], [0, 1, 4, 9, 16])
        env.execute_code('context = "hijacked"')
        self.assertEqual(env.locals["context"], {"key": "value", "number": 42})
        for hidden in ("llm_query", "SHOW_VARS", "FINAL_VAR"):
            self.assertNotIn(hidden, env.locals)
        temp_dir = env.temp_dir
        self.assertTrue(os.path.isdir(temp_dir))
        env.cleanup()
        self.assertEqual(len(env.locals), 0)
        self.assertFalse(os.path.exists(temp_dir))

    def test_persistent_contexts_and_histories_in_locals(self):
        env = self.env(persistent=True)
        self.assertEqual((env.add_context("First"), env.add_context("Second")), (0, 1))
        history = [{"role": "user", "content": "Hello"}]
        env.add_history(history)
        locals_ = env.locals
        self.assertEqual((locals_["context_0"], locals_["context_1"], locals_["context"]),
                         ("First", "Second", "First"))
        self.assertEqual((locals_["history_0"], locals_["history"]), (history, history))
        env.update_handler_address(("127.0.0.1", 6000))
        self.assertEqual(env.lm_handler_address, ("127.0.0.1", 6000))

    def test_locals_hold_message_histories_and_contexts_of_kilobytes(self):
        # tests/test_multi_turn_integration.py:84-117 read a whole message history (the
        # system prompt is kilobytes) and the contexts back through env.locals.
        env = self.env(persistent=True)
        history = [{"role": "system", "content": "s" * 20000}, {"role": "user", "content": "q"}]
        doc = "d" * 100000
        env.add_context(doc)
        env.add_history(history)
        locals_ = env.locals
        self.assertIsInstance(locals_["history_0"], list)
        self.assertEqual(locals_["history"], locals_["history_0"])
        self.assertEqual(locals_["context"], doc)
        r = env.execute_code("summary = context[:3] + 'x' * 30000")
        self.assertEqual(r.locals["summary"], "ddd" + "x" * 30000)
        self.assertIsInstance(r.locals["context"], adapter.JailedValue)  # over values_chars

    def test_output_is_not_cut_below_what_rlm_shows_the_model(self):
        # rlm/utils/parsing.py:26-62: each block's output is cut at 20000 characters for the
        # model; LocalREPL returns all of it, so the jail must not cut it below that.
        env = self.env()
        self.assertEqual(len(env.execute_code("print('x' * 30000)").stdout), 30001)

    def test_reserved_tool_names_error_names_them(self):
        with self.assertRaises(ValueError) as cm:
            adapter.RljailREPL(rljail={"binary": FAKE}, custom_tools={"llm_query": 1, "answer": 2, "ok": 3})
        message = str(cm.exception)
        self.assertIn("llm_query", message)
        self.assertIn("answer", message)
        self.assertIn("reserved", message.lower())

    def test_failing_tool_and_missing_handler(self):
        def failing_tool():
            raise ValueError("Tool failed!")

        def multiply(x, factor=10):
            return x * factor

        env = self.env(custom_tools={"failing_tool": failing_tool, "multiply": multiply})
        r = env.execute_code("result = failing_tool()")
        self.assertIn("ValueError", r.stderr)
        self.assertIn("Tool failed!", r.stderr)
        self.assertEqual(env.execute_code("result = multiply(5)").stderr, "")
        self.assertEqual(env.locals["result"], 50)
        env.execute_code("response = llm_query('test')")
        self.assertIn("Error", env.locals["response"])
        # A handler that is gone: the request fails, as send_lm_request reports it.
        dead = socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)
        address = dead.server_address
        dead.server_close()
        env.update_handler_address(address)
        env.execute_code("r1 = llm_query('q')\nr2 = llm_query_batched(['a', 'b'])")
        self.assertTrue(env.locals["r1"].startswith("Error: Request failed: "), env.locals["r1"])
        self.assertEqual(len(env.locals["r2"]), 2)
        self.assertTrue(env.locals["r2"][0].startswith("Error: Request failed: "))


class ValueHelpersTest(unittest.TestCase):
    """What issue 32 found when rlm itself drove the adapter: the large values that stay
    in the jail must still be listed by type, and a tool's non-JSON result must reach the
    cell as the nearest value.  (The conformance run holds both against rlm's own code.)"""

    def test_jailed_values_keep_their_type(self):
        for type_name, base in (("str", str), ("list", list), ("dict", dict), ("tuple", tuple),
                                ("int", int), ("float", float)):
            v = adapter.jailed_value(type_name, "<preview>")
            self.assertIsInstance(v, adapter.JailedValue)
            self.assertIsInstance(v, base)
            self.assertEqual((repr(v), str(v), v.type_name), ("<preview>", "<preview>", type_name))
        other = adapter.jailed_value("Counter", "Counter()")
        self.assertIsInstance(other, adapter.JailedValue)
        self.assertNotIsInstance(other, (str, list, dict))

    def test_nearest_json(self):
        from rljail.adapters._common import nearest_json

        class P:
            def __repr__(self):
                return "P()"
        self.assertEqual(nearest_json({"c", "a", "b"}), ["a", "b", "c"])
        self.assertEqual(nearest_json(P()), "P()")
        self.assertEqual(nearest_json({"k": [P(), (1, 2)], "n": float("nan")}),
                         {"k": ["P()", [1, 2]], "n": "nan"})
        self.assertEqual(nearest_json([1, "x", None]), [1, "x", None])


class InstallTest(unittest.TestCase):
    """install() against a stand-in of the library's module layout (rlm.core.rlm)."""

    def setUp(self):
        root = self.root = tempfile.mkdtemp(prefix="fake-rlm-pkg-")
        self.addCleanup(shutil.rmtree, root, True)
        os.makedirs(os.path.join(root, "rlm", "core"))
        for d in ("rlm", os.path.join("rlm", "core")):
            open(os.path.join(root, d, "__init__.py"), "w").close()
        with open(os.path.join(root, "rlm", "core", "rlm.py"), "w") as f:
            f.write(textwrap.dedent('''
                class LocalREPL:
                    def __init__(self, **kwargs):
                        self.kwargs = kwargs

                def get_environment(environment, environment_kwargs):
                    if environment == "local":
                        return LocalREPL(**environment_kwargs)
                    raise ValueError(environment)

                class RLM:
                    """As rlm.core.rlm.RLM: environments come from get_environment by name."""
                    def __init__(self, environment="local", environment_kwargs=None, max_depth=1):
                        self.environment_type = environment
                        self.environment_kwargs = environment_kwargs or {}
                        self.max_depth = max_depth

                    def make_env(self, address, prompt):
                        kw = dict(self.environment_kwargs, lm_handler_address=address,
                                  context_payload=prompt, depth=1)
                        if self.environment_type in ("local", "ipython", "docker") and self.max_depth > 1:
                            kw["subcall_fn"] = lambda p, m=None: None
                        return get_environment(self.environment_type, kw)
            '''))
        sys.path.insert(0, root)
        self.addCleanup(sys.path.remove, root)
        for name in [n for n in sys.modules if n == "rlm" or n.startswith("rlm.")]:
            del sys.modules[name]
        self.addCleanup(lambda: [sys.modules.pop(n) for n in list(sys.modules)
                                 if n == "rlm" or n.startswith("rlm.")])

    def test_local_environment_is_jailed_and_keeps_recursion(self):
        lm = FakeLMHandler()
        self.addCleanup(lm.stop)
        import rlm.core.rlm as runtime
        with adapter.install(binary=FAKE, memory="256m"):
            r = runtime.RLM(environment="local", max_depth=2,
                            environment_kwargs={"rljail": {"cell_timeout": 5}})
            env = r.make_env(lm.address, "ctx")
            try:
                self.assertIsInstance(env, adapter.RljailREPL)
                self.assertIsNotNone(env.subcall_fn)
                self.assertEqual(env.options, {"binary": FAKE, "memory": "256m", "cell_timeout": 5})
                self.assertEqual(env.execute_code("print(context)").stdout, "ctx\n")
            finally:
                env.cleanup()
        self.assertIsInstance(runtime.RLM().make_env(lm.address, "x"), runtime.LocalREPL)

    def test_environments_get_environment_is_jailed_too(self):
        # rlm.environments.get_environment, which a runner's own loop may call.
        os.makedirs(os.path.join(self.root, "rlm", "environments"))
        with open(os.path.join(self.root, "rlm", "environments", "__init__.py"), "w") as f:
            f.write("from rlm.core.rlm import LocalREPL, get_environment\n")
        import rlm.environments as envs
        original = envs.get_environment
        with adapter.install(binary=FAKE):
            env = envs.get_environment("local", {"context_payload": "ctx"})
            try:
                self.assertIsInstance(env, adapter.RljailREPL)
                self.assertEqual(env.execute_code("print(context)").stdout, "ctx\n")
            finally:
                env.cleanup()
        self.assertIs(envs.get_environment, original)


if __name__ == "__main__":
    unittest.main()
