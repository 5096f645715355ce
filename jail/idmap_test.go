package jail

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOwnerUserns makes the id-mapping user namespace of an owner (its
// child from usernsChild, entry_amd64.s) and reads its maps from inside
// it, through nsenter: the owner must map to the jail's host user and
// nothing else, and setgroups must be denied. Then an idmapped clone of a
// directory of that owner must show the jail's user as its owner.
func TestOwnerUserns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it writes the id maps of a user namespace): run the unit tests as root, as make test does")
	}
	tests := []struct {
		name             string
		uid, gid         int
		hostUID, hostGID int // the jail's host ids, of the range
	}{
		{"root", 0, 0, IDRangeBase, IDRangeBase},
		{"a user", 1234, 5678, IDRangeBase + 7, IDRangeBase + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := ownerUserns(tt.uid, tt.gid, tt.hostUID, tt.hostGID)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			ns := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
			for file, want := range map[string]string{
				"uid_map":   fmt.Sprintf("%d %d 1", tt.uid, tt.hostUID),
				"gid_map":   fmt.Sprintf("%d %d 1", tt.gid, tt.hostGID),
				"setgroups": "deny",
			} {
				out, err := exec.Command("nsenter", "--preserve-credentials", "--user="+ns, "cat", "/proc/self/"+file).CombinedOutput()
				if err != nil {
					t.Fatalf("read %s inside: %v: %s", file, err, out)
				}
				if got := strings.Join(strings.Fields(string(out)), " "); got != want {
					t.Errorf("%s inside the namespace: %q, want %q", file, got, want)
				}
			}

			dir := t.TempDir()
			if err := os.Chown(dir, tt.uid, tt.gid); err != nil {
				t.Fatal(err)
			}
			tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(tree)
			m := idmapper{hostUID: tt.hostUID, hostGID: tt.hostGID}
			defer m.close()
			if err := m.apply(tree, dir); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(tree, &st); err != nil {
				t.Fatal(err)
			}
			if int(st.Uid) != tt.hostUID || int(st.Gid) != tt.hostGID {
				t.Errorf("through the idmapped clone the owner is %d:%d, want %d:%d", st.Uid, st.Gid, tt.hostUID, tt.hostGID)
			}
		})
	}
}
