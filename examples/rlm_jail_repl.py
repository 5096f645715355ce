"""The jailed side of examples/rlm_repl.py: a persistent REPL for one RLM trajectory.

It reads one JSON cell per line on stdin ({"code": ...}), runs it in one namespace that
lasts the whole trajectory, and writes one JSON result per line on stdout ({"ok", "output",
"error"}). llm_query(prompt) asks the model through the Unix socket the host granted at
/run/llm.sock: the API key stays with the host process that answers there.
"""
import contextlib
import io
import json
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
        return json.loads(f.readline())["answer"]


def main():
    namespace = {"__name__": "__rlm__", "llm_query": llm_query}
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        code = json.loads(line).get("code", "")
        buf = io.StringIO()
        ok, error = True, ""
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                exec(compile(code, "<cell>", "exec"), namespace)
            except BaseException:  # SystemExit and KeyboardInterrupt end the cell, not the REPL
                ok, error = False, traceback.format_exc(limit=5)
        output = buf.getvalue()
        if len(output) > MAX_OUTPUT:  # what the model reads back stays short
            output = output[:MAX_OUTPUT] + "\n[%d more characters cut]" % (len(output) - MAX_OUTPUT)
        out.write(json.dumps({"ok": ok, "output": output, "error": error}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
