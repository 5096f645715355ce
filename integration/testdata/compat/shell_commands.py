"""a shell: subprocess's shell=True, os.system, os.popen (they run /bin/sh)."""
import os
import subprocess

r = subprocess.run("echo shell $((6 * 7)); exit 3", shell=True, capture_output=True, text=True)
print(r.returncode, r.stdout.strip())
print(subprocess.check_output("printf '%s\\n' a b | while read x; do echo \"<$x>\"; done", shell=True, text=True).split())
print(os.system("exit 5") >> 8)
with os.popen("echo popen") as p:
    print(p.read().strip())
print(subprocess.run(["sh", "-c", 'echo "$0 $1"', "zero", "one"], capture_output=True, text=True).stdout.strip())
