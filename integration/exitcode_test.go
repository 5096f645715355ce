package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestOutputReaderGone: when the reader of rljail's stdout goes away
// (rljail ... | head), rljail is not killed by SIGPIPE: the payload's next
// write fails as it would outside the jail, rljail exits with the
// payload's status and writes its report, which says so. Output to a full
// device is reported too, on stderr and in the report.
func TestOutputReaderGone(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			dir := newOpenDir(t)
			report := filepath.Join(dir, "r.json")
			cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "20s", "--result", report, "--",
				"python3", "-c", "import time\nfor i in range(10**7):\n    print(i, flush=i < 3)")
			cmd.Dir = dir
			cmd.Env = modeEnv(m)
			runAsMode(cmd, m)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = w, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			buf := make([]byte, 6) // "0\n1\n2\n": head -3
			if _, err := io.ReadFull(r, buf); err != nil {
				t.Fatalf("read the first lines: %v", err)
			}
			r.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("rljail did not end within 15 s of its reader going away")
			}
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				t.Fatalf("rljail was killed by %v when its reader went away; stderr %q", ws.Signal(), errb.String())
			}
			if ws.ExitStatus() != 1 {
				t.Errorf("exit %d, want the payload's 1 (BrokenPipeError); stderr %q", ws.ExitStatus(), errb.String())
			}
			b, err := os.ReadFile(report)
			if err != nil || !strings.Contains(string(b), "stdout could not be passed on (broken pipe)") {
				t.Errorf("the report does not say that stdout's reader went away (%v): %s", err, b)
			}

			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer full.Close()
			cmd = exec.Command(testBin, "--rootfs", rootfsDir, "--result", report, "--", "python3", "-c", "print('x' * 100)")
			cmd.Dir = dir
			cmd.Env = modeEnv(m)
			runAsMode(cmd, m)
			errb.Reset()
			cmd.Stdout, cmd.Stderr = full, &errb
			_ = cmd.Run()
			if !strings.Contains(errb.String(), "stdout could not be passed on (no space left on device)") {
				t.Errorf("stdout to /dev/full: stderr %q does not say the output was lost", errb.String())
			}
			if b, err := os.ReadFile(report); err != nil || !strings.Contains(string(b), "no space left on device") {
				t.Errorf("stdout to /dev/full: the report does not say the output was lost (%v): %s", err, b)
			}
		})
	}
}

// TestMergedOutputOrder: with rljail's stdout and stderr one file (2>&1,
// as a runner that merges them into the model's observation does), what
// the payload writes to each arrives in the order it wrote it, and
// rljail's own lines start a line even when the payload stopped mid-line.
func TestMergedOutputOrder(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			dir := newOpenDir(t)
			cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "2s", "--result", filepath.Join(dir, "r.json"), "--",
				"python3", "-c", `
import sys, time
for i in range(20):
    sys.stdout.write("out%d\n" % i); sys.stdout.flush()
    sys.stderr.write("err%d\n" % i); sys.stderr.flush()
sys.stdout.write("working..."); sys.stdout.flush()
time.sleep(30)`)
			cmd.Dir = dir
			cmd.Env = modeEnv(m)
			runAsMode(cmd, m)
			f, err := os.Create(filepath.Join(dir, "merged.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdout, cmd.Stderr = f, f // one open file for both
			_ = cmd.Run()
			got, _ := os.ReadFile(filepath.Join(dir, "merged.txt"))
			var want strings.Builder
			for i := 0; i < 20; i++ {
				fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
			}
			want.WriteString("working...\n")
			// Rootless, the fallback warning comes first.
			body := string(got)
			if i := strings.Index(body, "out0\n"); i >= 0 {
				body = body[i:]
			}
			if !strings.HasPrefix(body, want.String()) {
				t.Errorf("merged output out of order, or rljail's line not on a line of its own:\n%s", got)
			}
			if !strings.Contains(string(got), "\nrljail: killed at the time limit") {
				t.Errorf("rljail's timeout line does not start a line:\n%q", got)
			}
		})
	}
}

// TestManyArguments: tens of thousands of arguments and environment
// entries (a harness passing model-chosen arguments) reach the payload
// quickly and cheaply. The jail's init once grew its tables one entry at
// a time on an allocator that frees only its last block: 40,000
// arguments took gigabytes, outside every jail limit, and the timeout.
func TestManyArguments(t *testing.T) {
	t.Parallel()
	dir := newOpenDir(t)
	var env strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&env, "V%d=x\n", i)
	}
	writeFile(t, filepath.Join(dir, "many.env"), env.String(), 0o644)
	args := []string{"--rootfs", rootfsDir, "--timeout", "20s", "--env-file", filepath.Join(dir, "many.env"), "--",
		"python3", "-c", "import os, sys; print(len(sys.argv), sum(k.startswith('V') for k in os.environ))"}
	for i := 0; i < 40000; i++ {
		args = append(args, "arg")
	}
	cmd := exec.Command(testBin, args...)
	cmd.Dir = dir
	cmd.Env = modeEnv(asRoot)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil || !strings.Contains(string(out), "40001 20000") {
		t.Fatalf("40,000 arguments and 20,000 variables: %v after %v\n%.500s", err, took, out)
	}
	if took > 10*time.Second {
		t.Errorf("40,000 arguments and 20,000 variables took %v", took)
	}
	t.Logf("40,000 arguments and 20,000 variables: %v", took)
}

// TestStalledReaderTimeout: a caller that holds rljail's stdout open but
// never reads it (a harness that waits for the exit before it reads, with
// more output than a pipe holds) still gets rljail back at --timeout, as
// timeout(1) would give it back, with the loss in the report.
func TestStalledReaderTimeout(t *testing.T) {
	t.Parallel()
	for _, merged := range []bool{false, true} {
		name := "separate"
		if merged {
			name = "merged"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := newOpenDir(t)
			report := filepath.Join(dir, "r.json")
			cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "2s", "--output-limit", "64m", "--result", report, "--",
				"python3", "-c", "import sys, time\nsys.stdout.write('x' * (10 << 20)); sys.stdout.flush(); time.sleep(60)")
			cmd.Dir = dir
			cmd.Env = modeEnv(asRoot)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close() // held open, never read
			var errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = w, &errb
			if merged {
				cmd.Stderr = w
			}
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("rljail did not return within 20 s of a 2 s timeout while its stdout's reader did not read")
			}
			took := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); code != 124 || took > 10*time.Second {
				t.Errorf("exit %d after %v, want 124 within a few seconds of the 2 s timeout; stderr %q", code, took, errb.String())
			}
			if b, err := os.ReadFile(report); err != nil || !strings.Contains(string(b), "its reader did not read it") {
				t.Errorf("the report does not say that stdout was not all passed on (%v): %.300s", err, b)
			}
		})
	}
}

// TestLateReaderKeepsStatus: a payload that ended on its own before
// --timeout keeps its exit status however late its reader takes the
// output (a slow reader once turned it into a timeout, 124); and a SIGTERM
// while only output waits for its reader ends rljail within the grace.
func TestLateReaderKeepsStatus(t *testing.T) {
	t.Parallel()
	dir := newOpenDir(t)
	report := filepath.Join(dir, "r.json")
	cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "2s", "--result", report, "--",
		"python3", "-c", "import sys\nsys.stdout.write('x' * 100000)\nsys.exit(3)")
	cmd.Dir = dir
	cmd.Env = modeEnv(asRoot)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // well past the timeout
	n, _ := io.Copy(io.Discard, out)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 || n != 100000 {
		t.Errorf("exit %d with %d bytes read late, want the payload's 3 and all 100000", code, n)
	}
	if b, _ := os.ReadFile(report); !strings.Contains(string(b), `"status":"exit_nonzero"`) {
		t.Errorf("the report: %.300s", b)
	}

	cmd = exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "30s", "--", "python3", "-c", "import sys\nsys.stdout.write('x' * 200000)")
	cmd.Dir = dir
	cmd.Env = modeEnv(asRoot)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // never read
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	time.Sleep(time.Second)
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("rljail took %v to end after SIGTERM while its output waited for a reader", took)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("rljail did not end within 15 s of SIGTERM while its output waited for a reader")
	}
}
