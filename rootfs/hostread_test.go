package rootfs

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopyJudgesWhatItOpens swaps an entry of a copied tree between its listing (or
// the walk that led to it) and its open, through the beforeOpen hook, as whoever may
// write a venv while root builds from it can: a copy of the old code (lstat, then
// open of the path) published a file only root may read at 0644 in the first case.
// The copy must judge what it opened: a symlink put where a file or directory was
// listed is never followed to what others may not read, nor is one swapped in at the
// end of a followed link's walk, and a file private when opened is refused. No case
// may leave the secrets' bytes anywhere in the tree.
func TestCopyJudgesWhatItOpens(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	type layout struct{ host, site, private, public string }
	// swap replaces the entry at p by what make puts there (the old one moved aside).
	swap := func(p string, make func(p string) error) error {
		if err := os.Rename(p, p+".moved"); err != nil {
			return err
		}
		return make(p)
	}
	linkTo := func(target string) func(string) error {
		return func(p string) error { return os.Symlink(target, p) }
	}
	tests := []struct {
		name string
		at   func(l layout) string // the host path whose open the swap precedes
		do   func(l layout, p string) error
		// wantErr is what the copy's error says; "" for a copy that succeeds.
		wantErr string
		check   func(t *testing.T, out string) // the copied tree, at /dst
	}{
		{
			name: "file swapped for a link to a file only root may read",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do: func(l layout, p string) error {
				return swap(p, linkTo(filepath.Join(l.private, "secret")))
			},
			wantErr: "which other users may not read",
		},
		{
			name: "file swapped for a link into a directory only root may enter",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do: func(l layout, p string) error {
				return swap(p, linkTo(filepath.Join(l.private, "readable")))
			},
			wantErr: "which other users may not read",
		},
		{
			name: "file swapped for a link to a public file: a copy of it",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do: func(l layout, p string) error {
				return swap(p, linkTo(filepath.Join(l.public, "other.txt")))
			},
			check: func(t *testing.T, out string) {
				if b, err := os.ReadFile(filepath.Join(out, "pkg/data.txt")); err != nil || string(b) != "public other\n" {
					t.Errorf("pkg/data.txt: %q %v, want a copy of the public file", b, err)
				}
			},
		},
		{
			name: "file swapped for a link inside: kept as the link",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do:   func(l layout, p string) error { return swap(p, linkTo("inner.py")) },
			check: func(t *testing.T, out string) {
				if got, err := os.Readlink(filepath.Join(out, "pkg/data.txt")); err != nil || got != "inner.py" {
					t.Errorf("pkg/data.txt -> %q %v, want the symlink -> inner.py", got, err)
				}
			},
		},
		{
			name:    "file made private before its open",
			at:      func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do:      func(l layout, p string) error { return os.Chmod(p, 0o600) },
			wantErr: "other users may not read it (mode 0600)",
		},
		{
			name: "file swapped for a FIFO: refused, not waited on",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg/data.txt") },
			do: func(l layout, p string) error {
				return swap(p, func(p string) error { return unix.Mkfifo(p, 0o644) })
			},
			wantErr: "not a file, directory or symlink",
		},
		{
			name: "directory swapped for a link to a directory only root may enter: left out",
			at:   func(l layout) string { return filepath.Join(l.site, "pkg") },
			do:   func(l layout, p string) error { return swap(p, linkTo(l.private)) },
			check: func(t *testing.T, out string) {
				if _, err := os.Lstat(filepath.Join(out, "pkg")); err == nil {
					t.Error("pkg is in the tree: the link put in place of the directory was followed")
				}
			},
		},
		{
			name: "listed link swapped for a public file: a copy of the file",
			at:   func(l layout) string { return filepath.Join(l.site, "link-in") },
			do: func(l layout, p string) error {
				return swap(p, func(p string) error { return os.WriteFile(p, []byte("now a file\n"), 0o644) })
			},
			check: func(t *testing.T, out string) {
				if b, err := os.ReadFile(filepath.Join(out, "link-in")); err != nil || string(b) != "now a file\n" {
					t.Errorf("link-in: %q %v, want the file now there", b, err)
				}
			},
		},
		{
			name: "a followed link's target swapped for a link to a file only root may read",
			at:   func(l layout) string { return filepath.Join(l.public, "other.txt") },
			do: func(l layout, p string) error {
				return swap(p, linkTo(filepath.Join(l.private, "secret")))
			},
			wantErr: "which other users may not read",
		},
		{
			name:    "a followed link's target made private before its open",
			at:      func(l layout) string { return filepath.Join(l.public, "other.txt") },
			do:      func(l layout, p string) error { return os.Chmod(p, 0o600) },
			wantErr: "which other users may not read",
		},
	}
	setup := func(t *testing.T) layout {
		host := t.TempDir()
		for _, d := range []string{host, filepath.Dir(host)} {
			must(os.Chmod(d, 0o755))
		}
		l := layout{host: host, site: filepath.Join(host, "site"), private: filepath.Join(host, "private"), public: filepath.Join(host, "public")}
		for _, d := range []string{filepath.Join(l.site, "pkg"), l.private, l.public} {
			must(os.MkdirAll(d, 0o755))
		}
		for p, content := range map[string]string{
			"site/a.py":            "a = 1\n",
			"site/pkg/data.txt":    "public data\n",
			"site/pkg/inner.py":    "x = 1\n",
			"public/other.txt":     "public other\n",
			"private/readable":     "SECRET in a private directory\n",
			"private/secret":       "SECRET of root's\n",
			"public/libswapped.so": "elf\n",
		} {
			must(os.WriteFile(filepath.Join(host, p), []byte(content), 0o644))
			must(os.Chmod(filepath.Join(host, p), 0o644))
		}
		must(os.Chmod(filepath.Join(l.private, "secret"), 0o600))
		must(os.Chmod(l.private, 0o700))
		t.Cleanup(func() { os.Chmod(l.private, 0o755) })
		must(os.Symlink("pkg/inner.py", filepath.Join(l.site, "link-in")))
		must(os.Symlink(filepath.Join(l.public, "other.txt"), filepath.Join(l.site, "out.txt")))
		return l
	}
	// hook runs do once, before the open of the host path at.
	hook := func(t *testing.T, at string, do func(string) error) {
		done := false
		beforeOpen = func(p string) {
			if p == at && !done {
				done = true
				if err := do(p); err != nil {
					t.Errorf("swap %s: %v", p, err)
				}
			}
		}
		t.Cleanup(func() {
			beforeOpen = nil
			if !done {
				t.Errorf("the copy never opened %s: the case proves nothing", at)
			}
		})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := setup(t)
			hook(t, tc.at(l), func(p string) error { return tc.do(l, p) })
			out := t.TempDir()
			tr := newTree(out, func(s string) { t.Log(s) })
			_, err := tr.copyDirTo(context.Background(), l.site, "/dst", func(string, bool) bool { return false })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("copy: %v, want it to succeed", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("copy: %v, want an error saying %q", err, tc.wantErr)
			}
			if tc.check != nil && err == nil {
				tc.check(t, filepath.Join(out, "dst"))
			}
			noSecretIn(t, out)
		})
	}

	// mirror copies the file its walk ends on from the descriptor it judged.
	t.Run("mirrored file swapped for a link to a file only root may read", func(t *testing.T) {
		l := setup(t)
		lib := filepath.Join(l.public, "libswapped.so")
		hook(t, lib, func(p string) error { return swap(p, linkTo(filepath.Join(l.private, "secret"))) })
		out := t.TempDir()
		tr := newTree(out, func(s string) { t.Log(s) })
		if _, err := tr.mirror(lib); err == nil {
			t.Error("mirror of a file swapped for a symlink succeeded")
		}
		noSecretIn(t, out)
	})
}

// noSecretIn fails the test if any file under root holds "SECRET".
func noSecretIn(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("SECRET")) {
			t.Errorf("%s holds a secret the copy should never have read: %q", p, b)
		}
		return nil
	})
}

// TestOpenHost checks openHost's judgement of a path by what it opened: public only
// through directories others may search, to a file others may read, symlinks
// followed (".." after one is the kernel's), and its real path.
func TestOpenHost(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	host := t.TempDir()
	for _, d := range []string{host, filepath.Dir(host)} {
		must(os.Chmod(d, 0o755))
	}
	for _, d := range []string{"a/b", "closed/in", "searchonly"} {
		must(os.MkdirAll(filepath.Join(host, d), 0o755))
	}
	for _, f := range []string{"a/b/f", "closed/in/f", "searchonly/f", "a/private"} {
		must(os.WriteFile(filepath.Join(host, f), []byte("x"), 0o644))
	}
	must(os.Chmod(filepath.Join(host, "a/private"), 0o600))
	must(os.Chmod(filepath.Join(host, "closed"), 0o700))
	must(os.Chmod(filepath.Join(host, "searchonly"), 0o711))
	t.Cleanup(func() { os.Chmod(filepath.Join(host, "closed"), 0o755) })
	must(os.Symlink("a/b", filepath.Join(host, "lb")))
	must(os.Symlink(filepath.Join(host, "closed/in"), filepath.Join(host, "lclosed")))
	must(os.Symlink("lb/../b/f", filepath.Join(host, "ldotdot")))
	tests := []struct {
		path, real string
		public     bool
	}{
		{"a/b/f", "a/b/f", true},
		{"lb/f", "a/b/f", true},
		{"ldotdot", "a/b/f", true}, // lb/.. is a, not host
		{"a/private", "a/private", false},
		{"closed/in/f", "closed/in/f", false},
		{"lclosed/f", "closed/in/f", false},
		{"searchonly/f", "searchonly/f", true},
		{"searchonly", "searchonly", false}, // others may not list it
		{"a/b", "a/b", true},
	}
	for _, tc := range tests {
		f, err := openHost(filepath.Join(host, tc.path))
		if err != nil {
			t.Errorf("openHost(%s): %v", tc.path, err)
			continue
		}
		f.Close()
		if want := filepath.Join(host, tc.real); f.real != want || f.public != tc.public {
			t.Errorf("openHost(%s): real %s public %v, want %s %v", tc.path, f.real, f.public, want, tc.public)
		}
	}
	if _, err := openHost(filepath.Join(host, "a/b/f/x")); err == nil {
		t.Error("openHost through a regular file succeeded")
	}
}
