"""zlib, gzip, bz2, lzma and zipfile/tarfile in memory and in /tmp."""
import bz2
import gzip
import io
import lzma
import os
import tarfile
import tempfile
import zipfile
import zlib

data = ("The quick brown fox jumps over the lazy dog. " * 500).encode()
print("crc32", zlib.crc32(data), "adler32", zlib.adler32(data))
z = zlib.compress(data, 9)
print("zlib", len(z), zlib.decompress(z) == data)
c = zlib.compressobj(6, zlib.DEFLATED, -15)
raw = c.compress(data) + c.flush()
print("raw deflate", zlib.decompress(raw, -15) == data)
g = gzip.compress(data, mtime=0)
print("gzip", len(g), gzip.decompress(g) == data)
b = bz2.compress(data)
print("bz2", len(b), bz2.decompress(b) == data)
for fmt in (lzma.FORMAT_XZ, lzma.FORMAT_ALONE):
    x = lzma.compress(data, format=fmt)
    print("lzma", fmt, len(x), lzma.decompress(x) == data)

d = tempfile.mkdtemp()
for opener, ext in ((gzip.open, "gz"), (bz2.open, "bz2"), (lzma.open, "xz")):
    p = os.path.join(d, "f." + ext)
    with opener(p, "wb") as f:
        f.write(data)
    with opener(p, "rb") as f:
        print("file", ext, f.read() == data)
    os.unlink(p)
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("a.txt", data)
    zf.writestr("b/c.txt", b"small")
with zipfile.ZipFile(buf) as zf:
    print("zip", zf.namelist(), zf.read("a.txt") == data, zf.testzip())
tp = os.path.join(d, "t.tar.xz")
with tarfile.open(tp, "w:xz") as tf:
    info = tarfile.TarInfo("hello.txt")
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))
with tarfile.open(tp) as tf:
    print("tar", tf.getnames(), tf.extractfile("hello.txt").read() == data)
os.unlink(tp)
os.rmdir(d)
