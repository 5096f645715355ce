# What model code expects of any Linux box (issue 23): the network tables,
# pseudo-terminals, the no-op identity calls, ctypes finding libc by name.
# (Outside the jail this runs as root; that a real change of ids fails in
# the jail is the attack case identity_calls_change_ids.)
import ctypes
import ctypes.util
import os
import pty
import socket

print("http", socket.getservbyname("http"), socket.getservbyname("https", "tcp"))
print("port", socket.getservbyport(443, "tcp"))
print("tcp", socket.getprotobyname("tcp"), socket.getprotobyname("udp"))
info = socket.getaddrinfo("127.0.0.1", "http", socket.AF_INET, socket.SOCK_STREAM)
print("getaddrinfo", info[0][4])

m, s = pty.openpty()
print("openpty", os.ttyname(s).startswith("/dev/pts/"), os.isatty(s))
os.write(m, b"hello\n")
print("pty read", os.read(s, 100))
os.close(m)
os.close(s)
pid, fd = pty.fork()
if pid == 0:
    os.write(1, b"child on its tty %d\n" % os.isatty(0))
    os._exit(7)
out = b""
while True:
    try:
        b = os.read(fd, 1024)
    except OSError:
        break
    if not b:
        break
    out += b
_, status = os.waitpid(pid, 0)
print("pty.fork", out.replace(b"\r", b""), os.waitstatus_to_exitcode(status))
pid, fd = os.forkpty()
if pid == 0:
    os._exit(3)
_, status = os.waitpid(pid, 0)
os.close(fd)
print("forkpty", os.waitstatus_to_exitcode(status))

uid, gid = os.getuid(), os.getgid()
os.setreuid(-1, -1)
os.setresuid(-1, -1, -1)
os.setregid(-1, -1)
os.setresgid(-1, -1, -1)
os.setuid(uid)
os.setgid(gid)
os.seteuid(uid)
os.setegid(gid)
print("ids unchanged", os.getresuid() == (uid, uid, uid), os.getresgid() == (gid, gid, gid))

libc = ctypes.util.find_library("c")
print("find_library", libc, ctypes.CDLL(libc).getpid() == os.getpid())

import resource
# Reading a process's limits by its pid (psutil's Process.rlimit does).
print("prlimit read", resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE) == resource.getrlimit(resource.RLIMIT_NOFILE))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 128), hard))
print("setrlimit", resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(soft, 128))
