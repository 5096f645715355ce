"""A Recursive Language Model's REPL in rljail: one persistent jailed Python per trajectory,
whose code calls llm_query() while the model's API key stays in this (host) process.

    python3 examples/rlm_repl.py        # three cells against a stub model

Everything a cell runs is jailed: no network, no host files but the ones granted (here the
REPL program, the llm_query socket and an optional context directory, read-only), no
secrets, the limits and the kill timer of rljail. The socket is the only way out, and it
answers llm_query and nothing else. Replace answer() with a call to your model.

The rule this meets: sandbox model code, Agent Wranglers application security playbook
(https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code).
"""
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
RLJAIL = os.environ.get("RLJAIL_BIN") or os.path.join(HERE, "..", "bin", "rljail")


def answer(prompt):
    """The model. Replace with a call to your provider; its key stays in this process."""
    return "stub answer to: " + prompt[:60]


# The jail is hostile: it may open many connections, send endless lines or garbage.
MAX_CONNECTIONS = 8
MAX_REQUEST = 1 << 20


class _Bridge(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path, handler):
        super().__init__(path, handler)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def handle_error(self, request, client_address):
        pass  # a bad request from the jail is not the runner's error to print


class _Ask(socketserver.StreamRequestHandler):
    def handle(self):
        if not self.server.slots.acquire(blocking=False):
            return  # too many connections at once: this one is closed
        try:
            while True:
                line = self.rfile.readline(MAX_REQUEST + 1)
                if not line:
                    return
                if len(line) > MAX_REQUEST or not line.endswith(b"\n"):
                    self._reply({"error": "request too long"})
                    return
                try:
                    prompt = str(json.loads(line).get("prompt", ""))
                except (ValueError, AttributeError):
                    self._reply({"error": "bad request"})
                    continue
                self._reply({"answer": answer(prompt)})
        finally:
            self.server.slots.release()

    def _reply(self, obj):
        self.wfile.write((json.dumps(obj) + "\n").encode())
        self.wfile.flush()


class JailedREPL:
    """One jailed Python that keeps its state from cell to cell."""

    def __init__(self, context_dir=None, timeout="600s"):
        # 0700: only this user reaches the socket on the host; the jail gets the socket
        # itself, bound at /run/llm.sock (as root the jail's user is a host uid of its own, hence 0666).
        self.dir = tempfile.mkdtemp(prefix="rlm-")
        sock = os.path.join(self.dir, "llm.sock")
        self.bridge = _Bridge(sock, _Ask)
        os.chmod(sock, 0o666)
        threading.Thread(target=self.bridge.serve_forever, daemon=True).start()
        # --output-limit counts the whole session; the REPL cuts each cell's output.
        argv = [RLJAIL, "-q", "--timeout", timeout, "--output-limit", "1g", "--no-workspace",
                "-v", sock + ":/run/llm.sock",
                "-v", os.path.join(HERE, "rlm_jail_repl.py") + ":/opt/rlm/repl.py"]
        if context_dir:
            argv += ["-v", os.path.abspath(context_dir) + ":/context"]
        argv += ["--", "python3", "-u", "/opt/rlm/repl.py"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, code):
        """Runs one cell; returns {"ok", "output", "error"}."""
        self.proc.stdin.write(json.dumps({"code": code}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the jailed REPL ended (exit status %s)" % self.proc.wait())
        return json.loads(line)

    def close(self, wait=5):
        """Ends the REPL (its stdin closes; a cell that will not end is stopped) and
        returns rljail's exit status."""
        try:
            try:
                self.proc.stdin.close()
            except OSError:
                pass  # the REPL is gone already
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.terminate()  # rljail passes SIGTERM on, then kills at --stop-grace
                try:
                    return self.proc.wait(wait + 10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    return self.proc.wait()
        finally:
            self.bridge.shutdown()
            self.bridge.server_close()
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    repl = JailedREPL()
    try:
        for code in ("x = 21",
                     "import os; os.write(1, b'to descriptor 1: stderr, not a reply\\n')",
                     "print(x * 2)",
                     "print(llm_query('summarize: ' + str(x)))",
                     "import os; print(sorted(os.environ.items()))",
                     "open('/etc/hostname').read(); import socket; socket.create_connection(('1.1.1.1', 443), timeout=2)"):
            r = repl.run(code)
            print(">>>", code)
            print(r["output"] if r["ok"] else r["error"].strip().splitlines()[-1])
    finally:
        status = repl.close()
    print("rljail exit status", status)
    return status


if __name__ == "__main__":
    sys.exit(main())
