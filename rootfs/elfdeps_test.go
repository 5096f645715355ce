package rootfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestProgramClosurePython resolves Debian 12's interpreter as ld.so would.
func TestProgramClosurePython(t *testing.T) {
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	r, err := newLibraryResolver(python, "/etc/ld.so.conf")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := r.programClosure(python)
	if err != nil {
		t.Fatal(err)
	}
	if prog.interp != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("interp = %q, want /lib64/ld-linux-x86-64.so.2", prog.interp)
	}
	got := map[string]loadedLibrary{}
	for _, l := range prog.libs {
		got[filepath.Base(l.Path)] = l
	}
	for _, tc := range []struct{ name, path string }{
		{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"},
		{"libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6"},
		{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"},
		{"libexpat.so.1", "/lib/x86_64-linux-gnu/libexpat.so.1"},
	} {
		l, ok := got[tc.name]
		switch {
		case !ok:
			t.Errorf("%s missing from closure %v", tc.name, prog.libs)
		case l.Path != tc.path || l.Hidden:
			t.Errorf("%s = %+v, want %s, not hidden", tc.name, l, tc.path)
		}
	}
	// libc needs the loader by SONAME: already loaded as PT_INTERP, never searched.
	if _, ok := got["ld-linux-x86-64.so.2"]; ok {
		t.Errorf("loader searched again as a library: %v", prog.libs)
	}

	// An extension module adds only what the program has not loaded.
	ssl, err := filepath.Glob("/usr/lib/python3.11/lib-dynload/_ssl.cpython-311-*.so")
	if err != nil || len(ssl) != 1 {
		t.Fatalf("find _ssl module: %v %v", ssl, err)
	}
	more, err := r.moduleClosure(prog, ssl[0])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range more {
		names = append(names, filepath.Base(l.Path))
	}
	slices.Sort(names)
	if want := []string{"libcrypto.so.3", "libssl.so.3"}; !slices.Equal(names, want) {
		t.Errorf("_ssl adds %v, want %v", names, want)
	}
}

// TestClosureSearchPaths builds small programs with gcc to check RUNPATH, RPATH and
// $ORIGIN handling, and compares the resolver's verdict with what ld.so really does.
func TestClosureSearchPaths(t *testing.T) {
	d := t.TempDir()
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	src := func(name, code string) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mkdir := func(dirs ...string) {
		for _, dir := range dirs {
			if err := os.MkdirAll(filepath.Join(d, dir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkdir("app/bin", "app/lib", "r/bin", "r/lib1", "r/lib2")
	leaf := src("leaf.c", "int leaf(void) { return 2; }\n")
	mid := src("mid.c", "int leaf(void); int mid(void) { return leaf() + 1; }\n")
	main := src("main.c", "int mid(void); int main(void) { return mid() == 3 ? 0 : 1; }\n")
	p := func(rel string) string { return filepath.Join(d, rel) }

	// app: main -RUNPATH $ORIGIN/../lib-> libmid -RUNPATH $ORIGIN-> libleaf
	gcc("-shared", "-fPIC", "-o", p("app/lib/libleaf.so.1"), "-Wl,-soname,libleaf.so.1", leaf)
	gcc("-shared", "-fPIC", "-o", p("app/lib/libmid.so.1"), "-Wl,-soname,libmid.so.1", mid,
		p("app/lib/libleaf.so.1"), "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
	gcc("-o", p("app/bin/main"), main, p("app/lib/libmid.so.1"), "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib")

	// r: libmid has no search path of its own, libleaf is only in lib2.
	gcc("-shared", "-fPIC", "-o", p("r/lib2/libleaf.so.1"), "-Wl,-soname,libleaf.so.1", leaf)
	gcc("-shared", "-fPIC", "-o", p("r/lib1/libmid.so.1"), "-Wl,-soname,libmid.so.1", mid, p("r/lib2/libleaf.so.1"))
	// DT_RPATH is inherited by libmid: libleaf is found.
	gcc("-o", p("r/bin/rpath"), main, p("r/lib1/libmid.so.1"), "-Wl,-rpath-link,"+p("r/lib2"),
		"-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib1:$ORIGIN/../lib2")
	// DT_RUNPATH applies to the program's own needs only: libleaf is not found.
	gcc("-o", p("r/bin/runpath"), main, p("r/lib1/libmid.so.1"), "-Wl,-rpath-link,"+p("r/lib2"),
		"-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib1:$ORIGIN/../lib2")

	tests := []struct {
		exe     string
		want    []string // cleaned paths of the non-system libraries, in load order
		wantErr string
	}{
		{exe: "app/bin/main", want: []string{p("app/lib/libmid.so.1"), p("app/lib/libleaf.so.1")}},
		{exe: "r/bin/rpath", want: []string{p("r/lib1/libmid.so.1"), p("r/lib2/libleaf.so.1")}},
		{exe: "r/bin/runpath", wantErr: "library libleaf.so.1 needed by"},
	}
	for _, tc := range tests {
		t.Run(tc.exe, func(t *testing.T) {
			exe := p(tc.exe)
			r, err := newLibraryResolver(exe, "/etc/ld.so.conf")
			if err != nil {
				t.Fatal(err)
			}
			prog, err := r.programClosure(exe)
			runErr := exec.Command(exe).Run()
			if (err == nil) != (runErr == nil) {
				t.Errorf("resolver says %v, but running it says %v", err, runErr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range prog.libs {
				if strings.HasPrefix(l.Path, d) {
					got = append(got, filepath.Clean(l.Path))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("closure = %v, want %v", got, tc.want)
			}
			if !slices.ContainsFunc(prog.libs, func(l loadedLibrary) bool { return filepath.Base(l.Path) == "libc.so.6" }) {
				t.Errorf("no libc in %v", prog.libs)
			}
		})
	}
}

func TestParseLdSoConf(t *testing.T) {
	d := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(d, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ld.so.conf", "# comment\n/first  # trailing comment\ninclude conf.d/*.conf\n\nhwcap 0 nosegneg\n/last\n")
	write("conf.d/b.conf", "/b1\n/b2=libc6,relative\ninclude ../ld.so.conf\n")
	write("conf.d/a.conf", "/a\n")
	write("conf.d/ignored.txt", "/nope\n")
	tests := []struct {
		name    string
		path    string
		want    []string
		wantErr bool
	}{
		{name: "includes in glob order, loop stopped", path: filepath.Join(d, "ld.so.conf"), want: []string{"/first", "/a", "/b1", "/b2", "/last"}},
		{name: "missing file is empty", path: filepath.Join(d, "absent.conf"), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLdSoConf(tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
