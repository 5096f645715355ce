package jail

// Fuzz targets for the -v parser and Spec.Validate (issue 5). The seed
// corpora are in testdata/fuzz/FuzzXxx; `go test` runs them as ordinary
// tests, and
//
//	go test -run '^$' -fuzz '^FuzzParseVolume$' -fuzztime 30s ./jail/
//
// fuzzes one target.

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fzCheckDest fails t unless dest is a destination a volume may have:
// absolute, clean, free of NUL (the kernel cannot be given it), not / and
// not under a path the jail reserves.
func fzCheckDest(t *testing.T, what, dest string) {
	t.Helper()
	switch {
	case !strings.HasPrefix(dest, "/"):
		t.Fatalf("%s: destination %q is not absolute", what, dest)
	case path.Clean(dest) != dest:
		t.Fatalf("%s: destination %q is not clean", what, dest)
	case dest == "/":
		t.Fatalf("%s: destination / accepted", what)
	case strings.IndexByte(dest, 0) >= 0:
		t.Fatalf("%s: destination %q has a NUL byte, which no mount can take", what, dest)
	}
	for _, r := range []string{"/proc", "/dev", "/sys"} {
		if dest == r || strings.HasPrefix(dest, r+"/") {
			t.Fatalf("%s: destination %q is under the reserved %s", what, dest, r)
		}
	}
}

// FuzzParseVolume: -v SRC:DST[:ro|rw] and the volumes of profiles. An
// accepted volume has a non-empty source, an acceptable destination (see
// fzCheckDest), is writable exactly when the mode is rw, and spells back
// to itself.
func FuzzParseVolume(f *testing.F) {
	f.Add("./data:/data")
	f.Add("/srv/x:/x:rw")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVolume(s)
		what := "ParseVolume(" + strconv.Quote(s) + ")"
		if err != nil {
			if v != (Volume{}) {
				t.Fatalf("%s = %+v with error %v", what, v, err)
			}
			if !strings.Contains(err.Error(), "volume") {
				t.Fatalf("%s: error %q does not say it is about a volume", what, err)
			}
			return
		}
		if v.Source == "" {
			t.Fatalf("%s: empty source accepted", what)
		}
		fzCheckDest(t, what, v.Dest)
		parts := strings.Split(s, ":")
		switch {
		case len(parts) == 2 && !v.Writable:
		case len(parts) == 3 && parts[2] == "ro" && !v.Writable:
		case len(parts) == 3 && parts[2] == "rw" && v.Writable:
		default:
			t.Fatalf("%s = %+v: the mode is not ro or rw, or does not match", what, v)
		}
		if parts[0] != v.Source || parts[1] != v.Dest {
			t.Fatalf("%s = %+v: source or destination differs from the input", what, v)
		}
		spelled := v.Source + ":" + v.Dest + ":ro"
		if v.Writable {
			spelled = v.Source + ":" + v.Dest + ":rw"
		}
		if w, err := ParseVolume(spelled); err != nil || w != v {
			t.Fatalf("%s = %+v, but %q gives %+v, %v", what, v, spelled, w, err)
		}
	})
}

// fzHostTree makes the host side of FuzzValidate's volumes in dir: a
// directory, a file, a symlink to each, a symlink loop and a symlink out
// of dir. A source "@NAME" in the fuzz input stands for dir/NAME.
func fzHostTree(f *testing.F, dir string) {
	f.Helper()
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "data"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644))
	must(os.Symlink("data", filepath.Join(dir, "dlink")))
	must(os.Symlink("file", filepath.Join(dir, "flink")))
	must(os.Symlink("loop", filepath.Join(dir, "loop")))
	must(os.Symlink("..", filepath.Join(dir, "up")))
	must(os.Symlink("nowhere", filepath.Join(dir, "dangling")))
}

// FuzzValidate: Spec.Validate with fuzzed volumes, environment entry and
// workdir, over a real rootfs directory. bits: 1 and 2 make the volumes
// writable, 4 adds a workspace. After Validate succeeds the spec is what
// the jail can use as it is: the rootfs and every volume source are
// absolute, clean and fully resolved (no symlink left) and exist; every
// destination is acceptable (see fzCheckDest) and used once, /workspace
// not at all when a workspace is mounted; the workdir is empty or
// absolute, clean and free of NUL; every environment entry is KEY=VALUE
// with a key and no NUL.
func FuzzValidate(f *testing.F) {
	dir := f.TempDir()
	fzHostTree(f, dir)
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("@data", "/data", "@file", "/etc/extra", "A=1", "/data", uint8(4))
	f.Fuzz(func(t *testing.T, src1, dst1, src2, dst2, env, workdir string, bits uint8) {
		source := func(s string) string {
			if name, ok := strings.CutPrefix(s, "@"); ok {
				return filepath.Join(dir, name)
			}
			return s
		}
		spec := Spec{
			Command: []string{"python3"},
			Rootfs:  dir,
			Env:     []string{env},
			Workdir: workdir,
			Volumes: []Volume{
				{Source: source(src1), Dest: dst1, Writable: bits&1 != 0},
				{Source: source(src2), Dest: dst2, Writable: bits&2 != 0},
			},
		}
		if bits&4 != 0 {
			spec.Workspace = filepath.Join(dir, "data")
		}
		if err := spec.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("Validate: empty error")
			}
			return
		}
		if spec.Rootfs != realDir {
			t.Fatalf("Validate: rootfs %q, want %q", spec.Rootfs, realDir)
		}
		if w := spec.Workdir; w != "" && (!path.IsAbs(w) || path.Clean(w) != w || strings.IndexByte(w, 0) >= 0) {
			t.Fatalf("Validate accepted workdir %q: not absolute, not clean or with a NUL byte", w)
		}
		for _, kv := range spec.Env {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
				t.Fatalf("Validate accepted environment entry %q", kv)
			}
		}
		seen := map[string]bool{}
		if spec.Workspace != "" {
			seen[WorkspaceDir] = true
		}
		for _, v := range spec.Volumes {
			what := "Validate(volume " + strconv.Quote(v.Source) + " at " + strconv.Quote(v.Dest) + ")"
			fzCheckDest(t, what, v.Dest)
			if seen[v.Dest] {
				t.Fatalf("%s: destination used twice", what)
			}
			seen[v.Dest] = true
			if !filepath.IsAbs(v.Source) || filepath.Clean(v.Source) != v.Source {
				t.Fatalf("%s: source is not absolute and clean", what)
			}
			st, err := os.Lstat(v.Source)
			if err != nil {
				t.Fatalf("%s: source: %v", what, err)
			}
			if st.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("%s: source is still a symlink", what)
			}
			if real, err := filepath.EvalSymlinks(v.Source); err != nil || real != v.Source {
				t.Fatalf("%s: source resolves further, to %q (%v)", what, real, err)
			}
		}
	})
}
