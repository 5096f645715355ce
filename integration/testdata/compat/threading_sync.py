"""threading: threads, locks, conditions, barriers, queues, timers, thread-locals."""
import queue
import threading

N = 8
counter = 0
lock = threading.Lock()


def add(n):
    global counter
    for _ in range(n):
        with lock:
            counter += 1


threads = [threading.Thread(target=add, args=(1000,)) for _ in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("counter", counter)

# Producer/consumer through a queue.
q = queue.Queue(maxsize=4)
results = []


def produce():
    for i in range(20):
        q.put(i)
    q.put(None)


def consume():
    while True:
        item = q.get()
        if item is None:
            break
        results.append(item * item)


p, c = threading.Thread(target=produce), threading.Thread(target=consume)
p.start(); c.start(); p.join(); c.join()
print("squares", sum(results), len(results))

# A barrier and a condition.
barrier = threading.Barrier(4)
passed = []


def at_barrier(i):
    barrier.wait()
    with lock:
        passed.append(i)


ts = [threading.Thread(target=at_barrier, args=(i,)) for i in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("barrier", sorted(passed))

cond = threading.Condition()
ready = []


def waiter():
    with cond:
        cond.wait_for(lambda: ready)
        ready.append("woken")


w = threading.Thread(target=waiter)
w.start()
with cond:
    ready.append("go")
    cond.notify_all()
w.join()
print("condition", ready)

# Thread-local storage, an event and a timer.
local = threading.local()
seen = {}


def use_local(i):
    local.value = i
    seen[i] = local.value


ts = [threading.Thread(target=use_local, args=(i,)) for i in range(5)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("local", sorted(seen.items()))

ev = threading.Event()
timer = threading.Timer(0.05, ev.set)
timer.start()
print("timer fired", ev.wait(5))
sem = threading.BoundedSemaphore(2)
with sem:
    print("semaphore ok", threading.active_count() >= 1)
