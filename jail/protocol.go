package jail

// The supervisor and the init stage talk over two pipes that init inherits
// as fixed descriptors: the supervisor writes one initConfig (JSON) on the
// control pipe, then controlMessages, and closes it when the run ends; init
// writes initMessage lines on the status pipe. Nothing the payload can reach is on either pipe: both are closed
// before the payload's execve.

const (
	initArg0     = "rljail-init" // argv[0] that selects the init stage
	fdConfig     = 3             // init reads its initConfig, then controlMessages, here
	fdStatus     = 4             // init reports here
	fdNotify     = 5             // a Unix socket to the supervisor for the seccomp listener
	fdFirstMount = 6             // mount trees passed by a root supervisor start here
)

// initConfig is everything init needs; it must not depend on anything else
// of the host.
type initConfig struct {
	Command  []string      `json:"command"`
	Env      []string      `json:"env"`
	Workdir  string        `json:"workdir"`
	TmpSize  int64         `json:"tmp_size"`
	Mounts   []bindMount   `json:"mounts"`
	Symlinks []rootSymlink `json:"symlinks"`
	// Filter is the payload's seccomp program (BPF), installed last.
	Filter []byte `json:"filter,omitempty"`
	// Notify: the filter has a user-notification listener, which the
	// payload's child sends to the supervisor over fdNotify.
	Notify bool `json:"notify,omitempty"`
	// Rlimits are the payload's resource limits.
	Rlimits []rlimit `json:"rlimits,omitempty"`
	// UnshareCgroup: the supervisor places init in its cgroup after the
	// clone (v1, where clone cannot) and says so with a Placed message;
	// init then enters a new cgroup namespace itself, so that
	// /proc/self/cgroup shows no host path, and starts the payload.
	UnshareCgroup bool `json:"unshare_cgroup,omitempty"`
}

// rlimit is one resource limit for the payload.
type rlimit struct {
	Resource int    `json:"resource"`
	Soft     uint64 `json:"soft"`
	Hard     uint64 `json:"hard"`
}

// bindMount grants a host object to the jail. A root supervisor clones the
// tree itself (the jail's host uid may not be able to traverse to it) and
// passes it as descriptor FD; a rootless one leaves FD at -1 and init clones
// Source, with the same rights as the user.
type bindMount struct {
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	FD       int    `json:"fd"`
	Dir      bool   `json:"dir"`
	Writable bool   `json:"writable"`
	Device   bool   `json:"device"` // a device node: read-only, noexec, but not nodev
	// Granted is the workspace or a volume: as root, its owner is mapped to
	// the jail's user (idmap.go).
	Granted bool `json:"granted"`
}

// rootSymlink recreates a top-level symlink of the rootfs (lib -> usr/lib).
type rootSymlink struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// controlMessage is a request from the supervisor after the config.
type controlMessage struct {
	// Signal is a signal number to deliver to the payload.
	Signal int `json:"signal,omitempty"`
	// Placed: the supervisor has put init in the jail's cgroup (v1, where
	// it could not be born there); init starts the payload only after it.
	Placed bool `json:"placed,omitempty"`
}

// initMessage is one status line from init.
type initMessage struct {
	// Error is set when setup failed: the step and its cause, one line.
	Error string `json:"error,omitempty"`
	// ExitCode is the code rljail should exit with for Error (125, 126, 127).
	ExitCode int `json:"exit_code,omitempty"`
	// Started is sent once the payload's execve succeeded.
	Started bool `json:"started,omitempty"`
	// Exited is sent when the payload ended, with Code or Signal.
	Exited bool `json:"exited,omitempty"`
	Code   int  `json:"code,omitempty"`
	Signal int  `json:"signal,omitempty"`
}
