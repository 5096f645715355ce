package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootfsBuildKeepsTheDefault (issue 30): `rljail rootfs build
// --system-packages ...` without --name refuses to put the packages into
// the default rootfs that every run uses, in one line that says how to
// build one of its own or change the default on purpose, and leaves the
// default as it was; `--system-packages numpy` says python3-numpy; a
// build with --name says what it builds where, and each package's size.
func TestRootfsBuildKeepsTheDefault(t *testing.T) {
	dir := newDir(t)
	def := filepath.Join(dir, "default")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(testBin, append([]string{"rootfs", "build"}, args...)...)
		cmd.Env = append(os.Environ(), "RLJAIL_ROOTFS="+def)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("--system-packages", "python3-six")
	if code != 125 || !strings.Contains(out, "--name NAME") || !strings.Contains(out, "--replace") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("a package build without --name: exit %d, %q; want 125 and one line naming --name and --replace", code, out)
	}
	if _, err := os.Lstat(def); err == nil {
		t.Errorf("the refused build made %s", def)
	}
	out, code = run("--system-packages", "six", "--rootfs", filepath.Join(dir, "x"))
	if code != 125 || !strings.Contains(out, "did you mean python3-six?") {
		t.Errorf("--system-packages six: exit %d, %q; want 125 and python3-six suggested", code, out)
	}
	out, code = run("--system-packages", "python3-six", "--rootfs", filepath.Join(dir, "six"))
	if code != 0 || !strings.Contains(out, "building a rootfs at "+filepath.Join(dir, "six")+" with --system-packages python3-six") ||
		!strings.Contains(out, "adding 1 Debian packages") || !strings.Contains(out, "python3-six ") {
		t.Errorf("a build with --rootfs: exit %d, %s; want what it builds where, and python3-six's size", code, out)
	}
	// With --replace the default takes the packages, and a plain build
	// over it then needs --replace again.
	if out, code = run("--system-packages", "python3-six", "--replace", "-q"); code != 0 {
		t.Fatalf("--replace: exit %d, %s", code, out)
	}
	if out, code = run("-q"); code != 125 || !strings.Contains(out, "holds 1 added packages (python3-six)") {
		t.Errorf("a plain build over a default with packages: exit %d, %q; want 125", code, out)
	}
}
