"""subprocess: run the interpreter itself (there is no /bin/sh in the jail), capture output, pipes, exit codes."""
import subprocess
import sys

r = subprocess.run([sys.executable, "-c", "print('hello from child')"], capture_output=True, text=True, check=True)
print("run", r.returncode, r.stdout.strip(), repr(r.stderr))

r = subprocess.run([sys.executable, "-c", "import sys; sys.exit(3)"])
print("exit code", r.returncode)

r = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
                   input="piped input", capture_output=True, text=True)
print("stdin", r.stdout.strip())

r = subprocess.run([sys.executable, "-c", "import sys; print('err', file=sys.stderr)"],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print("stderr merged", r.stdout.strip())

out = subprocess.check_output([sys.executable, "-c", "import os; print(os.environ['RLJAIL_COMPAT'])"],
                              env={"RLJAIL_COMPAT": "env passed"}, text=True)
print("env", out.strip())

p = subprocess.Popen([sys.executable, "-c", "import sys\nfor line in sys.stdin: print(len(line.strip()))"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
out, _ = p.communicate("a\nbb\nccc\n", timeout=10)
print("popen", out.split(), p.returncode)

try:
    subprocess.run([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)
except subprocess.TimeoutExpired:
    print("timeout expired")

try:
    subprocess.run(["/nonexistent/program"])
except FileNotFoundError as e:
    print("missing program", e.errno)

# close_fds, pass_fds and a process group of its own.
import os
rfd, wfd = os.pipe()
p = subprocess.Popen([sys.executable, "-c", f"import os; os.write({wfd}, b'through fd')"],
                     pass_fds=(wfd,), start_new_session=True)
os.close(wfd)
p.wait()
print("pass_fds", os.read(rfd, 100).decode(), p.returncode)
