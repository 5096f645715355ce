"""socketpair: stream and datagram pairs, fd passing with SCM_RIGHTS, a Unix socket in /tmp."""
import array
import os
import socket
import tempfile
import threading

a, b = socket.socketpair()
a.sendall(b"ping")
print("stream", b.recv(10))
b.sendall(b"pong" * 10000)
got = b""
while len(got) < 40000:
    got += a.recv(65536)
print("bulk", len(got))

da, db = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
da.send(b"one")
da.send(b"two")
print("dgram", db.recv(10), db.recv(10))

r, w = os.pipe()
socket.send_fds(a, [b"fd"], [w])
msg, fds, _, _ = socket.recv_fds(b, 10, 1)
os.write(fds[0], b"via passed fd")
print("send_fds", msg, os.read(r, 100))
for fd in (r, w, fds[0]):
    os.close(fd)
print("peercred pid", b.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12) != b"\0" * 12)

path = os.path.join(tempfile.mkdtemp(), "s")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen()


def serve():
    c, _ = srv.accept()
    c.sendall(c.recv(100)[::-1])
    c.close()


t = threading.Thread(target=serve)
t.start()
cl = socket.socket(socket.AF_UNIX)
cl.connect(path)
cl.sendall(b"unix path")
print("unix path", cl.recv(100))
t.join()
abstract = socket.socket(socket.AF_UNIX)
abstract.bind(b"\0rljail-compat-abstract")
print("abstract", abstract.getsockname())
for s in (a, b, da, db, srv, cl, abstract):
    s.close()
os.unlink(path)
