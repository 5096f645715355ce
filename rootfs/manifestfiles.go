package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// filesName is the per-file list at the top of a rootfs: one line per entry of the tree
// with its type, mode, size and SHA-256 (or link target). It is a file of its own, in a
// line format, because the manifest is parsed before every jail and this list (some 2000
// lines, 20000 for a data-science rootfs) is read only by `rljail rootfs verify`; the
// manifest's files_sha256 holds it to the build.
const filesName = ".rljail-files"

// filesHeader is the first line of filesName.
const filesHeader = "rljail-files 1"

// maxFileList bounds the list read (about 110 bytes an entry).
const maxFileList = 256 << 20

// isOwnFile tells the files of the tree that describe it rather than belong to it: the
// manifest, the per-file list and the fingerprint.
func isOwnFile(rel string) bool {
	return rel == "/"+manifestName || rel == "/"+filesName || rel == "/"+fingerprintName
}

// fileEntry is one entry of the tree as the build left it.
type fileEntry struct {
	// Path is the entry's absolute path inside the tree ("/" for the top).
	Path string
	// Kind is 'd' (directory), 'f' (regular file) or 'l' (symlink).
	Kind byte
	// Perm holds the permission bits (0777 for a symlink).
	Perm fs.FileMode
	// Size is a regular file's size, -1 for the other kinds.
	Size int64
	// Xattrs are the extended attributes found on the entry (scanTree only:
	// a build writes none, so the list records none; see liveXattrs).
	Xattrs []string
	// Digest is a regular file's SHA-256 in hex, a symlink's target, "" for a
	// directory.
	Digest string
}

// escapeField writes s so that it holds no space, control character or non-ASCII byte:
// those bytes, and '%', become %XX. A path may hold any byte but NUL.
func escapeField(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeField undoes escapeField.
func unescapeField(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

// encodeFileList writes the list: the header, then one line an entry,
// "KIND MODE SIZE DIGEST PATH" ("-" for what a kind has not).
func encodeFileList(entries []fileEntry) []byte {
	var b bytes.Buffer
	b.WriteString(filesHeader + "\n")
	for _, e := range entries {
		size, digest := "-", "-"
		switch e.Kind {
		case 'f':
			size, digest = strconv.FormatInt(e.Size, 10), e.Digest
		case 'l':
			digest = escapeField(e.Digest)
		}
		fmt.Fprintf(&b, "%c %04o %s %s %s\n", e.Kind, e.Perm, size, digest, escapeField(e.Path))
	}
	return b.Bytes()
}

// parseFileList reads what encodeFileList wrote.
func parseFileList(data []byte) ([]fileEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() || sc.Text() != filesHeader {
		return nil, fmt.Errorf("%s does not start with %q", filesName, filesHeader)
	}
	var out []fileEntry
	for line := 2; sc.Scan(); line++ {
		bad := func(why string) error { return fmt.Errorf("%s line %d: %s", filesName, line, why) }
		f := strings.Split(sc.Text(), " ")
		if len(f) != 5 || len(f[0]) != 1 || !strings.Contains("dfl", f[0]) {
			return nil, bad("not KIND MODE SIZE DIGEST PATH")
		}
		e := fileEntry{Kind: f[0][0], Size: -1}
		perm, err := strconv.ParseUint(f[1], 8, 32)
		if err != nil || perm > 0o777 {
			return nil, bad("bad mode " + f[1])
		}
		e.Perm = fs.FileMode(perm)
		if e.Path, err = unescapeField(f[4]); err != nil || !strings.HasPrefix(e.Path, "/") {
			return nil, bad("bad path " + f[4])
		}
		switch e.Kind {
		case 'f':
			if e.Size, err = strconv.ParseInt(f[2], 10, 64); err != nil || e.Size < 0 || !isSHA256(f[3]) {
				return nil, bad("bad size or digest")
			}
			e.Digest = f[3]
		case 'l':
			if e.Digest, err = unescapeField(f[3]); err != nil {
				return nil, bad("bad link target")
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", filesName, err)
	}
	return out, nil
}

// writeFileList writes the list into dir and returns its SHA-256 for the manifest.
func writeFileList(dir string, entries []fileEntry) (string, error) {
	data := encodeFileList(entries)
	if err := writeNewFile(filepath.Join(dir, filesName), data); err != nil {
		return "", fmt.Errorf("write the file list: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// writeNewFile creates p (never over an existing file) with data and flushes it.
func writeNewFile(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Difference is one way a rootfs differs from its build.
type Difference struct {
	// Path is the entry's path inside the rootfs.
	Path string
	// What says how it differs, e.g. "content changed", "added".
	What string
}

// String is the difference as one line of plain text. A name in the tree may hold
// any byte but NUL and '/': a path that holds a control character, a byte that is
// not UTF-8 or anything else Go would escape is written quoted (strconv.Quote), so
// that a file named like an escape sequence, or like a second line ("... is as
// built"), reaches a terminal as neither.
func (d Difference) String() string { return DisplayPath(d.Path) + ": " + d.What }

// DisplayPath is p as it may be printed: itself when it is plain printable text,
// else Go-quoted.
func DisplayPath(p string) string {
	if q := strconv.Quote(p); q[1:len(q)-1] != p {
		return q
	}
	return p
}

// Verify compares every entry of the rootfs at dir with its per-file list: type, mode,
// size, content digest or link target, and entries added or missing. It hashes every
// file (about 0.2 s for a 50 MB tree), so it is `rljail rootfs verify`, not a run's
// check. Then it compares the fingerprint the build recorded (what a run checks), and
// reports the entries whose metadata changed while their content did not (a touch,
// chown, or a copy of the tree), since a run refuses those too. err is for a rootfs
// that cannot be verified at all (no manifest, a list that does not match it).
func Verify(dir string) ([]Difference, error) {
	data, err := readManifestFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	m, err := parseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: bad %s: %w; run `rljail rootfs build` to rebuild it", dir, manifestName, err)
	}
	list, err := readBounded(filepath.Join(dir, filesName), maxFileList)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: the file list: %w", dir, err)
	}
	if sum := sha256.Sum256(list); hex.EncodeToString(sum[:]) != m.FilesSHA256 {
		return []Difference{{Path: "/" + filesName, What: "the file list does not match the manifest's files_sha256 (changed since the build)"}}, nil
	}
	want, err := parseFileList(list)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	got, err := scanTree(dir)
	if err != nil {
		return nil, err
	}
	diffs := compareEntries(want, got)
	seen := map[string]bool{}
	for _, d := range diffs {
		seen[d.Path] = true
	}
	fdiffs, err := fingerprintDifferences(dir)
	if err != nil {
		diffs = append(diffs, Difference{Path: "/" + fingerprintName, What: err.Error()})
	}
	explained := func(dir string) bool { // a change inside dir says why dir changed
		for _, d := range diffs {
			if strings.HasPrefix(d.Path, strings.TrimSuffix(dir, "/")+"/") {
				return true
			}
		}
		return false
	}
	for _, d := range fdiffs {
		if d.isDirectoryStamp() && explained(d.Path) {
			continue
		}
		if !seen[d.Path] && !strings.HasPrefix(d.What, "added") && !strings.HasPrefix(d.What, "missing") {
			diffs = append(diffs, Difference{Path: d.Path, What: "metadata changed since the build (inode, ctime, mtime or owner), content and mode as built; a run refuses it"})
		}
	}
	sort.SliceStable(diffs, func(i, j int) bool { return diffs[i].Path < diffs[j].Path })
	return diffs, nil
}

// compareEntries lists how got differs from want (both sorted by path or not).
func compareEntries(want, got []fileEntry) []Difference {
	kinds := map[byte]string{'d': "directory", 'f': "file", 'l': "symlink", '?': "special file"}
	have := make(map[string]fileEntry, len(got))
	for _, e := range got {
		have[e.Path] = e
	}
	var diffs []Difference
	for _, w := range want {
		g, ok := have[w.Path]
		delete(have, w.Path)
		switch {
		case !ok:
			diffs = append(diffs, Difference{w.Path, "missing"})
		case g.Kind != w.Kind:
			diffs = append(diffs, Difference{w.Path, fmt.Sprintf("is a %s, built as a %s", kinds[g.Kind], kinds[w.Kind])})
		default:
			if g.Perm != w.Perm {
				diffs = append(diffs, Difference{w.Path, fmt.Sprintf("mode %04o, built %04o", g.Perm, w.Perm)})
			}
			if len(g.Xattrs) > 0 {
				diffs = append(diffs, Difference{w.Path, "extended attributes " + strings.Join(g.Xattrs, ", ") + " set, built with none"})
			}
			switch {
			case w.Kind == 'f' && g.Size != w.Size:
				diffs = append(diffs, Difference{w.Path, fmt.Sprintf("content changed (%d bytes, built %d)", g.Size, w.Size)})
			case w.Kind == 'f' && g.Digest != w.Digest:
				diffs = append(diffs, Difference{w.Path, fmt.Sprintf("content changed (sha256 %.12s, built %.12s)", g.Digest, w.Digest)})
			case w.Kind == 'l' && g.Digest != w.Digest:
				diffs = append(diffs, Difference{w.Path, fmt.Sprintf("link target %q, built %q", g.Digest, w.Digest)})
			}
		}
	}
	for p, g := range have {
		diffs = append(diffs, Difference{p, "added (a " + kinds[g.Kind] + ")"})
	}
	sort.SliceStable(diffs, func(i, j int) bool { return diffs[i].Path < diffs[j].Path })
	return diffs
}

// scanTree reads the tree at dir as it is now, in the list's terms, without following
// a link and without blocking on a planted FIFO.
func scanTree(dir string) ([]fileEntry, error) {
	var out []fileEntry
	err := walkEntries(context.Background(), dir, func(p string, _ fs.FileInfo, e fileEntry) error {
		var err error
		if e.Xattrs, err = liveXattrs(p); err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// walkEntries calls fn with every entry of the tree at root but its own files
// (isOwnFile), in WalkDir's order, with its lstat information and as the list
// records it: the path in the tree, the
// kind ('?' for a device, FIFO or socket: fn decides), the permission bits with any
// set-id or sticky bit (unixPerm), a regular file's size and SHA-256 (read without
// following a link or blocking: regularFileSHA256), a symlink's target. No link is
// followed and no extended attribute read (fn's to do). summarize records a build with
// it and scanTree reads the tree Verify compares, so that the two read an entry alike.
func walkEntries(ctx context.Context, root string, fn func(p string, fi fs.FileInfo, e fileEntry) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := treeRel(root, p)
		if err != nil {
			return err
		}
		if isOwnFile(rel) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		e := fileEntry{Path: rel, Perm: unixPerm(fi.Mode()), Size: -1}
		switch mode := fi.Mode(); {
		case mode.IsDir():
			e.Kind = 'd'
		case mode.IsRegular():
			e.Kind, e.Size = 'f', fi.Size()
			if e.Digest, err = regularFileSHA256(p); err != nil {
				return fmt.Errorf("hash %s: %w", p, err)
			}
		case mode&fs.ModeSymlink != 0:
			e.Kind = 'l'
			if e.Digest, err = os.Readlink(p); err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
		default:
			e.Kind = '?'
		}
		return fn(p, fi, e)
	})
}

// unixPerm is mode's permission bits with the setuid, setgid and sticky bits as
// chmod(2) numbers them (04000, 02000, 01000). A build never sets those (normalize
// gives every entry 0755 or 0644), so Verify must see them: fs.FileMode.Perm drops
// them, and a setuid-root interpreter would otherwise be "as built" (on the host, where
// the rootfs is not mounted nosuid, it would be root for every local user).
func unixPerm(mode fs.FileMode) fs.FileMode {
	perm := mode.Perm()
	if mode&fs.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	return perm
}

// labelXattrs are extended attributes a host's security module or integrity
// subsystem puts on every file it sees (a label, a measurement), never a build's or a
// user's change to the tree: Verify does not count them.
var labelXattrs = map[string]bool{"security.selinux": true, "security.SMACK64": true, "security.ima": true, "security.evm": true, "security.apparmor": true}

// liveXattrs lists the extended attributes of the entry at p (not following a link),
// but those of labelXattrs, sorted. A build writes none, so every one is a change since
// the build that the fingerprint check saw only as a new ctime: a file capability
// (security.capability), a POSIX ACL (system.posix_acl_*), an overlayfs attribute
// (trusted.overlay.*, user.overlay.*) that changes what a stacked mount shows.
func liveXattrs(p string) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil // a filesystem without extended attributes
		}
		if err != nil {
			return nil, fmt.Errorf("list extended attributes: %w", err)
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" && !labelXattrs[name] {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		return names, nil
	}
}

// regularFileSHA256 hashes the regular file at p, refusing anything that replaced it
// meanwhile (a link, a FIFO).
func regularFileSHA256(p string) (string, error) {
	data, err := openRegular(p)
	if err != nil {
		return "", err
	}
	defer data.Close()
	h := sha256.New()
	if _, err := io.Copy(h, data); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// openRegular opens p for reading without following a link in its last element or
// blocking, and only if it is a regular file.
func openRegular(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return f, nil
}

// readBounded reads the regular file at p, at most max bytes.
func readBounded(p string, max int64) ([]byte, error) {
	f, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is more than %d bytes", p, max)
	}
	return data, nil
}

// SharedFiles lists the regular files of the rootfs at dir that have
// another name (a hard link) somewhere on its filesystem: a build makes
// none, and through that other name, in a directory a run grants writable,
// a jail writes the rootfs's file itself. A run that walks the rootfs
// sees the write (it changes the file's ctime); one that takes the rootfs
// after a look at its top only (cmd/rljail's unwritableByJails: the
// owner's data directory) does not, so `rljail rootfs verify` lists them
// there and --update-fingerprint refuses them. The rootfs's own files
// count too: a cp -al of the whole tree links them.
func SharedFiles(dir string) ([]Difference, error) {
	var out []Difference
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink < 2 {
			return nil
		}
		rel, err := treeRel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, Difference{Path: rel, What: fmt.Sprintf("%d names: a hard link elsewhere on its filesystem shares the file, and a jail granted a writable volume that holds the other name would change it unseen by runs (they take this rootfs after a look at its top only); replace the other name with a copy (cp, not ln or cp -al)", st.Nlink)})
		return nil
	})
	return out, err
}
