"""rljail.Session and the adapters against the real `rljail session` binary.

These tests FAIL, never skip, when ``RLJAIL_BIN`` is unset or names a binary without a
``session`` subcommand: a suite that passes by skipping would say nothing.  They run the
same contract as the fake-server unit tests (session_contract.py), then what only a real
jail can show: output written at the descriptor level, a memory limit, a 2 GiB sparse
context mapped in the jail, nothing left behind.  RealCallTest and RealAdaptersTest need
the bridge in the session (calls from the jail: llm_query, tools; the OpenAI mode's key
staying on the host); the other classes run without it:

    python3 -m unittest test_real_binary.RealBinaryPresent test_real_binary.RealSessionTest

    RLJAIL_BIN=$PWD/bin/rljail ./clients/python/run_tests.sh --real
"""

import gc
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import support

from rljail import RequestError, Session, SessionLost
from rljail.adapters import dspy as dspy_adapter
from rljail.adapters import rlm as rlm_adapter
from rljail.adapters import smolagents as smol_adapter
from session_contract import CallContract, SessionContract, project_dir


def real_binary():
    """RLJAIL_BIN, checked to be an rljail that has `session`; AssertionError if not."""
    path = os.environ.get("RLJAIL_BIN")
    if not path:
        raise AssertionError("RLJAIL_BIN is not set: these tests need the real rljail binary "
                             "(RLJAIL_BIN=$PWD/bin/rljail)")
    if not os.access(path, os.X_OK):
        raise AssertionError("RLJAIL_BIN=%s is not an executable file" % path)
    out = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=30).stdout.decode("utf-8", "replace")
    if not any(line.strip().startswith("session") for line in out.splitlines()):
        raise AssertionError("%s has no `session` subcommand (rljail session, issue 19)" % path)
    return path


class RealBinaryPresent(unittest.TestCase):
    def test_binary_has_session(self):
        real_binary()


class RealSessionTest(SessionContract, unittest.TestCase):
    options = {"timeout": "10m"}

    def binary(self):
        return real_binary()

    def test_descriptor_level_and_subprocess_output_belong_to_the_cell(self):
        s = self.session()
        r = s.run("import os, subprocess\nos.write(1, b'fd one\\n')\nos.write(2, b'fd two\\n')\n"
                  "subprocess.run(['python3', '-c', 'print(\"child\")'])")
        self.assertTrue(r.ok, r.error)
        self.assertIn("fd one\n", r.stdout)
        self.assertIn("child\n", r.stdout)
        self.assertIn("fd two\n", r.stderr)

    def test_descriptor_output_is_capped_too(self):
        s = self.session(max_output_chars=1000)
        r = s.run("import os\nos.write(1, b'HEAD' + b'x' * 100000 + b'TAIL')")
        self.assertGreater(r.stdout_truncated, 0)
        self.assertTrue(r.stdout.startswith("HEAD"))
        self.assertTrue(r.stdout.endswith("TAIL"))

    def test_bad_flag_is_a_lost_session_with_rljails_line(self):
        with self.assertRaises(SessionLost) as cm:
            Session(self.binary(), tool="not an identifier:x")
        self.assertEqual(cm.exception.reason, "exited")
        self.assertIn("status 125", str(cm.exception))
        self.assertIn("not an identifier", str(cm.exception))

    def test_memory_limit(self):
        s = self.session(memory="128m")
        mechanism = s.limits["jail"]["memory_bytes"]["mechanism"]
        if mechanism == "rlimit":
            # RLIMIT_AS (rootless on a cgroup v1 host): a MemoryError, the session goes on.
            r = s.run("x = bytearray(1 << 30)")
            self.assertEqual(r.error.type, "MemoryError")
            self.assertTrue(s.run("pass").ok)
            return
        with self.assertRaises(SessionLost) as cm:
            s.run("x = bytearray(1 << 30)")
        self.assertEqual(cm.exception.reason, "memory_limit", mechanism)

    def test_sparse_2gib_context_by_path(self):
        self.binary()
        d = tempfile.mkdtemp(prefix="rljail-ctx-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "big.txt")
        with open(path, "wb") as f:
            f.write(b"start")
            f.truncate(2 << 30)
        os.chmod(d, 0o755)
        os.chmod(path, 0o644)
        s = self.session(memory="256m", volumes=["%s:/context" % d])
        # The context is bound by path, never read whole: a cell reads slices of it.
        ctx = s.load_context(path="/context/big.txt")
        self.assertIn(ctx.kind, ("mmap", "file"))
        r = s.run("print(len(context), bytes(context[:5]))")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "%d b'start'\n" % (2 << 30))

    def test_working_directory_is_the_jails_tmp(self):
        project_dir(self)
        s = self.session()
        r = s.run("import os\nprint(os.getcwd(), os.path.exists('/workspace'))")
        self.assertEqual(r.stdout, "/tmp False\n")

    def test_hundred_sessions_leave_nothing(self):
        def ours():
            # The temporary directory may be shared with other programs: only rljail's own
            # entries count.
            return {n for n in os.listdir(tempfile.gettempdir()) if "rljail" in n}

        before = ours()
        for _ in range(100):
            with Session(self.binary()) as s:
                s.run("x = 1")
        self.assertEqual(sorted(ours() - before), [])

class RealCallTest(CallContract, unittest.TestCase):
    options = {"timeout": "10m"}

    def binary(self):
        return real_binary()

    def test_openai_mode_key_stays_on_host(self):
        key = "sk-test-%d" % os.getpid()
        seen = []

        class Endpoint(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append((self.headers.get("Authorization"), body))
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": "42"}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out.encode())

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        os.environ["RLJAIL_TEST_KEY"] = key
        self.addCleanup(os.environ.pop, "RLJAIL_TEST_KEY", None)
        s = self.session(llm="openai", llm_endpoint="http://127.0.0.1:%d/v1" % server.server_port,
                         llm_model="m", llm_key_env="RLJAIL_TEST_KEY")
        r = s.run("print(llm_query('q'))\nimport os, glob\n"
                  "dump = repr(dict(os.environ))\n"
                  "for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
                  "    try:\n        dump += open(p, 'rb').read().decode('latin1')\n"
                  "    except OSError:\n        pass\nprint(dump)")
        self.assertTrue(r.ok, r.error)
        self.assertTrue(r.stdout.startswith("42\n"))
        self.assertNotIn(key, r.stdout)
        self.assertEqual(seen[0][0], "Bearer " + key)
        self.assertEqual(seen[0][1]["messages"][-1]["content"], "q")


def data_rootfs():
    """The data rootfs (numpy, pandas, matplotlib) that make data-rootfs builds."""
    path = os.environ.get("RLJAIL_DATA_ROOTFS")
    if not path:
        raise AssertionError("RLJAIL_DATA_ROOTFS is not set: `make python-test` sets it to the "
                             "data rootfs (`make data-rootfs` builds it)")
    return path


class RealDataRootfsTest(unittest.TestCase):
    """A session, and each adapter, on the data rootfs imports its packages (issue 30:
    the worker's namespace sees what a one-shot run of the same rootfs sees)."""

    def test_session_imports_pandas(self):
        with Session(real_binary(), rootfs=data_rootfs(), cell_timeout=120) as s:
            r = s.run("import numpy as np, pandas as pd\n"
                      "print(int(pd.DataFrame({'a': np.arange(4)}).a.sum()))")
            self.assertTrue(r.ok, r.error)
            self.assertEqual(r.stdout, "6\n")

    def test_adapters_import_numpy(self):
        env = rlm_adapter.RljailREPL(rljail={"binary": real_binary(), "rootfs": data_rootfs(),
                                              "cell_timeout": 120})
        self.addCleanup(env.cleanup)
        self.assertEqual(env.execute_code("import numpy; print(numpy.arange(3).sum())").stdout, "3\n")
        interp = dspy_adapter.RljailInterpreter(binary=real_binary(), rootfs=data_rootfs(), execute_timeout=120)
        self.addCleanup(interp.shutdown)
        self.assertEqual(interp.execute("import numpy; print(numpy.arange(4).sum())"), "6\n")


class RealAdaptersTest(unittest.TestCase):
    def test_rlm_environment(self):
        env = rlm_adapter.RljailREPL(context_payload="doc", rljail={"binary": real_binary()})
        self.addCleanup(env.cleanup)
        r = env.execute_code("n = len(context)\nanswer['content'] = str(n); answer['ready'] = True")
        self.assertEqual(r.final_answer, "3")
        self.assertEqual(r.locals["n"], 3)
        # env.locals, as rlm's own tests read LocalREPL's (tests/test_local_repl.py:16).
        self.assertEqual((env.locals["n"], env.locals["context"]), (3, "doc"))
        big = "q" * (2 << 20)
        env.add_context(big)
        self.assertEqual(env.execute_code("print(len(context_1))").stdout, "%d\n" % len(big))

    def test_dspy_interpreter(self):
        interp = dspy_adapter.RljailInterpreter(binary=real_binary(), execute_timeout=5,
                                                tools={"twice": lambda x: 2 * x})
        self.addCleanup(interp.shutdown)
        interp.output_fields = [{"name": "answer", "type": "int"}]
        self.assertEqual(interp.execute("print(twice(x=n))", {"n": 21}), "42\n")
        out = interp.execute("SUBMIT(answer=twice(x=n))", {"n": 2})
        self.assertEqual(out.output, {"answer": 4})
        with self.assertRaises(dspy_adapter.CodeExecutionError):
            interp.execute("while True:\n    pass")
        # As DSPy's PythonInterpreter (runner.js, python_interpreter.py at 3.3.1): a last
        # expression's value, an exception's args.
        self.assertEqual(interp.execute("m = n * 2\nm", {"n": 21}), 42)
        with self.assertRaisesRegex(dspy_adapter.CodeExecutionError, r"ValueError: \[7\]"):
            interp.execute("raise ValueError(7)")
        # A tool added once code ran (a caller-owned interpreter a later forward gives
        # more tools, dspy/predict/rlm.py:505-517): state kept, the tool callable.
        interp.tools["thrice"] = lambda x: 3 * x
        self.assertEqual(interp.execute("thrice(m)"), 126)

    def test_dspy_interpreter_network_access(self):
        # DSPy's enable_network_access=[hosts] (test_enable_net_flag at 3.3.1): the
        # session's egress allowlist; here a host server by a name resolved to loopback.
        class Hello(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"hello")

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        port = server.server_address[1]
        code = "import urllib.request\nurllib.request.urlopen('http://net.test:%d/', timeout=10).read().decode()" % port
        closed = dspy_adapter.RljailInterpreter(binary=real_binary())
        self.addCleanup(closed.shutdown)
        with self.assertRaises(dspy_adapter.CodeExecutionError):
            closed.execute(code)
        opened = dspy_adapter.RljailInterpreter(binary=real_binary(), enable_network_access=["net.test:%d" % port],
                                                resolve=["net.test:127.0.0.1"])
        self.addCleanup(opened.shutdown)
        self.assertEqual(opened.execute(code), "hello")

    def test_dspy_interpreter_files_and_env(self):
        # As DSPy's tests of PythonInterpreter's grants (tests/primitives/
        # test_python_interpreter.py:149-214 at 3.3.1): files at /sandbox/<basename>,
        # read-only or writable and synced back after an execution, env vars by name.
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        readable, writable = os.path.join(tmp, "in.txt"), os.path.join(tmp, "out.txt")
        with open(readable, "w") as f:
            f.write("test content")
        os.environ["FOO_TEST_ENV"] = "test_value"
        self.addCleanup(os.environ.pop, "FOO_TEST_ENV", None)
        interp = dspy_adapter.RljailInterpreter(
            binary=real_binary(), enable_read_paths=[readable], enable_write_paths=[writable],
            enable_env_vars=["FOO_TEST_ENV"])
        self.addCleanup(interp.shutdown)
        self.assertEqual(interp.execute("open('/sandbox/in.txt').read()"), "test content")
        self.assertEqual(interp.execute("import os\nos.getenv('FOO_TEST_ENV')"), "test_value")
        with self.assertRaises(dspy_adapter.CodeExecutionError):
            interp.execute("open('/sandbox/in.txt', 'w')")
        self.assertEqual(interp.execute("with open('/sandbox/out.txt', 'w') as f:\n"
                                        "    f.write('allowed')\n'ok'"), "ok")
        with open(writable) as f:
            self.assertEqual(f.read(), "allowed")
        # enable_network_access: test_dspy_interpreter_network_access.

    # What model code sees of the host and leaves on it, through each adapter.
    _WHERE = ("import os\nwith open('scratch.txt', 'w') as f:\n    f.write('relative')\n"
              "print(os.getcwd(), os.path.exists('/workspace/.env'), open('scratch.txt').read())")

    def adapters(self):
        """An rlm REPL, a DSPy interpreter (with a writable grant and a large variable:
        both make host directories) and a smolagents executor, each with its run()."""
        granted = os.path.join(tempfile.mkdtemp(dir=self.outside), "notes.txt")
        with open(granted, "w") as f:
            f.write("notes")
        repl = rlm_adapter.RljailREPL(rljail={"binary": real_binary()})
        interp = dspy_adapter.RljailInterpreter(binary=real_binary(), enable_write_paths=[granted])
        executor = smol_adapter.RljailExecutor(["os"], binary=real_binary())  # as CodeAgent authorizes it
        return [(repl, lambda code: repl.execute_code(code).stdout),
                (interp, lambda code: interp.execute(code, {"big": "x" * (2 << 20)})),
                (executor, lambda code: executor(code).logs)]

    def own_tempdir(self):
        self.tmp = tempfile.mkdtemp(prefix="adapters-tmp-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.outside = tempfile.mkdtemp(prefix="adapters-outside-")
        self.addCleanup(shutil.rmtree, self.outside, True)
        patcher = mock.patch.object(tempfile, "tempdir", self.tmp)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_adapters_mount_no_workspace_and_write_relative_paths(self):
        # A runner started in its project directory: the model sees none of it (.env),
        # and its relative writes land in the jail's /tmp.
        project_dir(self)  # first: below the test's own 0700 temporary directory, rljail
        self.own_tempdir()  # (as root) would not have mounted it before either
        for obj, run in self.adapters():
            with self.subTest(adapter=type(obj).__name__):
                self.addCleanup(getattr(obj, "cleanup", None) or obj.shutdown)
                self.assertEqual(run(self._WHERE), "/tmp False relative\n")

    def test_adapters_leave_nothing_on_the_host(self):
        # However each one ends: closed, or dropped unclosed and collected.
        self.own_tempdir()
        for ending in ("closed", "dropped"):
            with self.subTest(ending=ending):
                made = self.adapters()
                for obj, run in made:
                    run("x = 1")
                self.assertGreaterEqual(len(os.listdir(self.tmp)), 3)
                procs = [obj.session._proc for obj, _ in made]
                if ending == "closed":
                    for obj, _ in made:
                        (getattr(obj, "cleanup", None) or obj.shutdown)()
                del made, obj, run
                gc.collect()
                self.assertEqual([p.poll() is None for p in procs], [False] * 3)
                self.assertEqual(sorted(os.listdir(self.tmp)), [])

    def test_adapters_leave_nothing_at_interpreter_exit(self):
        self.own_tempdir()
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            from rljail.adapters.dspy import RljailInterpreter
            from rljail.adapters.rlm import RljailREPL
            keep = [RljailInterpreter(binary=%r), RljailREPL(rljail={"binary": %r})]
            print(keep[0].execute("1 + 1", {"big": "x" * (2 << 20)}), flush=True)
        """) % (support.PACKAGE_ROOT, real_binary(), real_binary())
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TMPDIR=self.tmp),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual((out.returncode, out.stdout), (0, b"2\n"), out.stderr.decode())
        self.assertEqual(sorted(os.listdir(self.tmp)), [])

    def test_smolagents_executor(self):
        # As agents.py:1603-1606 makes a LocalPythonExecutor: imports, max_print_outputs_length.
        # An authorized module the (default) rootfs has not is refused at the start, as
        # LocalPythonExecutor refuses one its host has not.
        missing = smol_adapter.RljailExecutor(["math", "numpy"], binary=real_binary())
        self.addCleanup(missing.cleanup)
        with self.assertRaisesRegex(smol_adapter.JailedCodeError, "^Non-installed authorized modules: numpy[.]"):
            missing.send_tools({})
        self.assertIsNone(missing.session)
        ex = smol_adapter.RljailExecutor(["math"], 2000, binary=real_binary(),
                                         additional_functions={"inc": lambda x: x + 1})
        self.addCleanup(ex.cleanup)

        class FinalAnswer:
            name = "final_answer"
            inputs = {"answer": {}}

            def __call__(self, answer):
                return answer

        ex.send_tools({"final_answer": FinalAnswer()})
        ex.send_variables({"items": [1, 2, 3]})
        self.assertEqual(ex("sum(items)").output, 6)
        self.assertEqual(ex("inc(41)").output, 42)
        # LocalPythonExecutor's output: a last assignment's value (its tests, 2304-2313).
        self.assertEqual(ex("result = 'completed'").output, "completed")
        logs = ex("print('HEAD' + 'x' * 100000 + 'TAIL')").logs
        # Head and tail within the cap, with rljail's note of what was cut between them
        # (smolagents' truncate_content also adds its note to max_length).
        self.assertLess(len(logs), 2200)
        self.assertTrue(logs.startswith("HEAD") and logs.rstrip().endswith("TAIL"), logs[-50:])
        out = ex("final_answer(max(items))")
        self.assertTrue(out.is_final_answer)
        self.assertEqual(out.output, 3)


if __name__ == "__main__":
    unittest.main()


class RealHostileWorkerTest(unittest.TestCase):
    """What a cell makes the worker say (red-team round 4): the supervisor's verdicts stay
    the supervisor's, and a get that runs a cell's slow __repr__ is answered at the cell
    timeout."""

    def session(self, **options):
        s = Session(real_binary(), timeout="10m", **options)
        self.addCleanup(s.close)
        return s

    def test_a_cells_own_celltimeout_is_not_a_timeout(self):
        s = self.session(cell_timeout=2)
        r = s.run("class CellTimeout(Exception): pass\nraise CellTimeout('forged')")
        self.assertFalse(r.timed_out, r.error)
        self.assertEqual(r.error.type, "WorkerError")

    def test_a_cells_own_sessionlost_does_not_lose_the_session(self):
        s = self.session()
        s.run("class SessionLost(Exception): pass\nclass X:\n    def __repr__(self):\n"
              "        raise SessionLost('memory_limit')\nx = X()")
        with self.assertRaises(RequestError) as cm:
            s.get("x")
        self.assertEqual(cm.exception.type, "WorkerError")
        self.assertTrue(s.alive)
        self.assertEqual(s.run("print(1)").stdout, "1\n")

    def test_a_slow_get_is_answered(self):
        s = self.session(cell_timeout=2, cell_grace=1)
        s.run("import time\nclass Slow:\n    def __repr__(self):\n        time.sleep(1000)\n"
              "slow = Slow()")
        t0 = time.monotonic()
        with self.assertRaises(RequestError) as cm:
            s.get("slow")
        self.assertEqual(cm.exception.type, "CellTimeout")
        self.assertLess(time.monotonic() - t0, 8)
        self.assertEqual(s.run("print(2)").stdout, "2\n")
