"""select, poll and epoll on pipes; the selectors module; eventfd-backed waits."""
import os
import select
import selectors

r, w = os.pipe()
print("select empty", select.select([r], [], [], 0))
os.write(w, b"x")
rl, wl, _ = select.select([r], [w], [], 1)
print("select ready", rl == [r], wl == [w])
os.read(r, 1)

p = select.poll()
p.register(r, select.POLLIN)
print("poll empty", p.poll(0))
os.write(w, b"yy")
print("poll ready", [(fd == r, ev & select.POLLIN != 0) for fd, ev in p.poll(1000)])
os.read(r, 2)

ep = select.epoll()
ep.register(r, select.EPOLLIN | select.EPOLLET)
print("epoll empty", ep.poll(0))
os.write(w, b"zzz")
print("epoll ready", [(fd == r, ev & select.EPOLLIN != 0) for fd, ev in ep.poll(1)])
print("epoll edge triggered", ep.poll(0))
os.read(r, 3)
ep.modify(r, select.EPOLLIN)
os.close(w)
print("epoll hangup", [(ev & select.EPOLLHUP != 0) for _, ev in ep.poll(1)])
ep.close()
os.close(r)

sel = selectors.DefaultSelector()
print("selector", type(sel).__name__)
pipes = [os.pipe() for _ in range(5)]
for i, (rr, _) in enumerate(pipes):
    sel.register(rr, selectors.EVENT_READ, data=i)
for i, (_, ww) in enumerate(pipes):
    if i % 2 == 0:
        os.write(ww, b"!")
print("selector ready", sorted(key.data for key, _ in sel.select(1)))
sel.close()
for rr, ww in pipes:
    os.close(rr)
    os.close(ww)
efd = os.eventfd(0)
os.eventfd_write(efd, 3)
os.eventfd_write(efd, 4)
print("eventfd", os.eventfd_read(efd))
os.close(efd)
