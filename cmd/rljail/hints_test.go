package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rljail/rljail/jail"
)

// issue 30: a mistyped flag or subcommand is one line and exit 125 with
// the name it was likely meant to be; `rljail --help` lists docker and
// `rljail help docker` prints its help.
func TestUsageHints(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rljail", "--timout", "5", "--", "true"}, "rljail: flag provided but not defined: --timout (did you mean --timeout? see rljail --help)\n"},
		{[]string{"rljail", "--quite", "--", "true"}, "(did you mean --quiet? see rljail --help)\n"},
		{[]string{"rljail", "--result-outptu=1k", "--", "true"}, "(did you mean --result-output? see rljail --help)\n"},
		{[]string{"rljail", "session", "--cell-timout", "1s"}, "(did you mean --cell-timeout? see rljail --help)\n"},
		{[]string{"rljail", "rootfs", "verfy"}, `rljail: rootfs has no command "verfy" (did you mean verify? it has: build, list, info, verify, remove)` + "\n"},
		{[]string{"rljail", "profiles", "shwo"}, `(did you mean show? it has: list, show NAME)` + "\n"},
		{[]string{"rljail", "--bogus", "--", "true"}, "rljail: flag provided but not defined: --bogus (see rljail --help)\n"},
		{[]string{"rljail", "-Z", "--", "true"}, "rljail: flag provided but not defined: -Z (see rljail --help)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &out, &errb)
		if code != 125 || strings.Count(errb.String(), "\n") != 1 || !strings.HasSuffix(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 125 and one line ending %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"rljail", "--help"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "\n   docker ") {
		t.Errorf("rljail --help: exit %d, stdout %q; want docker among the commands", code, out.String())
	}
	out.Reset()
	if code := run([]string{"rljail", "help", "docker"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "Usage:  docker run [OPTIONS] IMAGE COMMAND") {
		t.Errorf("rljail help docker: exit %d, stdout %q; want docker run's help", code, out.String())
	}
}

func TestHostFileArg(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	for _, name := range []string{"script.py", "python3", "run.sh"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"python3", "script.py"}, "script.py"},
		{[]string{"python3", "-u", "./script.py", "x"}, "./script.py"},
		{[]string{"./run.sh"}, "./run.sh"},
		{[]string{"python3", "-c", "print(1)"}, ""}, // python3 here is not the jail's python3
		{[]string{"python3", "-m", "pkg"}, ""},
		{[]string{"python3", "/abs/script.py"}, ""},
		{[]string{"python3", "missing.py"}, ""},
	} {
		if got := hostFileArg(tc.argv); got != tc.want {
			t.Errorf("hostFileArg(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
	for st, want := range map[string]bool{jail.StatusExitNonzero: true, jail.StatusOK: false, jail.StatusTimeout: false} {
		if got := failedOnAFile(jail.Result{Status: st}); got != want {
			t.Errorf("failedOnAFile(%s) = %v", st, got)
		}
	}
	if !failedOnAFile(jail.Result{Status: jail.StatusSetupError, ExitCode: jail.ExitNotFound}) || failedOnAFile(jail.Result{Status: jail.StatusSetupError, ExitCode: jail.ExitSetupError}) {
		t.Errorf("failedOnAFile: a command not found is one, rljail's own setup error is not")
	}
}
