// Package bombs holds the Python programs that the limit tests run in the jail to
// break a limit: the host's and the test VM's (package integration) and the systemd
// VM's (integration/vm/systemd), and the attack suite, so that all of them judge one
// payload and a fix to a bomb reaches every test that runs it. Only tests import it.
package bombs

// Memory allocates and touches 1 MiB at a time without end; when Python's allocation
// fails (RLIMIT_AS), it lets the chunks go, prints "MemoryError after N MiB" and exits
// 3. A cgroup's memory limit kills it instead (SIGKILL, exit 137).
const Memory = `
import sys
chunks = []
try:
    while True:
        chunks.append(b"\x01" * (1 << 20))
except MemoryError:
    n = len(chunks)
    chunks = None
    print("MemoryError after", n, "MiB", flush=True)
    sys.exit(3)
`

// Fork: every process forks for 2 s, each child forking on; a refused fork must fail
// with EAGAIN (anything else raises), and the first process prints "refused N", how
// many of its forks were refused.
const Fork = `
import errno, os, time
deadline = time.monotonic() + 2.0
root = os.getpid()
refused = 0
while time.monotonic() < deadline:
    try:
        pid = os.fork()
    except OSError as e:
        if e.errno != errno.EAGAIN:
            raise
        refused += 1
        time.sleep(0.01)
        continue
    if pid == 0:
        refused = 0  # the child forks on: a fork bomb
if os.getpid() == root:
    print("refused", refused, flush=True)
os._exit(0)
`

// TmpFill writes 4 MiB files into each directory named by an absolute-path argument
// (the attack suite appends its marker, which is not one) until an error or 256 MiB,
// prints "FILL DIR ERRNO-NAME BYTES" ("none" for no error), and removes what it wrote
// before the next directory, so that each starts from an empty one.
const TmpFill = `
import errno, os, sys
chunk = b"z" * (1 << 20)
for d in [a for a in sys.argv[1:] if a.startswith("/")]:
    total, err, i = 0, "none", 0
    try:
        while total < (256 << 20):
            with open(os.path.join(d, "fill%03d" % i), "wb", buffering=0) as f:
                for _ in range(4):
                    total += f.write(chunk)
            i += 1
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
    print("FILL", d, err, total, flush=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
`
