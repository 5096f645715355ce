"""multiprocessing with the start method named by the one argument (fork, forkserver or
spawn): Pool.map, Queue, Process, Lock, Value, Manager."""
import multiprocessing as mp
import sys


def square(x):
    return x * x


def worker(q, i):
    q.put((i, i * 10))


def bump(v, lock, n):
    for _ in range(n):
        with lock:
            v.value += 1


def main(method):
    ctx = mp.get_context(method)
    print("start method", ctx.get_start_method())
    with ctx.Pool(2) as pool:
        print("pool.map", pool.map(square, range(10)))
        print("pool.apply", pool.apply(square, (12,)))
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(q, i)) for i in range(3)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=10) for _ in procs)
    for p in procs:
        p.join()
    print("queue", got)
    print("exitcodes", [p.exitcode for p in procs])
    lock = ctx.Lock()
    v = ctx.Value("i", 0)
    ps = [ctx.Process(target=bump, args=(v, lock, 100)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    print("value", v.value)
    with ctx.Manager() as m:
        d = m.dict()
        d["a"] = 1
        lst = m.list(range(3))
        print("manager", dict(d), list(lst))
    p = ctx.Process(target=square, args=("not a number",))
    p.start()
    p.join()
    print("failing child exitcode", p.exitcode)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: mp_start_method.py fork|forkserver|spawn")
    main(sys.argv[1])
