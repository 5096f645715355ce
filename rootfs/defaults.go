package rootfs

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RootDataDir is where root keeps its root filesystems, one directory per name: shared by
// every root-run jail, outside any home directory, and what DataDir and StableDataDir are
// for root whatever the environment.
const RootDataDir = "/var/lib/rljail/rootfs"

// DefaultDir says where the Python rootfs lives when the user did not choose: $RLJAIL_ROOTFS
// if set, else the rootfs named DefaultName in rljail's data directory:
// /var/lib/rljail/rootfs/python for root, else $XDG_DATA_HOME/rljail/rootfs/python, else
// $HOME/.local/share/rljail/rootfs/python. It fails, saying how to choose a place, where
// none of these is usable (no HOME, HOME=/nonexistent as for system users, or a parent the
// user cannot write), rather than building somewhere surprising.
func DefaultDir() (string, error) {
	return defaultDir(os.Geteuid(), os.Getenv, creatableDir)
}

// defaultDir is DefaultDir with its inputs passed in, so the rules can be tested for any
// user. creatable reports why dir cannot be used (or created) by this user.
func defaultDir(euid int, getenv func(string) string, creatable func(dir string) error) (string, error) {
	if d := getenv("RLJAIL_ROOTFS"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("RLJAIL_ROOTFS %s: %w", d, err)
		}
		return abs, nil
	}
	return namedDir(DefaultName, euid, getenv, creatable)
}

// namedDir is NamedDir with its inputs passed in (name already valid).
func namedDir(name string, euid int, getenv func(string) string, creatable func(dir string) error) (string, error) {
	base, err := dataDir(euid, getenv)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, name)
	if err := creatable(dir); err != nil {
		return "", fmt.Errorf("no writable default place for the Python rootfs (%s); pass --rootfs DIR or set RLJAIL_ROOTFS", err)
	}
	return dir, nil
}

// dataDir is the directory that holds the named root filesystems for this user.
func dataDir(euid int, getenv func(string) string) (string, error) {
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("no writable default place for the Python rootfs (%s); pass --rootfs DIR or set RLJAIL_ROOTFS", why)
	}
	switch xdg := getenv("XDG_DATA_HOME"); {
	case euid == 0:
		return RootDataDir, nil
	case filepath.IsAbs(xdg): // the XDG spec says to ignore a relative value
		return filepath.Join(xdg, "rljail", "rootfs"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return fail("HOME is not set")
	}
	// Never create a missing home directory (HOME=/nonexistent is how Debian says
	// "this user has none").
	if fi, err := os.Stat(home); !filepath.IsAbs(home) || err != nil || !fi.IsDir() {
		return fail("HOME is " + home)
	}
	return filepath.Join(home, ".local", "share", "rljail", "rootfs"), nil
}

// creatableDir accepts an existing directory (reading a rootfs is enough to use it) or
// a path whose nearest existing ancestor is a directory this user may write into.
func creatableDir(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != "/" {
			continue
		}
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", p, err)
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory", p)
		case p == dir:
			return nil
		}
		// AT_EACCESS: the effective uid is the one that will create the directories.
		if err := unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
			return fmt.Errorf("%s is not writable", p)
		}
		return nil
	}
}

// DefaultPython picks the host interpreter to build the rootfs from: /usr/bin/python3 if
// it exists (the distribution's, whose libraries the host keeps up to date), else the
// first python3 on PATH that is a real ELF program. Shims that are shell scripts (pyenv's,
// which come first on PATH on some machines) cannot be copied into a jail and are
// skipped. The result is the resolved path of the interpreter itself.
func DefaultPython() (string, error) {
	const system = "/usr/bin/python3"
	if _, err := os.Lstat(system); err == nil {
		return hostInterpreter(system)
	}
	var rejected []error
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue // never a python3 from the current directory
		}
		p := filepath.Join(dir, "python3")
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		real, err := hostInterpreter(p)
		if err == nil {
			return real, nil
		}
		rejected = append(rejected, err)
	}
	if len(rejected) > 0 {
		return "", fmt.Errorf("no usable python3 (%s does not exist): %w", system, errors.Join(rejected...))
	}
	return "", fmt.Errorf("no python3: %s does not exist and there is none on PATH; install python3", system)
}

// hostInterpreter resolves p (a path, or a name looked up on PATH by the caller) to the
// interpreter file itself and makes sure it is an executable ELF program: the rootfs is
// built from the binary and the libraries it loads, which a script cannot tell.
func hostInterpreter(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("python %s: %w", p, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", fmt.Errorf("python %s: %w", p, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("python %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("python %s (%s) is not an executable file", p, real)
	}
	f, err := elf.Open(real)
	if err != nil {
		head := make([]byte, 2)
		if fh, oerr := os.Open(real); oerr == nil {
			io.ReadFull(fh, head)
			fh.Close()
		}
		if bytes.Equal(head, []byte("#!")) {
			return "", fmt.Errorf("python %s (%s) is a script, such as a pyenv shim, not an interpreter; pass the real interpreter's path (for pyenv: `pyenv which python3`)", p, real)
		}
		return "", fmt.Errorf("python %s (%s) is not an ELF program: %w", p, real, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("python %s (%s) is an ELF %v, not a program", p, real, f.Type)
	}
	return real, nil
}
