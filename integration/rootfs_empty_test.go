package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootfsEmptyValuesRefused: an empty rootfs name or directory is bad
// input, not "the default": `rootfs remove ""` must not remove the default
// rootfs, `rootfs build --name ""` must not rebuild it, and every other
// surface that takes a rootfs (info, verify, --rootfs of a run or a build,
// a profile's rootfs, check), --cgroup-manager and --cgroup-parent refuse
// an empty value with one line and exit 125; so does check a
// --cgroup-manager it does not know. `rootfs info` and `rootfs verify` of a missing or damaged rootfs
// (no manifest, or one that does not parse) are bad input too (125, one
// line), as to a run. Rootless, in a data directory of the test's own
// (XDG_DATA_HOME), where the default rootfs is built first.
func TestRootfsEmptyValuesRefused(t *testing.T) {
	data := newDir(t)
	if err := os.Chown(data, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_DATA_HOME=" + data}
	rljail := func(args ...string) (string, string, int) {
		cmd := exec.Command(testBin, args...)
		cmd.Env = append(modeEnv(asRootless), env...)
		cmd.Dir = data
		return attackExec(t, asRootless, cmd)
	}
	if out, stderr, exit := rljail("rootfs", "build", "-q", "--no-commands"); exit != 0 {
		t.Fatalf("rootfs build: exit %d: %s%s", exit, out, stderr)
	}
	def := filepath.Join(data, "rljail", "rootfs", "python")
	manifest := filepath.Join(def, ".rljail-rootfs.json")
	before, err := os.Stat(manifest)
	if err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(data, "p.toml")
	writeFile(t, prof, "base = \"python\"\n[defaults]\nrootfs = \"\"\n", 0o644)
	for _, args := range [][]string{
		{"rootfs", "remove", ""},
		{"rootfs", "remove", "--rootfs", ""},
		{"rootfs", "info", ""},
		{"rootfs", "info", "--rootfs", ""},
		{"rootfs", "verify", ""},
		{"rootfs", "verify", "--update-fingerprint", ""},
		{"rootfs", "build", "-q", "--no-commands", "--name", ""},
		{"rootfs", "build", "-q", "--no-commands", "--rootfs", ""},
		{"-q", "--rootfs", "", "--", "true"},
		{"-q", "--profile", prof, "--", "true"},
		{"-q", "--cgroup-manager", "", "--", "true"},
		{"-q", "--cgroup-parent", "", "--", "true"},
		{"check", "--cgroup-parent", ""},
		{"check", "--rootfs", ""},
		{"check", "--cgroup-manager", ""},
		{"check", "--cgroup-manager", "bogus"},
		{"rootfs", "info", "nosuch"},
		{"rootfs", "info", filepath.Join(data, "nosuch")},
	} {
		what := "rljail " + shellQuote(args)
		_, stderr, exit := rljail(args...)
		checkSetupError(t, what, stderr, exit)
		after, err := os.Stat(manifest)
		if err != nil {
			t.Errorf("%s: the default rootfs is gone: %v", what, err)
			if out, stderr, exit := rljail("rootfs", "build", "-q", "--no-commands"); exit != 0 {
				t.Fatalf("rootfs build: exit %d: %s%s", exit, out, stderr)
			}
			after, err = os.Stat(manifest)
			if err != nil {
				t.Fatal(err)
			}
		} else if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("%s: the default rootfs was rebuilt", what)
		}
		before = after
	}
	// A damaged rootfs (its manifest gone) is bad input to info as well.
	damaged := filepath.Join(data, "damaged")
	if out, err := exec.Command("cp", "-a", def, damaged).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(damaged, ".rljail-rootfs.json")); err != nil {
		t.Fatal(err)
	}
	for _, damage := range []string{"no manifest", "a manifest that does not parse"} {
		if damage == "a manifest that does not parse" {
			writeFile(t, filepath.Join(damaged, ".rljail-rootfs.json"), "garbage\n", 0o644)
		}
		for _, args := range [][]string{
			{"rootfs", "info", damaged},
			{"rootfs", "verify", damaged},
			{"rootfs", "verify", "--update-fingerprint", damaged},
			{"-q", "--rootfs", damaged, "--", "true"},
		} {
			_, stderr, exit := rljail(args...)
			what := "rljail " + shellQuote(args) + " (" + damage + ")"
			checkSetupError(t, what, stderr, exit)
			if !strings.Contains(stderr, damaged) {
				t.Errorf("%s: the line does not name the rootfs: %q", what, stderr)
			}
		}
	}
}

// TestRootfsBuildFailureLeavesNothing: a build that fails (an interpreter
// that does not exist, found once the build lock is held; as root also a
// full disk, a small tmpfs as the target, also as a rootless run's data
// directory when it builds the default) is one line and exit 125, and
// leaves nothing where it was to go: no half-built tree, no temp
// directory, no build lock, no parent directory it created. `rootfs
// remove` takes the lock file away with the rootfs.
func TestRootfsBuildFailureLeavesNothing(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			base := newDir(t)
			if err := os.Chown(base, testUID, testGID); err != nil {
				t.Fatal(err)
			}
			rljail := func(args ...string) (string, string, int) {
				cmd := exec.Command(testBin, args...)
				cmd.Env = modeEnv(m)
				cmd.Dir = base
				return attackExec(t, m, cmd)
			}
			left := func(what, dir string) {
				t.Helper()
				names, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range names {
					t.Errorf("%s: left %s", what, filepath.Join(dir, e.Name()))
				}
			}
			args := []string{"rootfs", "build", "-q", "--rootfs", filepath.Join(base, "new", "parent", "py"), "--python", "/nonexistent/python3"}
			_, stderr, exit := rljail(args...)
			checkSetupError(t, "rljail "+shellQuote(args), stderr, exit)
			left("rljail "+shellQuote(args), base)

			if m == asRoot {
				small := filepath.Join(base, "small")
				if err := os.Mkdir(small, 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", small).CombinedOutput(); err != nil {
					t.Fatalf("mount a small tmpfs: %v: %s", err, out)
				}
				t.Cleanup(func() { exec.Command("umount", small).Run() })
				args := []string{"rootfs", "build", "-q", "--no-commands", "--rootfs", filepath.Join(small, "py")}
				_, stderr, exit := rljail(args...)
				checkSetupError(t, "rljail "+shellQuote(args)+" (8 MiB free)", stderr, exit)
				if !strings.Contains(stderr, "no space left on device") {
					t.Errorf("a full disk is not named: %q", stderr)
				}
				left("a build onto a full disk", small)
				// The default rootfs built on first use, by a rootless run
				// whose data directory is that full disk.
				if err := os.Chmod(small, 0o777); err != nil {
					t.Fatal(err)
				}
				run := exec.Command(testBin, "-q", "--no-workspace", "--", "python3", "-c", "pass")
				run.Env = append(modeEnv(asRootless), "XDG_DATA_HOME="+small)
				_, stderr, exit = attackExec(t, asRootless, run)
				checkSetupError(t, "a rootless run whose first-use build fills the disk", stderr, exit)
				left("a first-use build onto a full disk", small)
				if out, err := exec.Command("umount", small).CombinedOutput(); err != nil {
					t.Fatalf("umount: %v: %s", err, out)
				}
				if err := os.Remove(small); err != nil {
					t.Fatal(err)
				}
			}

			dir := filepath.Join(base, "py")
			if out, stderr, exit := rljail("rootfs", "build", "-q", "--no-commands", "--rootfs", dir); exit != 0 {
				t.Fatalf("rootfs build: exit %d: %s%s", exit, out, stderr)
			}
			if out, stderr, exit := rljail("rootfs", "remove", dir); exit != 0 {
				t.Fatalf("rootfs remove: exit %d: %s%s", exit, out, stderr)
			}
			left("a build and its removal", base)
		})
	}
}

// TestRootfsFirstBuildOnce: jails started together on a data directory
// with no rootfs yet build the default once (one of them says so) and all
// run; the build lock, which lives only while held, is gone after.
func TestRootfsFirstBuildOnce(t *testing.T) {
	data := newDir(t)
	if err := os.Chown(data, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	const n = 4
	type outcome struct {
		stdout, stderr string
		exit           int
	}
	results := make(chan outcome, n)
	for i := 0; i < n; i++ {
		go func() {
			cmd := exec.Command(testBin, "--no-workspace", "--", "python3", "-c", "print('ran')")
			cmd.Env = append(modeEnv(asRootless), "XDG_DATA_HOME="+data)
			stdout, stderr, exit := attackExec(t, asRootless, cmd)
			results <- outcome{stdout, stderr, exit}
		}()
	}
	builds := 0
	for i := 0; i < n; i++ {
		r := <-results
		if r.exit != 0 || r.stdout != "ran\n" {
			t.Errorf("a run on a rootfs built on first use: exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
		}
		builds += strings.Count(r.stderr, "yet: building it")
	}
	if builds != 1 {
		t.Errorf("%d runs built the default rootfs, want 1", builds)
	}
	names, err := os.ReadDir(filepath.Join(data, "rljail", "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "python" {
		var got []string
		for _, e := range names {
			got = append(got, e.Name())
		}
		t.Errorf("the data directory holds %q, want the rootfs python alone", got)
	}
}

// TestRootfsBadNamesShownSafely: a rootfs path, name or package source
// holding control characters (a terminal escape, a bell, a newline) or
// spaces is refused with one line and exit 125 that shows the characters
// (^[, <9B>) rather than passing them to the terminal, and nothing is made
// for it.
func TestRootfsBadNamesShownSafely(t *testing.T) {
	for _, m := range bothModes {
		base := newDir(t)
		if err := os.Chown(base, testUID, testGID); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"a\x1b]0;owned\x07b", "a\nb c", "a\xc2\x9bb", "a\x7fb"} {
			dir := filepath.Join(base, bad)
			for _, args := range [][]string{
				{"-q", "--rootfs", dir, "--", "true"},
				{"-q", "--rootfs", bad, "--", "true"},
				{"rootfs", "info", dir},
				{"rootfs", "verify", dir},
				{"rootfs", "remove", dir},
				{"rootfs", "build", "-q", "--name", bad},
				{"rootfs", "build", "-q", "--rootfs", filepath.Join(dir, "py"), "--python", dir},
				{"rootfs", "build", "-q", "--rootfs", filepath.Join(base, "py"), "--venv", dir},
				{"rootfs", "build", "-q", "--rootfs", filepath.Join(base, "py"), "--wheels", dir, "--requirements", dir},
				{"rootfs", "build", "-q", "--rootfs", filepath.Join(base, "py"), "--system-packages", "python3-" + bad},
			} {
				cmd := exec.Command(testBin, args...)
				cmd.Env = modeEnv(m)
				cmd.Dir = base
				_, stderr, exit := attackExec(t, m, cmd)
				what := string(m) + ": rljail " + shellQuote(args)
				checkSetupError(t, what, stderr, exit)
				for _, r := range strings.TrimSuffix(stderr, "\n") {
					if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfffd {
						t.Errorf("%s: the error line passes the control character %U: %q", what, r, stderr)
						break
					}
				}
			}
		}
		names, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range names {
			t.Errorf("%s: left %q", m, e.Name())
		}
	}
}
