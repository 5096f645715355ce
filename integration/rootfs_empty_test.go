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
// a profile's rootfs) and --cgroup-manager refuse an empty value with one
// line and exit 125. `rootfs info` of a missing or damaged rootfs is bad
// input too (125, one line). Rootless, in a data directory of the test's
// own (XDG_DATA_HOME), where the default rootfs is built first.
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
		{"rootfs", "info", "nosuch"},
		{"rootfs", "info", filepath.Join(data, "nosuch")},
	} {
		what := "rljail " + shellQuote(args)
		_, stderr, exit := rljail(args...)
		checkSetupError(t, what, stderr, exit)
		after, err := os.Stat(manifest)
		if err != nil {
			t.Fatalf("%s: the default rootfs is gone: %v", what, err)
		}
		if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
			t.Fatalf("%s: the default rootfs was rebuilt", what)
		}
	}
	// A damaged rootfs (its manifest gone) is bad input to info as well.
	damaged := filepath.Join(data, "damaged")
	if out, err := exec.Command("cp", "-a", def, damaged).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(damaged, ".rljail-rootfs.json")); err != nil {
		t.Fatal(err)
	}
	_, stderr, exit := rljail("rootfs", "info", damaged)
	checkSetupError(t, "rljail rootfs info "+damaged+" (no manifest)", stderr, exit)
	if !strings.Contains(stderr, damaged) {
		t.Errorf("rootfs info of a damaged rootfs does not name it: %q", stderr)
	}
}
