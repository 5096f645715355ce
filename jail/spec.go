// Package jail runs one command in a throwaway Linux jail: new user, mount,
// PID, IPC, UTS, network and cgroup namespaces, a read-only Python root
// filesystem with a tmpfs scratch, every capability dropped and a wall-clock
// kill timer.
//
// Run is the supervisor: it stays on the host, outside every namespace, and
// re-executes the running binary as the jail's init (see InitMain). The
// payload is hostile by assumption; the supervisor and the host user are
// trusted.
package jail

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
	"github.com/rljail/rljail/seccomp"
)

// Defaults for a zero Spec. They are the safe choices: a short wall-clock
// limit, a small scratch space, and the resource limits of issue 4.
const (
	DefaultTimeout = 10 * time.Second
	DefaultTmpSize = 64 << 20
	DefaultMemory  = 512 << 20
	DefaultPids    = 64
	DefaultCPUs    = 1.0
	DefaultOutput  = 1 << 20
	DefaultFSize   = 64 << 20
	DefaultNoFile  = 256
	// Hostname is the jail's UTS name: the host's own name is not disclosed.
	Hostname = "rljail"
	// WorkspaceDir is where the granted working directory appears.
	WorkspaceDir = "/workspace"
	// JailUID and JailGID are the payload's ids inside the user namespace.
	// They map to the invoking user (rootless) or to an unprivileged host id
	// (as root), never to host root.
	JailUID = 1000
	JailGID = 1000
	// DefaultPath is the payload's PATH.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// Volume is a host path granted to the jail, read-only unless Writable.
type Volume struct {
	Source   string // host path, absolute after Validate
	Dest     string // absolute path inside the jail
	Writable bool
}

// Spec describes one run completely. The CLI (and any other caller) builds
// it; Validate checks it before anything is created on the host.
type Spec struct {
	// Early, when set, is an init stage started before the Spec was known
	// (StartEarly), which Run takes over instead of starting one.
	Early *Early

	// Command is the argv run inside the jail; Command[0] is looked up on the
	// jail's PATH when it has no slash.
	Command []string
	// Env holds KEY=VALUE entries added to the payload's environment, after
	// the fixed allowlist (PATH, HOME, LANG, PYTHONDONTWRITEBYTECODE).
	Env []string
	// Rootfs is the host directory of the Python root filesystem.
	Rootfs string
	// Workspace, when set, is a host directory mounted read-only at
	// /workspace.
	Workspace string
	// Volumes are extra host paths granted to the jail.
	Volumes []Volume
	// Workdir is the payload's working directory inside the jail: default
	// /workspace when a workspace is mounted, else /tmp.
	Workdir string
	// Timeout is the wall-clock limit; zero means DefaultTimeout.
	Timeout time.Duration
	// TmpSize is the size in bytes of the /tmp tmpfs (and of /dev/shm);
	// zero means DefaultTmpSize.
	TmpSize int64
	// Resources are the jail's resource limits; zero fields take the
	// defaults.
	Resources Resources

	// Stdin, Stdout and Stderr are pumped through pipes by the supervisor:
	// the payload never holds a host file descriptor (a host file or
	// terminal could otherwise be reopened through /proc/self/fd or fed
	// keystrokes with TIOCSTI). A nil Stdin reads as empty; a nil Stdout or
	// Stderr discards.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTYPassthrough passes the payload's output to a terminal unchanged
	// (colours, cursor movement, and also titles, the clipboard and
	// queries whose replies the payload may read on a terminal stdin). By
	// default, when Stdout or Stderr is a terminal (IsTerminal), every
	// control character of the payload's output to it is made visible
	// (package termsafe). Output to anything else passes byte for byte
	// either way.
	TTYPassthrough bool
	// ReportOutput is how many bytes of each output stream the Result
	// carries as text (Result.Output: the whole stream, or its head and
	// tail); 0 carries none. At most MaxReportOutput.
	ReportOutput int64

	// Seccomp is the payload's system call filter, installed last before
	// execve; nil runs without one. In the strict and learn modes the
	// supervisor answers the calls it denies (see seccomp.Supervisor).
	Seccomp *seccomp.Program

	// Warn, when set, receives one-line warnings about what the run does
	// differently from what was asked (a fallback); they are also in
	// Result.Warnings.
	Warn func(msg string)

	// Signals, when set, carries signals for the payload (the CLI forwards
	// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 here); the
	// jail's init passes them on. A payload that does not end when asked
	// is killed: StopGrace after a SIGTERM, SIGHUP or SIGQUIT, and at once
	// on any further SIGTERM, SIGHUP, SIGQUIT or SIGINT. A SIGINT alone
	// never kills: an interactive payload (a REPL) takes it as an
	// interrupt and goes on.
	Signals <-chan os.Signal
	// StopGrace is how long the payload has to end after a SIGTERM,
	// SIGHUP or SIGQUIT before the jail is killed; 0 means
	// DefaultStopGrace.
	StopGrace time.Duration
	// SignalsReady, when set, is closed once Signals receives what it
	// should, for a caller that starts catching them in the background
	// (os/signal's first Notify takes a while; the CLI uses a SignalPipe,
	// which is ready at once). Run waits for it before the payload may
	// start, so that a signal meant for the payload cannot end the caller
	// instead.
	SignalsReady <-chan struct{}
	// BeforePayload, when set, is called once everything else is ready and
	// before the payload may start; an error ends the run as a setup
	// error (exit 125, nothing left behind), and what it passes to warn
	// goes to Warn and the result's warnings. The CLI's check that the
	// rootfs is as its build left it runs concurrently with the jail's
	// setup and is waited for here (rootfs.CheckFingerprint), so that no
	// file of a changed rootfs is ever executed.
	BeforePayload func(warn func(string)) error

	// Egress, when set, gives the jail network egress by allowlist
	// (package egress; --allow-host); nil keeps the network namespace
	// with lo only, and nothing of egress is made.
	Egress Egress
	// Channel, when set, is a socket the payload gets as descriptor 3,
	// its only descriptor beyond 0, 1 and 2: a session's channel between
	// its worker and the supervisor (package session), apart from the
	// output that the pumps count. Run passes a copy and never closes
	// Channel; the caller closes its own once Started is called (until
	// then the payload's end of the socket is not gone when it is).
	Channel *os.File
	// Started, when set, is called once the payload is about to start,
	// with a Handle on the running jail (its CPU time), for a caller that
	// measures a long-lived payload piece by piece.
	Started func(*Handle)

	// threadEnv is threadHints' entries for this run, set by Run.
	threadEnv []string
}

// Resources are a run's resource limits. Every limit is always on: a zero
// field takes its default, never "unlimited".
type Resources struct {
	MemoryBytes int64   // --memory: cgroup memory.max, no swap; RLIMIT_AS as fallback
	PidsMax     int64   // --pids-limit: cgroup pids.max (no fallback: RLIMIT_NPROC counts the whole host user)
	CPUs        float64 // --cpus: cgroup CPU quota
	// CPUTime (--cpu-time) is the CPU time the whole jail may use, enforced
	// by the supervisor from the cgroup's accounting, with RLIMIT_CPU per
	// process as backstop; zero means the timeout.
	CPUTime     time.Duration
	OutputBytes int64 // --output-limit: bytes of stdout and of stderr passed through
	FileSize    int64 // --file-size: RLIMIT_FSIZE
	NoFile      int64 // --nofile: RLIMIT_NOFILE
	// CgroupParent (--cgroup-parent) places the jail's cgroup below this
	// existing cgroup.
	CgroupParent string
	// CgroupManager (--cgroup-manager) says whether systemd is asked for
	// a transient scope to hold the jail's cgroup; "" is auto.
	CgroupManager cgroup.Manager
	// CgroupManagerTimeout bounds the exchange with systemd; zero is 2 s
	// ($RLJAIL_SYSTEMD_TIMEOUT, for slow, emulated machines).
	CgroupManagerTimeout time.Duration
	// Strict (--strict-limits) makes every fallback to a weaker mechanism
	// an error.
	Strict bool
}

// withDefaults returns a copy of s with zero values replaced by defaults.
func (s Spec) withDefaults() Spec {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.TmpSize == 0 {
		s.TmpSize = DefaultTmpSize
	}
	r := &s.Resources
	if r.MemoryBytes == 0 {
		r.MemoryBytes = DefaultMemory
	}
	if r.PidsMax == 0 {
		r.PidsMax = DefaultPids
	}
	if r.CPUs == 0 {
		r.CPUs = DefaultCPUs
	}
	if r.CPUTime == 0 {
		r.CPUTime = s.Timeout
	}
	if r.OutputBytes == 0 {
		r.OutputBytes = DefaultOutput
	}
	if r.FileSize == 0 {
		r.FileSize = DefaultFSize
	}
	if r.NoFile == 0 {
		r.NoFile = DefaultNoFile
	}
	if s.Workdir == "" {
		if s.Workspace != "" {
			s.Workdir = WorkspaceDir
		} else {
			s.Workdir = "/tmp"
		}
	}
	return s
}

// reservedDests are jail paths a volume may not cover: the jail's own
// machinery lives there.
var reservedDests = []string{"/proc", "/dev", "/sys"}

// hiddenDests are jail directories a volume may go below but not on: it
// would hide what every run needs.
var hiddenDests = map[string]string{
	"/usr": "the root filesystem's /usr (the interpreter and its libraries)",
	"/etc": "the jail's generated /etc (passwd, hosts, the loader's cache)",
	"/bin": "the root filesystem's programs", "/lib": "the root filesystem's libraries",
	"/lib64": "the root filesystem's loader", "/sbin": "the root filesystem's programs",
}

// Validate checks the spec and makes host paths absolute. Every error names
// the offending value, so the CLI can print it as the one line of a 125 exit.
func (s *Spec) Validate() error {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return errors.New("no command given: usage: rljail [flags] -- CMD [ARG...]")
	}
	for _, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("command arguments may not contain NUL bytes")
		}
	}
	if s.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative", s.Timeout)
	}
	if s.TmpSize < 0 {
		return fmt.Errorf("tmp size %d is negative", s.TmpSize)
	}
	if err := s.Resources.validate(); err != nil {
		return err
	}
	if s.ReportOutput < 0 || s.ReportOutput > MaxReportOutput {
		return fmt.Errorf("--result-output %s is not between 0 and %s", FormatBytes(s.ReportOutput), FormatBytes(MaxReportOutput))
	}
	for _, kv := range s.Env {
		if err := checkEnvEntry(kv); err != nil {
			return err
		}
	}
	if s.Rootfs == "" {
		return errors.New("no rootfs given")
	}
	var err error
	if s.Rootfs, err = checkHostDir(s.Rootfs, "rootfs"); err != nil {
		return err
	}
	if s.Workspace != "" {
		if s.Workspace, err = checkHostDir(s.Workspace, "workspace"); err != nil {
			return err
		}
	}
	if strings.IndexByte(s.Workdir, 0) >= 0 {
		return fmt.Errorf("workdir %q contains a NUL byte", s.Workdir)
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		return fmt.Errorf("workdir %q must be an absolute, clean path inside the jail", s.Workdir)
	}
	seen := map[string]bool{}
	if s.Workspace != "" {
		seen[WorkspaceDir] = true
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		if err := checkDest(v.Dest); err != nil {
			return err
		}
		if seen[v.Dest] && v.Dest == WorkspaceDir && s.Workspace != "" {
			return fmt.Errorf("volume destination %s is where the current directory goes: add --no-workspace to put this volume there", v.Dest)
		}
		if seen[v.Dest] {
			return fmt.Errorf("volume destination %s is used twice", v.Dest)
		}
		seen[v.Dest] = true
		if strings.IndexByte(v.Source, 0) >= 0 {
			return fmt.Errorf("volume source %q contains a NUL byte", v.Source)
		}
		abs, err := filepath.Abs(v.Source)
		if err != nil {
			return fmt.Errorf("volume source %s: %w", v.Source, err)
		}
		// No symlink is followed in a granted path: one planted by an
		// earlier jail in a directory it could write would otherwise
		// redirect the grant anywhere the user can read. The jail binds
		// exactly the object found here (by file descriptor, see
		// cloneHostPath), so nothing swapped later can redirect it either.
		if err := noSymlinks(abs); err != nil {
			return fmt.Errorf("volume source %s: %w", v.Source, err)
		}
		v.Source = abs
	}
	return nil
}

// noSymlinks checks that no component of the absolute, clean path p is a
// symlink, and names the first one that is, with its target: the grant to
// give instead.
func noSymlinks(p string) error {
	fd, err := openPathNoLinks(p)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.ELOOP) {
		return err
	}
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		cur = filepath.Join(cur, part)
		if target, err := os.Readlink(cur); err == nil {
			return fmt.Errorf("%s is a symlink (to %s); rljail follows no symlink in a granted path: grant the real path", cur, target)
		}
	}
	return errors.New("a component is a symlink; rljail follows no symlink in a granted path: grant the real path")
}

func checkHostDir(p, what string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%s %q contains a NUL byte", what, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, unwrapPathError(err))
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, unwrapPathError(err))
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s %s is not a directory", what, p)
	}
	return real, nil
}

func checkDest(dest string) error {
	if strings.IndexByte(dest, 0) >= 0 {
		return fmt.Errorf("volume destination %q contains a NUL byte", dest)
	}
	if !path.IsAbs(dest) {
		return fmt.Errorf("volume destination %q must be an absolute path", dest)
	}
	if path.Clean(dest) != dest {
		return fmt.Errorf("volume destination %q must be a clean path (no .., //, or trailing /)", dest)
	}
	if dest == "/" {
		return errors.New("volume destination / would hide the jail's root filesystem")
	}
	for _, r := range reservedDests {
		if dest == r || strings.HasPrefix(dest, r+"/") {
			return fmt.Errorf("volume destination %s is reserved for the jail (%s)", dest, r)
		}
	}
	if why, ok := hiddenDests[dest]; ok {
		return fmt.Errorf("volume destination %s would hide %s: mount below it, or elsewhere", dest, why)
	}
	return nil
}

func checkEnvEntry(kv string) error {
	k, _, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
	}
	if strings.IndexByte(kv, 0) >= 0 {
		return fmt.Errorf("environment entry for %s contains a NUL byte", k)
	}
	return nil
}

// unwrapPathError drops the *PathError wrapper whose path we already print.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ParseVolume parses the docker spelling SRC:DST[:ro|rw]. Volumes are
// read-only unless "rw" is given.
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	var v Volume
	switch len(parts) {
	case 2:
	case 3:
		switch parts[2] {
		case "ro":
		case "rw":
			v.Writable = true
		default:
			return Volume{}, fmt.Errorf("volume %q: mode %q is neither ro nor rw", s, parts[2])
		}
	default:
		return Volume{}, fmt.Errorf("volume %q is not SRC:DST[:ro|rw]", s)
	}
	v.Source, v.Dest = parts[0], parts[1]
	if v.Source == "" {
		return Volume{}, fmt.Errorf("volume %q has an empty source", s)
	}
	if v.Dest == "" {
		return Volume{}, fmt.Errorf("volume %q has an empty destination", s)
	}
	if err := checkDest(v.Dest); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// payloadEnv builds the payload's environment: the fixed allowlist, the
// thread-pool hints (threadHints), then extra entries, later entries winning.
func payloadEnv(hints, extra []string) []string {
	base := []string{
		"PATH=" + DefaultPath,
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
	}
	base = append(base, hints...)
	index := map[string]int{}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range append(base, extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// threadPoolVars are the variables by which the numeric libraries model code
// loads size their worker pools: OpenMP's (libgomp, and OpenBLAS's OpenMP
// build), OpenBLAS's pthreads build (Debian's default), Intel MKL's and
// BLIS's (in pip's wheels), numexpr's. joblib sets the same set for its
// workers, for the same reason (loky's _MAX_THREADS_ENV_VARS names them).
func threadPoolVars() []string {
	return []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS"}
}

// threadHints tells those libraries the CPUs the jail gets (--cpus, rounded
// up) when that is fewer than the CPUs its processes may run on, and none of
// the variables is set by the caller (extra: --env, --env-file, the
// profile), who then chose the pools' sizes. Without it, OpenBLAS starts a
// thread for every CPU it may run on, and its idle threads spin in
// sched_yield while numpy imports: under a quota of one CPU the spinning is
// throttled together with the import (`import numpy` took 158 ms at --cpus 1
// against 122 ms at --cpus 2 and 108 ms with OPENBLAS_NUM_THREADS=1). It
// returns the entries and the count, nil and 0 for no hint.
func threadHints(cpus float64, usable int, extra []string) ([]string, int) {
	n := int(math.Ceil(cpus))
	if cpus <= 0 || n >= usable {
		return nil, 0
	}
	vars := threadPoolVars()
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(vars, k) {
			return nil, 0
		}
	}
	out := make([]string, len(vars))
	for i, k := range vars {
		out[i] = k + "=" + strconv.Itoa(n)
	}
	return out, n
}

// usableCPUs counts the CPUs this run's processes may run on: the caller's
// CPU set (the supervisor itself runs pinned to one while a jail starts,
// stage/prestart.c), else this thread's.
func usableCPUs() int {
	if set, ok := callerCPUs(); ok {
		return set.Count()
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return onlineCPUs()
	}
	return set.Count()
}

// onlineCPUs counts the host's online CPUs (/sys/devices/system/cpu/online,
// "0-3,6"); not runtime.NumCPU, which counts this process's CPU set, and
// the supervisor runs pinned to one CPU while a jail starts. A count it
// cannot read is large, so that nothing is refused for it.
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 1 << 20
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if isRange {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return 1 << 20
		}
		n += z - a + 1
	}
	if n == 0 {
		return 1 << 20
	}
	return n
}

// maxPids is the kernel's highest process count (PID_MAX_LIMIT on 64-bit).
const maxPids = 4 << 20

// validate checks the limits; the flag names are in the messages because
// that is what a user typed.
func (r Resources) validate() error {
	switch {
	case r.MemoryBytes < 0:
		return fmt.Errorf("--memory %d is negative", r.MemoryBytes)
	case r.MemoryBytes != 0 && r.MemoryBytes < 8<<20:
		return fmt.Errorf("--memory %s is below the 8m a Python process needs to start", FormatBytes(r.MemoryBytes))
	case r.PidsMax < 0:
		return fmt.Errorf("--pids-limit %d is negative", r.PidsMax)
	case r.PidsMax == 1:
		return errors.New("--pids-limit 1 leaves no room for the payload: the jail's init counts too (2 at least)")
	case r.PidsMax > maxPids:
		return fmt.Errorf("--pids-limit %d is more than the kernel allows (%d)", r.PidsMax, maxPids)
	case r.CPUs < 0:
		return fmt.Errorf("--cpus %g is negative", r.CPUs)
	case r.CPUs != 0 && r.CPUs < 0.01:
		return fmt.Errorf("--cpus %g is below the minimum of 0.01", r.CPUs)
	case r.CPUs > 0 && r.CPUs > float64(onlineCPUs()):
		return fmt.Errorf("--cpus %g is more than the %d CPUs of this host", r.CPUs, onlineCPUs())
	case r.CPUTime < 0:
		return fmt.Errorf("--cpu-time %s is negative", r.CPUTime)
	case r.OutputBytes < 0:
		return fmt.Errorf("--output-limit %d is negative", r.OutputBytes)
	case r.FileSize < 0:
		return fmt.Errorf("--file-size %d is negative", r.FileSize)
	case r.NoFile < 0:
		return fmt.Errorf("--nofile %d is negative", r.NoFile)
	case r.NoFile != 0 && r.NoFile < 16:
		return fmt.Errorf("--nofile %d is below the 16 descriptors a Python process needs", r.NoFile)
	}
	return nil
}
