"""time and locale: clocks, sleeping, formatting, TZ rules, setlocale(LC_ALL, "") with LANG=C.UTF-8."""
import locale
import os
import time

t0 = time.monotonic()
time.sleep(0.02)
print("monotonic advances", time.monotonic() - t0 >= 0.02)
print("clocks", all(time.get_clock_info(c).resolution > 0 for c in ("monotonic", "perf_counter", "process_time", "thread_time", "time")))
print("process_time", time.process_time() >= 0, time.thread_time() >= 0)
print("ns", time.time_ns() > 1_600_000_000 * 10 ** 9)
print("gmtime", time.strftime("%Y-%m-%d %H:%M:%S %A %j", time.gmtime(1234567890)))
os.environ["TZ"] = "EST5EDT,M3.2.0,M11.1.0"
time.tzset()
print("tz", time.tzname, time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(1234567890)))
os.environ["TZ"] = "UTC0"
time.tzset()
print("utc", time.strftime("%c", time.localtime(0)), time.mktime(time.strptime("2000-01-01", "%Y-%m-%d")))
print("setlocale", locale.setlocale(locale.LC_ALL, ""))
print("getlocale", locale.getlocale())
print("encoding", locale.getpreferredencoding(False))
conv = locale.localeconv()
print("localeconv", conv["decimal_point"], repr(conv["thousands_sep"]))
print("format", locale.format_string("%.2f", 1234567.891, grouping=True))
print("strxfrm sort", sorted(["b", "A", "a", "B", "é"], key=locale.strxfrm))
print("upper", "straße ǆ é".upper())
print("strftime", time.strftime("%B %b %A", time.gmtime(0)))
print("setlocale C", locale.setlocale(locale.LC_ALL, "C"))
try:
    locale.setlocale(locale.LC_ALL, "xx_YY.UTF-8")
except locale.Error as e:
    print("unsupported locale", e)
