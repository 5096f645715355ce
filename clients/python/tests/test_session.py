"""rljail.Session against the TEST-ONLY fake session server (unit tests).

The same cases run against the real binary in test_real_binary.py; the ones here that
only the package decides (flags, binary discovery, client-side checks) are below."""

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

from support import FAKE, PACKAGE_ROOT

import rljail
from rljail.session import build_flags, find_binary
from session_contract import CallContract, SessionContract


class FakeSessionTest(SessionContract, CallContract, unittest.TestCase):
    tick = 0.3
    def binary(self):
        return FAKE


class FlagsTest(unittest.TestCase):
    def test_keywords_become_flags(self):
        argv = build_flags({"memory": "1g", "cell_timeout": 30, "timeout": 1.5, "max_cells": 100,
                            "strict_limits": True, "quiet": False, "tool": ["a:x,y", "b:"],
                            "tmp_size": 1 << 20, "audit_log": "/var/log/a.jsonl", "cpus": None})
        self.assertEqual(argv, ["--memory", "1g", "--cell-timeout", "30s", "--timeout", "1500ms",
                                "--max-cells", "100", "--strict-limits", "--tool", "a:x,y",
                                "--tool", "b:", "--tmp-size", "1048576b",
                                "--audit-log", "/var/log/a.jsonl"])

    def test_session_argv(self):
        s = rljail.Session(FAKE, memory="256m", volumes=["/data:/data", ("/src", "/dst", "rw")],
                           env={"LANG": "C.UTF-8"}, tools={"f": lambda a: a},
                           llm=lambda p, m=None: p, max_llm_calls=7)
        self.addCleanup(s.close)
        argv = s.argv[len(FAKE):]
        self.assertEqual(argv[0], "session")
        for part in (["--memory", "256m"], ["--max-llm-calls", "7"], ["--llm", "client"],
                     ["--tool", "f:a"], ["-v", "/data:/data"], ["-v", "/src:/dst:rw"],
                     ["-e", "LANG=C.UTF-8"]):
            self.assertTrue(any(argv[i:i + len(part)] == part for i in range(len(argv))), (part, argv))

    def test_no_workspace_unless_asked(self):
        # rljail mounts its current directory (this process's) unless told not to.
        s = rljail.Session(FAKE)
        self.addCleanup(s.close)
        argv = s.argv[len(FAKE):]
        self.assertIn("--no-workspace", argv)
        self.assertTrue(any(argv[i:i + 2] == ["--workdir", "/tmp"] for i in range(len(argv))), argv)
        self.assertFalse(any(a.endswith(":/workspace:ro") for a in argv), argv)
        d = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, d)
        s = rljail.Session(FAKE, workspace=d, workdir="/workspace")
        self.addCleanup(s.close)
        argv = s.argv[len(FAKE):]
        self.assertIn("--no-workspace", argv)
        self.assertIn("%s:/workspace:ro" % d, argv)
        self.assertEqual(argv.count("--workdir"), 1)
        self.assertTrue(any(argv[i:i + 2] == ["--workdir", "/workspace"] for i in range(len(argv))), argv)
        with self.assertRaises(ValueError):
            rljail.Session(FAKE, workspace="/a:b")

    def test_openai_mode_is_only_flags(self):
        s = rljail.Session(FAKE, llm="openai", llm_endpoint="http://127.0.0.1:9/v1",
                           llm_model="m", llm_key_env="MY_KEY")
        self.addCleanup(s.close)
        argv = " ".join(s.argv)
        self.assertIn("--llm openai", argv)
        self.assertIn("--llm-endpoint http://127.0.0.1:9/v1", argv)
        self.assertIn("--llm-key-env MY_KEY", argv)

    def test_bad_tool_names(self):
        with self.assertRaises(ValueError):
            rljail.Session(FAKE, tools={"not an identifier": print})
        with self.assertRaises(ValueError):
            rljail.Session(FAKE, tools={"llm_query": print})
        with self.assertRaises(ValueError):
            rljail.Session(FAKE, errors="ignore")


class BinaryTest(unittest.TestCase):
    def test_explicit_then_env_then_path(self):
        self.assertEqual(find_binary("/x/rljail"), ["/x/rljail"])
        self.assertEqual(find_binary(["python3", "w.py"]), ["python3", "w.py"])
        with mock.patch.dict(os.environ, {"RLJAIL_BIN": "/from/env"}):
            self.assertEqual(find_binary(), ["/from/env"])
        with mock.patch.dict(os.environ, {"PATH": "/nonexistent", "RLJAIL_BIN": ""}):
            with self.assertRaises(rljail.SessionError):
                find_binary()

    def test_not_a_session_server(self):
        # A program that exits at once: the hello never comes, the session is lost.
        with self.assertRaises(rljail.SessionLost) as cm:
            rljail.Session([sys.executable, "-c", "import sys; sys.exit(125)"])
        self.assertEqual(cm.exception.reason, "exited")

    def test_exit_status_beats_the_broken_pipe(self):
        # rljail closes its stdin only as it exits (a bad flag: 125 and one line): a
        # request whose write finds the pipe closed before the exit is seen must still
        # give the status and rljail's line, not the write's error. The stand-in
        # answers hello, closes its stdin, says its line and exits a moment later.
        code = ("import json, os, sys, time\n"
                "rid = json.loads(sys.stdin.readline())['id']\n"
                "print(json.dumps({'id': rid, 'ok': True, 'protocol': %d}), flush=True)\n"
                "os.close(0)\n"
                "sys.stderr.write('rljail: the session ended: bad\\n'); sys.stderr.flush()\n"
                "time.sleep(0.5)\nsys.exit(125)" % rljail.PROTOCOL_VERSION)
        s = rljail.Session([sys.executable, "-c", code])
        time.sleep(0.2)  # its stdin is closed by now; it has not exited
        with self.assertRaises(rljail.SessionLost) as cm:
            s.run("1")
        self.assertEqual(cm.exception.reason, "exited")
        self.assertIn("status 125", str(cm.exception))
        self.assertIn("the session ended: bad", str(cm.exception))
        s.close()

    def test_wrong_protocol_version(self):
        code = ("import sys, json\nline = sys.stdin.readline()\n"
                "print(json.dumps({'id': json.loads(line)['id'], 'ok': True, 'protocol': 99}), flush=True)\n"
                "sys.stdin.read()")
        with self.assertRaises(rljail.ProtocolError):
            rljail.Session([sys.executable, "-c", code])


# A stand-in for rljail that answers hello, then each later request with the next entry
# of its script (argv[1], JSON): lines to write, "{id}" standing for the request's id
# (a lone surrogate for a byte that is not UTF-8), or "<read>" for a reply whose stdout
# is the next line the client wrote.  close, and a request past the script, get ok.
_STAND_IN = r"""
import json, sys
script = json.loads(sys.argv[1])
out, inp = sys.stdout.buffer, sys.stdin.buffer
def write(text):
    out.write(text.encode("utf-8", "surrogateescape") + b"\n")
    out.flush()
step = 0
while True:
    raw = inp.readline()
    if not raw:
        break
    req = json.loads(raw)
    if req.get("op") == "hello":
        write(json.dumps({"id": req["id"], "ok": True, "protocol": 2}))
    elif req.get("op") == "call_result":
        continue
    elif req.get("op") == "close" or step >= len(script):
        write(json.dumps({"id": req["id"], "ok": True}))
    else:
        for line in script[step]:
            if line == "<read>":
                write(json.dumps({"id": req["id"], "ok": True, "stdout": inp.readline().decode()}))
            else:
                write(line.replace("{id}", json.dumps(req["id"])))
        step += 1
"""

_DEEP = "[" * 5000 + "]" * 5000


class UndecodableLinesTest(unittest.TestCase):
    """Lines from rljail that cannot be decoded: each fails its own request, or loses
    the session at once; none stops the reader (every later request would then wait
    out its deadline: 61 s with the defaults, 5 s here)."""

    def session(self, script, **kwargs):
        s = rljail.Session([sys.executable, "-c", _STAND_IN, json.dumps(script)],
                           cell_timeout=1, cell_grace=1, reply_margin=3, **kwargs)
        self.addCleanup(s.close)
        return s

    def test_a_reply_that_cannot_be_decoded_fails_that_request_only(self):
        cases = [
            ('{"id":{id},"ok":true,"json":true,"value":%s}' % _DEEP, RecursionError),
            ('{"id":{id},"ok":true,"json":true,"value":"\udcff"}', UnicodeDecodeError),
            ('{"id":{id},"ok":true,"json":true,"value":[1,2}', ValueError),
            ('{"id":{id},"ok":"yes"}', type(None)),
            ('{"id":{id},"ok":false,"error":"not an object"}', type(None)),
        ]
        s = self.session([[line] for line, _ in cases]
                         + [['{"id":{id},"ok":true,"stdout":"fine\\n","error":null}']])
        for line, cause in cases:
            with self.subTest(line=line[:60]):
                start = time.monotonic()
                with self.assertRaises(rljail.UndecodableReply) as cm:
                    s.get("x")
                self.assertLess(time.monotonic() - start, 2)
                self.assertIsInstance(cm.exception, rljail.ProtocolError)
                self.assertIsInstance(cm.exception.__cause__, cause)
                self.assertEqual(cm.exception.op, "get")
        self.assertEqual(s.run("x").stdout, "fine\n")
        self.assertTrue(s.alive)

    def test_memory_error_decoding_a_reply_fails_that_request(self):
        real_loads = json.loads

        def loads(text, *args, **kwargs):
            if "HUGE" in text:
                raise MemoryError()
            return real_loads(text, *args, **kwargs)

        s = self.session([['{"id":{id},"ok":true,"json":true,"value":"HUGE"}'],
                          ['{"id":{id},"ok":true,"json":true,"value":"small"}']])
        with mock.patch("rljail.session.json.loads", loads):
            with self.assertRaises(rljail.UndecodableReply) as cm:
                s.get("x")
            self.assertIsInstance(cm.exception.__cause__, MemoryError)
            self.assertEqual(s.get("x"), "small")

    def test_a_line_that_names_no_request_loses_the_session_at_once(self):
        for line in ("[1, 2, 3]", "not JSON", '{"ok":true}', '{"id":[{id}],"ok":true}',
                     '{"id":{id}.0,"ok":true}', '{"id":true,"ok":true}', '{"event":7}',
                     '{"event":"call","call":"seven","name":"f","args":{}}',
                     '{"event":"call","name":"f","args":{"x":%s}}' % _DEEP):
            with self.subTest(line=line[:60]):
                s = self.session([[line]])
                start = time.monotonic()
                with self.assertRaises(rljail.SessionLost) as cm:
                    s.run("x")
                self.assertLess(time.monotonic() - start, 2)
                self.assertEqual(cm.exception.reason, "protocol")
                self.assertFalse(s.alive)

    def test_a_call_event_that_cannot_be_decoded_is_answered_with_an_error(self):
        # The cell waits for its call: it gets an error back now, not at its timeout,
        # and the handler never sees arguments that are not the call's.
        seen = []
        calls = [
            ('{"event":"call","call":7,"cell":1,"name":"f","args":{"x":%s}}' % _DEEP, "RecursionError"),
            ('{"event":"call","call":8,"cell":1,"name":"f","args":[1]}', "args are not an object"),
            ('{"event":"call","call":9,"cell":1,"name":["f"],"args":{}}', "name is not a string"),
            ('{"event":"call","call":10,"cell":1,"name":"f","args":{"x":"\udcff"}}', "UnicodeDecodeError"),
        ]
        s = self.session([[line, "<read>"] for line, _ in calls],
                         tools={"f": (lambda **kw: seen.append(kw) or "called", ["x"])})
        for n, (line, why) in enumerate(calls, 7):
            with self.subTest(line=line[:60]):
                start = time.monotonic()
                answer = json.loads(s.run("x").stdout)
                self.assertLess(time.monotonic() - start, 2)
                self.assertEqual(answer["op"], "call_result")
                self.assertEqual(answer["call"], n)
                self.assertNotIn("value", answer)
                self.assertIn("cannot decode", answer["error"])
                self.assertIn(why, answer["error"])
        self.assertEqual(seen, [])
        self.assertTrue(s.alive)


class HostFilesTest(unittest.TestCase):
    """What the package makes on the host (the adapters' input directories, DSPy's
    writable copies) goes with the session, however it ends.  Counted in a temporary
    directory of the test's own."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="host-files-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.outside = tempfile.mkdtemp(prefix="host-files-outside-")
        self.addCleanup(shutil.rmtree, self.outside, True)
        patcher = mock.patch.object(tempfile, "tempdir", self.tmp)
        patcher.start()
        self.addCleanup(patcher.stop)

    def left(self):
        return sorted(os.listdir(self.tmp))

    def test_session_removes_its_temp_dirs_when_closed(self):
        for end in ("close", "with", "failed start", "bad argument"):
            with self.subTest(end=end):
                d = tempfile.mkdtemp()
                if end == "close":
                    rljail.Session(FAKE, temp_dirs=[d]).close()
                elif end == "with":
                    with rljail.Session(FAKE, temp_dirs=[d]) as s:
                        s.run("pass")
                elif end == "failed start":
                    with self.assertRaises(rljail.SessionLost):
                        rljail.Session([sys.executable, "-c", "import sys; sys.exit(125)"], temp_dirs=[d])
                else:
                    with self.assertRaises(ValueError):
                        rljail.Session(FAKE, errors="ignore", temp_dirs=[d])
                self.assertEqual(self.left(), [])

    def test_a_session_dropped_unclosed_is_stopped_and_leaves_nothing(self):
        d = tempfile.mkdtemp()
        s = rljail.Session(FAKE, temp_dirs=[d], tools={"f": lambda: 1})
        s.run("f()")
        proc = s._proc
        del s
        # The last reference may still be the call pool's thread finishing f's
        # answer: the Session is collected, and rljail stopped, once it lets go.
        deadline = time.monotonic() + 10
        while True:
            gc.collect()
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertIsNotNone(proc.poll(), "rljail still runs 10 s after its Session was dropped")
        self.assertEqual(self.left(), [])

    def test_adapters_dropped_unclosed_leave_nothing(self):
        from rljail.adapters.dspy import RljailInterpreter
        from rljail.adapters.rlm import RljailREPL
        from rljail.adapters.smolagents import RljailExecutor
        granted = os.path.join(self.outside, "notes.txt")
        with open(granted, "w") as f:
            f.write("notes")
        interp = RljailInterpreter(binary=FAKE, tools={"f": lambda: 1}, enable_write_paths=[granted])
        interp.execute("print(f())", {"big": "x" * (2 << 20)})
        repl = RljailREPL(rljail={"binary": FAKE})
        repl.execute_code("x = 1")
        executor = RljailExecutor(binary=FAKE)
        executor("x = 1")
        self.assertGreaterEqual(len(self.left()), 4)  # two inputs directories, DSPy's copies, ...
        procs = [obj.session._proc for obj in (interp, repl, executor)]
        del interp, repl, executor
        gc.collect()
        self.assertEqual([p.poll() is None for p in procs], [False] * 3)
        self.assertEqual(self.left(), [])

    def test_lost_dspy_interpreter_leaves_nothing(self):
        from rljail.adapters.dspy import CodeInterpreterError, RljailInterpreter
        interp = RljailInterpreter(binary=FAKE)
        with self.assertRaises(CodeInterpreterError):
            interp.execute("import os\nos._exit(3)")
        self.assertEqual(self.left(), [])

    def test_nothing_left_at_interpreter_exit(self):
        # A runner that exits with its interpreters, REPLs and sessions open.
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import rljail, tempfile
            from rljail.adapters.dspy import RljailInterpreter
            from rljail.adapters.rlm import RljailREPL
            from rljail.adapters.smolagents import RljailExecutor
            fake = %r
            keep = [RljailInterpreter(binary=fake), RljailREPL(rljail={"binary": fake}),
                    RljailExecutor(binary=fake), rljail.Session(fake, temp_dirs=[tempfile.mkdtemp()])]
            keep[0].execute("x = 1")
            keep[2]("x = 1")
            print(len(keep), flush=True)
        """) % (PACKAGE_ROOT, FAKE[:2] + ["--fake-tmp", self.outside])
        env = dict(os.environ, TMPDIR=self.tmp)
        out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assertEqual(out.stdout, b"4\n")
        self.assertEqual(self.left(), [])


    def test_adapter_closed_at_exit_while_reader_waits(self):
        # An adapter's __del__ runs at the interpreter's last collection, after the
        # daemon reader threads were stopped.  Here the reader is still blocked in a
        # read (holding its pipe's lock), because a child of "rljail" keeps the
        # stdout pipe open after rljail is stopped: closing that pipe then was a
        # fatal error (CI saw it with the real binary, as a race).
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import rljail
            from rljail.adapters.rlm import RljailREPL
            fake = ["sh", "-c", 'sleep 2 & exec "$0" "$@"'] + %r
            keep = [RljailREPL(rljail={"binary": fake}), rljail.Session(fake)]
            print(len(keep), flush=True)
        """) % (PACKAGE_ROOT, FAKE[:2] + ["--fake-tmp", self.outside])
        env = dict(os.environ, TMPDIR=self.tmp)
        out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=120)
        self.assertEqual((out.returncode, out.stdout), (0, b"2\n"), out.stderr.decode())
        self.assertEqual(self.left(), [])


if __name__ == "__main__":
    unittest.main()
