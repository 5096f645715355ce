"""A Recursive Language Model's REPL in rljail: one persistent jailed Python per trajectory,
whose code calls llm_query() while the model's API key stays in this (host) process.

    python3 examples/rlm_repl.py        # a few cells against a stub model

Everything a cell runs is jailed (`rljail session`: one jail and one namespace per
trajectory): no network, no host files but the ones granted (here an optional context
directory, read-only), no secrets, the limits of rljail and a per-cell timeout. The cell's
llm_query() is rljail's bridge: each call comes to this process as a call event on the
session's stdout, counted against --max-llm-calls by rljail, and goes back as a call_result
(docs/session-protocol.md, "Calls to the host"). Replace answer() with a call to your model.

The rule this meets: sandbox model code, Agent Wranglers application security playbook
(https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RLJAIL = os.environ.get("RLJAIL_BIN") or os.path.join(HERE, "..", "bin", "rljail")


def answer(prompt):
    """The model. Replace with a call to your provider; its key stays in this process."""
    return "stub answer to: " + prompt[:60]


class JailedREPL:
    """One jailed Python that keeps its state from cell to cell: an `rljail session`
    (docs/session-protocol.md), driven over JSON lines on its stdin and stdout."""

    def __init__(self, context_dir=None, timeout="600s", cell_timeout="60s", max_llm_calls=50):
        argv = [RLJAIL, "session", "-q", "--timeout", timeout, "--cell-timeout", cell_timeout,
                "--no-workspace", "--max-llm-calls", str(max_llm_calls)]
        if context_dir:
            argv += ["-v", os.path.abspath(context_dir) + ":/context"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ids = 0

    def _send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def request(self, op, **fields):
        """Sends one request and returns its reply, answering the cell's llm_query calls
        (call events) meanwhile."""
        self.ids += 1
        self._send(dict(fields, id=self.ids, op=op))
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the session ended (exit status %s)" % self.proc.wait())
            msg = json.loads(line)
            if msg.get("event") == "call":
                self._send(self._answer(msg))
                continue
            if msg.get("id") != self.ids:
                continue
            if not msg["ok"] and msg["error"]["type"] == "SessionLost":
                raise RuntimeError("the session was lost: " + msg["error"]["reason"])
            return msg

    def _answer(self, ev):
        res = {"op": "call_result", "call": ev["call"]}
        try:
            args = ev["args"]
            if ev["name"] in ("llm_query", "rlm_query"):
                res["value"] = answer(args["prompt"])
            elif ev["name"] in ("llm_query_batched", "rlm_query_batched"):
                res["value"] = [answer(p) for p in args["prompts"]]
            else:
                res["error"] = "no tool " + ev["name"]
        except Exception as e:  # the model failed: CallFailed in the cell
            res["error"] = str(e)
        return res

    def run(self, code):
        """Runs one cell; returns {"ok", "output", "error"} (output capped by rljail)."""
        r = self.request("exec", code=code)
        error = r["error"]
        return {"ok": error is None, "output": r["stdout"] + r["stderr"],
                "error": (error.get("traceback") or error["type"] + ": " + error.get("message", "")) if error else ""}

    def close(self, wait=5):
        """Ends the session (nothing of the jail is left) and returns rljail's exit status."""
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


def main():
    repl = JailedREPL()
    try:
        for code in ("x = 21",
                     "import os; os.write(1, b'to descriptor 1: the cell\\'s output too\\n')",
                     "print(x * 2)",
                     "print(llm_query('summarize: ' + str(x)))",
                     "print(llm_query_batched(['a', 'b']))",
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
