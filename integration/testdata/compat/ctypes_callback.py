"""ctypes: the C library through CDLL(None), structures, and a Python callback called from C (qsort)."""
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
print("strlen", libc.strlen(b"hello, jail"))
buf = ctypes.create_string_buffer(64)
libc.snprintf(buf, 64, b"%d-%s-%.2f", 42, b"x", ctypes.c_double(3.14159))
print("snprintf", buf.value.decode())
print("getpid matches", libc.getpid() == __import__("os").getpid())

CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
calls = 0


def cmp(a, b):
    global calls
    calls += 1
    return a[0] - b[0]


arr = (ctypes.c_int * 10)(5, 3, 9, 1, 7, 0, 8, 2, 6, 4)
libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), CMP(cmp))
print("qsort", list(arr), calls > 0)


class Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_double)]


p = Point(3, 4.5)
print("struct", p.x, p.y, ctypes.sizeof(Point))
libm = ctypes.CDLL("libm.so.6")
libm.cos.restype = ctypes.c_double
libm.cos.argtypes = [ctypes.c_double]
print("cos", libm.cos(0.0))
libc.close(-1)
print("errno", ctypes.get_errno())
s = ctypes.c_char_p(b"abc")
print("memmove", ctypes.string_at(s, 3))
