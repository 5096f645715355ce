"""UDP and TCP on the loopback interface: sendto/recvfrom, sendmsg, socket options, a TCP listener."""
import socket
import threading

srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
srv.bind(("127.0.0.1", 0))
addr = srv.getsockname()
cl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(3):
    cl.sendto(f"datagram {i}".encode(), addr)
print("udp", [srv.recvfrom(100)[0] for _ in range(3)])
srv.sendto(b"reply", cl.getsockname())
print("reply", cl.recv(100))
cl.connect(addr)
cl.sendmsg([b"scatter ", b"gather"])
print("sendmsg", srv.recv(100))
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
print("rcvbuf set", srv.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 65536)
srv.settimeout(0.05)
try:
    srv.recv(10)
except socket.timeout:
    print("udp timeout")

lst = socket.create_server(("127.0.0.1", 0))
port = lst.getsockname()[1]


def serve():
    c, _ = lst.accept()
    with c:
        c.sendall(c.recv(100).upper())


t = threading.Thread(target=serve)
t.start()
with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"tcp loopback")
    print("tcp", c.recv(100))
t.join()
print("getaddrinfo", socket.getaddrinfo("127.0.0.1", 80, socket.AF_INET, socket.SOCK_STREAM)[0][4])
print("inet_pton", socket.inet_pton(socket.AF_INET6, "::1").hex())
for s in (srv, cl, lst):
    s.close()
