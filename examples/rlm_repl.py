"""A Recursive Language Model's REPL in rljail: one persistent jailed Python per trajectory,
whose code calls llm_query() while the model's API key stays in this (host) process.

    python3 examples/rlm_repl.py        # three cells against a stub model

Everything a cell runs is jailed (`rljail session`: one jail and one namespace per
trajectory): no network, no host files but the ones granted (here the llm_query socket and an
optional context directory, read-only), no secrets, the limits of rljail and a per-cell
timeout. The socket is the only way out, and it
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


# Defined in the session's namespace before the first cell: llm_query(prompt) asks the model
# through the socket granted at /run/llm.sock, so the API key stays in this process.
LLM_QUERY = """
def llm_query(prompt):
    import json, socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("/run/llm.sock")
        f = s.makefile("rw", encoding="utf-8")
        f.write(json.dumps({"prompt": str(prompt)}) + "\\n")
        f.flush()
        reply = json.loads(f.readline() or "{}")
    if "answer" not in reply:
        raise RuntimeError("llm_query: " + str(reply.get("error", "no answer")))
    return reply["answer"]
"""


class JailedREPL:
    """One jailed Python that keeps its state from cell to cell: an `rljail session`
    (docs/session-protocol.md), driven over JSON lines on its stdin and stdout."""

    def __init__(self, context_dir=None, timeout="600s", cell_timeout="60s"):
        # 0700: only this user reaches the socket on the host; the jail gets the socket
        # itself, bound at /run/llm.sock (as root the jail's user is a host uid of its own, hence 0666).
        self.dir = tempfile.mkdtemp(prefix="rlm-")
        sock = os.path.join(self.dir, "llm.sock")
        self.bridge = _Bridge(sock, _Ask)
        os.chmod(sock, 0o666)
        threading.Thread(target=self.bridge.serve_forever, daemon=True).start()
        argv = [RLJAIL, "session", "-q", "--timeout", timeout, "--cell-timeout", cell_timeout,
                "--no-workspace", "-v", sock + ":/run/llm.sock"]
        if context_dir:
            argv += ["-v", os.path.abspath(context_dir) + ":/context"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ids = 0
        self.request("exec", code=LLM_QUERY)

    def request(self, op, **fields):
        """Sends one request and returns its reply (one at a time, as the protocol asks)."""
        self.ids += 1
        self.proc.stdin.write(json.dumps(dict(fields, id=self.ids, op=op)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the session ended (exit status %s)" % self.proc.wait())
        reply = json.loads(line)
        if not reply["ok"] and reply["error"]["type"] == "SessionLost":
            raise RuntimeError("the session was lost: " + reply["error"]["reason"])
        return reply

    def run(self, code):
        """Runs one cell; returns {"ok", "output", "error"} (output capped by rljail)."""
        r = self.request("exec", code=code)
        error = r["error"]
        return {"ok": error is None, "output": r["stdout"] + r["stderr"],
                "error": (error.get("traceback") or error["type"] + ": " + error.get("message", "")) if error else ""}

    def close(self, wait=5):
        """Ends the session (nothing of the jail is left) and returns rljail's exit status."""
        try:
            try:
                self.request("close")
                self.proc.stdin.close()
            except (OSError, RuntimeError, ValueError):
                pass  # the session is gone already
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.terminate()  # rljail session ends the jail on SIGTERM
                try:
                    return self.proc.wait(wait)
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
                     "import os; os.write(1, b'to descriptor 1: the cell\\'s output too\\n')",
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
