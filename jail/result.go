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
	// StatusMemoryLimit: the OOM killer ended the payload at --memory.
	StatusMemoryLimit = "memory_limit"
	// StatusPidsLimit: forks were refused at --pids-limit (pids.events).
	StatusPidsLimit = "pids_limit"
	// StatusCPULimit: the jail used up --cpu-time.
	StatusCPULimit = "cpu_limit"
	// StatusOutputTruncated: the payload ended normally but wrote more than
	// --output-limit; the rest was discarded.
	StatusOutputTruncated = "output_truncated"
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

	// What the run used, from its cgroup (or, without one, from the
	// init's rusage, which covers every process it reaped).
	CPUUserMS       int64 `json:"cpu_user_ms"`
	CPUSystemMS     int64 `json:"cpu_system_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	PidsPeak        int64 `json:"pids_peak"`
	OOMKills        int64 `json:"oom_kills"`
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	StdoutTruncated bool  `json:"stdout_truncated"`
	StderrTruncated bool  `json:"stderr_truncated"`
	// Warnings say what the run did differently from what was asked.
	Warnings []string `json:"warnings,omitempty"`
	// Seccomp names the profile and, in the strict and learn modes, the
	// calls it denied.
	Seccomp *seccomp.Report `json:"seccomp,omitempty"`
	// Network lists the connections of a run with egress (--allow-host).
	Network *NetworkReport `json:"network,omitempty"`
	// Output is the payload's output as text, when asked for
	// (Spec.ReportOutput, --result-output).
	Output *Output `json:"output,omitempty"`
}

// Limits reports the limits a run was held to, each with what enforced it
// (the timeout is the supervisor's kill timer, the /tmp size a tmpfs's).
type Limits struct {
	TimeoutMS    int64  `json:"timeout_ms"`
	TmpSizeBytes int64  `json:"tmp_size_bytes"`
	Network      string `json:"network"`
	Memory       Limit  `json:"memory_bytes"`
	Pids         Limit  `json:"pids"`
	CPUs         Limit  `json:"cpus"`
	CPUTimeMS    Limit  `json:"cpu_time_ms"`
	Output       Limit  `json:"output_bytes"`
	FileSize     Limit  `json:"file_size_bytes"`
	NoFile       Limit  `json:"nofile"`
	// Placement is where the jail's cgroup went (cgroup2-own,
	// cgroup2-toplevel, cgroup2-parent, cgroup1, cgroup1-parent, none).
	Placement string `json:"cgroup_placement"`
	// SystemdScope is the transient scope unit the jail's cgroup was in
	// (placement systemd-scope), and CgroupPath that cgroup's path as
	// /proc/PID/cgroup shows it; both empty and left out elsewhere.
	SystemdScope string `json:"systemd_scope,omitempty"`
	CgroupPath   string `json:"cgroup_path,omitempty"`
	// ThreadPools is the size the jail's environment gave the numeric
	// libraries' thread pools (OMP_NUM_THREADS and the like: --cpus rounded
	// up, when fewer than the CPUs the jail may run on and the caller set
	// none of them); 0, and left out, for none.
	ThreadPools int `json:"thread_pools,omitempty"`
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
