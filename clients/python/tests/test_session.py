"""rljail.Session against the TEST-ONLY fake session server (unit tests).

The same cases run against the real binary in test_real_binary.py; the ones here that
only the package decides (flags, binary discovery, client-side checks) are below."""

import os
import sys
import time
import unittest
from unittest import mock

from support import FAKE

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


if __name__ == "__main__":
    unittest.main()
