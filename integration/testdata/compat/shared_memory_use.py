"""multiprocessing.shared_memory: SharedMemory and ShareableList across processes, in /dev/shm."""
import multiprocessing as mp
from multiprocessing import shared_memory


def child(name):
    shm = shared_memory.SharedMemory(name=name)
    shm.buf[:5] = b"WORLD"
    shm.close()


def child_list(name):
    sl = shared_memory.ShareableList(name=name)
    sl[0] = sl[0] * 2
    sl[1] = "changed"
    sl.shm.close()


def main():
    shm = shared_memory.SharedMemory(create=True, size=4096)
    shm.buf[:5] = b"hello"
    for method in ("fork", "spawn"):
        shm.buf[:5] = b"hello"
        p = mp.get_context(method).Process(target=child, args=(shm.name,))
        p.start()
        p.join()
        print(method, bytes(shm.buf[:5]), p.exitcode)
    sl = shared_memory.ShareableList([21, "orig", 3.5, None])
    p = mp.get_context("fork").Process(target=child_list, args=(sl.shm.name,))
    p.start()
    p.join()
    print("list", list(sl))
    sl.shm.close()
    sl.shm.unlink()
    shm.close()
    shm.unlink()
    try:
        shared_memory.SharedMemory(name=shm.name)
    except FileNotFoundError:
        print("unlinked")


if __name__ == "__main__":
    main()
