"""os.mkfifo in /tmp, pipes, a writer thread and a forked writer."""
import os
import stat
import tempfile
import threading

d = tempfile.mkdtemp()
path = os.path.join(d, "fifo")
os.mkfifo(path, 0o600)
print("is fifo", stat.S_ISFIFO(os.stat(path).st_mode), oct(os.stat(path).st_mode & 0o777))


def writer():
    with open(path, "w") as f:
        f.write("through the fifo\n")


t = threading.Thread(target=writer)
t.start()
with open(path) as f:
    print("thread", f.read().strip())
t.join()

pid = os.fork()
if pid == 0:
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, b"from a child")
    os.close(fd)
    os._exit(0)
fd = os.open(path, os.O_RDONLY)
data = b""
while chunk := os.read(fd, 100):
    data += chunk
os.close(fd)
_, status = os.waitpid(pid, 0)
print("fork", data.decode(), os.waitstatus_to_exitcode(status))
os.mknod(os.path.join(d, "fifo2"), 0o600 | stat.S_IFIFO)
print("mknod fifo", stat.S_ISFIFO(os.stat(os.path.join(d, "fifo2")).st_mode))

r, w = os.pipe2(os.O_CLOEXEC)
print("pipe2 cloexec", not os.get_inheritable(r))
os.write(w, b"pipe")
print("pipe", os.read(r, 10))
import fcntl
print("pipe size", fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) > 0)
for p in os.listdir(d):
    os.unlink(os.path.join(d, p))
os.rmdir(d)
