package packaging

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fakeBinary writes a small executable to package instead of rljail (the
// packaging, not the binary, is under test; the Go build is reproducible
// with -trimpath on its own). Its `man` prints a man page, as rljail's
// does (cmd/rljail's tests check the real one).
func fakeBinary(t *testing.T) string {
	t.Helper()
	return fakeBinaryWith(t, ".TH RLJAIL 1 \"\" \"rljail fake\" \"User Commands\"\n.SH NAME\nrljail \\- fake\n")
}

// fakeBinaryWith is fakeBinary whose `man` prints page (lines, each
// ending in a newline).
func fakeBinaryWith(t *testing.T, page string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rljail")
	script := "#!/bin/sh\nif [ \"$1\" = man ]; then cat <<'PAGE'\n" + page + "PAGE\nexit 0; fi\necho rljail fake\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
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
	// The relations: the binary is static, so nothing is a Depends; a
	// rootfs build wants python3 and netbase (build-deb.sh says why).
	for field, want := range map[string]string{
		"Depends":    "",
		"Recommends": "python3, netbase",
		"Suggests":   "busybox-static, apparmor, python3-pip",
	} {
		out, err := exec.Command("dpkg-deb", "--field", deb, field).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("dpkg-deb --field %s: %q (%v), want %q", field, got, err, want)
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
		"./usr/lib/systemd/system/rljail.service",
		"./usr/lib/systemd/system/rljail.slice",
		"./usr/lib/systemd/system/rljail.socket",
		"./usr/lib/tmpfiles.d/rljail.conf",
		"./usr/share/doc/rljail/copyright",
		"./usr/share/doc/rljail/examples/rljail-runner.service",
		"./usr/share/man/man1/rljail.1.gz",
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
				"/usr/local/lib/systemd/system/rljail.socket", "/usr/local/lib/systemd/system/rljail.service",
				"/usr/local/share/rljail/apparmor/rljail", "/usr/local/share/man/man1/rljail.1"} {
				if _, err := os.Stat(dest + p); err != nil {
					t.Errorf("not installed: %v", err)
				}
			}
			unit, _ := os.ReadFile(dest + "/usr/local/lib/systemd/system/rljail-runner@.service")
			if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/rljail run ") || strings.Contains(string(unit), "@BINDIR@") {
				t.Errorf("rljail-runner@.service does not run /usr/local/bin/rljail:\n%s", unit)
			}
			if svc, _ := os.ReadFile(dest + "/usr/local/lib/systemd/system/rljail.service"); !strings.Contains(string(svc), "ExecStart=/usr/local/bin/rljail serve ") || strings.Contains(string(svc), "@BINDIR@") {
				t.Errorf("rljail.service does not run /usr/local/bin/rljail serve:\n%s", svc)
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

// debMember extracts one file of the package's data.
func debMember(t *testing.T, deb, name string) []byte {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDebManPage: the package's man page is the binary's `rljail man`,
// gzipped as Debian's policy asks (-9n: no file name and no time in the
// header, so that the package stays reproducible).
func TestDebManPage(t *testing.T) {
	requireTool(t, "dpkg-deb")
	page := ".TH RLJAIL 1 \"\" \"rljail test\" \"User Commands\"\n.SH NAME\nrljail \\- a test page\n"
	deb := buildDeb(t, fakeBinaryWith(t, page), "1.2.3", 0o022)
	gz := debMember(t, deb, "usr/share/man/man1/rljail.1.gz")
	if len(gz) < 10 || gz[0] != 0x1f || gz[1] != 0x8b {
		t.Fatalf("rljail.1.gz is not gzip")
	}
	if flags, mtime := gz[3], gz[4:8]; flags&0x08 != 0 || !slices.Equal(mtime, []byte{0, 0, 0, 0}) {
		t.Errorf("rljail.1.gz's header has a name (flags %#x) or a time (%v): gzip -n", flags, mtime)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != page {
		t.Errorf("the package's man page is %q, want what rljail man printed, %q", b, page)
	}
}

// TestInstallRefusesNoManPage: a binary whose `man` prints no man page
// (one older than the man command, which would run `man` in a jail) is
// refused with one line, and leaves no half-written page.
func TestInstallRefusesNoManPage(t *testing.T) {
	dest := t.TempDir()
	out, err := exec.Command("sh", "install.sh", "--bin", fakeBinaryWith(t, "no page\n"), "--destdir", dest, "--prefix", "/usr").CombinedOutput()
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "no man page") {
		t.Errorf("install.sh with a binary without a man page: %v, output %q; want it refused with one line", err, out)
	}
	matches, _ := filepath.Glob(dest + "/usr/share/man/man1/*")
	if len(matches) > 0 {
		t.Errorf("left in man1: %q", matches)
	}
}

// TestDebCopyright: usr/share/doc/rljail/copyright is in Debian's
// machine-readable format, says that rljail's source names no license (the
// repository has no LICENSE file: nothing is invented), and has a Files
// stanza for every Go module the static binary links, as the Makefile
// builds it, so that each one's notice ships with the binary.
func TestDebCopyright(t *testing.T) {
	requireTool(t, "dpkg-deb")
	deb := buildDeb(t, fakeBinary(t), "1.2.3", 0o022)
	c := string(debMember(t, deb, "usr/share/doc/rljail/copyright"))
	src, err := os.ReadFile("deb/copyright")
	if err != nil {
		t.Fatal(err)
	}
	if c != string(src) {
		t.Errorf("the package's copyright is not packaging/deb/copyright")
	}
	if !strings.HasPrefix(c, "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n") {
		t.Errorf("copyright does not start with the format's Format: line")
	}
	for _, name := range []string{"LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"} {
		if _, err := os.Stat(filepath.Join("..", name)); err == nil {
			t.Errorf("the repository has %s now: name its license in packaging/deb/copyright instead of UNLICENSED", name)
		}
	}
	// Paragraphs: every License a Files stanza names is defined (by a
	// text under it or a stand-alone License paragraph).
	defined := map[string]bool{}
	var named []string
	for _, para := range strings.Split(strings.TrimSpace(c), "\n\n") {
		first := strings.SplitN(para, "\n", 2)[0]
		for _, l := range strings.Split(para, "\n") {
			if lic, ok := strings.CutPrefix(l, "License: "); ok {
				if strings.HasPrefix(first, "License: ") || strings.Contains(para, "\nLicense: "+lic+"\n ") {
					defined[lic] = true
				}
				if strings.HasPrefix(first, "Files: ") {
					named = append(named, lic)
				}
			}
		}
		if !strings.HasPrefix(first, "Files: ") && !strings.HasPrefix(first, "License: ") && !strings.HasPrefix(first, "Format: ") {
			t.Errorf("copyright has a paragraph that is no header, Files or License paragraph: %q", first)
		}
	}
	for _, lic := range named {
		if !defined[lic] {
			t.Errorf("copyright names License %s without its text", lic)
		}
	}
	if !strings.Contains(c, "License: UNLICENSED\n") {
		t.Errorf("copyright does not say that rljail's source names no license")
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GOFLAGS_STATIC := .*-tags (\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no GOFLAGS_STATIC with -tags")
	}
	out, err := exec.Command("go", "list", "-tags", string(m[1]), "-deps", "-f", "{{if .Module}}{{if not .Module.Main}}{{.Module.Path}}{{end}}{{end}}", "../cmd/rljail").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	modules := strings.Fields(string(out))
	slices.Sort(modules)
	modules = slices.Compact(modules)
	if len(modules) < 3 {
		t.Fatalf("go list found %d modules: %q", len(modules), modules)
	}
	for _, mod := range modules {
		if !regexp.MustCompile(`(?m)^Files:.*[ ]` + regexp.QuoteMeta(mod) + `/\*`).MatchString(c) {
			t.Errorf("the binary links Go module %s, which packaging/deb/copyright has no Files stanza for", mod)
		}
	}
	t.Logf("%d modules: %s", len(modules), strings.Join(modules, " "))
}
