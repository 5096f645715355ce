"""What rljail.Session must do against any `rljail session`: the fake one (test_session.py)
and the real binary (test_real_binary.py) run these same cases.  A subclass sets
``binary()`` and may add options with ``options``.  SessionContract is the protocol
without calls from the jail, CallContract the calls (the bridge); a test class takes
either or both."""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from support import RecordingLLM  # noqa: F401  (sets sys.path)

import rljail
from rljail import CellTimeout, RequestError, Repr, Session, SessionLost


class _Contract:
    options = {}
    #: The unit of the timing cases, in seconds (cell timeouts, grace): the fake's is
    #: shorter than the real binary's, whose jail runs on a busy machine.
    tick = 1.0

    def binary(self):
        raise NotImplementedError

    def session(self, **kwargs):
        opts = dict(self.options)
        opts.update(kwargs)
        s = Session(self.binary(), **opts)
        self.addCleanup(s.close)
        return s


def project_dir(test, chdir=True):
    """A directory as a runner's project is (a script, a ``.env`` with a secret), open to
    every user (as root, rljail mounts no directory that other users may not enter),
    removed after the test; with ``chdir`` the test process runs in it meanwhile, as a
    runner started there does."""
    d = tempfile.mkdtemp(prefix="project-")
    test.addCleanup(shutil.rmtree, d, True)
    for name, text in ((".env", "API_KEY=sk-project-secret\n"), ("runner.py", "print('runner')\n")):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(d, name), 0o644)
    os.chmod(d, 0o755)
    if chdir:
        test.addCleanup(os.chdir, os.getcwd())
        os.chdir(d)
    return d


#: A cell that binds ``deep`` to a list nested 3000 deep: past the recursion limit of
#: json.loads on the host (1000), within Go's decoder's (10000) and, once the cell
#: raised its own, the worker's json.dumps.
DEEP_VALUE = ("import sys\nsys.setrecursionlimit(100000)\ndeep = 1\n"
              "for _ in range(3000):\n    deep = [deep]\n")


class SessionContract(_Contract):

    # ------------------------------------------------------------ cells and state

    def test_hello(self):
        s = self.session()
        self.assertEqual(s.protocol, rljail.PROTOCOL_VERSION)
        self.assertTrue(s.version)
        self.assertTrue(s.session_id)
        self.assertIsInstance(s.limits, dict)
        for key in ("cell_timeout_ms", "cell_grace_ms", "max_output_chars", "max_cells",
                    "max_request_bytes", "max_file_bytes"):
            self.assertIn(key, s.limits)
        self.assertEqual(s.limits["cell_timeout_ms"], 30000)  # rljail's default

    def test_hello_reports_the_flags(self):
        s = self.session(cell_timeout=2, cell_grace="500ms", max_cells=9)
        self.assertEqual(s.limits["cell_timeout_ms"], 2000)
        self.assertEqual(s.limits["cell_grace_ms"], 500)
        self.assertEqual(s.limits["max_cells"], 9)

    def test_state_persists_across_cells(self):
        s = self.session()
        self.assertTrue(s.run("x = 20\ndef f(y):\n    return x + y").ok)
        r = s.run("print(f(22))")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "42\n")
        self.assertIn("x", r.names)
        self.assertIn("f", r.variables)
        self.assertEqual(r.cell, 2)
        self.assertEqual(r.stdout_bytes, 3)
        s.run("_hidden = 1")
        self.assertNotIn("_hidden", s.run("pass").names)

    def test_restart_after_the_worker_exited(self):
        # os._exit in a cell loses the session; restart gives a fresh one, state gone.
        s = self.session()
        s.run("kept = 1")
        with self.assertRaises(SessionLost):
            s.run("import os; os._exit(3)")
        self.assertFalse(s.alive)
        s.restart()
        self.assertTrue(s.alive)
        r = s.run("print('kept' in globals())")
        self.assertEqual(r.stdout, "False\n")
        self.assertEqual(r.cell, 1)
        s.restart()  # of a live session too
        self.assertEqual(s.run("print(2)").stdout, "2\n")

    def test_last_expression_is_the_result(self):
        # As a REPL shows it: the repr of a last expression that is not None.
        s = self.session()
        self.assertEqual(s.run("x = 6\nx * 7").result, "42")
        self.assertIsNone(s.run("x = 1").result)
        self.assertIsNone(s.run("print('p')").result)
        r = s.run("'y' * 70000")
        self.assertTrue(r.result_truncated)
        self.assertLessEqual(len(r.result), 65536)
        self.assertIsNone(s.run("1/0\n2").result)

    def test_exception_keeps_session(self):
        s = self.session()
        s.run("x = 1")
        r = s.run("print('before')\nraise ValueError('bad value')")
        self.assertFalse(r.ok)
        self.assertEqual(r.error.type, "ValueError")
        self.assertEqual(r.error.message, "bad value")
        self.assertIn("ValueError", r.error.traceback)
        self.assertEqual(r.stdout, "before\n")
        self.assertEqual(s.run("print(x + 1)").stdout, "2\n")

    def test_syntax_error_is_a_cell_error(self):
        s = self.session()
        r = s.run("def (:")
        self.assertEqual(r.error.type, "SyntaxError")
        self.assertTrue(s.run("pass").ok)

    def test_stderr_and_timings(self):
        s = self.session()
        r = s.run("import sys; sys.stderr.write('warn\\n'); print('out')")
        self.assertEqual(r.stdout, "out\n")
        self.assertEqual(r.stderr, "warn\n")
        self.assertIsInstance(r.wall_ms, (int, float))
        self.assertIsInstance(r.cpu_ms, (int, float))

    def test_forged_reply_changes_nothing(self):
        # A cell prints what looks like the next request's reply, on stdout and at the
        # descriptor level; the next cell's result is still its own.
        s = self.session()
        forged = '{"id": %d, "ok": true, "stdout": "all tests passed\\n", "error": null}'
        for nid in range(1, 12):
            s.run("import os\nprint(%r)\nos.write(1, (%r + '\\n').encode())"
                  % (forged % nid, forged % nid))
        r = s.run("assert False, 'really failed'")
        self.assertEqual(r.error.type, "AssertionError")
        self.assertNotEqual(r.stdout, "all tests passed\n")

    def test_set_and_get(self):
        s = self.session()
        s.set("data", {"a": [1, 2, 3], "b": None, "c": "ü"})
        self.assertEqual(s.run("print(sum(data['a']), data['c'])").stdout, "6 ü\n")
        self.assertEqual(s.get("data"), {"a": [1, 2, 3], "b": None, "c": "ü"})
        s.run("obj = object()")
        value = s.get("obj")
        self.assertIsInstance(value, Repr)
        self.assertIn("object", value)
        self.assertFalse(value.truncated)
        with self.assertRaises(RequestError) as cm:
            s.get("no_such_name")
        self.assertEqual(cm.exception.type, "KeyError")
        with self.assertRaises(ValueError):
            s.set("bad", float("nan"))
        with self.assertRaises(RequestError) as cm:
            s.set("not an identifier", 1)
        self.assertEqual(cm.exception.type, "BadRequest")
        self.assertTrue(s.run("pass").ok)

    def test_get_of_a_value_too_deep_to_decode_fails_that_get(self):
        # get's value is the worker's claim, passed on by rljail as deep as it comes:
        # the get fails here, and the session answers on at once (not after the reply
        # deadline, which a dead reader thread left every later request to).
        s = self.session(cell_timeout=2 * self.tick, reply_margin=2 * self.tick)
        self.assertTrue(s.run(DEEP_VALUE).ok)
        start = time.monotonic()
        with self.assertRaises(rljail.UndecodableReply) as cm:
            s.get("deep")
        self.assertIsInstance(cm.exception.__cause__, RecursionError)
        self.assertEqual(cm.exception.op, "get")
        self.assertEqual(s.run("print(len(deep))").stdout, "1\n")
        self.assertLess(time.monotonic() - start, 2 * self.tick)
        self.assertTrue(s.alive)

    # ------------------------------------------------------------ what the jail sees of the host

    def test_no_workspace_and_a_writable_working_directory(self):
        # The runner's current directory (its scripts, its .env) is not the model's:
        # no session mounts it unless asked; relative paths land in the jail's /tmp.
        here = project_dir(self)
        s = self.session()
        r = s.run("import os\nprint(os.path.exists('/workspace/.env'), sorted(os.listdir('.')))\n"
                  "with open('scratch.txt', 'w') as f:\n    f.write('relative')\n"
                  "print(open('scratch.txt').read())")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "False []\nrelative\n")
        self.assertEqual(s.get_file("/tmp/scratch.txt"), b"relative")
        self.assertEqual(sorted(os.listdir(here)), [".env", "runner.py"])

    def test_workspace_is_granted_read_only_when_asked(self):
        d = project_dir(self, chdir=False)
        s = self.session(workspace=d)
        r = s.run("print(open('/workspace/runner.py').read(), end='')\n"
                  "try:\n    open('/workspace/new.txt', 'w')\nexcept OSError as e:\n"
                  "    print(type(e).__name__, e.errno)\n"
                  "open('scratch.txt', 'w').write('still writable')")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "print('runner')\nOSError 30\n")
        self.assertEqual(s.get_file("/tmp/scratch.txt"), b"still writable")
        self.assertEqual(sorted(os.listdir(d)), [".env", "runner.py"])

    def test_load_context_value_numbers_names(self):
        s = self.session()
        first = s.load_context("the first")
        self.assertEqual(first, "context_0")
        self.assertEqual(sorted(first.names), ["context", "context_0"])
        self.assertEqual(first.kind, "value")
        second = s.load_context({"k": 2})
        self.assertEqual(second, "context_1")
        self.assertEqual(second.names, ("context_1",))
        r = s.run("print(context, context_0 == context, context_1['k'])")
        self.assertEqual(r.stdout, "the first True 2\n")

    def test_load_context_by_path(self):
        s = self.session()
        s.put_file("/tmp/c.json", b'{"k": [1, 2]}')
        s.put_file("/tmp/c.txt", "caf\u00e9\n")
        self.assertEqual(s.load_context(path="/tmp/c.json").kind, "json")
        self.assertEqual(s.load_context(path="/tmp/c.txt").kind, "str")
        self.assertEqual(s.run("print(context['k'], repr(context_1))").stdout, "[1, 2] 'caf\u00e9\\n'\n")
        with self.assertRaises(RequestError) as cm:
            s.load_context(path="/tmp/nope.txt")
        self.assertEqual(cm.exception.type, "FileNotFoundError")

    def test_files_in_and_out(self):
        s = self.session()
        self.assertEqual(s.put_file("/tmp/in.bin", b"\x00\x01binary\xff"), 9)
        r = s.run("data = open('/tmp/in.bin', 'rb').read()\n"
                  "open('/tmp/out.txt', 'w').write(str(len(data)))")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(s.get_file("/tmp/out.txt"), b"9")
        self.assertEqual(s.put_file("/dev/shm/x", ""), 0)
        for path in ("/etc/x", "relative", "/tmp/../etc/x"):
            with self.assertRaises(RequestError) as cm:
                s.put_file(path, b"x")
            self.assertEqual(cm.exception.type, "BadPath", path)
        with self.assertRaises(RequestError) as cm:
            s.get_file("/tmp/missing")
        self.assertEqual(cm.exception.type, "FileNotFoundError")
        with self.assertRaises(RequestError) as cm:
            s.put_file("/tmp/big", b"x" * ((8 << 20) + 1024))
        self.assertEqual(cm.exception.type, "FileTooLarge")
        self.assertTrue(s.run("pass").ok)

    def test_output_cap_keeps_head_and_tail(self):
        s = self.session(max_output_chars=1000)
        r = s.run("print('HEAD' + 'x' * 5000 + 'TAIL')")
        self.assertIs(r.stdout_truncated, True)
        self.assertEqual(r.stdout_bytes, 5009)
        self.assertIn("bytes cut by rljail", r.stdout)
        self.assertTrue(r.stdout.startswith("HEAD"))
        self.assertTrue(r.stdout.rstrip().endswith("TAIL"))
        self.assertLess(len(r.stdout), 1200)

    # ------------------------------------------------------------ timeouts and loss

    def test_cell_timeout_keeps_state(self):
        s = self.session(cell_timeout=self.tick)
        s.run("x = 7")
        start = time.monotonic()
        with self.assertRaises(CellTimeout) as cm:
            s.run("while True:\n    pass")
        self.assertLess(time.monotonic() - start, 10)
        self.assertTrue(cm.exception.result.timed_out)
        self.assertEqual(s.run("print(x)").stdout, "7\n")

    def test_cell_timeout_as_result_field(self):
        s = self.session(cell_timeout=self.tick, errors="result")
        r = s.run("import time\nwhile True:\n    time.sleep(0.01)")
        self.assertTrue(r.timed_out)
        self.assertEqual(r.error.type, "CellTimeout")
        self.assertTrue(s.run("pass").ok)

    def test_cell_ignoring_interrupts_loses_session(self):
        s = self.session(cell_timeout=self.tick, cell_grace=self.tick)
        start = time.monotonic()
        code = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "while True:\n    time.sleep(0.01)")
        with self.assertRaises(SessionLost) as cm:
            s.run(code)
        self.assertEqual(cm.exception.reason, "cell_timeout")
        self.assertLess(time.monotonic() - start, 15)
        with self.assertRaises(SessionLost):
            s.run("pass")
        self.assertFalse(s.alive)

    def test_lost_session_as_result_field(self):
        s = self.session(cell_timeout=self.tick, cell_grace=self.tick, errors="result")
        r = s.run("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                  "while True:\n    time.sleep(0.01)")
        self.assertTrue(r.lost)
        self.assertEqual(r.lost_reason, "cell_timeout")
        self.assertTrue(s.run("pass").lost)

    def test_crashed_worker_loses_session(self):
        s = self.session()
        with self.assertRaises(SessionLost) as cm:
            s.run("import os\nos._exit(3)")
        self.assertEqual(cm.exception.reason, "worker_exited")
        self.assertFalse(s.alive)
        with self.assertRaises(SessionLost):
            s.get("x")
        s.close()
        self.assertEqual(s.close_info.get("lost"), "worker_exited")

    def test_system_exit_ends_the_cell_not_the_session(self):
        s = self.session()
        s.run("x = 1")
        self.assertEqual(s.run("raise SystemExit(3)").error.type, "SystemExit")
        self.assertEqual(s.run("print(x)").stdout, "1\n")

    def test_cell_limit(self):
        s = self.session(max_cells=2)
        s.run("x = 1")
        s.run("pass")
        with self.assertRaises(RequestError) as cm:
            s.run("pass")
        self.assertEqual(cm.exception.type, "CellLimit")
        self.assertEqual(s.get("x"), 1)  # other requests work

    def test_interrupt_running_cell(self):
        s = self.session()
        s.run("x = 5")
        self.assertFalse(s.interrupt())  # no cell runs
        timer = threading.Timer(self.tick / 2, s.interrupt)
        timer.start()
        self.addCleanup(timer.cancel)
        r = s.run("import time\nwhile True:\n    time.sleep(0.01)")
        self.assertEqual(r.error.type, "KeyboardInterrupt")
        self.assertEqual(s.run("print(x)").stdout, "5\n")

    def test_close_is_idempotent_and_final(self):
        s = self.session()
        s.run("pass")
        self.assertEqual(s.close(), 0)
        s.close()
        self.assertFalse(s.alive)
        self.assertEqual(s.close_info["cells"], 1)
        self.assertNotIn("lost", s.close_info)
        with self.assertRaises(rljail.SessionError):
            s.run("pass")

    def test_context_manager(self):
        with Session(self.binary(), **self.options) as s:
            self.assertEqual(s.run("print(1)").stdout, "1\n")
        self.assertFalse(s.alive)

    def test_queued_and_malformed_lines_on_the_wire(self):
        # What the package never sends, on rljail's own stdin: the replies are as the
        # protocol says, and the session goes on.
        binary = self.binary()
        argv = (list(binary) if isinstance(binary, list) else [binary]) + ["session"]
        p = subprocess.Popen(argv, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.addCleanup(p.kill)
        lines = [b'not json', b'{"op":"hello"}', b'{"id":true,"op":"hello"}', b'{"id":1,"op":"nope"}',
                 (b'{"id":2,"op":"exec","code":"import time; time.sleep(%g)"}' % self.tick),
                 b'{"id":3,"op":"get","name":"x"}']
        out, _ = p.communicate(b"\n".join(lines) + b"\n", timeout=60)
        replies = [json.loads(l) for l in out.splitlines()]
        types = [(r["id"], r["error"]["type"] if not r["ok"] else None) for r in replies]
        # An id that is neither a string nor a number is repeated as it came.
        self.assertEqual(types[:4], [(None, "BadRequest"), (None, "BadRequest"), (True, "BadRequest"),
                                     (1, "UnknownOp")])
        # The get waits behind the exec (protocol 2 queues requests for the worker), and EOF
        # ends the session once the queue is answered.
        self.assertEqual(types[4:], [(2, None), (3, "KeyError")])
        self.assertEqual(p.returncode, 0)

    def test_idle_timeout_ends_the_session(self):
        s = self.session(idle_timeout="%dms" % (self.tick * 300))
        time.sleep(self.tick)
        with self.assertRaises(SessionLost) as cm:
            s.run("pass")
        self.assertEqual(cm.exception.reason, "idle_timeout")



class CallContract(_Contract):
    """The calls from the jail (the bridge: llm_query, rlm_query, tools, budgets), as
    events to the runner and call_result back.  The real binary has them once the
    bridge is wired into the session (issue 20)."""

    # ------------------------------------------------------------ the bridge (calls)

    def test_llm_query_reaches_host(self):
        llm = RecordingLLM()
        s = self.session(llm=llm)
        r = s.run("a = llm_query('summarize: ' + 'x' * 10)\n"
                  "b = llm_query('with a model', model='small')\nprint(a)")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "answer to summarize: xxxxxxxxxx\n")
        self.assertEqual(llm.prompts, ["summarize: xxxxxxxxxx", "with a model"])
        self.assertEqual(llm.models, [None, "small"])
        self.assertEqual(r.calls.get("llm_calls"), 2)

    def test_llm_query_batched_keeps_order(self):
        llm = RecordingLLM(lambda p: p.upper())
        s = self.session(llm=llm)
        r = s.run("print(llm_query_batched(['a', 'b', 'c', 'd']))")
        self.assertEqual(r.stdout, "['A', 'B', 'C', 'D']\n")
        self.assertEqual(sorted(llm.prompts), ["a", "b", "c", "d"])

    def test_rlm_query_falls_back_to_llm(self):
        llm = RecordingLLM()
        s = self.session(llm=llm)
        self.assertEqual(s.run("print(rlm_query('deep'))").stdout, "answer to deep\n")
        child = RecordingLLM(lambda p: "child: " + p)
        s2 = self.session(llm=llm, rlm=child)
        self.assertEqual(s2.run("print(rlm_query_batched(['p', 'q']))").stdout,
                         "['child: p', 'child: q']\n")

    def test_host_tools(self):
        seen = []

        def search(query, limit):
            seen.append((query, limit))
            return [{"hit": query, "n": i} for i in range(limit)]

        s = self.session(tools={"search": search, "add": (lambda **kw: kw["a"] + kw["b"], ["a", "b"])})
        r = s.run("print(len(search('needle', limit=3)), search('x', 1)[0]['hit'], add(a=2, b=3))")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "3 x 5\n")
        self.assertEqual(seen, [("needle", 3), ("x", 1)])

    def test_call_too_deep_to_decode_fails_that_call_at_once(self):
        # A cell's call whose arguments nest past the host's recursion limit: the call
        # fails in the cell (CallFailed) at once, not at its timeout, and the session
        # answers on.
        seen = []
        s = self.session(tools={"echo": lambda value: seen.append(value) or "echoed"},
                         cell_timeout=3 * self.tick, reply_margin=2 * self.tick)
        start = time.monotonic()
        r = s.run(DEEP_VALUE + "try:\n    echo(deep)\nexcept Exception as e:\n"
                  "    print(type(e).__name__, e)")
        self.assertTrue(r.ok, r.error)
        self.assertTrue(r.stdout.startswith("CallFailed "), r.stdout)
        self.assertIn("cannot decode", r.stdout)
        self.assertIn("RecursionError", r.stdout)
        self.assertLess(time.monotonic() - start, 2 * self.tick)
        self.assertEqual(s.run("print(echo(1))").stdout, "echoed\n")
        self.assertEqual(seen, [1])

    def test_handler_that_raises(self):
        def bad(prompt, model=None):
            raise ValueError("provider said no")

        s = self.session(llm=bad)
        r = s.run("try:\n    llm_query('p')\nexcept Exception as e:\n    print('caught', e)")
        self.assertTrue(r.ok, r.error)
        self.assertIn("provider said no", r.stdout)
        r = s.run("llm_query('p')")
        self.assertEqual(r.error.type, "CallFailed")
        self.assertIn("provider said no", r.error.message)
        self.assertTrue(s.run("print('alive')").ok)

    def test_slow_handler_while_cell_times_out(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def slow(prompt, model=None):
            release.wait(30)
            return "late"

        s = self.session(llm=slow, cell_timeout=self.tick)
        s.run("x = 3")
        with self.assertRaises(CellTimeout):
            s.run("llm_query('slow')")
        # The session is not wedged by the handler still running on the host.
        self.assertEqual(s.run("print(x)").stdout, "3\n")
        release.set()
        time.sleep(0.2)  # the late answer to a call that is gone is refused, and ignored
        self.assertEqual(s.run("print(x * 2)").stdout, "6\n")

    def test_non_json_handler_result_is_an_error_in_the_cell(self):
        s = self.session(llm=lambda p, m=None: object())
        r = s.run("llm_query('p')")
        self.assertIsNotNone(r.error)
        self.assertTrue(s.run("pass").ok)

    def test_llm_budget(self):
        llm = RecordingLLM()
        s = self.session(llm=llm, max_llm_calls=3)
        r = s.run("n = 0\nfor i in range(5):\n    try:\n        llm_query(str(i)); n += 1\n"
                  "    except LLMBudgetExceeded:\n        pass\nprint(n)")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "3\n")
        self.assertEqual(len(llm.prompts), 3)
        self.assertEqual((r.calls["llm_calls"], r.calls["refused"]), (3, 2))
        self.assertEqual(r.calls["prompt_chars"], 3)
        r = s.run("llm_query_batched(['a', 'b'])")
        self.assertEqual(r.error.type, "LLMBudgetExceeded")

    def test_llm_budget_counts_each_prompt_of_a_batch(self):
        llm = RecordingLLM()
        s = self.session(llm=llm, max_llm_calls=4)
        self.assertTrue(s.run("llm_query_batched(['a', 'b', 'c'])").ok)
        self.assertEqual(s.run("llm_query_batched(['d', 'e'])").error.type, "LLMBudgetExceeded")
        self.assertTrue(s.run("llm_query('d')").ok)
        self.assertEqual(len(llm.prompts), 4)

    def test_llm_budget_raced_from_16_threads(self):
        llm = RecordingLLM()
        s = self.session(llm=llm, max_llm_calls=10)
        code = ("import threading\nok = []\nrefused = []\n"
                "def worker(i):\n"
                "    for j in range(4):\n"
                "        try:\n            llm_query('%d-%d' % (i, j)); ok.append(1)\n"
                "        except LLMBudgetExceeded:\n            refused.append(1)\n"
                "ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]\n"
                "[t.start() for t in ts]\n[t.join() for t in ts]\n"
                "print(len(ok), len(refused))")
        r = s.run(code)
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.stdout, "10 54\n")
        self.assertEqual(len(llm.prompts), 10)  # counted on the host, not by the cell

    def test_call_from_a_leftover_thread_is_refused(self):
        llm = RecordingLLM()
        s = self.session(llm=llm)
        s.run("import threading, time\nseen = []\ndef late():\n    time.sleep(%g)\n    try:\n"
              "        llm_query('late')\n    except BadCall as e:\n        seen.append('BadCall')\n"
              "threading.Thread(target=late).start()" % (self.tick / 2))
        time.sleep(self.tick)
        self.assertEqual(s.run("print(seen)").stdout, "['BadCall']\n")
        self.assertEqual(llm.prompts, [])

    def test_call_in_flight_when_its_cell_ends(self):
        # Each cell leaves a thread whose call is still waiting (or not yet sent) as
        # the cell ends: the cell's calls end with it, a late one is refused, and the
        # next cell is answered at once all the same, the channel never out of step.
        def slow(prompt, model=None):
            time.sleep(self.tick / 4)
            return "late " + prompt

        s = self.session(llm=slow)
        s.run("import threading\nseen = []\ndef bg(i):\n    try:\n        seen.append(llm_query(str(i)))\n"
              "    except Exception as e:\n        seen.append(type(e).__name__)\n")
        start = time.monotonic()
        for i in range(10):
            r = s.run("threading.Thread(target=bg, args=(%d,)).start()\nprint(%d)" % (i, i))
            self.assertTrue(r.ok, r.error)
            self.assertEqual(r.stdout, "%d\n" % i)
        self.assertLess(time.monotonic() - start, 5 * self.tick)
        time.sleep(self.tick / 2)
        r = s.run("print(len(seen))\nprint(' '.join(sorted(set(seen))))")
        count, kinds = r.stdout.splitlines()
        self.assertEqual(count, "10")
        self.assertLessEqual(set(kinds.split()), {"CallTimeout", "CallFailed", "BadCall"}, kinds)

    def test_bridge_in_hello(self):
        s = self.session(llm=RecordingLLM(), tools={"search": lambda query, k: []},
                         max_llm_calls=7, call_timeout=5)
        self.assertEqual(s.tools, [{"name": "search", "params": ["query", "k"]}])
        self.assertEqual((s.limits["max_llm_calls"], s.limits["call_timeout_ms"], s.limits["llm"]),
                         (7, 5000, "client"))
        r = s.run("print(issubclass(CallTimeout, RuntimeError), ToolBudgetExceeded.__name__)")
        self.assertEqual(r.stdout, "True ToolBudgetExceeded\n")

    def test_prompt_size_budget(self):
        llm = RecordingLLM()
        s = self.session(llm=llm, max_llm_prompt_chars=100)
        self.assertEqual(s.run("llm_query('x' * 101)").error.type, "LLMBudgetExceeded")
        self.assertTrue(s.run("llm_query('x' * 100)").ok)
        self.assertEqual(len(llm.prompts), 1)

    def test_tool_budget(self):
        s = self.session(tools={"ping": lambda: "pong"}, max_tool_calls=2)
        r = s.run("print(ping(), ping())")
        self.assertEqual(r.stdout, "pong pong\n")
        self.assertEqual(s.run("ping()").error.type, "ToolBudgetExceeded")

    # ------------------------------------------------------------ many sessions

    def test_eight_concurrent_sessions_from_threads(self):
        results, errors = {}, []
        start = threading.Barrier(8)

        def trajectory(i):
            try:
                with Session(self.binary(), llm=lambda p, m=None: "n%d:%s" % (i, p),
                             **self.options) as s:
                    start.wait(30)
                    s.run("import os\nmine = %d\nos.chdir('/tmp')\n"
                          "open('who', 'w').write(str(mine))" % i)
                    outs = []
                    for step in range(5):
                        r = s.run("print(mine, open('who').read(), llm_query(str(%d)))" % step)
                        outs.append(r.stdout)
                    results[i] = outs
            except Exception as e:  # reported below, with the trajectory's number
                errors.append((i, e))

        cwd = os.getcwd()
        threads = [threading.Thread(target=trajectory, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        for i in range(8):
            self.assertEqual(results[i], ["%d %d n%d:%d\n" % (i, i, i, step) for step in range(5)])
        self.assertEqual(os.getcwd(), cwd)  # the runner's own cwd is never touched
