package rootfs

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultDir(t *testing.T) {
	home := t.TempDir()
	notAHome := filepath.Join(home, "file")
	if err := os.WriteFile(notAHome, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := func(string) error { return nil }
	readOnly := func(dir string) error { return errors.New(filepath.Dir(dir) + " is not writable") }
	tests := []struct {
		name      string
		euid      int
		env       map[string]string // unset when absent
		creatable func(string) error
		want      string
		wantErr   string
	}{
		{name: "override wins for root", euid: 0, env: map[string]string{"RLJAIL_ROOTFS": "/srv/py", "HOME": home}, creatable: readOnly, want: "/srv/py"},
		{name: "override wins for a user", euid: 1000, env: map[string]string{"RLJAIL_ROOTFS": "/srv/py", "XDG_DATA_HOME": "/x"}, creatable: ok, want: "/srv/py"},
		{name: "root", euid: 0, env: map[string]string{"HOME": home, "XDG_DATA_HOME": "/x"}, creatable: ok, want: "/var/lib/rljail/rootfs/python"},
		{name: "root, read-only /var/lib", euid: 0, env: map[string]string{}, creatable: readOnly, wantErr: "not writable); pass --rootfs DIR or set RLJAIL_ROOTFS"},
		{name: "xdg", euid: 1000, env: map[string]string{"HOME": home, "XDG_DATA_HOME": "/data"}, creatable: ok, want: "/data/rljail/rootfs/python"},
		{name: "relative xdg ignored", euid: 1000, env: map[string]string{"HOME": home, "XDG_DATA_HOME": "data"}, creatable: ok, want: home + "/.local/share/rljail/rootfs/python"},
		{name: "home", euid: 1000, env: map[string]string{"HOME": home}, creatable: ok, want: home + "/.local/share/rljail/rootfs/python"},
		{name: "no home", euid: 1000, env: map[string]string{}, creatable: ok,
			wantErr: "no writable default place for the Python rootfs (HOME is not set); pass --rootfs DIR or set RLJAIL_ROOTFS"},
		{name: "nonexistent home", euid: 1000, env: map[string]string{"HOME": "/nonexistent"}, creatable: ok,
			wantErr: "no writable default place for the Python rootfs (HOME is /nonexistent); pass --rootfs DIR or set RLJAIL_ROOTFS"},
		{name: "home is a file", euid: 1000, env: map[string]string{"HOME": notAHome}, creatable: ok, wantErr: "(HOME is " + notAHome + ")"},
		{name: "home not writable", euid: 1000, env: map[string]string{"HOME": home}, creatable: readOnly, wantErr: "is not writable); pass --rootfs DIR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"RLJAIL_ROOTFS", "XDG_DATA_HOME", "HOME"} {
				t.Setenv(k, tc.env[k])
				if _, set := tc.env[k]; !set {
					os.Unsetenv(k)
				}
			}
			got, err := defaultDir(tc.euid, os.Getenv, tc.creatable)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}

	// The real thing, for whoever runs the test.
	t.Setenv("RLJAIL_ROOTFS", "")
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	want := home + "/.local/share/rljail/rootfs/python"
	if os.Geteuid() == 0 {
		want = filepath.Join(RootDataDir, DefaultName)
	}
	if got, err := DefaultDir(); err != nil || got != want {
		t.Errorf("DefaultDir() = %q, %v; want %q", got, err, want)
	}
}

func TestCreatableDir(t *testing.T) {
	d := t.TempDir()
	file := filepath.Join(d, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir     string
		wantErr bool
	}{
		{d, false},
		{filepath.Join(d, "a/b/c"), false},
		{filepath.Join(file, "sub"), true},
	}
	for _, tc := range tests {
		if err := creatableDir(tc.dir); (err != nil) != tc.wantErr {
			t.Errorf("creatableDir(%s) = %v, want error %v", tc.dir, err, tc.wantErr)
		}
	}
}

func TestDefaultPython(t *testing.T) {
	p, err := DefaultPython()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(p) {
		t.Errorf("DefaultPython() = %q, not absolute", p)
	}
	if real, _ := filepath.EvalSymlinks(p); real != p {
		t.Errorf("DefaultPython() = %q, not resolved (%q)", p, real)
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("DefaultPython() = %q: %v", p, err)
	}
	f.Close()
	// On Debian 12, this is the distribution's interpreter, not a pyenv shim.
	if want := "/usr/bin/python3.11"; p != want {
		t.Errorf("DefaultPython() = %q, want %q", p, want)
	}
}

func TestHostInterpreter(t *testing.T) {
	d := t.TempDir()
	shim := filepath.Join(d, "python3")
	if err := os.WriteFile(shim, []byte("#!/usr/bin/env bash\nexec pyenv exec python3 \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(d, "data")
	if err := os.WriteFile(data, []byte("\x7fELF garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(d, "noexec")
	if err := os.WriteFile(noexec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(d, "python")
	if err := os.Symlink("/usr/bin/python3", link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want, wantErr string
	}{
		{path: link, want: "/usr/bin/python3.11"},
		{path: shim, wantErr: "is a script, such as a pyenv shim"},
		{path: data, wantErr: "is not an ELF program"},
		{path: noexec, wantErr: "not an executable file"},
		{path: filepath.Join(d, "absent"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		got, err := hostInterpreter(tc.path)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("hostInterpreter(%s) = %q, %v; want error %q", tc.path, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("hostInterpreter(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	// Build refuses a shim too, before touching the output directory.
	out := filepath.Join(d, "out")
	if _, err := Build(t.Context(), BuildOptions{Python: shim, Out: out}); err == nil || !strings.Contains(err.Error(), "pyenv") {
		t.Errorf("Build with a shim: %v", err)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("Build with a shim created the output directory")
	}
}
