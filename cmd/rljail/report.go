package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/jail"
)

// The files rljail writes for its caller (--result, --audit-log), and the
// one it reads (--env-file), are named
// by paths on the host, and the jail may write below some host paths: the
// volumes granted rw. A payload could plant a symbolic link or a FIFO
// there under the file's name, in this run for the audit log or in an
// earlier one for either, and rljail, as root or as its user, would then
// write its report wherever the link points (truncating that file) or
// block on the FIFO's open forever, before its kill timer runs. So:
//
//   - a file inside a writable volume (by any name) is refused: its
//     directory is the jail's to change;
//   - the file is opened without following a symbolic link in its last
//     element, unless that link lives in a directory only root may change
//     (/dev/stdout, /dev/stderr);
//   - the open does not block (a FIFO without a reader is an error), and
//     only a regular file, a FIFO, a character device or a socket is
//     written to.

// checkOutsideWritableVolumes refuses path (named by flag) when it lies
// inside a volume granted rw, or is one. It compares inodes: the file and
// every directory above it as its path is written, with each volume's
// source, so that a volume reached by another name (a link, a bind mount)
// is still the volume.
func checkOutsideWritableVolumes(flag, path string, volumes []string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	type inode struct{ dev, ino uint64 }
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
	for _, v := range volumes {
		vol, err := jail.ParseVolume(v)
		if err != nil || !vol.Writable {
			continue // buildSpec reports a bad volume
		}
		var st unix.Stat_t
		if unix.Stat(vol.Source, &st) == nil && here[inode{st.Dev, st.Ino}] {
			return fmt.Errorf("%s %s is inside the volume %s that the jail may write: the payload could replace it with a link to another file; name a file outside it", flag, path, vol.Source)
		}
	}
	return nil
}

// openOutput opens a file rljail writes for its caller (see above) with
// flags (O_WRONLY and more), creating it with mode.
func openOutput(path string, flags int, mode uint32) (*os.File, error) {
	return openCallerFile(path, flags|unix.O_CREAT, mode, func(st *unix.Stat_t) bool {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFIFO, unix.S_IFCHR, unix.S_IFSOCK:
			return true
		}
		return false
	})
}

// openInput opens a file rljail reads for its caller (--env-file) as
// openOutput opens the ones it writes (a FIFO without a writer reads as
// empty).
func openInput(path string) (*os.File, error) {
	return openCallerFile(path, unix.O_RDONLY, 0, func(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT != unix.S_IFDIR })
}

// openCallerFile opens path without following a planted link and without
// blocking on a FIFO, and keeps it if ok accepts what it is; the file then
// blocks as usual (a pipe's other end may be slow).
func openCallerFile(path string, flags int, mode uint32, ok func(*unix.Stat_t) bool) (*os.File, error) {
	flags |= unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW, mode)
	if errors.Is(err, unix.ELOOP) && trustedLink(path) {
		fd, err = unix.Open(path, flags, mode)
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link in a directory others may change: name the file it points to", path)
	case errors.Is(err, unix.ENXIO):
		return nil, fmt.Errorf("%s is a FIFO that nobody reads", path)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || !ok(&st) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a file", path)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
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
