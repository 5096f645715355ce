package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fixedMtime is the modification time of every entry of a built tree, so that two builds
// from the same inputs are identical (1980-01-01, the earliest time a zip file can hold,
// in the spirit of SOURCE_DATE_EPOCH). The bytecode is hash-based, so no timestamp is
// ever compared with a source file.
var fixedMtime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// tree is a root filesystem under construction: host paths are recreated under root.
type tree struct {
	root     string
	mirrored map[string]string // host path -> resolved host path, already in the tree
	log      func(string)
	// etc is the host's /etc, which the jail does not see (a test's stand-in).
	etc string
}

func newTree(root string, log func(string)) *tree {
	if log == nil {
		log = func(string) {}
	}
	return &tree{root: root, mirrored: map[string]string{}, log: log, etc: "/etc"}
}

// in is the path of host path p inside the tree. Callers only pass paths whose
// directories were created by mirror or copyDir, so none of them is a symlink in the
// tree: the result never leaves root.
func (t *tree) in(p string) string { return filepath.Join(t.root, p) }

// mirror recreates host path p (absolute) at the same path in the tree: each symlink met
// on the way becomes the same symlink in the tree and is followed, each directory is
// created (empty), and the final file is copied. So "/lib/x86_64-linux-gnu/libz.so.1"
// yields lib -> usr/lib, usr/lib/x86_64-linux-gnu/libz.so.1 -> libz.so.1.2.13 and the
// file itself: the loader inside resolves the path exactly as on the host. It returns
// the resolved host path. The path is walked by descriptor, one name at a time from /
// without following a symlink (hostWalk), and the file is copied from the descriptor
// whose fstat says it is one: a directory or file swapped for a symlink while it is
// walked is never followed by the kernel, only as the symlink it has become.
func (t *tree) mirror(p string) (string, error) {
	return t.mirrorHops(p, 0, false)
}

// mirrorPublic is mirror of a file that the host's own configuration did not name (a
// library a package's extension module names by its RPATH, RUNPATH or an absolute
// DT_NEEDED, which whoever may write the package chose): copied only where a user who
// is neither its owner nor in its group could read it, as the walk's descriptors say
// (every directory of its real path o+x, the file o+r).
func (t *tree) mirrorPublic(p string) (string, error) {
	return t.mirrorHops(p, 0, true)
}

func (t *tree) mirrorHops(p string, hops int, public bool) (string, error) {
	if real, ok := t.mirrored[p]; ok {
		return real, nil
	}
	if hops > 40 {
		return "", fmt.Errorf("mirror %s: %w", p, syscall.ELOOP)
	}
	w := &hostWalk{}
	defer w.close()
	if err := w.push(unix.AT_FDCWD, "/"); err != nil {
		return "", fmt.Errorf("mirror %s: %w", p, err)
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			w.up() // the chain has no symlinks: lexical is right
			continue
		}
		cur := w.path()
		next := filepath.Join(cur, c)
		fd, st, err := w.step(c)
		if err != nil {
			return "", fmt.Errorf("mirror %s: %s: %w", p, next, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkAt(fd, "")
			unix.Close(fd)
			if err != nil {
				return "", fmt.Errorf("mirror %s: %s: %w", p, next, err)
			}
			if t.throughEtc(target) {
				// The jail's /etc is its own (jail.prepareConfig), so a link into
				// the host's (Debian's alternatives: libblas.so.3 ->
				// /etc/alternatives/...; matplotlib's mpl-data/matplotlibrc ->
				// /etc/matplotlibrc) would dangle there: link straight to where the
				// chain ends, or copy the file when it ends inside /etc.
				return t.mirrorPastEtc(p, next, parts[i+1:], hops, public)
			}
			if err := t.symlink(next, target); err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				target = cur + "/" + target
			}
			rest := strings.Join(parts[i+1:], "/")
			real, err := t.mirrorHops(target+"/"+rest, hops+1, public)
			if err != nil {
				return "", err
			}
			t.mirrored[p] = real
			return real, nil
		case unix.S_IFDIR:
			w.pushFD(fd, c, &st)
			if err := t.mkdir(next); err != nil {
				return "", err
			}
		case unix.S_IFREG:
			unix.Close(fd)
			for _, c := range parts[i+1:] {
				if c != "" && c != "." {
					return "", fmt.Errorf("mirror %s: %s: %w", p, next, syscall.ENOTDIR)
				}
			}
			if !t.hasFile(next) {
				if err := t.mirrorFile(w, c, next, public); err != nil {
					return "", err
				}
			}
			t.mirrored[p] = next
			return next, nil
		default:
			unix.Close(fd)
			return "", fmt.Errorf("mirror %s: %s is a %v, not a file, directory or symlink", p, next, fileMode(&st).Type())
		}
	}
	real := w.path()
	t.mirrored[p] = real
	return real, nil
}

// mirrorFile copies the file name of the directory on top of the walk w (host path p)
// to the same path in the tree, from the descriptor opened without following a symlink
// and judged by its fstat: a symlink put there since it was walked is refused (ELOOP),
// not followed. With public, others must be able to read it (w's directories o+x, the
// file o+r).
func (t *tree) mirrorFile(w *hostWalk, name, p string, public bool) error {
	if beforeOpen != nil {
		beforeOpen(p)
	}
	f, st, err := openEntry(w.top(), name)
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	defer f.Close()
	if public && (!w.public() || st.Mode&0o004 == 0) {
		return fmt.Errorf("copy %s: %w, and every file of a rootfs is readable by all", p, errNotPublic)
	}
	return t.copyOpened(f, &st, p, p)
}

// throughEtc tells whether a symlink target leads into /etc.
func (t *tree) throughEtc(target string) bool {
	return target == t.etc || strings.HasPrefix(target, t.etc+"/")
}

// mirrorPastEtc mirrors the symlink link (met while mirroring p, with rest
// still to walk) whose target leads into the host's /etc: the tree gets a
// symlink to the end of the chain when it ends outside /etc, else a copy
// of the regular file it names.
func (t *tree) mirrorPastEtc(p, link string, rest []string, hops int, public bool) (string, error) {
	end, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("mirror %s: %w", p, err)
	}
	if t.throughEtc(end) {
		fi, err := os.Stat(end)
		if err != nil {
			return "", fmt.Errorf("mirror %s: %w", p, err)
		}
		if !fi.Mode().IsRegular() || len(strings.Join(rest, "")) > 0 {
			return "", fmt.Errorf("mirror %s: %s leads to %s, inside /etc, which the jail does not see", p, link, end)
		}
		if public && !othersMayRead(end) {
			return "", fmt.Errorf("mirror %s: %s leads to %s, which %w, and every file of a rootfs is readable by all", p, link, end, errNotPublic)
		}
		if err := t.copyFile(end, link); err != nil {
			return "", err
		}
		t.mirrored[p] = link
		return link, nil
	}
	if err := t.symlink(link, end); err != nil {
		return "", err
	}
	real, err := t.mirrorHops(end+"/"+strings.Join(rest, "/"), hops+1, public)
	if err != nil {
		return "", err
	}
	t.mirrored[p] = real
	return real, nil
}

// mkdir creates directory p of the tree, or accepts an existing one.
func (t *tree) mkdir(p string) error {
	dst := t.in(p)
	err := os.Mkdir(dst, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, lerr := os.Lstat(dst); lerr == nil && fi.IsDir() {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	return nil
}

// symlink creates symlink p -> target in the tree, or accepts an identical existing one.
func (t *tree) symlink(p, target string) error {
	dst := t.in(p)
	err := os.Symlink(target, dst)
	if errors.Is(err, fs.ErrExist) {
		if have, rerr := os.Readlink(dst); rerr == nil && have == target {
			return nil
		}
		return fmt.Errorf("symlink %s -> %s: the tree already has a different %s", p, target, p)
	}
	if err != nil {
		return fmt.Errorf("symlink %s -> %s: %w", p, target, err)
	}
	return nil
}

// copyFile copies the host regular file src to dst of the tree (or accepts an existing
// copy). src is a path that only root may change (the host's /etc: a network table, a
// package's file there), opened as named; a file of a tree that others may write is
// copied by copyDirTo, and mirror copies by descriptor.
func (t *tree) copyFile(src, dst string) error {
	if t.hasFile(dst) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return t.copyOpened(in, &st, src, dst)
}

// hasFile tells whether the tree has a regular file at dst already (a copy
// accepted as it is).
func (t *tree) hasFile(dst string) bool {
	fi, err := os.Lstat(t.in(dst))
	return err == nil && fi.Mode().IsRegular()
}

// copyOpened copies the host file in (opened as src; st is its fstat, by which it is
// judged) to dst of the tree, or accepts an existing regular file there. Only the
// permission bits that matter survive, and normalize masks them later; set-id bits and
// ownership are never carried over: the copy belongs to the builder.
func (t *tree) copyOpened(in *os.File, st *unix.Stat_t, src, dst string) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("copy %s: a %v, not a regular file", src, fileMode(st).Type())
	}
	out := t.in(dst)
	// O_EXCL: never write through something already at dst.
	w, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(st.Mode)&0o755|0o600)
	if errors.Is(err, fs.ErrExist) {
		if fi, lerr := os.Lstat(out); lerr == nil && fi.Mode().IsRegular() {
			return nil
		} else if lerr == nil {
			return fmt.Errorf("copy %s: the tree already has %s as a %v", src, dst, fi.Mode().Type())
		}
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if _, err := io.Copy(w, in); err != nil {
		w.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// excludedFromStdlib decides which parts of the standard library stay out of the rootfs:
// test suites, GUI and packaging tools that cannot work in the jail, third-party package
// directories (the rootfs is the bare standard library), host bytecode (ours is compiled
// into the tree), static libraries and the build configuration for C extensions, the
// host's site customisation, and the test-only extension modules (which expose raw
// interpreter internals). rel is slash-separated and relative to the directory being
// copied (the stdlib dir or lib-dynload).
func excludedFromStdlib(rel string, isDir bool) bool {
	name := path.Base(rel)
	topLevel := !strings.Contains(rel, "/")
	if isDir {
		switch name {
		case "__pycache__", "test", "tests", "idle_test", "site-packages", "dist-packages":
			return true
		}
		if topLevel {
			switch name {
			case "idlelib", "tkinter", "turtledemo", "ensurepip":
				return true
			}
			return strings.HasPrefix(name, "config-")
		}
		return false
	}
	switch {
	case strings.HasSuffix(name, ".a"), strings.HasSuffix(name, ".pyc"), strings.HasSuffix(name, ".pyo"):
		return true
	case topLevel && (name == "sitecustomize.py" || name == "usercustomize.py"):
		return true
	case strings.Contains(name, ".so"):
		for _, prefix := range []string{"_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "_tkinter"} {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		}
	}
	return false
}

// copyDir copies the host directory dir (already mirrored, so its path in the tree is a
// real directory) to the same path in the tree: copyDirTo with to = dir. It returns the
// host paths of the copied files that look like shared objects, for the library closure.
func (t *tree) copyDir(ctx context.Context, dir string, excluded func(rel string, isDir bool) bool) ([]string, error) {
	sos, err := t.copyDirTo(ctx, dir, dir, excluded)
	if err != nil {
		return nil, err
	}
	for i, rel := range sos {
		sos[i] = filepath.Join(dir, rel)
	}
	return sos, nil
}

// copyDirTo copies the host directory from into the tree at to (created with its
// parents where missing), leaving out what excluded says (rel is slash-separated and
// relative to from): copySource with from opened as named (a path only root may change,
// or the builder's own temporary directory).
func (t *tree) copyDirTo(ctx context.Context, from, to string, excluded func(rel string, isDir bool) bool) ([]string, error) {
	dir, err := os.OpenFile(from, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", from, err)
	}
	defer dir.Close()
	return t.copySource(ctx, dir, from, to, excluded)
}

// copySource copies the host directory dir (opened, at host path from) into the tree at
// to (created with its parents where missing), leaving out what excluded says (rel is
// slash-separated and relative to from). Directories are created and regular files
// copied (copyOpened: no set-id bit or owner survives). A symlink that stays inside
// from is kept as a symlink; one that leads elsewhere is replaced by a copy of the
// regular file it names (the tree must not depend on host paths that are not in it),
// or left out when it names none. A device, FIFO or socket is an error. A kept symlink
// whose target was left out is removed afterwards: it would dangle in the jail. It
// returns the paths, relative to from, of the copied files that look like shared
// objects (isSharedObject), for the library closure.
//
// Someone other than the builder may write the tree while it is copied (a venv's
// owner; a jail with the venv in a writable volume), and whatever the copy publishes
// every user and jail may read: so the walk goes by descriptor (treeCopy.entry), each
// entry opened once and judged by what was opened.
func (t *tree) copySource(ctx context.Context, dir *os.File, from, to string, excluded func(rel string, isDir bool) bool) ([]string, error) {
	if err := t.mkdirAll(to); err != nil {
		return nil, err
	}
	c := &treeCopy{t: t, ctx: ctx, from: from, to: to, excluded: excluded}
	if err := c.walk(dir, ""); err != nil {
		return nil, err
	}
	// A symlink whose target was left out would dangle in the jail.
	for _, l := range c.links {
		if _, err := os.Stat(t.in(l)); err != nil {
			t.log(fmt.Sprintf("leaving out %s: its target is not in the rootfs", l))
			if err := os.Remove(t.in(l)); err != nil {
				return nil, fmt.Errorf("remove dangling %s: %w", l, err)
			}
		}
	}
	return c.sos, nil
}

// treeCopy is one copySource under way.
type treeCopy struct {
	t        *tree
	ctx      context.Context
	from, to string
	excluded func(rel string, isDir bool) bool
	sos      []string // copied shared objects, relative to from
	links    []string // kept symlinks, in the tree
}

// beforeOpen, when set (by a test), runs with the host path of each source entry just
// before it is opened (or, a symlink, read): after its listing and after the walk
// that led to it, where a swap would have to land.
var beforeOpen func(host string)

// walk copies the entries of the directory dir (rel below from), in name order.
func (c *treeCopy) walk(dir *os.File, rel string) error {
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("walk %s: %w", filepath.Join(c.from, rel), err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		erel := path.Join(rel, e.Name())
		if c.excluded(erel, e.IsDir()) {
			continue
		}
		if err := c.entry(dir, e.Name(), erel, e.Type(), 0); err != nil {
			return err
		}
	}
	return nil
}

// entry copies the entry name of the directory dir (erel below from), whose type the
// listing gave as listed. The listing only says which open to try first: a file or directory is
// opened without following a symlink (ELOOP, when a symlink was put there since: then
// it is one) and judged by the fstat of the descriptor it is copied from; a symlink is
// read with readlinkat (EINVAL, when it is no symlink any more: then it is opened).
// An entry that keeps changing is refused. An entry listed as something else is
// refused unopened; one swapped for a FIFO since its listing does not block the open
// (O_NONBLOCK) and is refused by its fstat. (One swapped for a device node would be
// opened before its fstat refuses it; whoever may write the tree but is not root
// cannot make one there: mknod of a device needs CAP_MKNOD over the filesystem, which
// neither a user nor a jail's user namespace has, and a hard link to an existing node
// must be on the node's own filesystem, devtmpfs.)
func (c *treeCopy) entry(dir *os.File, name, erel string, listed fs.FileMode, changes int) error {
	p := filepath.Join(c.from, erel)
	if changes > 2 {
		return fmt.Errorf("copy %s: %w", p, errChanged)
	}
	if listed&fs.ModeSymlink != 0 {
		return c.link(dir, name, erel, changes)
	}
	if listed&^fs.ModeDir != 0 {
		return fmt.Errorf("copy %s: a %v, not a file, directory or symlink", p, listed)
	}
	if beforeOpen != nil {
		beforeOpen(p)
	}
	f, st, err := openEntry(int(dir.Fd()), name)
	if errors.Is(err, unix.ELOOP) {
		return c.entry(dir, name, erel, fs.ModeSymlink, changes+1)
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	defer f.Close()
	mode := fileMode(&st)
	if mode.Type() != listed.Type() && c.excluded(erel, mode.IsDir()) {
		return nil // what it is now is left out
	}
	dst := path.Join(c.to, erel)
	switch {
	case mode.IsDir():
		if err := publishable(p, mode, 0o005); err != nil {
			return err
		}
		if err := c.t.mkdir(dst); err != nil {
			return err
		}
		return c.walk(f, erel)
	case mode.IsRegular():
		if err := publishable(p, mode, 0o004); err != nil {
			return err
		}
	default:
		return fmt.Errorf("copy %s: a %v, not a file, directory or symlink", p, mode.Type())
	}
	if isSharedObject(erel) {
		c.sos = append(c.sos, erel)
	}
	return c.t.copyOpened(f, &st, p, dst)
}

// link copies the symlink name of the directory dir (erel below from): kept as a
// symlink when it stays inside from, else replaced by a copy of the regular file it
// leads to, which other users must be able to read (openHost: the target resolved by
// descriptor, every directory on the way and the file judged by what was opened), or
// left out when it leads to none.
func (c *treeCopy) link(dir *os.File, name, erel string, changes int) error {
	p := filepath.Join(c.from, erel)
	if beforeOpen != nil {
		beforeOpen(p)
	}
	target, err := readlinkAt(int(dir.Fd()), name)
	if errors.Is(err, unix.EINVAL) {
		return c.entry(dir, name, erel, 0, changes+1) // no symlink now: open what it is
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	dst := path.Join(c.to, erel)
	inside := path.Join(path.Dir(erel), target)
	if !path.IsAbs(target) && inside != ".." && !strings.HasPrefix(inside, "../") {
		c.links = append(c.links, dst)
		return c.t.symlink(dst, target)
	}
	// Followed, the link's target is published: a rootfs's files are readable
	// by every user and every jail. What the builder (root, say, building from
	// a user's venv) may read and others may not (/etc/shadow, a file below
	// /root) must not be. The target is resolved from the link's directory as
	// named: whatever that leads to by now is what is judged. Not cleaned: ".."
	// after a symlink of that path is the kernel's, which openHost follows.
	abs := target
	if !path.IsAbs(target) {
		abs = filepath.Dir(p) + "/" + target
	}
	f, err := openHost(abs)
	if err != nil {
		c.t.log(fmt.Sprintf("leaving out %s: symlink to %s outside %s (%v)", p, target, c.from, err))
		return nil
	}
	defer f.Close()
	if f.st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.t.log(fmt.Sprintf("leaving out %s: symlink to %s outside %s, not a regular file", p, target, c.from))
		return nil
	}
	if !f.public {
		return fmt.Errorf("copy %s: it links to %s, which other users may not read, and every file of a rootfs is readable by all: copy the file in, or remove the link", p, f.real)
	}
	if isSharedObject(erel) {
		c.sos = append(c.sos, erel)
	}
	return c.t.copyOpened(f.File, &f.st, p, dst)
}

// publishable refuses a file or directory of a copied tree that other users may
// not read (mode: what its descriptor's fstat says; want: the permission bits for
// others it needs, r or r-x): a rootfs publishes each of its files to every user
// and every jail, so that a file kept private where it was (a venv's .env at 0600,
// a directory made under umask 077) would be published by the copy, which makes
// it 0644.
func publishable(p string, mode fs.FileMode, want fs.FileMode) error {
	if mode.Perm()&want != want {
		return fmt.Errorf("copy %s: %v (mode %04o), and every file of a rootfs is readable by all: make it readable (chmod o+r, o+rx for a directory) if it belongs in the rootfs, or remove it", p, errNotPublic, mode.Perm())
	}
	return nil
}

// mkdirAll creates directory p of the tree and its missing parents.
func (t *tree) mkdirAll(p string) error {
	cur := "/"
	for _, c := range strings.Split(strings.Trim(filepath.Clean(p), "/"), "/") {
		if c == "" {
			continue
		}
		cur = path.Join(cur, c)
		if err := t.mkdir(cur); err != nil {
			return err
		}
	}
	return nil
}

// isSharedObject tells an extension module or library by its name.
func isSharedObject(p string) bool {
	base := path.Base(p)
	return strings.HasSuffix(base, ".so") || strings.Contains(base, ".so.")
}

// normalize gives every entry of the tree the modes and times a reproducible, safe root
// filesystem needs: directories 0755, files 0755 or 0644 (never set-id or sticky, whatever
// the host had or the umask did), one fixed mtime. A device, FIFO or socket is an error.
func normalize(ctx context.Context, root string) error {
	ts := unix.NsecToTimespec(fixedMtime.UnixNano())
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var perm fs.FileMode
		switch mode := d.Type(); {
		case d.IsDir():
			perm = 0o755
		case mode.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return fmt.Errorf("normalize %s: %w", p, err)
			}
			perm = 0o644
			if fi.Mode().Perm()&0o111 != 0 {
				perm = 0o755
			}
		case mode&fs.ModeSymlink != 0:
		default:
			return fmt.Errorf("normalize %s: a %v has no place in the rootfs", p, mode)
		}
		if perm != 0 {
			if err := os.Chmod(p, perm); err != nil {
				return fmt.Errorf("normalize %s: %w", p, err)
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("normalize %s: set mtime: %w", p, err)
		}
		return nil
	})
}

// treeSummary is what the manifest records about a tree's content.
type treeSummary struct {
	files  int   // regular files and symlinks
	size   int64 // bytes in regular files
	sha256 string
	// programs are the sizes of the interpreter and the shared libraries,
	// by path in the tree: Check compares them at every run, since a
	// damaged one crashes the payload rather than failing cleanly.
	programs map[string]int64
	// entries are every entry of the tree, sorted by path: the per-file list
	// (filesName) that `rljail rootfs verify` checks against.
	entries []fileEntry
}

// isProgram tells the files whose damage would crash the interpreter at
// start: executables in bin directories, shared libraries outside the
// standard library (whose extension modules fail to import cleanly) and the
// loader's cache, which names the libraries.
func isProgram(rel string) bool {
	base := path.Base(rel)
	switch {
	case strings.HasPrefix(rel, "/usr/bin/"), rel == LoaderCachePath:
		return true
	case strings.HasPrefix(rel, "/usr/lib/python"):
		return false
	}
	return strings.HasSuffix(base, ".so") || strings.Contains(base, ".so.")
}

// summarize hashes the tree: for every entry but the manifest and its lists (isOwnFile),
// sorted by path, its path,
// type, permission bits and the SHA-256 of its content or its symlink target. Mtimes and
// owners are left out (normalize fixes the one, the builder is the other), so equal hashes
// mean the jail sees the same files.
func summarize(ctx context.Context, root string) (treeSummary, error) {
	type record struct {
		path, line string
		entry      fileEntry
	}
	var recs []record
	var sum treeSummary
	err := walkEntries(ctx, root, func(p string, fi fs.FileInfo, e fileEntry) error {
		switch e.Kind {
		case 'f':
			sum.files++
			sum.size += e.Size
			if isProgram(e.Path) {
				if sum.programs == nil {
					sum.programs = map[string]int64{}
				}
				sum.programs[e.Path] = e.Size
			}
		case 'l':
			sum.files++
		case 'd':
		default:
			return fmt.Errorf("hash %s: a %v has no place in the rootfs", p, fi.Mode())
		}
		// The build's modes, without set-id or sticky bits (normalize leaves none):
		// should one be there all the same, the list records the mode without it, so
		// that Verify reports the bit rather than finding it as built.
		e.Perm = e.Perm.Perm()
		recs = append(recs, record{e.Path, fmt.Sprintf("%s\x00%c%04o\x00%s\x00", e.Path, e.Kind, e.Perm, e.Digest), e})
		return nil
	})
	if err != nil {
		return treeSummary{}, err
	}
	slices.SortFunc(recs, func(a, b record) int { return strings.Compare(a.path, b.path) })
	h := sha256.New()
	for _, r := range recs {
		io.WriteString(h, r.line)
		sum.entries = append(sum.entries, r.entry)
	}
	sum.sha256 = hex.EncodeToString(h.Sum(nil))
	return sum, nil
}

// treeRel is p's path in the tree at root as the manifest spells it: "/"
// for root itself, "/usr/bin/python3" below it.
func treeRel(root, p string) (string, error) {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + filepath.ToSlash(rel), nil
}
