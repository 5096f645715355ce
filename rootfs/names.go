package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultName is the name of the rootfs a run uses when nothing names another: the
// interpreter and its standard library, built on first use.
const DefaultName = "python"

// validName is what a rootfs name may be: short, lower case, no slash (a value with
// a slash is a directory), not starting with a dot (the data directory keeps its
// build locks and temporary trees under dot names): ^[a-z0-9][a-z0-9._-]{0,63}$,
// checked by hand, since every run checks its rootfs's name, and the regular
// expression's compilation (its {0,63} is 63 copies of the class) was a third of
// the instructions the supervisor of `rljail -- true` executed (callgrind).
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ValidName reports why name cannot name a rootfs, or nil.
func ValidName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%q is not a rootfs name (1 to 64 of a-z 0-9 . _ -, starting with a letter or digit); a directory needs a slash in it, such as ./%s", name, name)
	}
	return nil
}

// IsDirValue tells whether a --rootfs value is a directory (it has a slash) rather
// than the name of a rootfs in rljail's data directory.
func IsDirValue(value string) bool { return strings.Contains(value, "/") }

// DataDir is the directory holding the named root filesystems: /var/lib/rljail/rootfs
// for root, else $XDG_DATA_HOME/rljail/rootfs, else $HOME/.local/share/rljail/rootfs.
// RLJAIL_ROOTFS does not move it (that names one rootfs, the default one).
func DataDir() (string, error) { return dataDir(os.Geteuid(), os.Getenv) }

// StableDataDir is the data directory that the caller's environment cannot
// move: /var/lib/rljail/rootfs for root, else the passwd entry's home
// directory's .local/share/rljail/rootfs (HOME and XDG_DATA_HOME ignored).
// Every run refuses a writable volume over it whatever its environment
// (GuardedDataDirs), so a rootfs there is one no jail can have written; a
// data directory that only the environment names is not: a run with
// another XDG_DATA_HOME protects another directory, and may grant this
// one writable.
func StableDataDir() (string, error) { return StableDataDirOf(os.Geteuid()) }

// StableDataDirOf is StableDataDir for the user euid: what a run of that
// user would take as its own.
func StableDataDirOf(euid int) (string, error) {
	if euid == 0 {
		return RootDataDir, nil
	}
	u, err := user.LookupId(strconv.Itoa(euid))
	if err != nil {
		return "", fmt.Errorf("look up uid %d in the user database: %w", euid, err)
	}
	if !filepath.IsAbs(u.HomeDir) {
		return "", fmt.Errorf("uid %d has no home directory in the user database (%q)", euid, u.HomeDir)
	}
	return filepath.Join(u.HomeDir, ".local", "share", "rljail", "rootfs"), nil
}

// GuardedDataDirs are the data directories a run refuses a writable volume
// over: DataDir (the one this environment names) and StableDataDir, once
// each.
func GuardedDataDirs() []string {
	var out []string
	for _, f := range []func() (string, error){DataDir, StableDataDir} {
		if d, err := f(); err == nil && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// NamedDir is the directory of the rootfs called name in DataDir. It fails for an
// invalid name, and where the data directory could not be created by this user.
func NamedDir(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return namedDir(name, os.Geteuid(), os.Getenv, creatableDir)
}

// Resolve turns a --rootfs value into a directory: one with a slash is that
// directory (made absolute), a bare name is NamedDir(name).
func Resolve(value string) (string, error) {
	if IsDirValue(value) {
		dir, err := filepath.Abs(value)
		if err != nil {
			return "", fmt.Errorf("rootfs directory %s: %w", value, err)
		}
		return dir, nil
	}
	return NamedDir(value)
}

// Listed is one entry of List.
type Listed struct {
	Name string
	Dir  string
	// Manifest is the rootfs's manifest when Err is nil.
	Manifest Manifest
	// Err says why the directory is not a usable rootfs (half-built, built by an
	// older rljail, damaged).
	Err error
}

// List lists the named root filesystems in DataDir, sorted by name: every directory
// with a valid name, usable or not (Err says why not). A missing data directory is an
// empty list.
func List() ([]Listed, error) {
	base, err := DataDir()
	if err != nil {
		return nil, err
	}
	return listIn(base)
}

// listIn is List of the data directory base.
func listIn(base string) ([]Listed, error) {
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list root filesystems in %s: %w", base, err)
	}
	var out []Listed
	for _, e := range entries {
		if !e.IsDir() || ValidName(e.Name()) != nil {
			continue
		}
		l := Listed{Name: e.Name(), Dir: filepath.Join(base, e.Name())}
		l.Manifest, l.Err = Check(l.Dir)
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes the rootfs at dir atomically: it is renamed out of its place in one
// step (a run sees the rootfs or no rootfs, never half of one; a jail still running on
// it keeps its mounts) and then deleted. dir must hold an rljail rootfs (a manifest),
// complete or not, so that a mistyped path never deletes a user's directory. The
// caller holds the build lock (a build into dir at the same time would be lost).
func Remove(dir string) error {
	parent, err := OpenParent(dir)
	if err != nil {
		return err
	}
	defer parent.Close()
	return RemoveIn(parent, filepath.Base(dir), dir)
}

// OpenParent opens the directory that holds dir (following links once, as the
// path names it), for RemoveIn and InDir.
func OpenParent(dir string) (*os.File, error) {
	fd, err := unix.Open(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("no rootfs at %s: %w", dir, unwrapErrno(err))
	}
	return os.NewFile(uintptr(fd), filepath.Dir(dir)), nil
}

// InDir is a path that reaches name in the open directory parent however the path
// that named parent changes since (a component swapped for a symlink to another
// directory): /proc/self/fd/N/name.
func InDir(parent *os.File, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(int(parent.Fd())) + "/" + name
}

// RemoveIn is Remove of the rootfs name in the open directory parent (OpenParent);
// label names it in errors. Every step, the checks, the rename and the deletion, goes
// through parent, so that the removal lands where the caller's lock and checks were,
// even when a directory of the path belongs to someone else who repoints it while the
// caller waits for the lock.
func RemoveIn(parent *os.File, name, label string) error {
	dir := InDir(parent, name)
	exists, err := replaceable(dir)
	if err != nil {
		// replaceable speaks for a build ("refusing to replace it"):
		// here nothing is to be replaced, only removed.
		msg := strings.ReplaceAll(err.Error(), dir, label)
		if i := strings.Index(msg, "refusing to replace it"); i >= 0 {
			msg = msg[:i] + "refusing to remove it"
		}
		return errors.New(msg)
	}
	if !exists {
		return fmt.Errorf("no rootfs at %s", label)
	}
	if fi, err := os.Lstat(filepath.Join(dir, manifestName)); err != nil || !fi.Mode().IsRegular() {
		// replaceable also takes an empty directory, which is no rootfs.
		return fmt.Errorf("%s has no %s: not an rljail rootfs, refusing to remove it", label, manifestName)
	}
	at := filepath.Dir(dir)
	aside, err := os.MkdirTemp(at, "."+name+".removed-")
	if err != nil {
		return fmt.Errorf("remove %s: %w", label, unwrapErrno(err))
	}
	// aside is an empty directory: rename(2) replaces it with dir in one step
	// (os.Rename refuses to replace a directory).
	if err := unix.Rename(dir, aside); err != nil {
		os.Remove(aside)
		return fmt.Errorf("remove %s: %w", label, err)
	}
	if err := syncDir(at); err != nil {
		return fmt.Errorf("remove %s: %w", label, unwrapErrno(err))
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove %s (now at %s): %w", label, filepath.Join(filepath.Dir(label), filepath.Base(aside)), unwrapErrno(err))
	}
	return nil
}

// unwrapErrno is the errno of a path error, whose path may be InDir's.
func unwrapErrno(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
