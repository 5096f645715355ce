"""concurrent.futures: ThreadPoolExecutor and ProcessPoolExecutor, as_completed, exceptions."""
import concurrent.futures as cf
import math


def is_prime(n):
    if n < 2:
        return False
    return all(n % k for k in range(2, math.isqrt(n) + 1))


def boom(x):
    raise ValueError(f"bad {x}")


def main():
    nums = list(range(10000, 10100))
    with cf.ThreadPoolExecutor(max_workers=4) as ex:
        print("threads", sum(ex.map(is_prime, nums)))
        futs = {ex.submit(pow, 2, i): i for i in range(10)}
        print("as_completed", sorted(f.result() for f in cf.as_completed(futs)))
    with cf.ProcessPoolExecutor(max_workers=2) as ex:
        print("processes", sum(ex.map(is_prime, nums, chunksize=10)))
        f = ex.submit(boom, 7)
        try:
            f.result(timeout=30)
        except ValueError as e:
            print("exception", e)
        done, _ = cf.wait([ex.submit(is_prime, n) for n in (97, 98)])
        print("wait", sorted(d.result() for d in done))


if __name__ == "__main__":
    main()
