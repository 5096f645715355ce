package jail

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestInitStageWithoutEntry runs this test binary, which is linked without
// the init stage's entry point, as an init stage: it must stop at once with
// exit 125 and say why, not take its argv for a run and start another init
// stage. Should the guard be gone, the child runs the tests instead, and
// this one, seeing the variable, stops the recursion there.
func TestInitStageWithoutEntry(t *testing.T) {
	if os.Getenv("RLJAIL_INIT_TEST_CHILD") != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{initArg0, "-test.run=^TestInitStageWithoutEntry$"},
		Env: append(os.Environ(), "RLJAIL_INIT_TEST_CHILD=1")}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitSetupError {
		t.Fatalf("as %s: %v, want exit %d; output %q", initArg0, err, ExitSetupError, out)
	}
	if !strings.Contains(string(out), "linked without -E rljail_entry") {
		t.Errorf("as %s: output %q does not say why it stopped", initArg0, out)
	}
}

// TestNoStageEntry: a binary linked without -E rljail_entry (this test
// binary is one, as a plain `go build` is) refuses every run with one
// line and exit 125, before anything of a jail is made, and CheckBinary
// (rljail check's binary item) says so.
func TestNoStageEntry(t *testing.T) {
	if err := CheckBinary(); err != ErrNoStageEntry {
		t.Fatalf("CheckBinary() in a binary without the entry = %v, want ErrNoStageEntry", err)
	}
	res, err := Run(context.Background(), Spec{Command: []string{"true"}, Rootfs: t.TempDir()})
	if err != ErrNoStageEntry || res.ExitCode != ExitSetupError || res.Status != StatusSetupError {
		t.Fatalf("Run = %+v, %v; want exit 125 and ErrNoStageEntry", res, err)
	}
	if strings.Contains(ErrNoStageEntry.Error(), "\n") || !strings.Contains(ErrNoStageEntry.Error(), "make build") {
		t.Errorf("the message %q is not one line that says what to do", ErrNoStageEntry)
	}
}
