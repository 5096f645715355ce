package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReclaimTree gives a volume's files of a jail's host ids to nobody:
// every kind of entry of those ids, at any depth, and a symbolic link
// itself, never what it points to; files of other ids stay as they are.
// A tree nested deeper than reclaimMaxDepth is an error (the id then stays
// marked), not a descriptor per level without end.
func TestReclaimTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it chowns files): run the unit tests as root, as make test does")
	}
	const uid, gid, other = IDRangeBase + 3, IDRangeBase + 3, 4321
	type entry struct {
		path     string
		uid, gid int
	}
	tests := []struct {
		name    string
		entries []entry // made in order, below the volume; a trailing / makes a directory
		want    map[string][2]int
		wantErr string
	}{
		{
			name: "the jail's files at any depth",
			entries: []entry{
				{"a/", uid, gid}, {"a/b/", uid, gid}, {"a/b/f", uid, gid}, {"g", uid, other}, {"h", other, gid},
				{"keep", other, other}, {"a/b/keep", 0, 0},
			},
			want: map[string][2]int{
				"a": {overflowID, overflowID}, "a/b": {overflowID, overflowID}, "a/b/f": {overflowID, overflowID},
				"g": {overflowID, other}, "h": {other, overflowID}, "keep": {other, other}, "a/b/keep": {0, 0},
			},
		},
		{
			name:    "a link is chowned itself, not its target",
			entries: []entry{{"target", other, other}, {"link->target", uid, gid}},
			want:    map[string][2]int{"target": {other, other}, "link": {overflowID, overflowID}},
		},
		{
			name:    "deeper than the bound",
			entries: []entry{{strings.Repeat("d/", reclaimMaxDepth+1), uid, gid}},
			wantErr: "nested deeper",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vol := t.TempDir()
			for _, e := range tt.entries {
				p := filepath.Join(vol, e.path)
				var err error
				switch {
				case strings.Contains(e.path, "->"):
					name, target, _ := strings.Cut(e.path, "->")
					p = filepath.Join(vol, name)
					err = os.Symlink(target, p)
				case strings.HasSuffix(e.path, "/"):
					err = os.MkdirAll(p, 0o755)
				default:
					err = os.WriteFile(p, []byte("x"), 0o644)
				}
				if err == nil {
					err = os.Lchown(p, e.uid, e.gid)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			err := reclaimTree(vol, uid, gid, &owner{uid: overflowID, gid: overflowID})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("reclaimTree: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				fi, err := os.Lstat(filepath.Join(vol, name))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if got := [2]int{int(st.Uid), int(st.Gid)}; got != want {
					t.Errorf("%s is %d:%d, want %d:%d", name, got[0], got[1], want[0], want[1])
				}
			}
		})
	}
}

// TestReclaimMarkedID clears a lock file that a killed supervisor left
// marked, once the files of its ids are given back; an id whose lock is
// held is left alone.
func TestReclaimMarkedID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it chowns files): run the unit tests as root, as make test does")
	}
	const uid, gid = IDRangeBase + 5, IDRangeBase + 5
	vol := t.TempDir()
	f := filepath.Join(vol, "left")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, uid, gid); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(t.TempDir(), fmt.Sprint(uid))
	mark := fmt.Sprintf(markHeader, uid, gid) + vol + "\n" + filepath.Join(vol, "gone") + "\n"
	if err := os.WriteFile(lock, []byte(mark), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := reclaimMarkedID(lock); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(lock); string(b) != mark {
		t.Errorf("a held lock file was changed: %q", b)
	}
	held.Close()
	if err := reclaimMarkedID(lock); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(lock); len(b) != 0 {
		t.Errorf("the lock file stays marked: %q", b)
	}
	fi, err := os.Lstat(f)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != overflowID || st.Gid != overflowID {
		t.Errorf("the file left by the killed run is %d:%d, want nobody", st.Uid, st.Gid)
	}
}
