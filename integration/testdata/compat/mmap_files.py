"""mmap: anonymous shared memory across fork, and a file-backed map in /tmp."""
import mmap
import os
import tempfile

anon = mmap.mmap(-1, 4096)
anon[:5] = b"hello"
pid = os.fork()
if pid == 0:
    anon[:5] = b"HELLO"
    os._exit(0)
os.waitpid(pid, 0)
print("anonymous shared", anon[:5])

fd, path = tempfile.mkstemp()
os.write(fd, b"\0" * 8192)
with mmap.mmap(fd, 8192) as m:
    m[0:11] = b"file-backed"
    m[4096:4100] = b"page"
    m.flush()
    print("find", m.find(b"page"))
    m.resize(16384)
    print("resized", len(m), os.fstat(fd).st_size)
with open(path, "rb") as f:
    data = f.read()
print("on disk", data[:11], data[4096:4100], len(data))
with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as ro:
    print("readonly", ro[:4])
    try:
        ro[0:1] = b"x"
    except TypeError:
        print("readonly write refused")
with mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as big:
    big.madvise(mmap.MADV_DONTNEED)
    big[-1:] = b"z"
    print("big", len(big), big[-1:])
os.close(fd)
os.unlink(path)
