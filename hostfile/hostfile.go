// Package hostfile opens the host files that rljail reads or writes on its
// caller's behalf: the profile (--profile FILE), the env file
// (--env-file), the report (--result), the audit log (--audit-log), and
// every such file that later commands add (session contexts, egress
// lists, service configuration). They all get the same rules, here, in one
// place.
//
// Such a file is named by a host path, and a jail may write below some
// host paths: the volumes granted rw, in this run or in an earlier one. A
// payload could plant a symbolic link, a FIFO or a rewritten file under
// the file's name, and rljail, as root or as its user, would then write
// its report wherever the link points (truncating that file), block on the
// FIFO forever before its kill timer runs, or, worst, run the next jail
// under a profile the payload wrote (granting host /etc and /root, passing
// the caller's secrets in, allowing clone with namespace flags). So:
//
//   - a file inside a volume the jail may write is refused, by any name
//     (inodes are compared: the file and every directory above it, as the
//     path is written and as the opened file really lies), against the
//     merged volume list of the run (flags and profile alike);
//   - the file is opened without following a symbolic link in its last
//     element, unless that link lives in a directory only root may change
//     (/dev/stdout) or in procfs (/dev/fd/N from a shell's process
//     substitution);
//   - nothing blocks without a bound: the open is non-blocking (a FIFO
//     without a reader is an error), a file read for the caller is read
//     with a deadline and a size cap, and only a regular file, a FIFO, a
//     character device or a socket is used;
//   - a file read for the caller (a profile, an env file) that a jail
//     could have written is refused: one anybody may write, one owned by
//     the host id a root-run jail runs as, or one that a root-run jail
//     made and rljail gave to the volume's owner after the run, marked
//     JailWrittenAttr.
//
// What remains is said in SECURITY.md: a directory above such a file that
// an earlier run could write, and that this run does not grant, is not
// known to rljail.
package hostfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// JailWrittenAttr marks a regular file that a root-run jail made in a
// writable volume, and that rljail gave to the volume's owner after the
// run (jail/rwgrant.go); its value is the jail's host uid. Only root may
// read, set or remove a trusted.* attribute, so a jail can neither forge
// it nor take it off.
const JailWrittenAttr = "trusted.rljail.jail"

// DefaultReadTimeout bounds the reading of one file for the caller (a FIFO
// or a device whose writer never writes, or never closes).
const DefaultReadTimeout = 5 * time.Second

// Guard refuses the caller's files that lie inside the host paths a jail
// may write. The zero Guard knows no writable path and still applies every
// other rule.
type Guard struct {
	writable []string // host paths granted rw (the volumes' sources)
	// jailOwned reports whether a host uid is one a jail runs as; nil:
	// the host's overflow uid (nobody) only.
	jailOwned func(uid uint32) bool
	// readTimeout bounds ReadFile; zero: DefaultReadTimeout.
	readTimeout time.Duration
}

// NewGuard returns a Guard for the writable host paths given (the sources
// of the run's volumes granted rw). jailOwned, when not nil, says which
// host uids a jail runs as (files they own were written by a jail).
func NewGuard(writable []string, jailOwned func(uid uint32) bool) *Guard {
	return &Guard{writable: append([]string(nil), writable...), jailOwned: jailOwned}
}

// With returns a Guard that also refuses files below the writable paths
// given: the profile's volumes join those of the flags once it is read.
func (g *Guard) With(writable ...string) *Guard {
	n := *g
	n.writable = append(append([]string(nil), g.writable...), writable...)
	return &n
}

// WithReadTimeout returns a Guard whose ReadFile gives up after d.
func (g *Guard) WithReadTimeout(d time.Duration) *Guard {
	n := *g
	n.readTimeout = d
	return &n
}

// Writable lists the writable host paths g knows.
func (g *Guard) Writable() []string { return append([]string(nil), g.writable...) }

// Check refuses path (named by what, a flag such as "--result") when it
// lies inside a writable path, or is one, as the path is written: every
// directory above it and the file itself (when it exists) are compared by
// inode with each writable path, so that a volume reached by another name
// (a link, a bind mount) is still the volume. Open checks again what it
// opened.
func (g *Guard) Check(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	here := map[inode]bool{}
	for p := abs; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			here[inode{st.Dev, st.Ino}] = true
		}
		if p == "/" {
			break
		}
	}
	return g.refuseIn(what, path, here)
}

// checkOpened refuses the file opened as fd when the place it really lies
// (its path as procfs resolves it, every directory above that, and its own
// inode) is inside a writable path: a link followed because it lived in a
// trusted directory may still point into a volume.
func (g *Guard) checkOpened(what, path string, fd int, st *unix.Stat_t) error {
	here := map[inode]bool{{st.Dev, st.Ino}: true}
	if real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && filepath.IsAbs(real) {
		for p := filepath.Dir(real); ; p = filepath.Dir(p) {
			var dst unix.Stat_t
			if unix.Stat(p, &dst) == nil {
				here[inode{dst.Dev, dst.Ino}] = true
			}
			if p == "/" {
				break
			}
		}
	}
	return g.refuseIn(what, path, here)
}

// CheckFD refuses fd, a descriptor the caller passed (what names it, as
// --result-fd), when it is a regular file inside a writable path: the
// payload could have filled it, or keep writing to it, before rljail's
// report (red-team pass).
func (g *Guard) CheckFD(what string, fd int) error {
	return g.CheckFDNamed(what, strconv.Itoa(fd), fd)
}

// CheckFDNamed is CheckFD for a descriptor the caller knows by another
// name (what name: "--result -" for rljail's stdout).
func (g *Guard) CheckFDNamed(what, name string, fd int) error {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return g.checkOpened(what, name, fd, &st)
}

type inode struct{ dev, ino uint64 }

func (g *Guard) refuseIn(what, path string, here map[inode]bool) error {
	for _, w := range g.writable {
		var st unix.Stat_t
		if unix.Stat(w, &st) == nil && here[inode{st.Dev, st.Ino}] {
			return fmt.Errorf("%s %s is inside the volume %s that the jail may write: the payload could replace it or what it says; name a file outside it", what, path, w)
		}
	}
	return nil
}

// OpenWrite opens path, a file rljail writes for its caller (a report, a
// log), for writing with flags (O_WRONLY and more), creating it with mode.
// created says whether this call made it (the caller removes it again
// when it cannot be used). The file blocks as usual once open: a pipe's
// reader may be slow.
func (g *Guard) OpenWrite(what, path string, flags int, mode uint32) (*os.File, bool, error) {
	if err := g.Check(what, path); err != nil {
		return nil, false, err
	}
	_, statErr := os.Lstat(path)
	_, targetErr := os.Stat(path) // through a trusted link: is its target there?
	f, st, err := g.open(what, path, flags|unix.O_CREAT, mode, func(st *unix.Stat_t) bool {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFIFO, unix.S_IFCHR, unix.S_IFSOCK:
			return true
		}
		return false
	})
	if err != nil {
		return nil, false, err
	}
	if err := g.checkOpened(what, path, int(f.Fd()), &st); err != nil {
		if targetErr != nil {
			// Made by this open (through a trusted link, maybe): not
			// left behind.
			if real, e := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); e == nil {
				_ = os.Remove(real)
			}
		}
		f.Close()
		return nil, false, err
	}
	// (Fd makes the descriptor blocking again.)
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return f, statErr != nil, nil
}

// ReadFile reads path, a file rljail reads for its caller (a profile, an
// env file), whole: at most max bytes, within the Guard's read timeout,
// refusing one that a jail could have written.
func (g *Guard) ReadFile(what, path string, max int64) ([]byte, error) {
	if err := g.Check(what, path); err != nil {
		return nil, err
	}
	f, st, err := g.open(what, path, unix.O_RDONLY, 0, func(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT != unix.S_IFDIR })
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := g.checkOpened(what, path, fdOfOpen(f), &st); err != nil {
		return nil, err
	}
	if err := g.refuseJailWritten(what, path, fdOfOpen(f), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size > max {
		return nil, fmt.Errorf("%s %s is %d bytes, more than the %d it may be", what, path, st.Size, max)
	}
	timeout := g.readTimeout
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	// A FIFO, a socket or a terminal is polled (os.NewFile registers the
	// non-blocking descriptor with the runtime's poller), so the deadline
	// holds. What cannot be polled (a regular file, /dev/null) is read
	// with O_NONBLOCK still set: it does not wait for a writer either.
	_ = f.SetReadDeadline(time.Now().Add(timeout))
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("%s %s: nothing more to read within %s (a FIFO or device whose writer neither writes nor closes)", what, path, timeout)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", what, path, unwrapPathError(err))
	case int64(len(data)) > max:
		return nil, fmt.Errorf("%s %s is more than the %d bytes it may be", what, path, max)
	}
	return data, nil
}

// refuseJailWritten refuses a file for the caller to read (open as fd)
// that a jail could have written: one anybody may write, one owned by a
// host id that jails run as (root-run jails: files they create are
// theirs), or one marked JailWrittenAttr (a root-run jail's, given to the
// volume's owner after its run).
func (g *Guard) refuseJailWritten(what, path string, fd int, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // a pipe or a device: the caller's own, opened by name
	}
	if st.Mode&0o002 != 0 {
		return fmt.Errorf("%s %s may be written by anybody (mode %04o): a jail could have changed it; chmod o-w it", what, path, st.Mode&0o7777)
	}
	var mark [16]byte
	if n, err := unix.Fgetxattr(fd, JailWrittenAttr, mark[:]); err == nil || errors.Is(err, unix.ERANGE) {
		return fmt.Errorf("%s %s was written by a root-run jail (host uid %s) in a writable volume, and given to its owner after the run: check it, then take the mark off (setfattr -x %s FILE)", what, path, strconv.Quote(string(mark[:max(n, 0)])), JailWrittenAttr)
	}
	if uint32(os.Geteuid()) == st.Uid {
		return nil // the caller's own (jailOwned may read /etc/subuid)
	}
	owned := st.Uid == overflowUID
	if g.jailOwned != nil {
		owned = owned || g.jailOwned(st.Uid)
	}
	if owned {
		return fmt.Errorf("%s %s is owned by uid %d, a host id jails run as: a jail wrote it; check it and chown it to yourself", what, path, st.Uid)
	}
	return nil
}

// fdOfOpen is f's descriptor without making it blocking (as f.Fd would),
// which ReadFile's deadline needs.
func fdOfOpen(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(d uintptr) { fd = int(d) })
	}
	return fd
}

// overflowUID is the host's nobody, which root-run jails have been.
const overflowUID = 65534

// open opens path without following a planted link and without blocking
// on a FIFO, and keeps it if ok accepts what it is (the caller then checks
// where it lies: checkOpened). The descriptor stays non-blocking (ReadFile relies on
// it; OpenWrite makes it blocking).
func (g *Guard) open(what, path string, flags int, mode uint32, ok func(*unix.Stat_t) bool) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	flags |= unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW, mode)
	if errors.Is(err, unix.ELOOP) && trustedLink(path) {
		fd, err = unix.Open(path, flags, mode)
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, st, fmt.Errorf("%s %s is a symbolic link in a directory others may change: name the file it points to", what, path)
	case errors.Is(err, unix.ENXIO):
		return nil, st, fmt.Errorf("%s %s is a FIFO that nobody reads", what, path)
	case err != nil:
		return nil, st, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if err := unix.Fstat(fd, &st); err != nil || !ok(&st) {
		unix.Close(fd)
		return nil, st, fmt.Errorf("%s %s is not a file", what, path)
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// trustedLink reports whether the symbolic link path lives where no
// payload can have put it: in a directory that only root may change (as
// /dev/stdout does), or in procfs (/dev/fd/N, /proc/self/fd/N: a shell's
// process substitution).
func trustedLink(path string) bool {
	dir := filepath.Dir(path)
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.PROC_SUPER_MAGIC {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false
	}
	return st.Uid == 0 && st.Mode&0o022 == 0
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
