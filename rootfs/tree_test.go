package rootfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExcludedFromStdlib(t *testing.T) {
	tests := []struct {
		rel   string
		isDir bool
		want  bool
	}{
		{"os.py", false, false},
		{"json", true, false},
		{"json/__init__.py", false, false},
		{"_sysconfigdata__x86_64-linux-gnu.py", false, false},
		{"lib-dynload", true, false},
		{"lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", false, false},
		{"lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", false, false},
		{"test", true, true},
		{"unittest/test", true, true},
		{"ctypes/test", true, true},
		{"lib2to3/tests", true, true},
		{"idlelib", true, true},
		{"idlelib/idle_test", true, true},
		{"tkinter", true, true},
		{"turtledemo", true, true},
		{"ensurepip", true, true},
		{"site-packages", true, true},
		{"dist-packages", true, true},
		{"__pycache__", true, true},
		{"json/__pycache__", true, true},
		{"config-3.11-x86_64-linux-gnu", true, true},
		{"config-3.11-x86_64-linux-gnu/libpython3.11.a", false, true},
		{"libpython3.11.a", false, true},
		{"sitecustomize.py", false, true},
		{"usercustomize.py", false, true},
		{"stray.pyc", false, true},
		{"lib-dynload/_testcapi.cpython-311-x86_64-linux-gnu.so", false, true},
		{"lib-dynload/_testinternalcapi.cpython-311-x86_64-linux-gnu.so", false, true},
		{"lib-dynload/_ctypes_test.cpython-311-x86_64-linux-gnu.so", false, true},
		{"lib-dynload/xxlimited_35.cpython-311-x86_64-linux-gnu.so", false, true},
		{"lib-dynload/_tkinter.cpython-311-x86_64-linux-gnu.so", false, true},
		// Only the top-level directories of these names are the tools themselves.
		{"email/tkinter", true, false},
		{"email/config-x", true, false},
		{"email/sitecustomize.py", false, false},
		// Files named like excluded directories stay.
		{"test.py", false, false},
	}
	for _, tc := range tests {
		if got := excludedFromStdlib(tc.rel, tc.isDir); got != tc.want {
			t.Errorf("excludedFromStdlib(%q, dir=%v) = %v, want %v", tc.rel, tc.isDir, got, tc.want)
		}
	}
}

// TestMirror recreates a merged-/usr style layout: a directory symlink, a chain of
// library symlinks, an absolute symlink and "..", and checks the tree has the same
// symlinks and a single copy of the file.
func TestMirror(t *testing.T) {
	host := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(host, "usr/lib/multi"), 0o755))
	must(os.MkdirAll(filepath.Join(host, "usr/lib64"), 0o755))
	must(os.WriteFile(filepath.Join(host, "usr/lib/multi/libfoo.so.3.0.1"), []byte("elf"), 0o755))
	must(os.Symlink("libfoo.so.3.0.1", filepath.Join(host, "usr/lib/multi/libfoo.so.3")))
	must(os.Symlink("usr/lib", filepath.Join(host, "lib")))
	must(os.Symlink(filepath.Join(host, "lib/multi/libfoo.so.3"), filepath.Join(host, "usr/lib64/abs.so")))

	tests := []struct {
		name, path, wantReal string
	}{
		{"through dir and file symlinks", "lib/multi/libfoo.so.3", "usr/lib/multi/libfoo.so.3.0.1"},
		{"absolute symlink", "usr/lib64/abs.so", "usr/lib/multi/libfoo.so.3.0.1"},
		{"dot-dot after a symlink", "lib/multi/../multi/libfoo.so.3.0.1", "usr/lib/multi/libfoo.so.3.0.1"},
		{"directory only", "lib/multi", "usr/lib/multi"},
	}
	out := t.TempDir()
	tr := newTree(out, func(s string) { t.Log(s) })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			real, err := tr.mirror(filepath.Join(host, tc.path))
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(host, tc.wantReal); real != want {
				t.Errorf("real = %s, want %s", real, want)
			}
		})
	}
	links := map[string]string{
		"lib":                       "usr/lib",
		"usr/lib/multi/libfoo.so.3": "libfoo.so.3.0.1",
		"usr/lib64/abs.so":          filepath.Join(host, "lib/multi/libfoo.so.3"),
	}
	for rel, want := range links {
		got, err := os.Readlink(filepath.Join(out, host, rel))
		if err != nil || got != want {
			t.Errorf("%s -> %q (%v), want -> %q", rel, got, err, want)
		}
	}
	fi, err := os.Lstat(filepath.Join(out, host, "usr/lib/multi/libfoo.so.3.0.1"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("library file not copied: %v %v", fi, err)
	}

	// A path that goes through a file is refused.
	if _, err := tr.mirror(filepath.Join(host, "usr/lib/multi/libfoo.so.3.0.1/x")); err == nil {
		t.Error("mirror through a regular file succeeded")
	}
}

// TestNormalizeAndSummarize checks that modes are masked (no set-id or sticky bit
// survives) and that the hash follows content and modes but not mtimes.
func TestNormalizeAndSummarize(t *testing.T) {
	ctx := context.Background()
	build := func(mode os.FileMode, content string) (string, treeSummary) {
		d := t.TempDir()
		p := filepath.Join(d, "usr/bin/tool")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("tool", filepath.Join(d, "usr/bin/alias")); err != nil {
			t.Fatal(err)
		}
		if err := normalize(ctx, d); err != nil {
			t.Fatal(err)
		}
		s, err := summarize(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return d, s
	}
	tests := []struct {
		name     string
		mode     os.FileMode
		content  string
		wantPerm os.FileMode
	}{
		{"setuid executable", 0o755 | os.ModeSetuid, "x", 0o755},
		{"setgid sticky private file", 0o600 | os.ModeSetgid | os.ModeSticky, "x", 0o644},
		{"group-executable only", 0o710, "x", 0o755},
	}
	var sums []treeSummary
	for _, tc := range tests {
		d, s := build(tc.mode, tc.content)
		fi, err := os.Stat(filepath.Join(d, "usr/bin/tool"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.wantPerm {
			t.Errorf("%s: mode %v, want %v", tc.name, fi.Mode(), tc.wantPerm)
		}
		if !fi.ModTime().Equal(fixedMtime) {
			t.Errorf("%s: mtime %v, want %v", tc.name, fi.ModTime(), fixedMtime)
		}
		if di, _ := os.Stat(filepath.Join(d, "usr")); di.Mode().Perm() != 0o755 {
			t.Errorf("%s: directory mode %v", tc.name, di.Mode())
		}
		if s.files != 2 || s.size != 1 {
			t.Errorf("%s: files %d size %d, want 2 and 1", tc.name, s.files, s.size)
		}
		sums = append(sums, s)
	}
	if sums[0].sha256 != sums[2].sha256 {
		t.Error("same content and normalized mode hash differently")
	}
	if sums[0].sha256 == sums[1].sha256 {
		t.Error("different modes hash the same")
	}
	if _, s := build(0o755, "y"); s.sha256 == sums[0].sha256 {
		t.Error("different content hashes the same")
	}
}

func TestIsProgram(t *testing.T) {
	tests := []struct {
		rel  string
		want bool
	}{
		{"/usr/bin/python3.11", true},
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", true},
		{"/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", true},
		{LoaderCachePath, true},
		{"/usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", false},
		{"/usr/lib/python3.11/os.py", false},
		{"/usr/lib/locale/C.utf8/LC_CTYPE", false},
	}
	for _, tt := range tests {
		if got := isProgram(tt.rel); got != tt.want {
			t.Errorf("isProgram(%q) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}

// TestCopyDirTo checks the one directory copy that the standard library (copyDir, to
// the same path) and a venv's or wheelhouse's site-packages (to another path) share:
// what is kept, what is replaced by a copy, what is left out, and what is refused.
func TestCopyDirTo(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	host := t.TempDir()
	// (Open to others, as a venv is: a link out of it is followed only to
	// a file others may read.)
	must(os.Chmod(host, 0o755))
	must(os.Chmod(filepath.Dir(host), 0o755))
	from := filepath.Join(host, "site")
	elsewhere := filepath.Join(host, "elsewhere")
	must(os.MkdirAll(filepath.Join(from, "pkg/__pycache__"), 0o755))
	must(os.MkdirAll(filepath.Join(elsewhere, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(from, "pkg/mod.py"), []byte("x = 1\n"), 0o644))
	must(os.WriteFile(filepath.Join(from, "pkg/run"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(from, "pkg/_ext.cpython-311-x86_64-linux-gnu.so"), []byte("elf"), 0o755))
	must(os.Chmod(filepath.Join(from, "pkg/run"), 0o4755))
	must(os.WriteFile(filepath.Join(from, "pkg/__pycache__/mod.pyc"), []byte("pyc"), 0o644))
	must(os.WriteFile(filepath.Join(from, "pkg/excluded.txt"), []byte("no"), 0o644))
	must(os.WriteFile(filepath.Join(elsewhere, "libout.so.1"), []byte("elf"), 0o755))
	must(os.Symlink("mod.py", filepath.Join(from, "pkg/inside")))
	must(os.Symlink("../pkg/mod.py", filepath.Join(from, "pkg/inside-up")))
	must(os.Symlink("excluded.txt", filepath.Join(from, "pkg/dangles")))
	must(os.Symlink(filepath.Join(elsewhere, "libout.so.1"), filepath.Join(from, "pkg/libout.so.1")))
	must(os.Symlink("../../elsewhere/libout.so.1", filepath.Join(from, "pkg/relative-out.so")))
	must(os.Symlink(filepath.Join(elsewhere, "dir"), filepath.Join(from, "pkg/outdir")))
	must(os.Symlink(filepath.Join(elsewhere, "missing"), filepath.Join(from, "pkg/broken")))
	excluded := func(rel string, isDir bool) bool {
		return rel == "pkg/excluded.txt" || (isDir && filepath.Base(rel) == "__pycache__")
	}

	for _, tc := range []struct{ name, to string }{{"same path", from}, {"other path", "/usr/lib/python3/dist-packages"}} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			tr := newTree(out, func(s string) { t.Log(s) })
			sos, err := tr.copyDirTo(context.Background(), from, tc.to, excluded)
			if err != nil {
				t.Fatal(err)
			}
			wantSOs := []string{"pkg/_ext.cpython-311-x86_64-linux-gnu.so", "pkg/libout.so.1", "pkg/relative-out.so"}
			if !slices.Equal(sos, wantSOs) {
				t.Errorf("shared objects %q, want %q", sos, wantSOs)
			}
			in := func(rel string) string { return filepath.Join(out, tc.to, rel) }
			for rel, want := range map[string]string{"pkg/inside": "mod.py", "pkg/inside-up": "../pkg/mod.py"} {
				if got, err := os.Readlink(in(rel)); err != nil || got != want {
					t.Errorf("%s -> %q (%v), want a symlink -> %q", rel, got, err, want)
				}
			}
			for rel, perm := range map[string]fs.FileMode{"pkg/mod.py": 0o644, "pkg/run": 0o755, "pkg/libout.so.1": 0o755, "pkg/relative-out.so": 0o755} {
				fi, err := os.Lstat(in(rel))
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s: %v %v, want a regular file", rel, fi, err)
					continue
				}
				if fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != perm {
					t.Errorf("%s: mode %v, want %04o", rel, fi.Mode(), perm)
				}
			}
			for _, rel := range []string{"pkg/__pycache__", "pkg/excluded.txt", "pkg/dangles", "pkg/outdir", "pkg/broken"} {
				if _, err := os.Lstat(in(rel)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s is in the tree (%v), want it left out", rel, err)
				}
			}
		})
	}

	t.Run("FIFO refused", func(t *testing.T) {
		dir := t.TempDir()
		must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
		tr := newTree(t.TempDir(), nil)
		if _, err := tr.copyDirTo(context.Background(), dir, "/x", func(string, bool) bool { return false }); err == nil || !strings.Contains(err.Error(), "not a file, directory or symlink") {
			t.Errorf("copy of a directory with a FIFO: %v, want refused", err)
		}
	})

	t.Run("copyDir gives host paths", func(t *testing.T) {
		tr := newTree(t.TempDir(), nil)
		if _, err := tr.mirror(from); err != nil {
			t.Fatal(err)
		}
		sos, err := tr.copyDir(context.Background(), from, excluded)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(from, "pkg/_ext.cpython-311-x86_64-linux-gnu.so"); len(sos) != 3 || sos[0] != want {
			t.Errorf("copyDir shared objects %q, want host paths starting with %s", sos, want)
		}
	})
}

// TestSummarizeReadsAsScanTree checks that the build's record of a tree (summarize)
// and Verify's reading of it (scanTree) agree entry for entry, that a set-id bit the
// build should never leave is recorded without it (so that Verify reports it), and
// that a FIFO is refused.
func TestSummarizeReadsAsScanTree(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/python3"), []byte("elf"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/a-b"), []byte("data"), 0o644))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.WriteFile(filepath.Join(root, manifestName), []byte("{}"), 0o644))
	sum, err := summarize(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := scanTree(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b fileEntry) int { return strings.Compare(a.Path, b.Path) })
	if !slices.EqualFunc(sum.entries, got, func(a, b fileEntry) bool {
		return a.Path == b.Path && a.Kind == b.Kind && a.Perm == b.Perm && a.Size == b.Size && a.Digest == b.Digest
	}) {
		t.Errorf("summarize recorded\n%+v\nscanTree read\n%+v", sum.entries, got)
	}
	if sum.files != 3 || sum.size != 7 || sum.programs["/usr/bin/python3"] != 3 {
		t.Errorf("files %d size %d programs %v, want 3 files of 7 bytes, /usr/bin/python3 a program", sum.files, sum.size, sum.programs)
	}

	must(os.Chmod(filepath.Join(root, "usr/bin/python3"), 0o755|os.ModeSetuid))
	sum, err = summarize(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sum.entries {
		if e.Path == "/usr/bin/python3" && e.Perm != 0o755 {
			t.Errorf("setuid python3 recorded as %04o, want 0755 (so that Verify reports the bit)", e.Perm)
		}
	}
	if got, err = scanTree(root); err != nil {
		t.Fatal(err)
	}
	if d := compareEntries(sum.entries, got); len(d) != 1 || d[0].Path != "/usr/bin/python3" || !strings.Contains(d[0].What, "mode 4755") {
		t.Errorf("Verify's comparison of a setuid python3: %v, want its mode reported", d)
	}

	must(unix.Mkfifo(filepath.Join(root, "usr/fifo"), 0o644))
	if _, err := summarize(context.Background(), root); err == nil || !strings.Contains(err.Error(), "no place in the rootfs") {
		t.Errorf("summarize of a tree with a FIFO: %v, want refused", err)
	}
}

// TestCopyDirToRefusesPrivate: a rootfs publishes what it holds to every user,
// so a copy refuses what others may not read: a link out of the copied directory
// is followed only to a file with o+r below directories with o+x, and a file or
// directory inside it needs o+r (o+rx for a directory).
func TestCopyDirToRefusesPrivate(t *testing.T) {
	yes := true
	modes := []struct {
		name              string
		fileMode, dirMode os.FileMode
		ok                bool
		// linkOK, where it differs from ok: others may reach a file by
		// its name through a directory they may search but not list.
		linkOK *bool
	}{
		{"public", 0o644, 0o755, true, nil},
		{"file 0600", 0o600, 0o755, false, nil},
		{"file 0640", 0o640, 0o755, false, nil},
		{"directory 0700", 0o644, 0o700, false, nil},
		{"directory 0754", 0o644, 0o754, false, nil},
		{"directory 0711", 0o644, 0o711, false, &yes},
	}
	for _, where := range []string{"a link's target", "inside the tree"} {
		for _, tc := range modes {
			t.Run(where+"/"+tc.name, func(t *testing.T) {
				host := t.TempDir()
				for _, d := range []string{host, filepath.Dir(host)} {
					if err := os.Chmod(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				from := filepath.Join(host, "site")
				private := filepath.Join(host, "private") // the link's target's directory
				if where == "inside the tree" {
					private = filepath.Join(from, "pkg")
				}
				for _, d := range []string{from, private} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				secret := filepath.Join(private, "secret")
				if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(secret, tc.fileMode); err != nil { // whatever the umask
					t.Fatal(err)
				}
				if err := os.Chmod(private, tc.dirMode); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(private, 0o755) })
				want := "other users may not read it"
				if where == "a link's target" {
					if err := os.Symlink(secret, filepath.Join(from, "leak.txt")); err != nil {
						t.Fatal(err)
					}
					want = "which other users may not read"
				}
				ok := tc.ok
				if where == "a link's target" && tc.linkOK != nil {
					ok = *tc.linkOK
				}
				tr := newTree(t.TempDir(), func(s string) { t.Log(s) })
				_, err := tr.copyDirTo(context.Background(), from, "/dst", func(string, bool) bool { return false })
				if ok != (err == nil) {
					t.Fatalf("copyDirTo: %v, want ok=%v", err, ok)
				}
				if err != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say why (%q): %v", want, err)
				}
			})
		}
	}
}
