package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestPackageLibrariesOnlyPublic: an extension module in a venv chooses where the
// loader looks for its libraries (here DT_RUNPATH), so whoever may write the venv
// could have the build publish an ELF file only the builder may read. The module
// whose library others may not read is left out, its library with it; one whose
// library others may read brings it, marked for mirrorPublic, which judges the file
// it opens again (made private before its open: refused).
func TestPackageLibrariesOnlyPublic(t *testing.T) {
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
	site, private, public := filepath.Join(host, "site"), filepath.Join(host, "private"), filepath.Join(host, "public")
	for _, d := range []string{site, private, public} {
		must(os.MkdirAll(d, 0o755))
	}
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	lib := filepath.Join(host, "lib.c")
	mod := filepath.Join(host, "mod.c")
	must(os.WriteFile(lib, []byte("int rljail_lib(void) { return 1; }\n"), 0o644))
	must(os.WriteFile(mod, []byte("int rljail_lib(void); int rljail_mod(void) { return rljail_lib(); }\n"), 0o644))
	for _, dir := range []string{private, public} {
		gcc("-shared", "-fPIC", "-o", filepath.Join(dir, "librljailpkg.so.1"), "-Wl,-soname,librljailpkg.so.1", lib)
		must(os.Chmod(filepath.Join(dir, "librljailpkg.so.1"), 0o644))
		name := "mod_" + filepath.Base(dir) + ".cpython-311-x86_64-linux-gnu.so"
		gcc("-shared", "-fPIC", "-o", filepath.Join(site, name), mod, filepath.Join(dir, "librljailpkg.so.1"), "-Wl,--enable-new-dtags,-rpath,"+dir)
		must(os.Chmod(filepath.Join(site, name), 0o755))
	}
	must(os.Chmod(private, 0o700))
	t.Cleanup(func() { os.Chmod(private, 0o755) })

	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	must(err)
	r, err := newLibraryResolver(python, "/etc/ld.so.conf")
	must(err)
	prog, err := r.programClosure(python)
	must(err)
	out := t.TempDir()
	tr := newTree(out, func(s string) { t.Log(s) })
	to := "/usr/local/lib/python3.11/dist-packages"
	plan := &packagePlan{purelib: to, dirs: []dirCopy{{from: site, to: to}}}
	var logged []string
	libs, _, err := addPackages(context.Background(), tr, r, prog, python, plan, func(f string, a ...any) {
		logged = append(logged, fmt.Sprintf(f, a...))
	})
	must(err)
	inTree := func(name string) string { return filepath.Join(out, to, name) }
	if _, err := os.Lstat(inTree("mod_private.cpython-311-x86_64-linux-gnu.so")); err == nil {
		t.Error("the module whose library others may not read is in the tree")
	}
	if !slices.ContainsFunc(logged, func(s string) bool { return strings.Contains(s, "other users may not read") }) {
		t.Errorf("the build does not say why it left the module out: %q", logged)
	}
	if _, err := os.Lstat(inTree("mod_public.cpython-311-x86_64-linux-gnu.so")); err != nil {
		t.Errorf("the module whose library others may read is not in the tree: %v", err)
	}
	var got []loadedLibrary
	for _, l := range libs {
		if strings.HasPrefix(l.Path, host) {
			got = append(got, l)
		}
	}
	want := []loadedLibrary{{Path: filepath.Join(public, "librljailpkg.so.1"), Public: true}}
	if !slices.Equal(got, want) {
		t.Errorf("the packages' libraries %+v, want %+v", got, want)
	}

	// Made private after the judgement, before mirrorPublic opens it: refused.
	pub := filepath.Join(public, "librljailpkg.so.1")
	beforeOpen = func(p string) {
		if p == pub {
			os.Chmod(p, 0o600)
		}
	}
	defer func() { beforeOpen = nil }()
	if _, err := tr.mirrorPublic(pub); err == nil || !strings.Contains(err.Error(), "other users may not read") {
		t.Errorf("mirrorPublic of a library made private before its open: %v, want refused", err)
	}
	if _, err := os.Lstat(filepath.Join(out, pub)); err == nil {
		t.Error("the library made private is in the tree")
	}
}

// TestLinkOutToFIFONotOpened: a link out of the copied tree to something that is not
// a file or directory (a FIFO here; /dev/watchdog, which an open arms) is left out,
// as before, and never opened: the walk judges it by its O_PATH descriptor.
func TestLinkOutToFIFONotOpened(t *testing.T) {
	host := t.TempDir()
	site := filepath.Join(host, "site")
	fifo := filepath.Join(host, "fifo")
	if err := os.Mkdir(site, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, filepath.Join(site, "link")); err != nil {
		t.Fatal(err)
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, fifo, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tr := newTree(out, func(s string) { t.Log(s) })
	if _, err := tr.copyDirTo(context.Background(), site, "/dst", func(string, bool) bool { return false }); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(out, "dst/link")); err == nil {
		t.Error("the link to a FIFO is in the tree")
	}
	buf := make([]byte, 4096)
	if n, _ := unix.Read(in, buf); n > 0 {
		t.Error("the copy opened the FIFO a link out of the tree leads to")
	}
}

// TestOpenVenvSite: a venv's site-packages is opened by descriptor below the venv,
// and a symlink on the way (lib -> elsewhere, planted or swapped in after the plan
// checked the venv) leads only where others may read.
func TestOpenVenvSite(t *testing.T) {
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
	const rel = "lib/python3.11/site-packages"
	for _, d := range []string{"public/lib", "private/lib"} {
		must(os.MkdirAll(filepath.Join(host, d, "python3.11/site-packages"), 0o755))
	}
	must(os.WriteFile(filepath.Join(host, "afile"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(host, "private"), 0o700))
	t.Cleanup(func() { os.Chmod(filepath.Join(host, "private"), 0o755) })
	tests := []struct {
		name    string
		lib     func(venv string) error // makes venv/lib
		wantErr string
	}{
		{"a directory", func(v string) error { return os.MkdirAll(filepath.Join(v, rel), 0o755) }, ""},
		{"a link to a public directory", func(v string) error { return os.Symlink(filepath.Join(host, "public/lib"), filepath.Join(v, "lib")) }, ""},
		{"a relative link to a public directory", func(v string) error { return os.Symlink("../public/lib", filepath.Join(v, "lib")) }, ""},
		{"a link into a directory only root may enter", func(v string) error { return os.Symlink(filepath.Join(host, "private/lib"), filepath.Join(v, "lib")) }, "which other users may not read"},
		{"a link to a file", func(v string) error { return os.Symlink(filepath.Join(host, "afile"), filepath.Join(v, "lib")) }, "no site-packages through"},
		{"no site-packages", func(v string) error { return os.Mkdir(filepath.Join(v, "lib"), 0o755) }, "it has no"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			venv := filepath.Join(host, fmt.Sprintf("venv%d", i))
			must(os.Mkdir(venv, 0o755))
			must(tc.lib(venv))
			f, err := openVenvSite(venv, rel)
			if f != nil {
				f.Close()
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("openVenvSite: %v, want %q", err, tc.wantErr)
			}
		})
	}
}
