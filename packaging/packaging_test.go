package packaging

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fakeBinary writes a small executable to package instead of rljail (the
// packaging, not the binary, is under test; the Go build is reproducible
// with -trimpath on its own).
func fakeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rljail")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho rljail fake\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is needed (Debian package dpkg): %v", name, err)
	}
}

// buildDeb runs build-deb.sh with umask and TMPDIR as given.
func buildDeb(t *testing.T, bin, version string, umask int, env ...string) string {
	t.Helper()
	out := t.TempDir()
	old := syscall.Umask(umask)
	defer syscall.Umask(old)
	cmd := exec.Command("sh", "deb/build-deb.sh", "--bin", bin, "--version", version, "--out", out)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("build-deb.sh: %v\n%s", err, stderr)
	}
	deb := strings.TrimSpace(string(b))
	if filepath.Dir(deb) != out {
		t.Fatalf("build-deb.sh printed %q, want a file in %s", deb, out)
	}
	return deb
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestDebReproducible builds the package twice, under other umasks and
// temporary directories, and wants the same bytes; and a third time with
// another SOURCE_DATE_EPOCH, which must differ (the test can fail).
func TestDebReproducible(t *testing.T) {
	requireTool(t, "dpkg-deb")
	bin := fakeBinary(t)
	a := buildDeb(t, bin, "1.2.3", 0o022, "TMPDIR="+t.TempDir())
	b := buildDeb(t, bin, "1.2.3", 0o077, "TMPDIR="+t.TempDir())
	if sa, sb := sha(t, a), sha(t, b); sa != sb {
		t.Errorf("two builds of one commit differ: %s %s and %s %s", sa, a, sb, b)
	} else {
		t.Logf("sha256 %s, twice", sa)
	}
	c := buildDeb(t, bin, "1.2.3", 0o022, "SOURCE_DATE_EPOCH=1000000000")
	if sha(t, a) == sha(t, c) {
		t.Errorf("a build with another SOURCE_DATE_EPOCH has the same bytes: the timestamps are not the epoch's")
	}
}

// TestDebContents checks dpkg-deb --info and --contents: the fields, the
// maintainer scripts, every file root's with a fixed mode and the epoch's
// mtime, and the files install.sh puts under /usr.
func TestDebContents(t *testing.T) {
	requireTool(t, "dpkg-deb")
	tmp := t.TempDir()
	deb := buildDeb(t, fakeBinary(t), "1.2.3", 0o027, "SOURCE_DATE_EPOCH=1700000000", "TMPDIR="+tmp)
	info, err := exec.Command("dpkg-deb", "--info", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --info: %v\n%s", err, info)
	}
	for _, want := range []string{"Package: rljail", "Version: 1.2.3", "Architecture: amd64", "Maintainer: ", "Installed-Size: ", " postinst ", " prerm ", " postrm ", " md5sums "} {
		if !strings.Contains(string(info), want) {
			t.Errorf("dpkg-deb --info lacks %q:\n%s", want, info)
		}
	}
	contents, err := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --contents: %v\n%s", err, contents)
	}
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(string(contents)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Errorf("odd --contents line %q", l)
			continue
		}
		mode, owner, date, name := f[0], f[1], f[3]+" "+f[4], f[5]
		if owner != "root/root" {
			t.Errorf("%s is owned by %s, want root/root", name, owner)
		}
		if date != "2023-11-14 22:13" {
			t.Errorf("%s has mtime %s, want SOURCE_DATE_EPOCH's 2023-11-14 22:13 (UTC)", name, date)
		}
		want := "-rw-r--r--"
		switch {
		case strings.HasSuffix(name, "/"):
			want = "drwxr-xr-x"
		case name == "./usr/bin/rljail":
			want = "-rwxr-xr-x"
		}
		if mode != want {
			t.Errorf("%s has mode %s, want %s (whatever the umask)", name, mode, want)
		}
		if !strings.HasSuffix(name, "/") {
			files = append(files, name)
		}
	}
	wantFiles := []string{
		"./usr/bin/rljail",
		"./usr/lib/systemd/system/rljail-runner@.service",
		"./usr/lib/systemd/system/rljail.slice",
		"./usr/lib/tmpfiles.d/rljail.conf",
		"./usr/share/doc/rljail/examples/rljail-runner.service",
		"./usr/share/rljail/apparmor/rljail",
	}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("files in the package:\n %q\nwant\n %q", files, wantFiles)
	}
	// No build path in any member: the stage (in TMPDIR), the output
	// directory, the source tree.
	src, _ := filepath.Abs("..")
	for _, member := range []string{"--fsys-tarfile", "--ctrl-tarfile"} {
		b, err := exec.Command("dpkg-deb", member, deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb %s: %v", member, err)
		}
		for _, p := range []string{tmp, filepath.Dir(deb), src} {
			if strings.Contains(string(b), p) {
				t.Errorf("dpkg-deb %s names the build path %s", member, p)
			}
		}
	}
}

// TestInstallDestdir runs install.sh into a DESTDIR with prefix
// /usr/local, with and without AppArmor 4 there, and uninstalls again.
func TestInstallDestdir(t *testing.T) {
	bin := fakeBinary(t)
	for _, tc := range []struct {
		name     string
		abi4     bool
		apparmor string
		profile  bool
	}{
		{"no-apparmor", false, "auto", false},
		{"apparmor-4", true, "auto", true},
		{"forced-off", true, "no", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			if tc.abi4 {
				if err := os.MkdirAll(dest+"/etc/apparmor.d/abi", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dest+"/etc/apparmor.d/abi/4.0", nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sh := func(args ...string) {
				t.Helper()
				out, err := exec.Command("sh", append([]string{"install.sh"}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("install.sh %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
			sh("--bin", bin, "--destdir", dest, "--prefix", "/usr/local", "--apparmor", tc.apparmor)
			for _, p := range []string{"/usr/local/bin/rljail", "/usr/local/lib/systemd/system/rljail.slice",
				"/usr/local/lib/systemd/system/rljail-runner@.service", "/usr/local/lib/tmpfiles.d/rljail.conf",
				"/usr/local/share/rljail/apparmor/rljail"} {
				if _, err := os.Stat(dest + p); err != nil {
					t.Errorf("not installed: %v", err)
				}
			}
			unit, _ := os.ReadFile(dest + "/usr/local/lib/systemd/system/rljail-runner@.service")
			if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/rljail run ") || strings.Contains(string(unit), "@BINDIR@") {
				t.Errorf("rljail-runner@.service does not run /usr/local/bin/rljail:\n%s", unit)
			}
			profile, err := os.ReadFile(dest + "/etc/apparmor.d/rljail")
			if tc.profile {
				if err != nil || !strings.Contains(string(profile), "profile rljail /usr/local/bin/rljail flags=(unconfined)") || !strings.Contains(string(profile), "userns,") ||
					!strings.Contains(string(profile), "\nprofile rljail-host flags=(unconfined) {") {
					t.Errorf("/etc/apparmor.d/rljail: %v\n%s", err, profile)
				}
			} else if err == nil {
				t.Errorf("/etc/apparmor.d/rljail installed with abi4=%v --apparmor %s", tc.abi4, tc.apparmor)
			}
			sh("--uninstall", "--destdir", dest, "--prefix", "/usr/local")
			var left []string
			filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && !strings.HasSuffix(p, "/abi/4.0") {
					left = append(left, strings.TrimPrefix(p, dest))
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("left after uninstall: %q", left)
			}
		})
	}
}

// TestInstallRefusesBadPrefix: a PREFIX that is not an absolute path of
// plain characters is refused with one line, before anything is installed:
// a relative one was glued to DESTDIR ("DESTDIRrelative/bin"), and one with
// a space, #, & or a newline corrupts the units' ExecStart (sed's
// replacement, and systemd's word splitting).
func TestInstallRefusesBadPrefix(t *testing.T) {
	bin := fakeBinary(t)
	for _, prefix := range []string{"", "relative", "usr/local", "/usr/lo cal", "/usr/#x", "/usr/&x", "/usr/x\ny", "/usr/$HOME", "/usr/../etc"} {
		dest := t.TempDir()
		out, err := exec.Command("sh", "install.sh", "--bin", bin, "--destdir", dest+"/root", "--prefix", prefix).CombinedOutput()
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if err == nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "install.sh: ") {
			t.Errorf("install.sh --prefix %q: %v, output %q; want it refused with one line", prefix, err, out)
		}
		if names, _ := os.ReadDir(dest); len(names) > 0 {
			t.Errorf("install.sh --prefix %q left %d entries in its DESTDIR's parent", prefix, len(names))
		}
	}
}

// TestBuildNeedsOnlyBuildPackages (issue 30): `make build` (and so `make
// install`) installs only what the build needs, never the test toolchain
// (qemu, debootstrap, the data stack, CPython's test suite); `make
// rootfs` adds what a run needs, the tests the rest.
func TestBuildNeedsOnlyBuildPackages(t *testing.T) {
	packages := func(target string) []string {
		out, err := exec.Command("make", "-s", "-C", "..", "-n", "-W", "jail/stage/build.sh", target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		var all []string
		for _, line := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), `missing=""; for p in `); ok {
				list, _, _ := strings.Cut(rest, "; do")
				all = append(all, strings.Fields(list)...)
			}
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	build := packages("build")
	if strings.Join(build, " ") != "file gcc libc6-dev" {
		t.Errorf("make build installs %v, want only gcc, libc6-dev and file", build)
	}
	for _, target := range []string{"build", "install"} {
		for _, p := range packages(target) {
			if strings.Contains(p, "qemu") || p == "debootstrap" || strings.HasPrefix(p, "python3-") || strings.Contains(p, "testsuite") {
				t.Errorf("make %s installs %s, a test dependency", target, p)
			}
		}
	}
	if rootfs := packages("rootfs"); !slices.Contains(rootfs, "python3") || slices.Contains(rootfs, "qemu-system-x86") {
		t.Errorf("make rootfs installs %v, want the build's and python3, netbase", rootfs)
	}
}
