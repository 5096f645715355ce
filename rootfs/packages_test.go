package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseDepends(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][]string
	}{
		{"", nil},
		{"python3-numpy (>= 1:1.22.0), python3:any", [][]string{{"python3-numpy"}, {"python3"}}},
		{"libblas3 | libblas.so.3, python3-numpy (>= 1:1.18.5~) | python3 (<< 3.10)", [][]string{{"libblas3", "libblas.so.3"}, {"python3-numpy", "python3"}}},
		{" , python3-six:amd64 ,", [][]string{{"python3-six"}}},
		{"foo [amd64], bar <!nocheck>", [][]string{{"foo"}, {"bar"}}},
	} {
		if got := parseDepends(tc.in); !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("parseDepends(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestResolveGroup(t *testing.T) {
	pkgs := map[string]*dpkgPackage{
		"python3-numpy": {name: "python3-numpy", installed: true},
		"libblas3":      {name: "libblas3", installed: false},
		"python3-old":   {name: "python3-old", installed: false},
	}
	provides := map[string][]string{"python3-numpy-abi9": {"python3-numpy"}, "libblas.so.3": {"libopenblas0-pthread"}}
	for _, tc := range []struct {
		group []string
		want  string
	}{
		{[]string{"python3-numpy"}, "python3-numpy"},
		{[]string{"python3-numpy-abi9"}, "python3-numpy"}, // virtual
		{[]string{"libblas3", "libblas.so.3"}, "libopenblas0-pthread"},
		{[]string{"python3-old"}, ""}, // known but not installed
		{[]string{"python3-absent"}, ""},
	} {
		if got := resolveGroup(tc.group, pkgs, provides); got != tc.want {
			t.Errorf("resolveGroup(%q) = %q, want %q", tc.group, got, tc.want)
		}
	}
}

func TestFollowedPackage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		withPip bool
		want    bool
	}{
		{"python3-numpy", false, true},
		{"python-matplotlib-data", false, true},
		{"fonts-dejavu-core", false, true},
		{"python3", false, false},
		{"python3-minimal", false, false},
		{"python3-all-dev", false, false},
		{"python3-tk", false, false},
		{"python3-pil.imagetk", false, false},
		{"libopenblas0", false, false},
		{"python3-pip", false, false},
		{"python3-pip", true, true},
	} {
		if got := followedPackage(tc.name, tc.withPip); got != tc.want {
			t.Errorf("followedPackage(%q, %v) = %v, want %v", tc.name, tc.withPip, got, tc.want)
		}
	}
}

func TestKeepPackageFile(t *testing.T) {
	for _, tc := range []struct {
		path    string
		withPip bool
		want    bool
	}{
		{"/usr/lib/python3/dist-packages/numpy/__init__.py", false, true},
		{"/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", false, true},
		{"/usr/share/matplotlib/mpl-data/matplotlibrc", false, true},
		{"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", false, true},
		{"/usr/bin/f2py3", false, true},
		{"/usr/bin/dh_numpy3", false, false},
		{"/usr/share/numpy3/versions", false, false},
		{"/usr/share/debhelper/autoscripts/postinst-python3", false, false},
		{"/usr/share/doc/python3-numpy/copyright", false, false},
		{"/usr/share/man/man1/f2py.1.gz", false, false},
		{"/usr/include/python3.11/numpy/arrayobject.h", false, false},
		{"/etc/matplotlibrc", false, false},
		{"/usr/lib/python3/dist-packages/six/__pycache__/six.cpython-311.pyc", false, false},
		{"/usr/lib/python3/dist-packages/pip/__init__.py", false, false},
		{"/usr/lib/python3/dist-packages/pip-23.0.1.dist-info/METADATA", false, false},
		{"/usr/bin/pip3", false, false},
		{"/usr/lib/python3/dist-packages/pip/__init__.py", true, true},
		{"/usr/lib/python3/dist-packages/pipx/__init__.py", false, true},
	} {
		if got := keepPackageFile(tc.path, tc.withPip); got != tc.want {
			t.Errorf("keepPackageFile(%q, %v) = %v, want %v", tc.path, tc.withPip, got, tc.want)
		}
	}
}

// TestVenvVersion: a venv is taken only from an interpreter of the
// rootfs's minor version, and must be one.
func TestVenvVersion(t *testing.T) {
	info := pythonInfo{Version: "3.11.2", Purelib: "/usr/local/lib/python3.11/dist-packages"}
	mk := func(cfg string, site bool) string {
		dir := t.TempDir()
		if cfg != "" {
			if err := os.WriteFile(filepath.Join(dir, "pyvenv.cfg"), []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if site {
			if err := os.MkdirAll(filepath.Join(dir, "lib/python3.11/site-packages"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name, cfg string
		site      bool
		wantErr   string
	}{
		{"same", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n", true, ""},
		{"version_info", "home = /usr/bin\nversion_info = 3.11.2.final.0\n", true, ""},
		{"other minor", "home = /opt/py/bin\nversion = 3.12.1\n", true, "was made by Python 3.12.1"},
		{"no cfg", "", true, "not a virtual environment"},
		{"no version", "home = /usr/bin\n", true, "names no Python version"},
		{"no site-packages", "version = 3.11.2\n", false, "has no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &packagePlan{purelib: info.Purelib}
			err := plan.addVenv(mk(tc.cfg, tc.site), info)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("addVenv: %v", err)
				}
				if len(plan.dirs) != 1 || plan.dirs[0].to != info.Purelib {
					t.Fatalf("plan.dirs = %v, want one copy into %s", plan.dirs, info.Purelib)
				}
				return
			}
			var pe *PackageError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("addVenv error = %v, want a PackageError with %q", err, tc.wantErr)
			}
		})
	}
}

// TestMirrorPastEtc: a link through /etc (Debian's alternatives) becomes a
// link to where the chain ends, and one that ends in /etc a copy.
func TestMirrorPastEtc(t *testing.T) {
	host := t.TempDir()
	etc := filepath.Join(host, "etc")
	if err := os.MkdirAll(filepath.Join(etc, "alternatives"), 0o755); err != nil {
		t.Fatal(err)
	}
	alt := filepath.Join(etc, "alternatives", "libx.so.3")
	if err := os.WriteFile(filepath.Join(etc, "rc"), []byte("rc"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"lib", "real"} {
		if err := os.Mkdir(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	real := filepath.Join(host, "real", "libx.so.3")
	if err := os.WriteFile(real, []byte("lib"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, alt); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(host, "lib", "libx.so.3")
	if err := os.Symlink(alt, link); err != nil {
		t.Fatal(err)
	}
	// host/lib/rc -> etc/rc (a regular file in /etc)
	rc := filepath.Join(host, "lib", "rc")
	if err := os.Symlink(filepath.Join(etc, "rc"), rc); err != nil {
		t.Fatal(err)
	}
	tr := newTree(t.TempDir(), nil)
	tr.etc = etc
	got, err := tr.mirror(link)
	if err != nil {
		t.Fatalf("mirror %s: %v", link, err)
	}
	if got != real {
		t.Errorf("mirror returned %s, want %s", got, real)
	}
	if target, err := os.Readlink(tr.in(link)); err != nil || target != real {
		t.Errorf("tree link %s -> %q (%v), want -> %s", link, target, err, real)
	}
	if _, err := os.Lstat(tr.in(etc)); err == nil {
		t.Errorf("the tree has an /etc: the link chain was mirrored through it")
	}
	if _, err := tr.mirror(rc); err != nil {
		t.Fatalf("mirror %s: %v", rc, err)
	}
	fi, err := os.Lstat(tr.in(rc))
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("tree %s is %v (%v), want a regular copy of etc/rc", rc, fi, err)
	}
}

// TestSystemPackagesRefusal: a package that is not installed, or not a
// Python one, is refused with a PackageError naming it.
func TestSystemPackagesRefusal(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"python3-rljail-no-such-package", "python3-rljail-no-such-package is not installed"},
		{"libc6", "libc6 is not a Python package"},
	} {
		plan := &packagePlan{}
		err := plan.addSystemPackages(context.Background(), []string{tc.name})
		var pe *PackageError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("addSystemPackages(%s) = %v, want a PackageError with %q", tc.name, err, tc.want)
		}
	}
}

// TestSystemPackagesPlan: python3-matplotlib brings its data package and
// fonts, not its libraries or documentation.
func TestSystemPackagesPlan(t *testing.T) {
	plan := &packagePlan{}
	if err := plan.addSystemPackages(context.Background(), []string{"python3-matplotlib"}); err != nil {
		t.Fatalf("addSystemPackages: %v (the Makefile's APT_PACKAGES installs python3-matplotlib)", err)
	}
	var parts []string
	for _, p := range plan.packages {
		parts = append(parts, p.Name+"="+p.Version)
	}
	names := strings.Join(parts, " ")
	for _, want := range []string{"python3-matplotlib=", "python3-numpy=", "python-matplotlib-data=", "fonts-dejavu-core="} {
		if !strings.Contains(names, want) {
			t.Errorf("plan lacks %s...: %s", want, names)
		}
	}
	for _, not := range []string{"libfreetype6=", "python3=", "python3-tk="} {
		if strings.Contains(" "+names, " "+not) {
			t.Errorf("plan has %s...: %s", not, names)
		}
	}
	if !slices.Contains(plan.etc, "/etc/matplotlibrc") {
		t.Errorf("plan.etc = %v, want /etc/matplotlibrc", plan.etc)
	}
	for _, f := range plan.files {
		if strings.HasPrefix(f, "/usr/share/doc/") || strings.HasPrefix(f, "/etc/") {
			t.Errorf("plan has %s", f)
		}
	}
}

// TestWheelsNeedPip: a wheelhouse is refused when the build interpreter
// has no pip, and both flags go together.
func TestWheelsNeedPip(t *testing.T) {
	dir := t.TempDir()
	req := filepath.Join(dir, "requirements.txt")
	if err := os.WriteFile(req, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, req, python, want string
	}{
		{dir, req, "/bin/false", "--wheels needs pip in /bin/false"},
		{dir, "", "/bin/false", "go together"},
		{"", req, "/bin/false", "go together"},
		{filepath.Join(dir, "none"), req, "/bin/false", "is not a directory"},
	} {
		plan := &packagePlan{}
		err := plan.addWheels(context.Background(), tc.dir, tc.req, tc.python)
		var pe *PackageError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("addWheels(%q, %q) = %v, want a PackageError with %q", tc.dir, tc.req, err, tc.want)
		}
	}
}

// TestCheckRequirements: a requirements file may name packages (versions,
// extras, markers, hashes, comments, continuations, nested files, local
// --find-links); a URL, a path, an editable, a VCS or --no-binary is
// refused, in a nested file too.
func TestCheckRequirements(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ok-nested.txt", "six==1.16\n")
	write("bad-nested.txt", "-e ./src\n")
	for _, tc := range []struct {
		text string
		want string // "" if accepted
	}{
		{"numpy==1.24.2\npandas[performance]>=1.5 ; python_version >= '3.11'  # comment\n# only a comment\n\n", ""},
		{"attrs==22.2 \\\n    --hash=sha256:0123456789abcdef\n", ""},
		{"--find-links /srv/wheels\n--only-binary :all:\n-r ok-nested.txt\n-c ok-nested.txt\nsix\n", ""},
		{"--index-url https://pypi.org/simple\nsix\n", ""}, // ignored: --no-index
		{"six @ https://example.org/six-1.16-py2.py3-none-any.whl\n", "direct reference"},
		{"six @ file:///srv/six.whl\n", "direct reference"},
		{"git+https://example.org/six.git#egg=six\n", "direct reference"},
		{"https://example.org/six.tar.gz\n", "direct reference"},
		{"./src\n", "is a path"},
		{"/srv/six-1.16.tar.gz\n", "is a path"},
		{"-e ./src\n", "editable"},
		{"--editable=git+https://example.org/x.git\n", "editable"},
		{"--no-binary :all:\nsix\n", "from source"},
		{"--find-links https://example.org/wheels/\nsix\n", "on a network"},
		{"-r https://example.org/req.txt\n", "on a network"},
		{"-r bad-nested.txt\n", "editable"},
		{"six==${VERSION}\n", "environment variable"},
	} {
		p := write("req.txt", tc.text)
		err := checkRequirements(p, 0)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.text, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.text, err, tc.want)
		}
	}
}
