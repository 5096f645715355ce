package jail

import (
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/seccomp"
)

// Status values of a Result. They are part of the stable JSON report.
const (
	StatusOK          = "ok"           // the payload exited 0
	StatusExitNonzero = "exit_nonzero" // the payload exited with another code
	StatusSignaled    = "signaled"     // the payload died of a signal
	StatusTimeout     = "timeout"      // the kill timer fired
	StatusSetupError  = "setup_error"  // rljail could not start the payload
	// StatusSeccompViolation: under a kill-mode profile (python-strict) the
	// payload made a call outside the policy and the jail was ended;
	// seccomp.violation names the call.
	StatusSeccompViolation = "seccomp_violation"
)

// Exit codes that rljail itself uses (design.md, "Exit status").
const (
	ExitTimeout       = 124
	ExitSetupError    = 125
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// Result is what one run did. It is written as the JSON report (--result);
// fields are only ever added, never renamed.
type Result struct {
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal,omitempty"`
	SignalName string `json:"signal_name,omitempty"`
	WallMS     int64  `json:"wall_ms"`
	Error      string `json:"error,omitempty"`
	Limits     Limits `json:"limits"`
	// Warnings say what the run did differently from what was asked.
	Warnings []string `json:"warnings,omitempty"`
	// Seccomp names the profile and, in the strict and learn modes, the
	// calls it denied.
	Seccomp *seccomp.Report `json:"seccomp,omitempty"`
}

// Limits reports the limits a run was held to.
type Limits struct {
	TimeoutMS    int64  `json:"timeout_ms"`
	TmpSizeBytes int64  `json:"tmp_size_bytes"`
	Network      string `json:"network"`
}

// setExit fills Status, ExitCode and Signal from the payload's wait status.
func (r *Result) setExit(code, sig int) {
	switch {
	case sig != 0:
		r.Status = StatusSignaled
		r.Signal = sig
		r.SignalName = unix.SignalName(unix.Signal(sig))
		r.ExitCode = 128 + sig
	case code == 0:
		r.Status = StatusOK
	default:
		r.Status = StatusExitNonzero
		r.ExitCode = code
	}
}
