"""The jailed side of examples/rlm_repl.py: a persistent REPL for one RLM trajectory.

It reads one JSON cell per line on stdin ({"code": ...}), runs it in one namespace that
lasts the whole trajectory, and writes one JSON result per line on stdout ({"ok", "output",
"error"}). llm_query(prompt) asks the model through the Unix socket the host granted at
/run/llm.sock: the API key stays with the host process that answers there.

What a cell writes to descriptor 1 directly (os.write, a subprocess) goes to stderr, so that
it cannot put the replies out of step; a SIGINT interrupts the running cell only, and one
that comes between cells is ignored.
"""
import contextlib
import io
import json
import os
import signal
import socket
import sys
import traceback

# A cell's printed output is cut here: rljail's --output-limit counts the whole session.
MAX_OUTPUT = 64 << 10


def llm_query(prompt):
    """Ask the host's model; returns its answer as a string."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("/run/llm.sock")
        f = s.makefile("rw", encoding="utf-8")
        f.write(json.dumps({"prompt": str(prompt)}) + "\n")
        f.flush()
        reply = json.loads(f.readline() or "{}")
        if "answer" not in reply:
            raise RuntimeError("llm_query: " + str(reply.get("error", "no answer")))
        return reply["answer"]


running = False


def on_sigint(signum, frame):
    if running:
        raise KeyboardInterrupt


def main():
    global running
    # The replies get a descriptor of their own; descriptor 1 becomes stderr.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    namespace = {"__name__": "__rlm__", "llm_query": llm_query}
    for line in sys.stdin:
        if not line.strip():
            continue
        code = json.loads(line).get("code", "")
        buf = io.StringIO()
        ok, error = True, ""
        signal.signal(signal.SIGINT, on_sigint)  # a cell may have changed it
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                running = True
                exec(compile(code, "<cell>", "exec"), namespace)
            except BaseException:  # SystemExit and KeyboardInterrupt end the cell, not the REPL
                ok, error = False, traceback.format_exc(limit=5)
            finally:
                running = False
        output = buf.getvalue()
        if len(output) > MAX_OUTPUT:  # what the model reads back stays short
            output = output[:MAX_OUTPUT] + "\n[%d more characters cut]" % (len(output) - MAX_OUTPUT)
        replies.write(json.dumps({"ok": ok, "output": output, "error": error}) + "\n")
        replies.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, on_sigint)
    main()
