"""tempfile: named, unnamed, spooled files and directories."""
import os
import tempfile

print("tempdir is a dir", os.path.isdir(tempfile.gettempdir()))
with tempfile.NamedTemporaryFile("w+", suffix=".txt", prefix="rl-") as f:
    f.write("named")
    f.flush()
    print("named", os.path.basename(f.name).startswith("rl-"), f.name.endswith(".txt"), open(f.name).read())
    name = f.name
print("named removed", not os.path.exists(name))
with tempfile.TemporaryFile() as f:
    f.write(b"unnamed")
    f.seek(0)
    print("unnamed", f.read())
with tempfile.SpooledTemporaryFile(max_size=10) as f:
    f.write(b"x" * 5)
    print("spooled in memory", not f._rolled)
    f.write(b"y" * 20)
    print("spooled rolled", f._rolled)
with tempfile.TemporaryDirectory() as d:
    for i in range(3):
        open(os.path.join(d, f"f{i}"), "w").close()
    os.mkdir(os.path.join(d, "sub"))
    print("dir", sorted(os.listdir(d)))
    kept = d
print("dir removed", not os.path.exists(kept))
fd, p = tempfile.mkstemp()
print("mkstemp mode", oct(os.stat(p).st_mode & 0o777))
os.close(fd)
os.unlink(p)
d = tempfile.mkdtemp()
print("mkdtemp mode", oct(os.stat(d).st_mode & 0o777))
os.rmdir(d)
