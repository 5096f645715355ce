"""Shared by the tests: the package on sys.path, and the argv of the TEST-ONLY fake server."""

import atexit
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)

# The fake's scratch directories live below one directory that this test process removes
# at exit (a fake that a test made crash cannot remove its own).
_FAKE_TMP = tempfile.mkdtemp(prefix="fake-rljail-tests-")
atexit.register(shutil.rmtree, _FAKE_TMP, True)

#: Pass as Session(binary=FAKE): the fake of `rljail session` (tests/fake_session_server.py).
FAKE = [sys.executable, os.path.join(HERE, "fake_session_server.py"), "--fake-tmp", _FAKE_TMP]


class RecordingLLM:
    """A fake LLM that records every prompt (from any thread) and answers at once."""

    def __init__(self, answer=lambda prompt: "answer to " + str(prompt)):
        import threading
        self.prompts = []
        self.models = []
        self._lock = threading.Lock()
        self._answer = answer

    def __call__(self, prompt, model=None):
        with self._lock:
            self.prompts.append(prompt)
            self.models.append(model)
        return self._answer(prompt)
