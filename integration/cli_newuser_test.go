package integration

// A new user's first steps (issue 30), each replayed as the user typed it
// and judged by what rljail printed, its exit status and its report:
// docker's spellings, the kill timer nobody chose, the help, a mistyped
// flag, --quiet against the rootless warning, the memory kill's message,
// and a script the jail could not see because the current directory was
// not mounted.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDockerNewUser: `-v ./task:/task:ro` is a host path, as in docker 23
// and later (it was refused as a named volume); `-it` is refused with the
// line that says what to do; a run without a timer of its own says on
// stderr how long rljail's default one is, and one with a timer does not.
func TestDockerNewUser(t *testing.T) {
	needCommands(t)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			dir := newDir(t)
			if err := os.Mkdir(filepath.Join(dir, "task"), 0o755); err != nil {
				t.Fatal(err)
			}
			token := randomToken("task-ran-")
			writeFile(t, filepath.Join(dir, "task", "main.py"), "print("+`"`+token+`"`+")\n", 0o644)

			// README's own line, with the relative spelling.
			r := dockerRun(t, m, dir, "", "run", "--rm", "-v", "./task:/task:ro", "python:3.11-slim", "timeout", "10", "python", "/task/main.py")
			if r.exit != 0 || r.stdout != token+"\n" {
				t.Errorf("-v ./task:/task:ro: exit %d, stdout %q, stderr %q; want 0 and the task's line", r.exit, r.stdout, r.stderr)
			}
			// Granted read-only, as asked.
			r = dockerRun(t, m, dir, "", "run", "-v", "./task:/task:ro", "sandbox-image", "timeout", "10", "sh", "-c", "echo x > /task/w")
			if _, err := os.Stat(filepath.Join(dir, "task", "w")); r.exit == 0 || err == nil {
				t.Errorf("-v ./task:/task:ro was written (exit %d)", r.exit)
			}

			r = dockerRun(t, m, dir, "", "run", "-it", "python:3.11-slim", "python3")
			if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); r.exit != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail docker: -t is not supported: ") || !strings.Contains(lines[0], "-i alone") {
				t.Errorf("-it: exit %d, stderr %q; want 125 and one line saying -i alone passes stdin", r.exit, r.stderr)
			}

			notice := "rljail docker: no --rljail-timeout given: the jail is killed after 10m (exit 137)"
			for _, tc := range []struct {
				args   []string
				notice bool
			}{
				{[]string{"run", "--rm", "python:3.11-slim", "python3", "-c", "print(1)"}, true},
				{[]string{"run", "--rm", "--stop-timeout", "2", "python:3.11-slim", "python3", "-c", "print(1)"}, true},
				{[]string{"run", "--rm", "python:3.11-slim", "timeout", "10", "python3", "-c", "print(1)"}, false},
				{[]string{"run", "--rm", "--rljail-timeout", "30s", "python:3.11-slim", "python3", "-c", "print(1)"}, false},
			} {
				r := dockerRun(t, m, dir, "", tc.args...)
				if r.exit != 0 || r.stdout != "1\n" {
					t.Errorf("docker %q: exit %d, stdout %q, stderr %q", tc.args, r.exit, r.stdout, r.stderr)
				}
				if got := strings.Count(r.stderr, notice); got != map[bool]int{true: 1, false: 0}[tc.notice] {
					t.Errorf("docker %q: the timer's notice appears %d times in stderr %q, want it %v", tc.args, got, r.stderr, tc.notice)
				}
			}
		})
	}
}

// rljailLine runs rljail (the binary under test, with the rootfs under
// test) in dir as m, with extra environment entries.
func rljailLine(t *testing.T, m mode, dir string, env []string, args ...string) hostRun {
	t.Helper()
	cmd := exec.Command(testBin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(modeEnv(m), "RLJAIL_ROOTFS="+rootfsDir), env...)
	return runHost(t, m, cmd, 60*time.Second)
}

// TestExitCodeUsageHints: `rljail --help` lists docker and `rljail help
// docker` prints its help; a mistyped flag or subcommand is still one
// line and exit 125, now with the name it was likely meant to be.
func TestExitCodeUsageHints(t *testing.T) {
	dir := newDir(t)
	r := rljailLine(t, asRoot, dir, nil, "--help")
	if r.exit != 0 || !strings.Contains(r.stdout, "\n   docker ") || !strings.Contains(r.stdout, "rljail docker run") {
		t.Errorf("rljail --help: exit %d, stdout %q; want docker listed", r.exit, r.stdout)
	}
	r = rljailLine(t, asRoot, dir, nil, "help", "docker")
	if r.exit != 0 || !strings.Contains(r.stdout, "docker run [OPTIONS] IMAGE COMMAND") || !strings.Contains(r.stdout, "--rljail-timeout") {
		t.Errorf("rljail help docker: exit %d, stdout %q; want docker's help", r.exit, r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timout", "5", "--", "true"}, "rljail: flag provided but not defined: --timout (did you mean --timeout? see rljail --help)"},
		{[]string{"--memroy=1g", "--", "true"}, "did you mean --memory?"},
		{[]string{"session", "--timout", "5"}, "did you mean --timeout?"},
		{[]string{"rootfs", "buld"}, `rootfs has no command "buld" (did you mean build? it has: `},
		{[]string{"--bogus", "--", "true"}, "rljail: flag provided but not defined: --bogus (see rljail --help)"},
	} {
		r := rljailLine(t, asRoot, dir, nil, tc.args...)
		checkSetupError(t, strings.Join(tc.args, " "), r.stderr, r.exit)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("rljail %q: stderr %q, want it to hold %q", tc.args, r.stderr, tc.want)
		}
	}
	// A subcommand mistyped runs a program of that name, which is not
	// found: 127, and the line names the subcommand.
	r = rljailLine(t, asRoot, dir, nil, "sesion")
	if r.exit != 127 || !strings.HasSuffix(r.stderr, "(did you mean rljail session?)\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("rljail sesion: exit %d, stderr %q; want 127 and one line ending in the hint", r.exit, r.stderr)
	}
}

// TestReportQuietWarnings: rootless on this cgroup v1 host every run
// warned "limits weaker than asked", and -q could not silence it. -q now
// does; the report still lists every fallback, and --strict-limits still
// refuses.
func TestReportQuietWarnings(t *testing.T) {
	dir := newOpenDir(t)
	plain := rljailLine(t, asRootless, dir, nil, "--result", "r0.json", "--", "python3", "-c", "print(1)")
	if !strings.Contains(plain.stderr, fallbackWarning) {
		t.Skipf("no fallback here (stderr %q): rootless limits are as asked on this host", plain.stderr)
	}
	r := rljailLine(t, asRootless, dir, nil, "-q", "--result", "r.json", "--", "python3", "-c", "print(1)")
	if r.exit != 0 || r.stdout != "1\n" || r.stderr != "" {
		t.Errorf("-q: exit %d, stdout %q, stderr %q; want 0, the output and nothing on stderr", r.exit, r.stdout, r.stderr)
	}
	_, rep := lastReport(t, filepath.Join(dir, "r.json"))
	if w, _ := rep["warnings"].([]any); len(w) == 0 {
		t.Errorf("-q: the report lists no warnings: %v", rep)
	}
	r = rljailLine(t, asRootless, dir, nil, "-q", "--strict-limits", "--", "python3", "-c", "print(1)")
	checkSetupError(t, "-q --strict-limits", r.stderr, r.exit)
	if r.stdout != "" {
		t.Errorf("-q --strict-limits ran the payload: stdout %q", r.stdout)
	}
}

// TestExitCodeMemoryKillMessage: the kill at --memory 100m says 100m,
// not 104857600 bytes (as root: a cgroup's memory.max ends the jail).
func TestExitCodeMemoryKillMessage(t *testing.T) {
	dir := newDir(t)
	r := rljailLine(t, asRoot, dir, nil, "-m", "100m", "--", "python3", "-c", "b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096])")
	if r.exit != 137 || r.stderr != "rljail: killed at the memory limit of 100m\n" {
		t.Errorf("-m 100m: exit %d, stderr %q; want 137 and the limit as given", r.exit, r.stderr)
	}
}

// TestExitCodeWorkspaceNotMounted: run from the home directory, the
// current directory is not mounted, and `python3 script.py` failed with
// only Python's "can't open file". One line of rljail's now says why,
// -q or not, and the report lists it.
func TestExitCodeWorkspaceNotMounted(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			home := newOpenDir(t)
			writeFile(t, filepath.Join(home, "script.py"), "print('ran')\n", 0o644)
			env := []string{"HOME=" + home}
			for _, quiet := range []bool{false, true} {
				args := []string{"--result", "/dev/stdout", "--", "python3", "script.py"}
				if quiet {
					args = append([]string{"-q"}, args...)
				}
				r := rljailLine(t, m, home, env, args...)
				why := "rljail: script.py is in the current directory, which the jail does not have: not mounting " + home + " at /workspace: it is the root or your home directory"
				if r.exit != 2 || strings.Count(r.stderr, why) != 1 {
					t.Errorf("%q from the home directory: exit %d, stderr %q; want 2 and one line %q", args, r.exit, r.stderr, why)
				}
				before, rep := lastReport(t, writeTemp(t, r.stdout))
				w, _ := rep["warnings"].([]any)
				found := false
				for _, x := range w {
					found = found || strings.HasPrefix(x.(string), "not mounting "+home)
				}
				if before != "" || !found {
					t.Errorf("%q: stdout before the report %q, warnings %v; want none and the reason listed", args, before, w)
				}
			}
			// A payload that fails for its own reasons, naming no file
			// here, gets no such line.
			r := rljailLine(t, m, home, env, "--", "python3", "-c", "raise SystemExit(3)")
			if r.exit != 3 || strings.Contains(r.stderr, "which the jail does not have") {
				t.Errorf("exit 3 without a file: exit %d, stderr %q", r.exit, r.stderr)
			}
		})
	}
}

// writeTemp writes s to a new file and returns its path.
func writeTemp(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
