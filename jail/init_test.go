package jail

import (
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
