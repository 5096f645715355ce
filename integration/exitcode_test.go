package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExitCodes checks every exit-status rule: the payload's own code,
// 128+N for a signal, 126 not executable, 127 not found, and 125 with one
// line on stderr for every failure of rljail itself.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	type exitCase struct {
		name       string
		args       func(t *testing.T, ws string) []string
		opts       runOpts
		exit       int
		status     string // the --result status, "" to not check
		signal     int    // the --result signal, when status is signaled
		setupError bool   // 125: exactly one line on stderr starting "rljail: "
		only       mode   // run in this mode only, when set
	}
	fixed := func(args ...string) func(*testing.T, string) []string {
		return func(*testing.T, string) []string { return args }
	}
	cases := []exitCase{
		{name: "ok", args: fixed(python("pass")...), exit: 0, status: "ok"},
		{name: "payload_exit_3", args: fixed(python("import sys; sys.exit(3)")...), exit: 3, status: "exit_nonzero"},
		{name: "payload_sigkill", args: fixed(python("import os; os.kill(os.getpid(), 9)")...), exit: 137, status: "signaled", signal: 9},
		{name: "payload_sigterm", args: fixed(python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")...), exit: 143, status: "signaled", signal: 15},
		{name: "command_not_found", args: fixed("--", "no-such-command-rljail-it"), exit: 127},
		{name: "absolute_command_not_found", args: fixed("--", "/usr/bin/no-such-command-rljail-it"), exit: 127},
		{name: "not_executable", args: func(t *testing.T, ws string) []string {
			writeFile(t, filepath.Join(ws, "notexec.sh"), "#!/bin/sh\necho should not run\n", 0o644)
			return []string{"--", "./notexec.sh"}
		}, exit: 126},
		{name: "python_missing_script", args: fixed("--", "python3", "no_such_script.py"), exit: 2, status: "exit_nonzero"},
		{name: "bad_flag", args: fixed(append([]string{"--no-such-flag"}, python("print('ran')")...)...), exit: 125, setupError: true},
		{name: "bad_volume_syntax", args: fixed(append([]string{"-v", "nocolon"}, python("print('ran')")...)...), exit: 125, setupError: true},
		{name: "bad_volume_mode", args: fixed(append([]string{"-v", "/tmp:/data:rx"}, python("print('ran')")...)...), exit: 125, setupError: true},
		{name: "volume_source_missing", args: fixed(append([]string{"-v", "/nonexistent-rljail-it:/data"}, python("print('ran')")...)...), exit: 125, setupError: true, status: "setup_error"},
		{name: "network_host", args: fixed(append([]string{"--network", "host"}, python("print('ran')")...)...), exit: 125, setupError: true},
		{name: "timeout_zero", args: fixed(append([]string{"--timeout", "0"}, python("print('ran')")...)...), exit: 125, setupError: true},
		// A missing rootfs is built on first use (issue 2), so the missing
		// directory is one that cannot be created: its parent is a file.
		{name: "rootfs_missing", opts: runOpts{noRootfs: true}, args: func(t *testing.T, ws string) []string {
			parent := filepath.Join(newDir(t), "a-file")
			writeFile(t, parent, "", 0o644)
			return append([]string{"--rootfs", filepath.Join(parent, "rootfs")}, python("print('ran')")...)
		}, exit: 125, setupError: true, status: "setup_error"},
		// Rootless, a missing rootfs below a directory the user cannot write
		// cannot be built either (as root it would be built).
		{name: "rootfs_missing_parent_not_writable", only: asRootless, opts: runOpts{noRootfs: true}, args: func(t *testing.T, ws string) []string {
			return append([]string{"--rootfs", filepath.Join(newDir(t), "rootfs")}, python("print('ran')")...)
		}, exit: 125, setupError: true, status: "setup_error"},
		{name: "no_command", args: fixed("--"), exit: 125, setupError: true},
	}
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				if c.only != "" && c.only != m {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					o := c.opts
					o.dir = newDir(t)
					args := c.args(t, o.dir)
					stdout, stderr, exit, res := runJail(t, m, o, args...)
					what := "rljail " + shellQuote(args)
					if exit != c.exit {
						t.Errorf("%s: exit status %d, want %d\nstdout: %q\nstderr: %q", what, exit, c.exit, stdout, stderr)
					}
					if c.setupError {
						checkSetupError(t, what, stderr, exit)
						if strings.Contains(stdout, "ran") {
							t.Errorf("%s: the command ran although rljail failed: stdout %q", what, stdout)
						}
					}
					if c.status != "" {
						checkResult(t, what, res, c.status, c.exit)
					}
					if c.signal != 0 && res != nil {
						if got, _ := jsonInt(res, "signal"); got != int64(c.signal) {
							t.Errorf("%s: --result signal = %v, want %d (report %v)", what, res["signal"], c.signal, res)
						}
						if c.signal == 9 && res["signal_name"] != "SIGKILL" {
							t.Errorf("%s: --result signal_name = %v, want SIGKILL", what, res["signal_name"])
						}
					}
					// A report, when one was written, agrees with the exit status.
					if res != nil {
						if got, ok := jsonInt(res, "exit_code"); !ok || got != int64(exit) {
							t.Errorf("%s: --result exit_code %v differs from the exit status %d", what, res["exit_code"], exit)
						}
					}
				})
			}
		})
	}
}

// TestNotExecutableDidNotRun makes sure a 126 is not a script that ran and
// failed: the workspace file must not have produced output.
func TestNotExecutableDidNotRun(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			ws := newDir(t)
			writeFile(t, filepath.Join(ws, "prog"), "#!/usr/bin/python3\nprint('should not run')\n", 0o644)
			stdout, stderr, exit, _ := runJail(t, m, runOpts{dir: ws}, "--", "./prog")
			if exit != 126 || strings.Contains(stdout, "should not run") {
				t.Errorf("rljail -- ./prog (mode 0644): exit %d stdout %q stderr %q, want 126 and no output", exit, stdout, stderr)
			}
			// Control: the same file, executable, runs.
			if err := os.Chmod(filepath.Join(ws, "prog"), 0o755); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, exit, _ = runJail(t, m, runOpts{dir: ws}, "--", "./prog")
			if exit != 0 || !strings.Contains(stdout, "should not run") {
				t.Errorf("control: rljail -- ./prog (mode 0755): exit %d stdout %q stderr %q, want 0 and its output", exit, stdout, stderr)
			}
		})
	}
}
