package hostfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain", "A=1\n", 0o644)
	inVol := write("vol/in", "A=1\n", 0o644)
	loose := write("loose", "A=1\n", 0o666)
	big := write("big", strings.Repeat("x", 100), 0o644)
	open := filepath.Join(dir, "open") // a directory others may change
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "link")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	volAlias := filepath.Join(dir, "alias")
	if err := os.Symlink(vol, volAlias); err != nil {
		t.Fatal(err)
	}
	// A root-run jail's file, given to its volume's owner after the run
	// (jail/rwgrant.go): only root may set the mark.
	jailMade := write("jailmade", "A=1\n", 0o644)
	if os.Geteuid() == 0 {
		if err := syscall.Setxattr(jailMade, JailWrittenAttr, []byte("2130706432"), 0); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A writer that never writes: the read must end at the deadline.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	g := NewGuard([]string{vol}, nil).WithReadTimeout(200 * time.Millisecond)
	tests := []struct {
		name, path string
		want       string // "" for success, else a part of the error
	}{
		{"a plain file", plain, ""},
		{"inside a writable volume", inVol, "inside the volume"},
		{"inside it by another name", filepath.Join(volAlias, "in"), "inside the volume"},
		{"a planted link", link, "symbolic link"},
		{"anybody may write it", loose, "written by anybody"},
		{"too large", big, "more than the 10"},
		{"a FIFO whose writer never writes", fifo, "within 200ms"},
		{"a directory", open, "not a file"},
		{"missing", filepath.Join(dir, "nothing"), "no such file"},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct{ name, path, want string }{"marked as a root-run jail's", jailMade, "written by a root-run jail"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := g.ReadFile("--x", tc.path, 10)
			if time.Since(start) > 5*time.Second {
				t.Errorf("ReadFile took %v", time.Since(start))
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ReadFile(%s) = %v, want success", tc.path, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ReadFile(%s) = %v, want an error with %q", tc.path, err, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), "--x "):
				t.Errorf("ReadFile(%s) error %q does not start with the flag", tc.path, err)
			}
		})
	}
}

func TestOpenWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	g := NewGuard([]string{vol}, nil)
	if _, _, err := g.OpenWrite("--result", filepath.Join(vol, "r.json"), syscall.O_WRONLY, 0o644); err == nil || !strings.Contains(err.Error(), "inside the volume") {
		t.Fatalf("OpenWrite inside the volume = %v", err)
	}
	if entries, _ := os.ReadDir(vol); len(entries) != 0 {
		t.Errorf("OpenWrite refused a file and left %v", entries)
	}
	f, created, err := g.OpenWrite("--result", filepath.Join(dir, "r.json"), syscall.O_WRONLY, 0o644)
	if err != nil || !created {
		t.Fatalf("OpenWrite outside = %v, created %v", err, created)
	}
	f.Close()
}
