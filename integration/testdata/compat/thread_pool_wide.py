"""threads: 32 at once, each allocating (as a code executor's thread pool does).

Rootless on a cgroup v1 host the memory limit is RLIMIT_AS, which counts
address space: glibc's per-thread malloc arenas (64 MiB each) once made the
15th thread fail to start under the default 512m.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

N = 32
barrier = threading.Barrier(N)


def work(i):
    data = [bytes(1000) for _ in range(200)]  # malloc in this thread
    barrier.wait(timeout=20)  # all N threads alive at once
    return i * len(data)


with ThreadPoolExecutor(max_workers=N) as pool:
    total = sum(pool.map(work, range(N)))
print("threads", N, "total", total)
