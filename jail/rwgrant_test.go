package jail

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPath opens p as O_PATH, as cloneHostPath's descriptor is.
func openPath(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func namedUsers(t *testing.T, p string) map[uint32]uint16 {
	t.Helper()
	fd := openPath(t, p)
	entries, err := readACL(fd)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]uint16{}
	for _, e := range entries {
		if e.tag == aclUser {
			out[e.id] = e.perm
		}
	}
	return out
}

// TestJailACL adds the jail's entry to a directory's ACL and takes it out
// again: the mode's group bits show the mask meanwhile and the group's own
// bits after, an ACL of the owner's own stays as it was, and a mask that
// would have to widen for the jail is refused.
func TestJailACL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it writes ACLs of directories it does not own, and /run/rljail): run the unit tests as root, as make test does")
	}
	const uid = IDRangeBase + 11
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := addJailACL(openPath(t, dir), uid, 7); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Skipf("the test directory's filesystem takes no ACL: %v", err)
		}
		t.Fatal(err)
	}
	if got := namedUsers(t, dir); got[uid] != 7 || len(got) != 1 {
		t.Errorf("after addJailACL the ACL's named users are %v, want %d:rwx", got, uid)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o770 {
		t.Errorf("with the entry the mode is %v, want 0770 (the mask in the group bits)", fi.Mode())
	}
	if err := removeJailACL(dir, uid); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(dir, aclAttr, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("after removeJailACL the directory keeps an ACL: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o750 {
		t.Errorf("after removeJailACL the mode is %v, want 0750 as it was", fi.Mode())
	}
	if err := removeJailACL(dir, uid); err != nil {
		t.Errorf("a second removeJailACL: %v", err)
	}

	// The owner's own ACL (user 4321 rwx, mask rwx) stays.
	own := encodeACL(append(modeACL(0o750), aclEntry{tag: aclUser, perm: 7, id: 4321}, aclEntry{tag: aclMask, perm: 7, id: aclUndefinedID}))
	if err := unix.Setxattr(dir, aclAttr, own, 0); err != nil {
		t.Fatal(err)
	}
	if err := addJailACL(openPath(t, dir), uid, 7); err != nil {
		t.Fatal(err)
	}
	if err := removeJailACL(dir, uid); err != nil {
		t.Fatal(err)
	}
	if got := namedUsers(t, dir); len(got) != 1 || got[4321] != 7 {
		t.Errorf("the owner's ACL became %v, want 4321:rwx alone", got)
	}
	// A narrower mask: widening it would give 4321 write.
	narrow := encodeACL(append(modeACL(0o750), aclEntry{tag: aclUser, perm: 7, id: 4321}, aclEntry{tag: aclMask, perm: 5, id: aclUndefinedID}))
	if err := unix.Setxattr(dir, aclAttr, narrow, 0); err != nil {
		t.Fatal(err)
	}
	if err := addJailACL(openPath(t, dir), uid, 7); err == nil || !strings.Contains(err.Error(), "mask") {
		t.Errorf("addJailACL with a mask r-x: %v, want it refused", err)
	}
}

// TestReclaimTreeToOwner gives the jail's files of a volume of root's
// back: regular files and directories to root, a regular file marked
// JailWrittenAttr and without its set-id bits, a symbolic link and a FIFO
// to nobody.
func TestReclaimTreeToOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it chowns files): run the unit tests as root, as make test does")
	}
	const uid, gid = IDRangeBase + 13, IDRangeBase + 13
	vol := t.TempDir()
	mk := func(name string, make func(string) error) string {
		p := filepath.Join(vol, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	d := mk("d", func(p string) error { return os.Mkdir(p, 0o755) })
	f := mk("d/prog", func(p string) error { return os.WriteFile(p, []byte("x"), 0o755) })
	if err := os.Chmod(f, 0o6755); err != nil {
		t.Fatal(err)
	}
	l := mk("link", func(p string) error { return os.Symlink("/etc/shadow", p) })
	fifo := mk("fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) })
	to := owner{uid: 0, gid: 0}
	if err := reclaimTree(vol, uid, gid, &to); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{d: 0, f: 0, l: overflowID, fifo: overflowID} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != want || st.Gid != want {
			t.Errorf("%s is %d:%d, want %d:%d", p, st.Uid, st.Gid, want, want)
		}
	}
	fi, _ := os.Stat(f)
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the jail's program given to root is %v", fi.Mode())
	}
	buf := make([]byte, 32)
	n, err := unix.Getxattr(f, JailWrittenAttr, buf)
	if err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("the jail's file given to root has no %s: %v", JailWrittenAttr, err)
	} else if err == nil && string(buf[:n]) != "2130706445" {
		t.Errorf("%s is %q, want the jail's uid", JailWrittenAttr, buf[:n])
	}
}

// TestGiveBackDeepVolume: a volume too deep to walk keeps its id marked
// (a warning), and yet its ACL entry is taken out.
func TestGiveBackDeepVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: run the unit tests as root, as make test does")
	}
	const uid, gid = IDRangeBase + 17, IDRangeBase + 17
	vol := t.TempDir()
	if err := addJailACL(openPath(t, vol), uid, 7); err != nil {
		t.Skipf("no ACL here: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(vol, strings.Repeat("d/", reclaimMaxDepth+1)), 0o755); err != nil {
		t.Fatal(err)
	}
	warnings := giveBackVolume(giveBack{path: vol, uid: 0, gid: 0, acl: true}, uid, gid)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "nested deeper") {
		t.Errorf("warnings %q, want one about the depth", warnings)
	}
	if got := namedUsers(t, vol); len(got) != 0 {
		t.Errorf("the deep volume's ACL still names %v", got)
	}
}

// TestMarkLines: a giveBack survives its line of the lock file, a path
// with a space or a newline too.
func TestMarkLines(t *testing.T) {
	for _, b := range []giveBack{
		{path: "/srv/out", uid: 0, gid: 0, acl: true},
		{path: "/srv/a b\nc", uid: 1000, gid: 100},
		{path: "/x", uid: overflowID, gid: overflowID},
	} {
		line := formatMark(b)
		if strings.Count(line, "\n") != 1 {
			t.Errorf("%q is not one line", line)
		}
		got, err := parseMark(strings.TrimSuffix(line, "\n"))
		if err != nil || got != b {
			t.Errorf("parseMark(%q) = %+v, %v; want %+v", line, got, err, b)
		}
	}
	if _, err := parseMark("/old/style/path"); err == nil {
		t.Error("parseMark took a path of the old mark")
	}
}
