"""shutil in /tmp: copytree, copy2, move, make_archive, unpack_archive, rmtree, disk_usage."""
import os
import shutil
import tempfile
import zipfile
import tarfile

base = tempfile.mkdtemp()
src = os.path.join(base, "src")
os.makedirs(os.path.join(src, "a", "b"))
for rel, content in [("top.txt", "top"), ("a/one.txt", "one"), ("a/b/two.txt", "two" * 1000)]:
    with open(os.path.join(src, rel), "w") as f:
        f.write(content)
os.symlink("top.txt", os.path.join(src, "link"))
os.utime(os.path.join(src, "top.txt"), (1000000000, 1000000000))
os.chmod(os.path.join(src, "a", "one.txt"), 0o640)


def tree(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(d, name)
            out.append(os.path.relpath(p, root) + ("@" if os.path.islink(p) else ""))
    return out


dst = os.path.join(base, "dst")
shutil.copytree(src, dst, symlinks=True)
print("copytree", tree(dst))
print("symlink kept", os.readlink(os.path.join(dst, "link")))
c = shutil.copy2(os.path.join(src, "top.txt"), os.path.join(base, "copy.txt"))
print("copy2 mtime", int(os.stat(c).st_mtime))
print("copy mode", oct(os.stat(shutil.copy(os.path.join(src, "a", "one.txt"), base)).st_mode & 0o777))
shutil.copyfileobj(open(c, "rb"), open(os.path.join(base, "obj.txt"), "wb"))
moved = shutil.move(os.path.join(base, "dst"), os.path.join(base, "moved"))
print("move", os.path.basename(moved), os.path.exists(os.path.join(base, "dst")))
for fmt in ("zip", "gztar", "bztar", "xztar", "tar"):
    arch = shutil.make_archive(os.path.join(base, "arch"), fmt, root_dir=src)
    out = os.path.join(base, "unpacked-" + fmt)
    shutil.unpack_archive(arch, out)
    print("archive", fmt, tree(out))
    os.unlink(arch)
total, used, free = shutil.disk_usage(base)
print("disk_usage", total > 0 and free >= 0)
print("which", shutil.which("python3") is not None)
shutil.rmtree(base)
print("rmtree", os.path.exists(base))
