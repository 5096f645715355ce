package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"python", true},
		{"data", true},
		{"py3.11-numpy_2", true},
		{"0", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{".hidden", false},
		{"-flag", false},
		{"_x", false},
		{"Data", false},
		{"a b", false},
		{"a/b", false},
		{"..", false},
		{"naïve", false},
		{"a\n", false},
	}
	for _, tc := range tests {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", filepath.Join(home, "xdg"))
	t.Setenv("RLJAIL_ROOTFS", "/elsewhere/py") // names one rootfs; never moves the names
	base := filepath.Join(home, "xdg", "rljail", "rootfs")
	if os.Geteuid() == 0 {
		base = RootDataDir
	}
	wd, _ := os.Getwd()
	tests := []struct {
		value, want, wantErr string
	}{
		{value: "data", want: filepath.Join(base, "data")},
		{value: "python", want: filepath.Join(base, "python")},
		{value: "/srv/rootfs/py", want: "/srv/rootfs/py"},
		{value: "./py", want: filepath.Join(wd, "py")},
		{value: "rel/dir", want: filepath.Join(wd, "rel/dir")},
		{value: "Data", wantErr: `"Data" is not a rootfs name`},
		{value: ".", wantErr: "a directory needs a slash in it, such as ./."},
		{value: "a b", wantErr: "is not a rootfs name"},
	}
	for _, tc := range tests {
		got, err := Resolve(tc.value)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Resolve(%q) = %q, %v; want an error with %q", tc.value, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.value, got, err, tc.want)
		}
	}
}

// TestListAndRemove: List shows every directory with a valid name, usable
// or not; Remove takes a rootfs away whole and refuses what is not one.
func TestListAndRemove(t *testing.T) {
	home := t.TempDir()
	base := filepath.Join(home, "xdg", "rljail", "rootfs")
	if got, err := listIn(base); err != nil || len(got) != 0 {
		t.Fatalf("List of a missing data directory = %v, %v", got, err)
	}
	good := filepath.Join(base, "good")
	makeTree(t, good, 30)
	if err := os.MkdirAll(filepath.Join(base, "half"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(base, ".good.tmp-1"), 0o755) // a build's temporary tree: no name
	os.WriteFile(filepath.Join(base, ".good.lock"), nil, 0o644)
	got, err := listIn(base)
	if err != nil || len(got) != 2 || got[0].Name != "good" || got[1].Name != "half" {
		t.Fatalf("List = %+v, %v; want good and half", got, err)
	}
	if got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "interpreter") {
		// makeTree has no interpreter: Check says so, List passes it on.
		t.Errorf("good: Err = %v", got[0].Err)
	}
	if got[1].Err == nil || !strings.Contains(got[1].Err.Error(), "not a complete Python rootfs") {
		t.Errorf("half: Err = %v", got[1].Err)
	}
	if err := Remove(filepath.Join(base, "half")); err == nil || !strings.Contains(err.Error(), "not an rljail rootfs") {
		t.Errorf("Remove of an empty directory = %v", err)
	}
	mine := filepath.Join(home, "mine")
	os.MkdirAll(mine, 0o755)
	os.WriteFile(filepath.Join(mine, "notes"), []byte("x"), 0o644)
	if err := Remove(mine); err == nil || !strings.Contains(err.Error(), "not an rljail rootfs") {
		t.Errorf("Remove of a user's directory = %v", err)
	}
	if _, err := os.Stat(filepath.Join(mine, "notes")); err != nil {
		t.Errorf("Remove deleted a user's file: %v", err)
	}
	if err := Remove(good); err != nil {
		t.Fatalf("Remove(good) = %v", err)
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.Name() == "good" || strings.HasPrefix(e.Name(), ".good.removed-") {
			t.Errorf("Remove left %s", e.Name())
		}
	}
}
