package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// rootfsMaster is a rootfs this suite builds once with the binary under test
// (never the shared one at $RLJAIL_ROOTFS, which other runs use): each case
// takes a copy of it, made usable again by `rootfs verify --update-fingerprint`
// (a copy has other inodes and ctimes, which a run refuses), and changes that.
var rootfsMaster struct {
	once sync.Once
	dir  string
	err  error
}

func builtRootfs(t *testing.T) string {
	t.Helper()
	rootfsMaster.once.Do(func() {
		dir, err := os.MkdirTemp(baseDir, "rootfs-master-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			rootfsMaster.err = err
			return
		}
		rootfsMaster.dir = filepath.Join(dir, "py")
		if out, err := exec.Command(testBin, "rootfs", "build", "-q", "--rootfs", rootfsMaster.dir).CombinedOutput(); err != nil {
			rootfsMaster.err = &buildError{err, string(out)}
		}
	})
	if rootfsMaster.err != nil {
		t.Fatalf("build the test rootfs: %v", rootfsMaster.err)
	}
	return rootfsMaster.dir
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// rootfsCopy copies the master into a fresh directory (parent 0755, so the
// rootless user reaches it), fingerprints the copy anew and returns it.
func rootfsCopy(t *testing.T) string {
	t.Helper()
	master := builtRootfs(t)
	dir := filepath.Join(newDir(t), "py")
	if out, err := exec.Command("cp", "-a", master, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the rootfs: %v: %s", err, out)
	}
	if out, err := exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", dir).CombinedOutput(); err != nil {
		t.Fatalf("rootfs verify --update-fingerprint of an intact copy: %v: %s", err, out)
	}
	return dir
}

// TestRootfsChangedIsRefused: a rootfs changed after its build (content,
// mode, a file added, one removed, one replaced by a rename with the same
// size and mtime) is refused by every run, root and rootless: exit 125, one
// line naming the file, the payload never ran, nothing left on the host.
// `rootfs verify` lists the change, and --rootfs-unverified runs it saying
// on stderr and in the report that it was not verified.
func TestRootfsChangedIsRefused(t *testing.T) {
	const lib = "usr/lib/python3.11"
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		file   string // what the run's line and verify name
		verify string // in verify's line for it
	}{
		{"content", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, lib, "os.py"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("\nimport sys; sys.stdout.write('planted\\n')\n")
			f.Close()
		}, "/" + lib + "/os.py", "content changed"},
		{"mode", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, lib, "json/__init__.py"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "/" + lib + "/json/__init__.py", "mode 0600, built 0644"},
		{"added", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, lib, "sitecustomize.py"), "print('planted')\n", 0o644)
		}, "/" + lib + "/sitecustomize.py", "added"},
		{"removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, lib, "glob.py")); err != nil {
				t.Fatal(err)
			}
		}, "/" + lib + "/glob.py", "missing"},
		{"replaced by rename, same size and mtime", func(t *testing.T, dir string) {
			p := filepath.Join(dir, lib, "base64.py")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			// Same length: one byte of a comment changed.
			i := strings.Index(string(data), "#")
			data[i+1] ^= 1
			tmp := p + ".new"
			writeFile(t, tmp, string(data), 0o644)
			if out, err := exec.Command("touch", "-r", p, tmp).CombinedOutput(); err != nil {
				t.Fatalf("touch -r: %v: %s", err, out)
			}
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		}, "/" + lib + "/base64.py", "content changed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := rootfsCopy(t)
			c.change(t, dir)
			for _, m := range bothModes {
				env := faultEnv{vol: newOpenDir(t), privTmp: newOpenDir(t), marker: randomToken("rootfs")}
				before := faultSnapshot(t)
				args := append([]string{"--rootfs", dir}, faultPayload(env)...)
				stdout, stderr, exit, res := runJail(t, m, runOpts{noRootfs: true, env: []string{"TMPDIR=" + env.privTmp}}, args...)
				what := string(m) + ": rljail " + shellQuote(args)
				lines := attackErrorLines(stderr)
				if exit != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: rootfs "+dir+" changed since its build: "+c.file+": ") {
					t.Errorf("%s: exit %d, stderr %q; want 125 and one line naming %s", what, exit, stderr, c.file)
				}
				checkResult(t, what, res, "setup_error", 125)
				if exists(filepath.Join(env.vol, "ran")) || strings.Contains(stdout, "planted") {
					t.Errorf("%s: the payload ran on a changed rootfs", what)
				}
				if left := faultLeftovers(t, before, env.privTmp, env.marker); len(left) > 0 {
					t.Errorf("%s: left on the host:\n\t%s", what, strings.Join(left, "\n\t"))
				}
			}
			out, err := exec.Command(testBin, "rootfs", "verify", dir).Output()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("rootfs verify: %v, want exit 1", err)
			}
			if !strings.Contains(string(out), c.file+": "+c.verify) {
				t.Errorf("rootfs verify does not report %s (%s):\n%s", c.file, c.verify, out)
			}
			// An edited rootfs cannot be blessed: only a copy whose files are
			// as built.
			if out, err := exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", dir).CombinedOutput(); err == nil {
				t.Errorf("rootfs verify --update-fingerprint took a changed rootfs: %s", out)
			}
			// Told otherwise, the run goes ahead and says so.
			_, stderr, exit, res := runJail(t, asRoot, runOpts{noRootfs: true}, "--rootfs", dir, "--rootfs-unverified", "--", "python3", "-c", "pass")
			const unverified = "was not verified against its build (--rootfs-unverified)"
			if exit != 0 || !strings.Contains(stderr, unverified) || !strings.Contains(strings.Join(reportWarnings(res), "\n"), unverified) {
				t.Errorf("--rootfs-unverified: exit %d, stderr %q, report warnings %q; want 0 and the notice in both", exit, stderr, reportWarnings(res))
			}
		})
	}
}

func reportWarnings(res map[string]any) []string {
	var out []string
	ws, _ := res["warnings"].([]any)
	for _, w := range ws {
		s, _ := w.(string)
		out = append(out, s)
	}
	return out
}

// TestRootfsNamed: as the rootless user (whose data directory the test
// chooses with XDG_DATA_HOME), `--rootfs NAME` runs the rootfs of that name
// (copied in, or built by `rootfs build --name`), `rootfs list` shows them,
// a bad or unknown name is one line and 125, and `rootfs remove` takes them
// away. (As root the data directory is /var/lib/rljail/rootfs, which other
// runs share; the resolution for root is TestLocateRootfs's.)
func TestRootfsNamed(t *testing.T) {
	data := newDir(t)
	if err := os.Chown(data, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_DATA_HOME=" + data}
	named := filepath.Join(data, "rljail", "rootfs", "data")
	if err := os.MkdirAll(filepath.Dir(named), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", builtRootfs(t), named).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "--", strconv.Itoa(testUID)+":"+strconv.Itoa(testGID), filepath.Join(data, "rljail")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	rljail := func(args ...string) (string, string, int) {
		cmd := exec.Command(testBin, args...)
		cmd.Env = append(modeEnv(asRootless), env...)
		cmd.Dir = data
		return attackExec(t, asRootless, cmd)
	}
	// The chown changed every ctime: the run refuses it until its owner,
	// having checked every file's content, records the fingerprint anew.
	if _, stderr, exit := rljail("-q", "--rootfs", "data", "--", "python3", "-c", "pass"); exit != 125 || !strings.Contains(stderr, "changed since its build") {
		t.Errorf("a chowned rootfs: exit %d, stderr %q; want it refused", exit, stderr)
	}
	if out, stderr, exit := rljail("rootfs", "verify", "--update-fingerprint", "data"); exit != 0 {
		t.Fatalf("rootfs verify --update-fingerprint data: exit %d: %s%s", exit, out, stderr)
	}
	if stdout, stderr, exit := rljail("-q", "--rootfs", "data", "--", "python3", "-c", "import sys; print(sys.version_info[:2])"); exit != 0 || strings.TrimSpace(stdout) != "(3, 11)" {
		t.Errorf("--rootfs data: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
	// A profile names it too; --rootfs overrides the profile.
	prof := filepath.Join(data, "p.toml")
	writeFile(t, prof, "base = \"python\"\n[defaults]\nrootfs = \"nosuch\"\n", 0o644)
	if _, stderr, exit := rljail("-q", "--profile", prof, "--", "python3", "-c", "pass"); exit != 125 || !strings.Contains(stderr, "/rljail/rootfs/nosuch (given by the profile)") {
		t.Errorf("profile rootfs nosuch: exit %d, stderr %q", exit, stderr)
	}
	if _, stderr, exit := rljail("-q", "--profile", prof, "--rootfs", "data", "--", "python3", "-c", "pass"); exit != 0 {
		t.Errorf("--rootfs over the profile's: exit %d, stderr %q", exit, stderr)
	}
	// `rootfs build --name` builds one beside it, which runs at once.
	if out, stderr, exit := rljail("rootfs", "build", "-q", "--name", "mini", "--no-commands"); exit != 0 || !strings.Contains(out, "/rljail/rootfs/mini:") {
		t.Fatalf("rootfs build --name mini: exit %d: %s%s", exit, out, stderr)
	}
	if stdout, stderr, exit := rljail("-q", "--rootfs", "mini", "--", "python3", "-c", "print('mini')"); exit != 0 || stdout != "mini\n" {
		t.Errorf("--rootfs mini: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
	stdout, stderr, exit := rljail("rootfs", "list")
	if exit != 0 {
		t.Fatalf("rootfs list: exit %d: %s", exit, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "PACKAGES") {
		t.Fatalf("rootfs list:\n%s", stdout)
	}
	for i, name := range []string{"data", "mini"} {
		f := strings.Fields(lines[i+1])
		if len(f) < 5 || f[0] != name || !strings.HasPrefix(f[1], "3.11.") || f[2] == "0" || !strings.HasSuffix(f[3], "M") ||
			!strings.Contains(lines[i+1], "none beyond the standard library") {
			t.Errorf("rootfs list's line for %s: %q", name, lines[i+1])
		}
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--rootfs", "Data", "--", "true"}},
		{[]string{"--rootfs", "a b", "--", "true"}},
		{[]string{"--rootfs", ".hidden", "--", "true"}},
		{[]string{"--rootfs", "nosuch", "--", "true"}},
		{[]string{"rootfs", "info", "Bad"}},
		{[]string{"rootfs", "verify", "Bad"}},
		{[]string{"rootfs", "build", "--name", "Bad"}},
	} {
		_, stderr, exit := rljail(c.args...)
		checkSetupError(t, "rljail "+shellQuote(c.args), stderr, exit)
	}
	if _, stderr, _ := rljail("--rootfs", "nosuch", "--", "true"); !strings.Contains(stderr, "rljail rootfs build --name nosuch") {
		t.Errorf("an unknown name does not say how to build it: %q", stderr)
	}
	for _, name := range []string{"data", "mini"} {
		if out, stderr, exit := rljail("rootfs", "remove", name); exit != 0 || exists(filepath.Join(filepath.Dir(named), name)) {
			t.Errorf("rootfs remove %s: exit %d, %s%s", name, exit, out, stderr)
		}
	}
	if stdout, _, _ := rljail("rootfs", "list"); !strings.HasPrefix(stdout, "no root filesystems in") {
		t.Errorf("rootfs list after remove: %q", stdout)
	}
}

// TestRootfsSharedFilesListed: runs take a rootfs in the user's own data
// directory after a look at its top only, so a file of it with a second
// name (a hard link the owner made, or a deduplicating tool), in a
// directory a later run grants writable, is one that run's jail could
// change unseen. `rootfs verify` lists such a file there, and
// --update-fingerprint records nothing while one is.
func TestRootfsSharedFilesListed(t *testing.T) {
	m := asRootless
	name, named := copyIntoUsersDataDir(t, "sh")
	verify := func(args ...string) (string, int) {
		cmd := exec.Command(testBin, append([]string{"rootfs", "verify"}, args...)...)
		cmd.Env = modeEnv(m)
		cmd.Dir = baseDir
		stdout, stderr, exit := attackExec(t, m, cmd)
		return stdout + stderr, exit
	}
	if out, exit := verify("--update-fingerprint", name); exit != 0 {
		t.Fatalf("take the copy back as its owner: exit %d: %s", exit, out)
	}
	libs, _ := filepath.Glob(filepath.Join(named, "usr", "lib", "python3*"))
	if len(libs) != 1 {
		t.Fatalf("no one usr/lib/python3* in %s: %v", named, libs)
	}
	shared := filepath.Join(libs[0], "os.py")
	other := filepath.Join(newDir(t), "os.py")
	if err := os.Link(shared, other); err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(named, ".rljail-stat")
	before, err := os.ReadFile(stamp)
	if err != nil {
		t.Fatal(err)
	}
	rel := strings.TrimPrefix(shared, named)
	for _, args := range [][]string{{name}, {"--update-fingerprint", name}} {
		out, exit := verify(args...)
		if exit != 1 || !strings.Contains(out, rel+": 2 names") {
			t.Errorf("rootfs verify %v with %s linked from %s: exit %d, output %q; want 1 and the file listed", args, rel, other, exit, out)
		}
	}
	if after, _ := os.ReadFile(stamp); !bytes.Equal(before, after) {
		t.Errorf("--update-fingerprint recorded a rootfs with a shared file")
	}
	// The other name gone, it is as built again.
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if out, exit := verify("--update-fingerprint", name); exit != 0 {
		t.Errorf("with the other name removed: exit %d: %s", exit, out)
	}
	if out, exit := verify(name); exit != 0 || !strings.Contains(out, "as built") {
		t.Errorf("rootfs verify after that: exit %d: %s", exit, out)
	}
}
