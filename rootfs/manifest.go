package rootfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// manifestName is the file, at the top of a rootfs, that marks it complete. Build writes
// it last, so a directory without it is half-built (or not ours) and is never used.
const manifestName = ".rljail-rootfs.json"

// formatVersion is the layout version Build writes and Check accepts; bump it when a
// rootfs built by an older rljail would no longer do.
const formatVersion = 1

// Manifest describes a built Python rootfs. Build writes it as <dir>/.rljail-rootfs.json
// after everything else, and Check reads it before the rootfs is used, so that a
// half-built or foreign directory is never mounted into a jail.
type Manifest struct {
	// FormatVersion is the rootfs layout version (1); another value means the rootfs
	// must be rebuilt by this rljail.
	FormatVersion int `json:"format_version"`
	// PythonVersion is the interpreter's version, e.g. "3.11.2", for `rljail rootfs info`.
	PythonVersion string `json:"python_version"`
	// Python is the interpreter's path inside the rootfs, e.g. "/usr/bin/python3.11";
	// /usr/bin/python3 and /usr/bin/python lead to it.
	Python string `json:"python"`
	// Source is the host interpreter the rootfs was built from (its resolved path), so
	// a user can tell when the host's Python changed under it.
	Source string `json:"source"`
	// Files counts the regular files and symlinks of the tree.
	Files int `json:"files"`
	// SizeBytes is the total size of the tree's regular files.
	SizeBytes int64 `json:"size_bytes"`
	// TreeSHA256 hashes the sorted paths, types, modes and contents (or symlink
	// targets) of the tree: equal inputs give equal hashes, which proves a build
	// reproducible and identifies what a jail ran on.
	TreeSHA256 string `json:"tree_sha256"`
	// Programs are the sizes of the interpreter and the shared libraries
	// by path in the tree; Check compares them, so that a truncated
	// library is a clear error rather than a crashing payload.
	Programs map[string]int64 `json:"programs,omitempty"`
	// Packages are the package sources the rootfs was built with
	// ("python3-numpy=1:1.24.2-1", "venv:/srv/venv", "wheels:/srv/wheels"),
	// for `rljail rootfs info`; none for the bare standard library.
	Packages []string `json:"packages,omitempty"`
}

// validate reports what makes m unusable.
func (m Manifest) validate() error {
	if m.FormatVersion != formatVersion {
		return fmt.Errorf("format version %d, this rljail needs %d", m.FormatVersion, formatVersion)
	}
	switch {
	case m.PythonVersion == "":
		return errors.New("no python_version")
	case !filepath.IsAbs(m.Python) || filepath.Clean(m.Python) != m.Python:
		return fmt.Errorf("python %q is not a clean absolute path", m.Python)
	case m.Files <= 0 || m.SizeBytes <= 0:
		return errors.New("empty tree")
	case len(m.TreeSHA256) != 64 || strings.Trim(m.TreeSHA256, "0123456789abcdef") != "":
		return fmt.Errorf("tree_sha256 %q is not a SHA-256", m.TreeSHA256)
	}
	return nil
}

// Check tells whether dir holds a complete Python rootfs, by reading and validating its
// manifest (it does not rehash the tree: it runs before every jail and must be cheap).
// The error names dir and says how to (re)build it.
func Check(dir string) (Manifest, error) {
	data, err := readManifestFile(filepath.Join(dir, manifestName))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
				return Manifest{}, fmt.Errorf("no Python rootfs at %s; run `rljail rootfs build` to create it", dir)
			}
			return Manifest{}, fmt.Errorf("%s is not a complete Python rootfs (no %s: half-built or not made by rljail); run `rljail rootfs build` to rebuild it", dir, manifestName)
		}
		return Manifest{}, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	m, err := parseManifest(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("rootfs %s: bad %s: %w; run `rljail rootfs build` to rebuild it", dir, manifestName, err)
	}
	// The interpreter must be a regular executable file at that path in the tree, and
	// every program and library the size the build wrote. The lookups stay inside dir
	// even if the tree were tampered with (beneath), and cost one fstatat a file, since
	// this runs before every jail.
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Manifest{}, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	defer unix.Close(root)
	b := beneath{root: root}
	defer b.close()
	if st, err := b.lstat(m.Python); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return Manifest{}, fmt.Errorf("rootfs %s: interpreter %s is missing or not an executable file; run `rljail rootfs build` to rebuild it", dir, m.Python)
	}
	for p, size := range m.Programs {
		if st, err := b.lstat(p); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != size {
			return Manifest{}, fmt.Errorf("rootfs %s: %s is missing or damaged (expected a file of %d bytes); run `rljail rootfs build` to rebuild it", dir, p, size)
		}
	}
	return m, nil
}

// maxManifest bounds the manifest read (a built one is some 100 KB).
const maxManifest = 16 << 20

// readManifestFile reads the manifest at p without following a link in its
// last element and without blocking: the rootfs may lie where a jail could
// write (a volume granted rw in an earlier run), and a FIFO planted under
// the manifest's name hung every later rljail in open, before its kill
// timer, through SIGTERM.
func readManifestFile(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if st.Size() > maxManifest {
		return nil, fmt.Errorf("%s is %d bytes, more than a manifest can be", p, st.Size())
	}
	return io.ReadAll(io.LimitReader(f, maxManifest))
}

// beneath looks up paths inside the tree at root without leaving it: each
// directory through openat2 with RESOLVE_BENEATH, once, and a file's last
// element by fstatat on that directory without following a link, which,
// one element that is not "." or "..", cannot lead out of it.
type beneath struct {
	root int
	dirs map[string]int
}

// lstat is lstat of the absolute path p inside the tree.
func (b *beneath) lstat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	dir, name := path.Split(strings.TrimPrefix(p, "/"))
	if name == "" || name == "." || name == ".." {
		return st, fmt.Errorf("%s: not a file's path", p)
	}
	at := b.root
	if dir != "" {
		fd, ok := b.dirs[dir]
		if !ok {
			var err error
			fd, err = unix.Openat2(b.root, dir, &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				return st, err
			}
			if b.dirs == nil {
				b.dirs = map[string]int{}
			}
			b.dirs[dir] = fd
		}
		at = fd
	}
	err := unix.Fstatat(at, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// close closes the directories lstat opened.
func (b *beneath) close() {
	for _, fd := range b.dirs {
		unix.Close(fd)
	}
}

// parseManifest decodes a manifest strictly: an unknown field means a format this rljail
// does not understand.
func parseManifest(data []byte) (Manifest, error) {
	m, ok := parseManifestFast(data)
	if !ok {
		m = Manifest{}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return Manifest{}, err
		}
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// writeManifest writes m into dir and flushes it to disk.
func writeManifest(dir string, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	p := filepath.Join(dir, manifestName)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", p, err)
	}
	return nil
}
