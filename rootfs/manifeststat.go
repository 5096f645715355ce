package rootfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The fingerprint is how a run tells, cheaply, that the tree is the one its build
// left: for every entry, the inode number, ctime and mtime (in ns), size, mode and
// owner that lstat(2) gave right after the build's last write. Hashing the tree's
// 50 MB before each jail would cost some 100 ms; comparing these costs one fstatat an
// entry (a fraction of a millisecond for 2200 entries, run while the kernel builds
// the jail's namespaces: cmd/rljail gates the payload's execve on it).
//
// Why it is sound against what it guards (something on the host altering the rootfs
// after its build: a package script, a user who may write it; a jail cannot, the tree
// is mounted read-only):
//   - writing a file (write, truncate, a writable mmap) changes its mtime and ctime
//     (POSIX), and chmod, chown, link and unlink its ctime, which no user can set:
//     utimensat(2) sets atime and mtime, and itself sets ctime to now;
//   - replacing a file (rename over it, delete and create) gives another inode or,
//     should the number be reused, a new ctime, and changes its directory's mtime and
//     ctime; so does adding, removing or renaming any entry of a directory, which is
//     why a directory whose own fingerprint is unchanged needs no readdir;
//   - the build waits until the clock has passed the newest ctime it recorded before
//     it installs the tree, so a change after the build cannot carry the same
//     timestamp even where timestamps are coarse (the kernel stamps with a clock that
//     ticks every few ms).
//
// What it does not see: a change written below the filesystem (the block device,
// debugfs) or with the system clock set back to the nanosecond, both root's doing; a
// change made while a run is starting (the check sees the tree as it was at its own
// time: the next run sees the change); and a deliberate forgery that rewrites the
// manifest, the file list and this fingerprint to match a changed tree, which anyone
// who may write the tree could equally achieve by building a rootfs of their own.
// The top directory's own timestamps are not recorded (installing the tree renames
// it); its entries are compared by name instead.

// fingerprintName is the fingerprint file at the top of a rootfs. It is binary (a run
// reads it before every jail) and written last, after the manifest and the file list,
// whose own fingerprints it holds.
const fingerprintName = ".rljail-stat"

// fingerprintMagic starts the fingerprint file. Format 2 follows it with
// the record's owner summary (fpOwner), then the sections; format 1, which
// an earlier rljail wrote, has the sections right after its magic.
const (
	fingerprintMagic   = "rljail-stat 2\n"
	fingerprintMagicV1 = "rljail-stat 1\n"
)

// topPrefix is how much of the fingerprint file a run reads where it looks
// at the top directory only (CheckFingerprintTop): the magic, the owner
// summary and the top's section, a dozen entries, come first. The whole
// file is some 70 bytes an entry (1.2 MB for the data rootfs's 16,500),
// which that run would read and parse for nothing.
const topPrefix = 16 << 10

// maxFingerprint bounds the fingerprint read (about 70 bytes an entry).
const maxFingerprint = 256 << 20

// tupleSize is the size of one entry's recorded stat: inode, ctime, mtime, size (8
// bytes each), mode, uid, gid (4 each), little-endian.
const tupleSize = 44

// encodeTuple writes st's fingerprint into b[:tupleSize].
func encodeTuple(b []byte, st *unix.Stat_t) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], st.Ino)
	le.PutUint64(b[8:], uint64(st.Ctim.Nano()))
	le.PutUint64(b[16:], uint64(st.Mtim.Nano()))
	le.PutUint64(b[24:], uint64(st.Size))
	le.PutUint32(b[32:], st.Mode)
	le.PutUint32(b[36:], st.Uid)
	le.PutUint32(b[40:], st.Gid)
}

// fpSection is one directory of the fingerprint: its path ("" for the top, else
// relative, such as "usr/lib") and its entries' names and tuples.
type fpSection struct {
	dir    string
	names  []string
	tuples []byte // len(names) * tupleSize
}

// recordFingerprint records the fingerprint of the tree at root as it is now, and
// the newest ctime in it.
func recordFingerprint(root string) ([]fpSection, time.Time, bool, error) {
	var sections []fpSection
	index := map[string]int{}
	var newest int64
	coarse := true // every ctime a whole second: a filesystem with coarse timestamps
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("fingerprint %s: %w", p, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			index[""] = len(sections)
			sections = append(sections, fpSection{dir: ""})
			return nil
		}
		if rel == fingerprintName {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("fingerprint %s: %w", p, err)
		}
		parent := path.Dir(rel)
		if parent == "." {
			parent = ""
		}
		i, ok := index[parent]
		if !ok {
			return fmt.Errorf("fingerprint %s: its directory was not seen first", p)
		}
		s := &sections[i]
		s.names = append(s.names, path.Base(rel))
		var t [tupleSize]byte
		encodeTuple(t[:], &st)
		s.tuples = append(s.tuples, t[:]...)
		if c := st.Ctim.Nano(); c > newest {
			newest = c
		}
		if st.Ctim.Nsec != 0 {
			coarse = false
		}
		if d.IsDir() {
			index[rel] = len(sections)
			sections = append(sections, fpSection{dir: rel})
		}
		return nil
	})
	return sections, time.Unix(0, newest), coarse, err
}

// encodeFingerprint writes the sections in the file's format: the magic, the owner
// summary (fpOwner, a uvarint), then per section 'D', the directory's path and the
// number of entries, then per entry its name and tuple (lengths and counts as
// uvarints).
func encodeFingerprint(sections []fpSection) []byte {
	var b bytes.Buffer
	b.WriteString(fingerprintMagic)
	b.Write(binary.AppendUvarint(nil, fpOwner(sections)))
	for _, s := range sections {
		b.WriteByte('D')
		b.Write(binary.AppendUvarint(nil, uint64(len(s.dir))))
		b.WriteString(s.dir)
		b.Write(binary.AppendUvarint(nil, uint64(len(s.names))))
		for i, n := range s.names {
			b.Write(binary.AppendUvarint(nil, uint64(len(n))))
			b.WriteString(n)
			b.Write(s.tuples[i*tupleSize : (i+1)*tupleSize])
		}
	}
	return b.Bytes()
}

// fpOwner summarizes the record for the top-only check: uid+1 when every entry
// (a symlink's mode aside) is recorded as owned by uid and writable by neither
// its group nor others, as a build leaves it, else 0. It is written with the
// record, from the same tuples, so that a run need not read every entry's to
// know it (writableOnlyBy, for a record of format 1).
func fpOwner(sections []fpSection) uint64 {
	le := binary.LittleEndian
	owner, seen := uint32(0), false
	for _, s := range sections {
		for i := 0; i < len(s.names); i++ {
			tuple := s.tuples[i*tupleSize : (i+1)*tupleSize]
			mode := le.Uint32(tuple[32:])
			if mode&unix.S_IFMT == unix.S_IFLNK {
				continue
			}
			uid := le.Uint32(tuple[36:])
			if mode&0o022 != 0 || (seen && uid != owner) {
				return 0
			}
			owner, seen = uid, true
		}
	}
	if !seen {
		return 0
	}
	return uint64(owner) + 1
}

// fpHeader reads the fingerprint file's magic and, in format 2, its owner
// summary: body is where the sections start; summarized says the file has a
// summary, and owner is then the uid every entry is recorded as owned by (and
// writable by no one else), ok false where they are not all so.
func fpHeader(data []byte) (body int, owner uint32, summarized, ok bool, err error) {
	switch {
	case bytes.HasPrefix(data, []byte(fingerprintMagicV1)):
		return len(fingerprintMagicV1), 0, false, false, nil
	case bytes.HasPrefix(data, []byte(fingerprintMagic)):
		r := fpReader{data: data, i: len(fingerprintMagic)}
		v, k := binary.Uvarint(data[r.i:])
		if k <= 0 || v > 1<<32 {
			return 0, 0, false, false, errBadFingerprint
		}
		if v == 0 {
			return r.i + k, 0, true, false, nil
		}
		return r.i + k, uint32(v - 1), true, true, nil
	}
	return 0, 0, false, false, errBadFingerprint
}

// errBadFingerprint is a fingerprint file that does not parse.
var errBadFingerprint = errors.New("the fingerprint " + fingerprintName + " is damaged")

// fpReader reads the fingerprint file section by section.
type fpReader struct {
	data []byte
	i    int
}

func (r *fpReader) uvarint() (int, bool) {
	n, k := binary.Uvarint(r.data[r.i:])
	if k <= 0 || n > uint64(len(r.data)) {
		return 0, false
	}
	r.i += k
	return int(n), true
}

func (r *fpReader) bytes(n int) ([]byte, bool) {
	if n < 0 || r.i+n > len(r.data) {
		return nil, false
	}
	b := r.data[r.i : r.i+n]
	r.i += n
	return b, true
}

// section reads the next section's directory and entry count; ok is false at the
// end, err for a damaged file.
func (r *fpReader) section() (dir []byte, n int, ok bool, err error) {
	if r.i == len(r.data) {
		return nil, 0, false, nil
	}
	if r.data[r.i] != 'D' {
		return nil, 0, false, errBadFingerprint
	}
	r.i++
	l, ok1 := r.uvarint()
	dir, ok2 := r.bytes(l)
	n, ok3 := r.uvarint()
	if !ok1 || !ok2 || !ok3 {
		return nil, 0, false, errBadFingerprint
	}
	return dir, n, true, nil
}

// entry reads a section's next entry.
func (r *fpReader) entry() (name, tuple []byte, err error) {
	l, ok1 := r.uvarint()
	name, ok2 := r.bytes(l)
	tuple, ok3 := r.bytes(tupleSize)
	if !ok1 || !ok2 || !ok3 || len(name) == 0 || bytes.IndexByte(name, '/') >= 0 || string(name) == "." || string(name) == ".." {
		return nil, nil, errBadFingerprint
	}
	return name, tuple, nil
}

// decodeFingerprint parses the whole file (the slow path and tests).
func decodeFingerprint(data []byte) ([]fpSection, error) {
	body, _, _, _, err := fpHeader(data)
	if err != nil {
		return nil, err
	}
	r := fpReader{data: data, i: body}
	var out []fpSection
	for {
		dir, n, ok, err := r.section()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		s := fpSection{dir: string(dir)}
		for k := 0; k < n; k++ {
			name, tuple, err := r.entry()
			if err != nil {
				return nil, err
			}
			s.names = append(s.names, string(name))
			s.tuples = append(s.tuples, tuple...)
		}
		out = append(out, s)
	}
	if len(out) == 0 || out[0].dir != "" {
		return nil, errBadFingerprint
	}
	return out, nil
}

// writeFingerprint records the fingerprint of the finished tree at root and writes it
// there, after waiting until the clock has passed the newest ctime in it (a change
// made after the build then cannot carry a recorded timestamp). Nothing may write the
// tree after it but the install's rename of the top directory.
func writeFingerprint(root string) error {
	sections, newest, coarse, err := recordFingerprint(root)
	if err != nil {
		return err
	}
	if err := waitPast(newest, coarse); err != nil {
		return err
	}
	p := filepath.Join(root, fingerprintName)
	if err := writeNewFile(p, encodeFingerprint(sections)); err != nil {
		return fmt.Errorf("write the fingerprint: %w", err)
	}
	if err := os.Chmod(p, 0o644); err != nil { // whatever the umask
		return fmt.Errorf("write the fingerprint: %w", err)
	}
	// The file and the top directory (whose times are not recorded) get the
	// tree's one mtime, as normalize gave the rest.
	ts := unix.NsecToTimespec(fixedMtime.UnixNano())
	for _, q := range []string{p, root} {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, q, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("write the fingerprint: %w", err)
		}
	}
	return syncDir(root)
}

// waitPast waits until the kernel's file timestamps are later than newest. The
// kernel stamps files with its coarse clock (a tick of 1 to 10 ms); a filesystem
// whose times are whole seconds (or two, FAT's) needs two seconds more.
func waitPast(newest time.Time, coarse bool) error {
	after := newest
	if coarse {
		after = after.Add(2 * time.Second)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
			return fmt.Errorf("fingerprint: read the clock: %w", err)
		}
		if time.Unix(0, ts.Nano()).After(after) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fingerprint: the tree's newest ctime %v is in the future (is the clock right?)", newest)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ChangedError is a rootfs that differs from its build's fingerprint.
type ChangedError struct {
	Dir string
	// Diff is the difference that names the file (the first file that differs,
	// else the first directory).
	Diff Difference
	// More counts the other differences found.
	More int
	// TimesOnly says that every difference is one that leaves the files'
	// contents, modes, owners and names as built (times, ctimes, inodes:
	// a touch, a chmod that set the modes back, a copy), so that
	// re-hashing them (rljail rootfs verify --update-fingerprint) may
	// take the rootfs back: the message then names that one command.
	TimesOnly bool
}

// timesOnly reports whether every difference in diffs is one that
// describeChange gives when only times, ctimes or inodes changed.
func timesOnly(diffs []Difference) bool {
	for _, d := range diffs {
		switch {
		case d.What == "content or mtime changed", strings.HasPrefix(d.What, "changed (its ctime"),
			strings.HasPrefix(d.What, "replaced (another inode"), strings.HasPrefix(d.What, "directory changed"):
		default:
			return false
		}
	}
	return len(diffs) > 0
}

func (e *ChangedError) Error() string {
	more := ""
	if e.More > 0 {
		more = fmt.Sprintf(" (and %d more)", e.More)
	}
	if e.TimesOnly {
		return fmt.Sprintf("rootfs %s changed since its build: %s%s; no size, mode, owner or name changed, so its files may still be as built: `rljail rootfs verify --update-fingerprint %s` hashes each against the build's list and takes the rootfs back if every one is (else it says which is not)", e.Dir, e.Diff, more, e.Dir)
	}
	return fmt.Sprintf("rootfs %s changed since its build: %s%s; `rljail rootfs verify %s` lists every change (--update-fingerprint takes it back if its files are as built, as in a copy), `rljail rootfs build` rebuilds it, --rootfs-unverified runs it unchecked", e.Dir, e.Diff, more, e.Dir)
}

// CheckFingerprint tells whether the rootfs at dir is as its build left it, by
// comparing every entry's lstat with the fingerprint (see above for why that is
// sound): nil, a *ChangedError naming the first changed file, or an error for a
// rootfs without a readable fingerprint. It runs before every jail: one fstatat an
// entry, from directory descriptors opened without following links, and one readdir
// (the top directory's).
func CheckFingerprint(dir string) error {
	root, data, err := openFingerprint(dir)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	same, err := fingerprintMatches(root, data, 0)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w; run `rljail rootfs build` to rebuild it", dir, err)
	}
	if same {
		return nil
	}
	diffs, err := fingerprintDifferencesAt(root, data)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w; run `rljail rootfs build` to rebuild it", dir, err)
	}
	if len(diffs) == 0 {
		// It changed between the two looks (or back): still not the build's.
		diffs = []Difference{{Path: "/", What: "changed while it was checked"}}
	}
	pick := 0
	for i, d := range diffs {
		if !d.isDirectoryStamp() {
			pick = i
			break
		}
	}
	return &ChangedError{Dir: dir, Diff: diffs[pick], More: len(diffs) - 1, TimesOnly: timesOnly(diffs)}
}

// openFingerprint opens the rootfs at dir (O_PATH, the caller closes it)
// and reads its fingerprint.
func openFingerprint(dir string) (int, []byte, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	data, err := readFingerprintAt(root)
	if err != nil {
		unix.Close(root)
		return -1, nil, fmt.Errorf("rootfs %s: %w; run `rljail rootfs build` to rebuild it", dir, err)
	}
	return root, data, nil
}

// CheckFingerprintTop is CheckFingerprint for a rootfs that no jail can
// have written (cmd/rljail: one in a data directory that no run may grant
// writable, or root's, which no jail has the right to write): only the top
// directory's entries are compared with the fingerprint, a dozen fstatat
// calls rather than one an entry, which still catches a tree copied or
// moved in (every inode is new) and a chown, chmod or touch of it all
// (every ctime is). The claim rests on the kernel's permissions too, so it
// is taken only where the fingerprint records every entry as owner's and
// writable by no one else (links aside: their mode means nothing), as a
// build leaves it: a tree copied in with another user's files (cp -a as
// root, then verify --update-fingerprint) is walked, since that user's
// jails may write those files. A difference at the top, or a record that
// says otherwise, gets CheckFingerprint's full verdict, which names the
// change.
//
// It reads the file's first topPrefix bytes only, where the record's owner
// summary (format 2) and the top's section are: what it costs does not grow
// with the rootfs. A record of format 1 is read whole and its every entry
// looked at (writableOnlyBy).
func CheckFingerprintTop(dir string, owner uint32) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w", dir, err)
	}
	defer unix.Close(root)
	data, whole, err := readFingerprintUpTo(root, topPrefix)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w; run `rljail rootfs build` to rebuild it", dir, err)
	}
	body, recorded, summarized, single, err := fpHeader(data)
	if err != nil {
		return CheckFingerprint(dir)
	}
	var top fpSpan
	if summarized {
		if !single || recorded != owner {
			return CheckFingerprint(dir)
		}
		r := fpReader{data: data, i: body}
		_, n, ok, err := r.section()
		for k := 0; k < n && err == nil && ok; k++ {
			_, _, err = r.entry()
		}
		if err != nil || !ok {
			// The top's section runs past the prefix (a top of some
			// hundreds of entries), or the file is damaged: the whole
			// record's verdict.
			return CheckFingerprint(dir)
		}
		top = fpSpan{start: body, end: r.i, entries: n}
	} else {
		if !whole {
			if data, err = readFingerprintAt(root); err != nil {
				return fmt.Errorf("rootfs %s: %w; run `rljail rootfs build` to rebuild it", dir, err)
			}
		}
		spans, err := indexFingerprint(data)
		if err != nil || len(spans) == 0 || !writableOnlyBy(data, spans, owner) {
			return CheckFingerprint(dir)
		}
		top = spans[0]
	}
	if compareSpans(root, data, []fpSpan{top}, true) {
		return nil
	}
	return CheckFingerprint(dir)
}

// writableOnlyBy reports whether every entry the fingerprint records is
// owned by uid and writable by neither its group nor others (a symlink's
// mode aside): fpOwner's summary, for a record of format 1, which has none. An ACL's named entries are bounded by its mask, which a
// stat shows as the group bits, so no ACL makes such an entry writable
// to anyone but its owner. It reads the record only: no system call.
func writableOnlyBy(data []byte, spans []fpSpan, uid uint32) bool {
	le := binary.LittleEndian
	for _, span := range spans {
		r := fpReader{data: data[:span.end], i: span.start}
		if _, _, _, err := r.section(); err != nil {
			return false
		}
		for k := 0; k < span.entries; k++ {
			_, tuple, err := r.entry()
			if err != nil {
				return false
			}
			mode := le.Uint32(tuple[32:])
			if mode&unix.S_IFMT == unix.S_IFLNK {
				continue
			}
			if le.Uint32(tuple[36:]) != uid || mode&0o022 != 0 {
				return false
			}
		}
	}
	return true
}

// readFingerprintAt reads the fingerprint file of the tree at root.
func readFingerprintAt(root int) ([]byte, error) {
	data, _, err := readFingerprintUpTo(root, maxFingerprint)
	return data, err
}

// readFingerprintUpTo reads the fingerprint file of the tree at root, its
// first max bytes at most; whole says that is all of it.
func readFingerprintUpTo(root int, max int64) (data []byte, whole bool, err error) {
	fd, err := unix.Openat(root, fingerprintName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, fmt.Errorf("no %s (built by an older rljail, or damaged)", fingerprintName)
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", fingerprintName, err)
	}
	f := os.NewFile(uintptr(fd), fingerprintName)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", fingerprintName, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxFingerprint {
		return nil, false, fmt.Errorf("%s is not a regular file of at most %d bytes", fingerprintName, maxFingerprint)
	}
	n := st.Size
	if n > max {
		n = max
	}
	data = make([]byte, n)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", fingerprintName, err)
	}
	return data, n == st.Size, nil
}

// fpSpan is a run of sections of the fingerprint file: data[start:end].
type fpSpan struct{ start, end, entries int }

// indexFingerprint finds where each section starts, and checks that the file
// parses, so that the comparison can be split between workers.
func indexFingerprint(data []byte) ([]fpSpan, error) {
	body, _, _, _, err := fpHeader(data)
	if err != nil {
		return nil, err
	}
	r := fpReader{data: data, i: body}
	var spans []fpSpan
	for {
		start := r.i
		dir, n, ok, err := r.section()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if (len(spans) == 0) != (len(dir) == 0) {
			return nil, errBadFingerprint // the top first, and only once
		}
		for k := 0; k < n; k++ {
			if _, _, err := r.entry(); err != nil {
				return nil, err
			}
		}
		spans = append(spans, fpSpan{start, r.i, n})
	}
	if len(spans) == 0 {
		return nil, errBadFingerprint
	}
	return spans, nil
}

// fingerprintWorkers is how many goroutines compare a large tree at once: the
// comparison is one fstatat an entry, so it scales with the CPUs, and it runs
// while the jail is being set up.
func fingerprintWorkers(entries int) int {
	n := runtime.GOMAXPROCS(0)
	if n > 4 {
		n = 4
	}
	if entries < 1000 {
		n = 1
	}
	return n
}

// fingerprintMatches is the fast comparison: false at the first entry whose stat
// differs (or that is gone, or an entry the top directory gained). Symlinks are
// not compared one by one: no call changes a link in place, and replacing one
// changes its directory, which is compared.
// workers is how many goroutines share the work, 0 for fingerprintWorkers'.
func fingerprintMatches(root int, data []byte, workers int) (bool, error) {
	spans, err := indexFingerprint(data)
	if err != nil {
		return false, err
	}
	total := 0
	for _, s := range spans {
		total += s.entries
	}
	if workers <= 0 {
		workers = fingerprintWorkers(total)
	}
	if workers == 1 {
		return compareSpans(root, data, spans, true), nil
	}
	// Contiguous runs of about equal entries, so that each worker mostly
	// opens a directory from its parent.
	results := make(chan bool, workers)
	per := (total + workers - 1) / workers
	first, count, started := 0, 0, 0
	for i, s := range spans {
		count += s.entries
		if count >= per || i == len(spans)-1 {
			part, top := spans[first:i+1], first == 0
			go func() { results <- compareSpans(root, data, part, top) }()
			started++
			first, count = i+1, 0
		}
	}
	same := true
	for k := 0; k < started; k++ {
		same = <-results && same
	}
	return same, nil
}

// compareSpans compares the entries of the sections in spans (already parsed by
// indexFingerprint); top says whether the first is the top directory's.
func compareSpans(root int, data []byte, spans []fpSpan, top bool) bool {
	var stack []openedDir
	defer func() {
		for _, o := range stack {
			unix.Close(o.fd)
		}
	}()
	var live [tupleSize]byte
	var st unix.Stat_t
	name := make([]byte, 0, 256)
	compared := 0
	for k, span := range spans {
		r := fpReader{data: data[:span.end], i: span.start}
		dir, n, _, _ := r.section()
		at := root
		var names map[string]bool
		if top && k == 0 {
			// The top directory's timestamps are not recorded (the install
			// renamed it): its entries are compared by name.
			var err error
			if names, err = topNames(root); err != nil || len(names) != n+1 || !names[fingerprintName] {
				return false
			}
		} else {
			fd, ok := openSection(root, &stack, string(dir))
			if !ok {
				return false
			}
			at = fd
		}
		for i := 0; i < n; i++ {
			if compared++; compared%yieldEvery == 0 {
				// A run's supervisor has one P (GOMAXPROCS=1, entry_amd64.s),
				// on which a goroutine in a loop of short syscalls keeps it
				// until sysmon preempts it (10 ms): let the start's own
				// goroutines, woken by the jail's messages, run in between.
				runtime.Gosched()
			}
			nm, tuple, _ := r.entry()
			if names != nil && !names[string(nm)] {
				return false
			}
			if binary.LittleEndian.Uint32(tuple[32:])&unix.S_IFMT == unix.S_IFLNK && names == nil {
				continue
			}
			name = append(append(name[:0], nm...), 0)
			if fstatatNoFollow(at, name, &st) != nil {
				return false
			}
			encodeTuple(live[:], &st)
			if !bytes.Equal(live[:], tuple) {
				return false
			}
		}
	}
	return true
}

// yieldEvery is how many entries compareSpans compares between yields of its P
// (some 30 µs of fstatat here).
const yieldEvery = 32

// openedDir is a directory of the tree that compareSpans holds open.
type openedDir struct {
	dir string
	fd  int
}

// openSection opens the directory dir of the tree (a relative path): from its
// parent when that is the last one opened, with one element and O_NOFOLLOW, else
// from the top with no link followed on the way (RESOLVE_NO_SYMLINKS). Its own
// stat was compared in its parent's section.
func openSection(root int, stack *[]openedDir, dir string) (int, bool) {
	parent := path.Dir(dir)
	if parent == "." {
		parent = ""
	}
	for len(*stack) > 0 && (*stack)[len(*stack)-1].dir != parent {
		unix.Close((*stack)[len(*stack)-1].fd)
		*stack = (*stack)[:len(*stack)-1]
	}
	var fd int
	var err error
	switch {
	case len(*stack) > 0:
		fd, err = unix.Openat((*stack)[len(*stack)-1].fd, path.Base(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	case parent == "":
		fd, err = unix.Openat(root, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	default:
		fd, err = unix.Openat2(root, dir, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	if err != nil {
		return -1, false
	}
	*stack = append(*stack, openedDir{dir, fd})
	return fd, true
}

// fstatatNoFollow is fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) with name
// already NUL-terminated, so that the comparison of a few thousand entries
// allocates nothing per entry (unix.Fstatat copies each name).
func fstatatNoFollow(dirfd int, name []byte, st *unix.Stat_t) error {
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// topNames lists the names in the tree's top directory.
func topNames(root int) (map[string]bool, error) {
	fd, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read the top directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	list, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read the top directory: %w", err)
	}
	names := make(map[string]bool, len(list))
	for _, n := range list {
		names[n] = true
	}
	return names, nil
}

// isDirectoryStamp tells a difference that only says a directory changed (an entry
// in it added, removed or renamed, which another difference names).
func (d Difference) isDirectoryStamp() bool { return strings.HasPrefix(d.What, "directory changed") }

// fingerprintDifferences lists every way the tree at dir differs from its
// fingerprint (`rljail rootfs verify`, and a run's message once the fast comparison
// failed).
func fingerprintDifferences(dir string) ([]Difference, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	defer unix.Close(root)
	data, err := readFingerprintAt(root)
	if err != nil {
		return nil, err
	}
	return fingerprintDifferencesAt(root, data)
}

// fingerprintDifferencesAt is the slow comparison: every section's directory is
// listed, every entry compared, and each difference said in words.
func fingerprintDifferencesAt(root int, data []byte) ([]Difference, error) {
	sections, err := decodeFingerprint(data)
	if err != nil {
		return nil, err
	}
	var diffs []Difference
	abs := func(dir, name string) string { return "/" + path.Join(dir, name) }
	for _, s := range sections {
		fd := root
		if s.dir != "" {
			fd, err = unix.Openat2(root, s.dir, &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				continue // its parent's section says it is gone or replaced
			}
		}
		have, err := topNames(fd)
		if err != nil {
			if fd != root {
				unix.Close(fd)
			}
			return nil, err
		}
		if s.dir == "" {
			delete(have, fingerprintName)
		}
		for i, name := range s.names {
			p := abs(s.dir, name)
			if !have[name] {
				diffs = append(diffs, Difference{p, "missing"})
				continue
			}
			delete(have, name)
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				diffs = append(diffs, Difference{p, "missing"})
				continue
			}
			if w := describeChange(s.tuples[i*tupleSize:(i+1)*tupleSize], &st); w != "" {
				diffs = append(diffs, Difference{p, w})
			}
		}
		var added []string
		for name := range have {
			added = append(added, name)
		}
		sort.Strings(added)
		for _, name := range added {
			diffs = append(diffs, Difference{abs(s.dir, name), "added"})
		}
		if fd != root {
			unix.Close(fd)
		}
	}
	return diffs, nil
}

// describeChange says how st differs from the recorded tuple, "" if not at all.
func describeChange(tuple []byte, st *unix.Stat_t) string {
	var live [tupleSize]byte
	encodeTuple(live[:], st)
	if bytes.Equal(live[:], tuple) {
		return ""
	}
	le := binary.LittleEndian
	wasDir := le.Uint32(tuple[32:])&unix.S_IFMT == unix.S_IFDIR
	switch {
	case le.Uint32(tuple[32:])&unix.S_IFMT != st.Mode&unix.S_IFMT:
		return "replaced by another kind of file"
	case le.Uint64(tuple[0:]) != st.Ino:
		return "replaced (another inode in its place)"
	case le.Uint32(tuple[32:]) != st.Mode:
		return fmt.Sprintf("mode changed (%04o, built %04o)", st.Mode&0o7777, le.Uint32(tuple[32:])&0o7777)
	case le.Uint32(tuple[36:]) != st.Uid || le.Uint32(tuple[40:]) != st.Gid:
		return fmt.Sprintf("owner changed (%d:%d, built %d:%d)", st.Uid, st.Gid, le.Uint32(tuple[36:]), le.Uint32(tuple[40:]))
	case wasDir:
		return "directory changed (an entry in it added, removed or renamed, or its times set)"
	case int64(le.Uint64(tuple[24:])) != st.Size:
		return fmt.Sprintf("content changed (%d bytes, built %d)", st.Size, int64(le.Uint64(tuple[24:])))
	case int64(le.Uint64(tuple[16:])) != st.Mtim.Nano():
		return "content or mtime changed"
	}
	return "changed (its ctime: written, or its mode, owner or links changed and set back)"
}

// UpdateFingerprint records the fingerprint of the rootfs at dir anew, after
// Verify found every entry's content, mode and kind as built: for a rootfs that
// was copied (every inode and ctime differs), or whose times or owner something
// changed while its files stayed as built. It refuses a rootfs with any other
// difference, so it never makes a changed tree pass.
//
// The fingerprint it records is taken before Verify reads the tree, and taken
// again after: a change made while Verify ran (to a file it had already hashed)
// gives the second another ctime, and the update is refused. Recorded after
// Verify alone, such a change would be recorded as built.
func UpdateFingerprint(dir string) ([]Difference, error) {
	// A new file beside the old one, renamed over it: a run sees the old
	// fingerprint or the new one.
	tmp := filepath.Join(dir, fingerprintName+".new")
	os.Remove(tmp)
	before, newest, coarse, err := recordFingerprint(dir)
	if err != nil {
		return nil, err
	}
	// Past the newest ctime recorded: a change from here on, while Verify
	// reads, cannot carry a recorded timestamp.
	if err := waitPast(newest, coarse); err != nil {
		return nil, err
	}
	diffs, err := Verify(dir)
	if err != nil {
		return nil, err
	}
	var content []Difference
	for _, d := range diffs {
		if !strings.HasPrefix(d.What, "metadata changed") && d.Path != "/"+fingerprintName {
			content = append(content, d)
		}
	}
	if len(content) > 0 {
		return content, nil
	}
	after, _, _, err := recordFingerprint(dir)
	if err != nil {
		return nil, err
	}
	record := encodeFingerprint(before)
	if !bytes.Equal(record, encodeFingerprint(after)) {
		return []Difference{{Path: "/", What: "changed while it was verified; nothing recorded (run rljail rootfs verify again)"}}, nil
	}
	if err := writeNewFile(tmp, record); err != nil {
		return nil, fmt.Errorf("write the fingerprint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, fingerprintName)); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write the fingerprint: %w", err)
	}
	return nil, syncDir(dir)
}
