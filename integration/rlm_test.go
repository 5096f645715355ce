package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRLMExample runs examples/rlm_repl.py, the recipe docs/sessions.md gives
// RLM runners, as a user would: a host driver keeps one jailed REPL for a
// trajectory and answers its llm_query calls (the bridge's call events on
// the session's stdout). Decided
// from outside: state lasts from cell to cell, llm_query reaches the
// host's answer(), an API key in the driver's environment never shows in
// what the jail printed, the network is unreachable, rljail exits 0 and
// the socket's directory is removed.
func TestRLMExample(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			dir := newDir(t) // 0755: the rootless user reads the copies
			for _, f := range []string{"rlm_repl.py"} {
				if err := copyFile(filepath.Join("..", "examples", f), filepath.Join(dir, f), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tmp := newOpenDir(t)
			key := randomToken("sk-rlm")
			cmd := exec.Command("/usr/bin/python3", filepath.Join(dir, "rlm_repl.py")) // Debian's, as the rootfs build uses
			cmd.Dir = tmp
			cmd.Env = append(modeEnv(m), "RLJAIL_BIN="+testBin, "RLJAIL_ROOTFS="+rootfsDir, "TMPDIR="+tmp, "OPENAI_API_KEY="+key)
			runAsMode(cmd, m)
			cmd.WaitDelay = 5 * time.Second
			done := make(chan struct{})
			timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill(); close(done) })
			out, err := cmd.CombinedOutput()
			timer.Stop()
			text := string(out)
			if err != nil {
				t.Fatalf("python3 examples/rlm_repl.py: %v\n%s", err, text)
			}
			for _, want := range []string{">>> print(x * 2)\n42\n", "stub answer to: summarize: 21", "['stub answer to: a', 'stub answer to: b']", "Network is unreachable", "rljail exit status 0"} {
				if !strings.Contains(text, want) {
					t.Errorf("the example's output lacks %q:\n%s", want, text)
				}
			}
			if strings.Contains(text, key) || strings.Contains(text, "OPENAI_API_KEY") {
				t.Errorf("LEAK: the driver's API key reached the jail:\n%s", text)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "rlm-*")); len(left) > 0 {
				t.Errorf("the example left %v", left)
			}
			select {
			case <-done:
				t.Fatalf("the example did not end within 60 s")
			default:
			}
			_ = os.Remove(tmp)
		})
	}
}
