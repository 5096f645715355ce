"""signal: handlers, os.kill of itself, alarm, setitimer, sigwait, masks, wakeup fd."""
import os
import signal
import threading
import time

got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append("usr1"))
os.kill(os.getpid(), signal.SIGUSR1)
print("kill self", got)

signal.signal(signal.SIGUSR2, lambda s, f: got.append("usr2"))
signal.raise_signal(signal.SIGUSR2)
print("raise_signal", got)

fired = []
signal.signal(signal.SIGALRM, lambda s, f: fired.append("alarm"))
signal.setitimer(signal.ITIMER_REAL, 0.05)
deadline = time.monotonic() + 5
while not fired and time.monotonic() < deadline:
    time.sleep(0.01)
print("setitimer", fired)

fired.clear()
signal.alarm(1)
print("alarm pending", signal.getitimer(signal.ITIMER_REAL)[0] > 0)
signal.alarm(0)
print("alarm cancelled", signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))

# A repeating timer: pause() returns even if the first expiry comes before it.
signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
signal.pause()
signal.setitimer(signal.ITIMER_REAL, 0)
print("pause woken", fired[:1])

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.kill(os.getpid(), signal.SIGUSR1)
print("pending", signal.SIGUSR1 in signal.sigpending())
print("sigwait", signal.sigwait({signal.SIGUSR1}).name)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})

rfd, wfd = os.pipe()
os.set_blocking(wfd, False)
signal.set_wakeup_fd(wfd)
signal.signal(signal.SIGUSR2, lambda s, f: None)
os.kill(os.getpid(), signal.SIGUSR2)
print("wakeup fd", os.read(rfd, 1) == bytes([signal.SIGUSR2]))
signal.set_wakeup_fd(-1)

ev = threading.Event()
signal.signal(signal.SIGUSR1, lambda s, f: ev.set())
t = threading.Thread(target=lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1))
t.start()
t.join()
print("pthread_kill", ev.wait(5))
signal.signal(signal.SIGCHLD, signal.SIG_DFL)
print("ignored", signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)
print("strsignal", signal.strsignal(signal.SIGTERM))
