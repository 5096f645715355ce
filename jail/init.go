package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// IsInit reports whether this process was started as the jail's init stage.
// cmd/rljail calls it first thing and then InitMain, before parsing flags.
func IsInit() bool {
	return len(os.Args) > 0 && (os.Args[0] == initArg0 || os.Args[0] == probeArg0)
}

// ignoredSignals lists every signal the payload could send init (it runs
// with init's uid when rootless). Init is PID 1 of the PID namespace, so
// the kernel already drops SIGKILL and SIGSTOP from inside; the rest are
// ignored, so that the payload cannot make init's Go runtime exit or dump
// its stack (a SIGSEGV or SIGQUIT sent with kill(1, ...) would). The Go
// runtime still handles real faults, which are not sent by a user.
// Signals meant for the payload reach init as control messages from the
// supervisor, never as signals. SIGCHLD (reaping), SIGURG (the runtime's
// preemption) and SIGPROF stay as they are.
func ignoredSignals() []os.Signal {
	var sigs []os.Signal
	for s := unix.Signal(1); s < 32; s++ {
		switch s {
		case unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, unix.SIGURG, unix.SIGPROF:
			continue
		}
		sigs = append(sigs, s)
	}
	return sigs
}

// InitMain is the jail's PID 1. It never returns. It reads its initConfig
// from the supervisor, builds the jail's filesystem, starts the payload and
// reaps every process until the payload exits.
func InitMain() {
	if os.Args[0] == probeArg0 {
		probeMain()
	}
	// Die with the supervisor, even when it is SIGKILLed. The race (the
	// supervisor dying before this line) is closed below: its config pipe
	// then reads as EOF and init exits.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	// Non-dumpable: the payload, though it runs with the same uid, cannot
	// ptrace init, read its memory or open /proc/1/exe (the host binary,
	// CVE-2019-5736).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	signal.Ignore(ignoredSignals()...)

	status := os.NewFile(fdStatus, "status")
	if unix.Getpid() != 1 || status == nil {
		fmt.Fprintln(os.Stderr, "rljail: the init stage only runs inside a jail started by rljail")
		os.Exit(ExitSetupError)
	}
	report := func(m initMessage) {
		b, _ := json.Marshal(m)
		_, _ = status.Write(append(b, '\n'))
	}
	fail := func(code int, err error) {
		report(initMessage{Error: err.Error(), ExitCode: code})
		os.Exit(code)
	}

	var cfg initConfig
	control := json.NewDecoder(os.NewFile(fdConfig, "control"))
	if err := control.Decode(&cfg); err != nil {
		// EOF here means the supervisor is gone.
		fail(ExitSetupError, fmt.Errorf("read the jail config: %w", err))
	}

	capLast, err := readCapLast()
	if err != nil {
		fail(ExitSetupError, err)
	}
	if err := setupNamespaces(); err != nil {
		fail(ExitSetupError, err)
	}
	if err := buildRoot(&cfg); err != nil {
		fail(ExitSetupError, err)
	}

	exe, code, err := lookPath(cfg.Command[0], cfg.Env)
	if err != nil {
		fail(code, err)
	}
	if cfg.UnshareCgroup {
		if err := awaitPlacement(control); err != nil {
			fail(ExitSetupError, err)
		}
	}
	pid, err := spawnPayload(payloadProcess{
		Path:    exe,
		Argv:    cfg.Command,
		Env:     cfg.Env,
		Workdir: cfg.Workdir,
		CapLast: capLast,
		Filter:  cfg.Filter,
		Rlimits: cfg.Rlimits,
		NotifySock: func() int {
			if cfg.Notify {
				return fdNotify
			}
			return -1
		}(),
	})
	if err != nil {
		var se *spawnError
		if errors.As(err, &se) && se.exec {
			code := ExitNotExecutable
			if se.Errno == unix.ENOENT {
				code = ExitNotFound
			}
			fail(code, fmt.Errorf("cannot run %s: %w", cfg.Command[0], se.Errno))
		}
		if errors.As(err, &se) && se.StepNum == stepChdir {
			fail(ExitSetupError, fmt.Errorf("working directory %s: %w", cfg.Workdir, se.Errno))
		}
		fail(ExitSetupError, fmt.Errorf("start the payload: %w", err))
	}
	report(initMessage{Started: true})
	go forwardSignals(control, pid)
	code, sig := reapUntil(pid)
	report(initMessage{Exited: true, Code: code, Signal: sig})
	// Exiting as PID 1 kills whatever the payload left running.
	os.Exit(0)
}

// awaitPlacement waits until the supervisor has put init in the jail's
// cgroup (v1), then enters a new cgroup namespace rooted there.
func awaitPlacement(control *json.Decoder) error {
	var m controlMessage
	if err := control.Decode(&m); err != nil || !m.Placed {
		return fmt.Errorf("wait to be placed in the jail's cgroup: %v", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("enter a new cgroup namespace: %w", err)
	}
	return nil
}

// forwardSignals passes the supervisor's signal requests to the payload
// until the control pipe closes. A closed pipe means the supervisor is
// gone: init exits and the kernel ends the jail.
func forwardSignals(control *json.Decoder, pid int) {
	for {
		var m controlMessage
		if err := control.Decode(&m); err != nil {
			os.Exit(ExitSetupError)
		}
		if m.Signal > 0 {
			_ = unix.Kill(pid, unix.Signal(m.Signal))
		}
	}
}

// reapUntil reaps every child (orphans are reparented to init) until pid
// exits, and returns its exit code or signal.
func reapUntil(pid int) (code, sig int) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return ExitSetupError, 0 // ECHILD: cannot happen while pid lives
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), 0
		case ws.Signaled():
			return 0, int(ws.Signal())
		}
	}
}

// lookPath finds the command on the payload's PATH, inside the jail (after
// pivot_root, so nothing of the host is consulted).
func lookPath(name string, env []string) (string, int, error) {
	if strings.Contains(name, "/") {
		return name, 0, nil
	}
	pathVar := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	notExec := false
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			dir = "."
		}
		p := path.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 {
			notExec = true
			continue
		}
		return p, 0, nil
	}
	if notExec {
		return "", ExitNotExecutable, fmt.Errorf("%s: found on PATH but not executable", name)
	}
	return "", ExitNotFound, fmt.Errorf("%s: command not found in the jail (PATH=%s)", name, pathVar)
}
