package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// This file reads the host's files for a copy by descriptor. A build may
// copy from trees that someone other than the builder may write while it
// runs (a venv's owner, a jail with the venv in a writable volume), and a
// rootfs publishes every file it holds to every user at 0644: a check of a
// path followed by an open of the same path (lstat, then open; stat, then
// open) lets that someone swap a symlink to a file only the builder may
// read in between, and the open follows it. So every source is opened
// once, one name at a time relative to a directory already held open,
// never following a symlink (O_NOFOLLOW; a symlink is read with readlinkat
// on the descriptor of the link itself), and is judged by fstat of the
// descriptor it is then copied from. Every open names a single component
// relative to a held directory, so no path the kernel resolves can hold a
// symlink: openat2's RESOLVE_NO_SYMLINKS would add nothing, and this works
// on every kernel rljail runs on.

// entryFlags open an entry of a copied tree for reading: never through a
// symlink (ELOOP instead), without blocking on a FIFO, and without making a
// terminal the builder's.
const entryFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// errNotPublic is a file or directory that a user who is neither its owner
// nor in its group could not read: a rootfs, readable by all, must not
// publish it.
var errNotPublic = errors.New("other users may not read it")

// errChanged is an entry that changed its type again and again while the
// copy read it (a symlink, then a file, then a symlink).
var errChanged = errors.New("it changed while the build read it")

// openEntry opens the entry name of the directory dirfd (not following a
// symlink: ELOOP) and returns it with its fstat.
func openEntry(dirfd int, name string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat(dirfd, name, entryFlags, 0)
	if err != nil {
		return nil, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, err
	}
	return os.NewFile(uintptr(fd), name), st, nil
}

// readlinkAt reads the symlink name of the directory dirfd ("" for dirfd
// itself, an O_PATH descriptor of the link); EINVAL when it is no symlink.
func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
	}
}

// fileMode is the fs.FileMode of a raw stat mode: its type and permission bits.
func fileMode(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}

// hostFile is a host file or directory opened by openHost: the descriptor,
// its fstat, the real path it was reached by (no symlink in it), and
// whether a user who is neither its owner nor in its group could read it
// by that path.
type hostFile struct {
	*os.File
	st     unix.Stat_t
	real   string
	public bool
}

// openHost opens the host path p (absolute) as another user would reach it,
// and says whether they could: from /, one name at a time, each directory
// opened (O_PATH, O_NOFOLLOW) relative to the one before and judged by its
// fstat (others may search it: o+x), each symlink met read from the link
// opened and followed (40 at most, as the kernel), the last entry opened
// without following (entryFlags) and judged by its fstat (o+r, and o+x for
// a directory). A path changed while it is walked yields what was opened,
// judged as it is. Only a regular file or a directory is opened; anything
// else is an error, as is a path a directory of which the builder may not
// search. (An ACL could grant more; it is not consulted, which errs
// towards refusing.)
func openHost(p string) (*hostFile, error) {
	w := &hostWalk{}
	defer w.close()
	if err := w.push(unix.AT_FDCWD, "/"); err != nil {
		return nil, err
	}
	pending := strings.Split(p, "/")
	for hops := 0; ; {
		// The next component, and whether it is the last.
		c := ""
		for len(pending) > 0 && c == "" {
			c, pending = pending[0], pending[1:]
			if c == "." {
				c = ""
			}
		}
		last := true
		for _, rest := range pending {
			if rest != "" && rest != "." {
				last = false
				break
			}
		}
		switch {
		case c == "":
			// p named a directory (or /): open it for reading, as the last entry.
			return w.openTop()
		case c == "..":
			w.up()
			if last {
				return w.openTop()
			}
			continue
		}
		fd, st, err := w.step(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(w.path(), c), err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkAt(fd, "")
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path.Join(w.path(), c), err)
			}
			if hops++; hops > 40 {
				return nil, fmt.Errorf("%s: %w", p, unix.ELOOP)
			}
			if strings.HasPrefix(target, "/") {
				w.close()
				if err := w.push(unix.AT_FDCWD, "/"); err != nil {
					return nil, err
				}
			}
			pending = append(strings.Split(target, "/"), pending...)
		case unix.S_IFDIR:
			w.pushFD(fd, c, &st)
			if last {
				return w.openTop()
			}
		case unix.S_IFREG:
			unix.Close(fd)
			if !last {
				return nil, fmt.Errorf("%s: %w", path.Join(w.path(), c), unix.ENOTDIR)
			}
			if beforeOpen != nil {
				beforeOpen(path.Join(w.path(), c))
			}
			f, st, err := openEntry(w.top(), c)
			if errors.Is(err, unix.ELOOP) && hops < 40 {
				// A symlink now, where there was a file: walk it as one.
				hops++
				pending = []string{c}
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path.Join(w.path(), c), err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				f.Close()
				return nil, fmt.Errorf("%s: a %v, not a file or directory", path.Join(w.path(), c), fileMode(&st).Type())
			}
			return &hostFile{File: f, st: st, real: path.Join(w.path(), c), public: w.public() && st.Mode&0o004 != 0}, nil
		default:
			// Never opened: an open has effects of its own on a device (a
			// link to /dev/watchdog arms it) or blocks on a FIFO.
			unix.Close(fd)
			return nil, fmt.Errorf("%s: a %v, not a file or directory", path.Join(w.path(), c), fileMode(&st).Type())
		}
	}
}

// hostWalk is the chain of directories openHost holds, from / down: each
// an O_PATH descriptor opened relative to the one before, with its fstat.
type hostWalk struct {
	fds   []int
	names []string
	stats []unix.Stat_t
}

// push starts the chain anew at name (an absolute path) of dirfd.
func (w *hostWalk) push(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("open %s: %w", name, err)
	}
	w.pushFD(fd, name, &st)
	return nil
}

func (w *hostWalk) pushFD(fd int, name string, st *unix.Stat_t) {
	w.fds = append(w.fds, fd)
	w.names = append(w.names, name)
	w.stats = append(w.stats, *st)
}

// public tells whether others may search every directory of the chain
// (o+x), judged by the descriptors the walk went on from: the chain is the
// real path of its top, so this is the rule for what lies below it.
func (w *hostWalk) public() bool {
	for i := range w.stats {
		if w.stats[i].Mode&0o001 == 0 {
			return false
		}
	}
	return true
}

// step opens the entry c of the directory on top, not following it.
func (w *hostWalk) step(c string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat(w.top(), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// up goes to the parent: lexical ".." is the kernel's, since the chain
// holds no symlink. At / it stays, as the kernel's.
func (w *hostWalk) up() {
	if n := len(w.fds); n > 1 {
		unix.Close(w.fds[n-1])
		w.fds, w.names, w.stats = w.fds[:n-1], w.names[:n-1], w.stats[:n-1]
	}
}

func (w *hostWalk) top() int { return w.fds[len(w.fds)-1] }

func (w *hostWalk) path() string { return path.Join(append([]string{"/"}, w.names[1:]...)...) }

// openTop opens the directory on top of the chain for reading (relative
// to its parent, not following), which must still be the one the chain
// judged, and judges it: o+rx for others.
func (w *hostWalk) openTop() (*hostFile, error) {
	real := w.path()
	n := len(w.fds)
	var f *os.File
	var st unix.Stat_t
	var err error
	if n == 1 {
		f, st, err = openEntry(w.fds[0], ".")
	} else {
		f, st, err = openEntry(w.fds[n-2], w.names[n-1])
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", real, err)
	}
	if have := w.stats[n-1]; st.Dev != have.Dev || st.Ino != have.Ino {
		f.Close()
		return nil, fmt.Errorf("%s: %w", real, errChanged)
	}
	return &hostFile{File: f, st: st, real: real, public: w.public() && st.Mode&0o004 != 0}, nil
}

func (w *hostWalk) close() {
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.fds, w.names, w.stats = nil, nil, nil
}

// othersMayRead tells whether a user who is neither the owner of the
// regular file or directory at p nor in its group could read it: o+r on it
// (and o+x, a directory), o+x on every directory above it, as openHost
// judges the path by descriptor.
func othersMayRead(p string) bool {
	f, err := openHost(p)
	if err != nil {
		return false
	}
	f.Close()
	return f.public
}

// isDir tells whether the opened entry is a directory.
func (f *hostFile) isDir() bool { return f.st.Mode&unix.S_IFMT == unix.S_IFDIR }

// openVenvSite opens the directory rel (slash-separated: lib/python3.X/site-packages)
// of the venv at venv by descriptor: the venv as named, then each name below it
// without following a symlink. A symlink on the way (lib -> elsewhere) may lead only
// where others may read (openHost: every directory from / judged by what was opened),
// so that whoever may write the venv (its owner, a jail with it in a writable volume)
// cannot have the build publish a directory private to the builder, such as one below
// /root, by planting the link or by swapping it in after the check.
func openVenvSite(venv, rel string) (*os.File, error) {
	dir, err := os.OpenFile(venv, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	names := strings.Split(rel, "/")
	for i, c := range names {
		cur := filepath.Join(venv, path.Join(names[:i]...))
		f, st, err := openEntry(int(dir.Fd()), c)
		if errors.Is(err, unix.ELOOP) {
			f, err = openVenvLink(dir, cur, c, names[i+1:])
			dir.Close()
			return f, err
		}
		dir.Close()
		if err != nil {
			return nil, fmt.Errorf("it has no %s: %w", filepath.Join(cur, c), unwrapPathErr(err))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			f.Close()
			return nil, fmt.Errorf("it has no directory %s: %w", filepath.Join(cur, c), unix.ENOTDIR)
		}
		dir = f
	}
	return dir, nil
}

// openVenvLink opens the rest of a venv's site-packages path through the symlink name
// of the directory dir (at cur): where others may read only.
func openVenvLink(dir *os.File, cur, name string, rest []string) (*os.File, error) {
	target, err := readlinkAt(int(dir.Fd()), name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(cur, name), err)
	}
	if !path.IsAbs(target) {
		// From the real path of the directory held (the kernel's name for it):
		// ".." in the target is the kernel's then.
		real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dir.Fd()))
		if err != nil {
			real = cur
		}
		target = real + "/" + target
	}
	f, err := openHost(target + "/" + strings.Join(rest, "/"))
	if err != nil {
		return nil, fmt.Errorf("no site-packages through %s: %w", filepath.Join(cur, name), err)
	}
	if !f.isDir() {
		f.Close()
		return nil, fmt.Errorf("its site-packages leads to %s, not a directory", f.real)
	}
	if !f.public {
		f.Close()
		return nil, fmt.Errorf("its site-packages leads to %s, which other users may not read, and every file of a rootfs is readable by all", f.real)
	}
	return f.File, nil
}
