package rootfs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheck(t *testing.T) {
	valid := Manifest{
		FormatVersion: formatVersion,
		PythonVersion: "3.11.2",
		Python:        "/usr/bin/python3.11",
		Source:        "/usr/bin/python3.11",
		Files:         1,
		SizeBytes:     3,
		TreeSHA256:    strings.Repeat("ab", 32),
		FilesSHA256:   strings.Repeat("cd", 32),
	}
	// fill makes a tree with an interpreter file in it.
	fill := func(t *testing.T, dir string) {
		if err := os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "usr/bin/python3.11"), []byte("elf"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeRaw := func(t *testing.T, dir, text string) {
		if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // dir does not exist yet
		wantErr string
	}{
		{name: "valid", setup: func(t *testing.T, dir string) {
			fill(t, dir)
			if err := writeManifest(dir, valid); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "missing dir", setup: func(*testing.T, string) {}, wantErr: "no Python rootfs at %s; run `rljail rootfs build`"},
		{name: "half-built", setup: fill, wantErr: "%s is not a complete Python rootfs (no .rljail-rootfs.json: half-built or not made by rljail); run `rljail rootfs build`"},
		{name: "empty dir", setup: func(t *testing.T, dir string) { os.Mkdir(dir, 0o755) }, wantErr: "%s is not a complete Python rootfs"},
		{name: "truncated manifest", setup: func(t *testing.T, dir string) {
			fill(t, dir)
			writeRaw(t, dir, `{"format_version": 1, "python_ver`)
		}, wantErr: "rootfs %s: bad .rljail-rootfs.json"},
		{name: "other format", setup: func(t *testing.T, dir string) {
			fill(t, dir)
			m := valid
			m.FormatVersion = 1
			writeManifest(dir, m)
		}, wantErr: "format version 1, this rljail needs 2; run `rljail rootfs build` to rebuild it"},
		{name: "unknown field", setup: func(t *testing.T, dir string) {
			fill(t, dir)
			writeRaw(t, dir, `{"format_version":1,"python_version":"3.11.2","python":"/usr/bin/python3.11","files":1,"size_bytes":3,"tree_sha256":"`+valid.TreeSHA256+`","extra":1}`)
		}, wantErr: `unknown field "extra"`},
		{name: "interpreter missing", setup: func(t *testing.T, dir string) {
			os.Mkdir(dir, 0o755)
			writeManifest(dir, valid)
		}, wantErr: "interpreter /usr/bin/python3.11 is missing or not an executable file"},
		{name: "interpreter escapes the tree", setup: func(t *testing.T, dir string) {
			os.MkdirAll(filepath.Join(dir, "usr"), 0o755)
			os.Symlink("/usr/bin", filepath.Join(dir, "usr/bin"))
			writeManifest(dir, valid)
		}, wantErr: "is missing or not an executable file"},
		{name: "bad hash", setup: func(t *testing.T, dir string) {
			fill(t, dir)
			m := valid
			m.TreeSHA256 = "xyz"
			writeManifest(dir, m)
		}, wantErr: "is not a SHA-256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "python")
			tc.setup(t, dir)
			m, err := Check(dir)
			if tc.wantErr != "" {
				want := tc.wantErr
				if strings.Contains(want, "%s") {
					want = strings.ReplaceAll(want, "%s", dir)
				}
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Check = %v; want error containing %q", err, want)
				}
				if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "rljail rootfs build") {
					t.Errorf("error %q does not name the directory and the fix", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, valid) {
				t.Errorf("Check = %+v, want %+v", m, valid)
			}
		})
	}
}

// TestCheckPrograms: a truncated or missing library or interpreter named in
// the manifest is a clear error (the payload would crash with SIGSEGV or
// SIGBUS instead).
func TestCheckPrograms(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"usr/bin/python3.11":                 "interpreter",
		"usr/lib/x86_64-linux-gnu/libc.so.6": "a library",
	}
	m := Manifest{FormatVersion: formatVersion, FilesSHA256: strings.Repeat("cd", 32), PythonVersion: "3.11.2", Python: "/usr/bin/python3.11", Source: "/usr/bin/python3.11",
		Files: 2, SizeBytes: 20, TreeSHA256: strings.Repeat("ab", 32), Programs: map[string]int64{}}
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		m.Programs["/"+p] = int64(len(content))
	}
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(dir); err != nil {
		t.Fatalf("Check of an intact tree: %v", err)
	}
	if err := os.Truncate(filepath.Join(dir, "usr/lib/x86_64-linux-gnu/libc.so.6"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(dir); err == nil || !strings.Contains(err.Error(), "libc.so.6 is missing or damaged") {
		t.Fatalf("Check of a truncated libc: %v", err)
	}
}

// TestBeneath: lstat of a path in a tree stays in the tree. A directory
// link inside the tree is followed; one that leads out of it, absolute or
// by "..", fails; a last element that is a link is the link itself; "."
// and ".." are no file's path.
func TestBeneath(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"usr/lib", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/lib/f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	up, err := filepath.Rel(dir, outside)
	if err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"lib":          "usr/lib",  // a directory link within the tree
		"abs":          outside,    // out, absolute
		"up":           up,         // out, relative ("../...")
		"usr/bin/link": "../lib/f", // a last element that is a link
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	// Both links out of the tree do lead to the file outside.
	for _, l := range []string{"abs", "up"} {
		if _, err := os.Stat(filepath.Join(dir, l, "f")); err != nil {
			t.Fatalf("the test's link %s does not lead to the file outside: %v", l, err)
		}
	}
	b := beneath{root: root}
	defer b.close()
	tests := []struct {
		path string
		mode uint32 // the file type wanted; 0: an error
		size int64
	}{
		{"/usr/lib/f", unix.S_IFREG, 6},
		{"/lib/f", unix.S_IFREG, 6},
		{"/usr/bin/link", unix.S_IFLNK, 8},
		{"/abs/f", 0, 0},
		{"/up/f", 0, 0},
		{"/usr/lib/missing", 0, 0},
		{"/usr/lib/..", 0, 0},
		{"/usr/lib/.", 0, 0},
		{"/", 0, 0},
		{"/usr/lib/f", unix.S_IFREG, 6}, // the directory again, from the cache
	}
	for _, tc := range tests {
		st, err := b.lstat(tc.path)
		switch {
		case tc.mode == 0 && err == nil:
			t.Errorf("lstat %s: mode %o, want an error", tc.path, st.Mode)
		case tc.mode != 0 && err != nil:
			t.Errorf("lstat %s: %v", tc.path, err)
		case tc.mode != 0 && (st.Mode&unix.S_IFMT != tc.mode || st.Size != tc.size):
			t.Errorf("lstat %s: mode %o size %d, want type %o size %d", tc.path, st.Mode, st.Size, tc.mode, tc.size)
		}
	}
}
