// Package cgroup gives each jail its own cgroup: it picks where the cgroup
// goes, applies the memory, pids and CPU limits, reports precisely which
// limit is enforced by what, reads the jail's resource usage, and tears the
// cgroup down.
//
// cgroup v2 comes first; on legacy and hybrid hosts the v1 memory, pids, cpu
// and cpuacct hierarchies are used; where no cgroup can be written the
// caller falls back to rlimits, and Fallbacks words every limit that is
// weaker than asked so that it can be announced (issue 4).
//
// # Placement
//
// Create puts the jail's cgroup, in this order:
//
//   - below Options.Parent (--cgroup-parent) when given;
//   - below the supervisor's own cgroup: on v1 always (the jail's cgroup in
//     each hierarchy goes below this process's cgroup there); on v2 when
//     that cgroup holds no process but this one and this user may write it,
//     as in a systemd service with Delegate=yes or a cgroup delegated to an
//     unprivileged user. cgroup v2 lets only a cgroup without processes hand
//     controllers to its children, so the supervisor first moves itself into
//     the leaf child "rljail-supervisor", then enables the controllers, then
//     creates the jail's cgroup beside that leaf. The supervisor stays in
//     the leaf for the rest of its life (later runs find it there and reuse
//     the arrangement); it is the only process ever moved.
//   - on a v2 host that systemd runs (--cgroup-manager auto or systemd), in
//     a transient scope asked of systemd over D-Bus, which holds the run's
//     first step and the jail's cgroup beside it (scope.go);
//   - as root on v2, below the top-level cgroup /sys/fs/cgroup/rljail (a
//     login shell's scope holds other processes, so controllers cannot be
//     enabled below it). That cgroup is shared by every rljail process and
//     is kept, as runc's cgroupfs driver keeps its parents.
//   - else nowhere: PlacementNone, every limit falls back.
//
// Concurrent rljail processes in one delegated cgroup see each other in
// cgroup.procs, so none of them takes the cgroup over; each goes on down the
// list (root: the top-level cgroup). A program that starts many rljail
// processes from a delegated service should move itself into a leaf and
// pass its delegated cgroup as --cgroup-parent.
//
// # Why not containerd/cgroups
//
// The package writes the few cgroup files itself rather than through
// containerd/cgroups/v3 (v3.1.3 was measured on the hybrid development host):
//
//   - its cgroup2.NewManager writes cgroup.subtree_control in every ancestor
//     from the root down, touching cgroups rljail did not create, and
//     creates missing parents with MkdirAll, where --cgroup-parent must exist;
//   - its cgroup1.New takes hierarchy paths as /sys/fs/cgroup/<name> rather
//     than from mountinfo, creates missing parents, and leaves the
//     hierarchies it did create behind when a later one fails;
//   - its Kill logs through logrus to stderr, which is the payload's stream;
//     its Delete retries with sleeps instead of waiting for "populated 0";
//     its Stat reads every stat file, too much for a 50 ms CPU-time poll;
//   - importing cgroup1 and cgroup2 adds about 7 MB to the static binary and
//     0.7 ms of package initialisation (protobuf stats types, dbus, logrus,
//     cilium/ebpf) to every start, and rljail starts twice per run
//     (supervisor and re-executed init).
//
// containerd/cgroups/v3 has a systemd manager for cgroup v2 too
// (cgroup2.NewSystemd); it would bring the same cgroup2 package, and it
// makes the scope in a slice with its limits on the scope itself, where
// rljail puts them on the jail's own cgroup below it. The scope is asked
// for with godbus and go-systemd's unit properties (package
// cgroup/systemd), which add 0.42 MB to the binary and a 0.013 ms package
// initialisation (godbus's type tables), measured with GODEBUG=inittrace=1.
//
// # Teardown
//
// Destroy kills what is left (cgroup.kill on v2; on v1 SIGKILL to every pid
// in cgroup.procs through a pidfd, until they are empty), waits until the
// cgroup is empty (v2: cgroup.events "populated 0", watched with inotify),
// and removes every directory Create made. Create tears down its own partial
// work when it fails. Destroy may run in a goroutine after the caller has
// its result; the caller waits for it before exiting. What outlives a jail on
// purpose: on v2 the supervisor's leaf and the controllers it enabled in its
// delegated cgroup (both within the cgroup it was given), and the shared
// top-level cgroup.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup/systemd"
)

// Limits are the jail's resource limits. A zero field sets no limit.
type Limits struct {
	// MemoryBytes caps the jail's memory: memory.max with memory.swap.max 0
	// and memory.oom.group 1 (v2), or memory.limit_in_bytes with
	// memory.memsw.limit_in_bytes equal to it (v1), so that swap does not
	// extend it. On v1 the jail's TCP and UDP buffers are limited apart
	// (socketMemory).
	MemoryBytes int64
	// PidsMax caps the number of tasks (processes and threads): pids.max.
	PidsMax int64
	// PidsByRlimit says that, where no pids controller holds PidsMax, the
	// caller holds it itself by RLIMIT_NPROC in the jail's own user
	// namespace (counted per namespace since Linux 5.14: only the jail's
	// tasks count, not the host user's others). The pids limit is then
	// MechanismRlimit, and no fallback: it is the jail's own count.
	PidsByRlimit bool
	// CPUs caps the CPU share, in CPUs: a quota of CPUs*100 ms per 100 ms
	// period (cpu.max on v2, cpu.cfs_quota_us and cpu.cfs_period_us on v1).
	CPUs float64
}

// cpuPeriodUS is the CFS period of the CPU limit, the kernel's default.
const cpuPeriodUS = 100000

// Options say where the jail's cgroup goes and what it limits.
type Options struct {
	// Parent (--cgroup-parent) is a cgroup path relative to the cgroup
	// root, as under /sys/fs/cgroup (v2) or /sys/fs/cgroup/<controller>
	// (v1), such as "/rljail.slice". The jail's cgroup is created below it;
	// it must exist.
	Parent string
	// Name is the name of the jail's cgroup directory; empty means
	// "rljail-<pid>-<n>". An existing cgroup of that name is an error: the
	// jail's cgroup is never shared.
	Name   string
	Limits Limits
	// Announce, when set, is called with the directories of the jail's
	// cgroup (one on v2, one per v1 hierarchy) just before they are
	// created, once for all of them, so that a caller can arrange their
	// removal even if it is killed right after (rljail's cgroup guard).
	// An error stops Create.
	Announce func(dirs ...string) error `json:"-"`
	// Helpers are processes of the caller's own that sit in its cgroup
	// beside it (rljail's init stage, which is also the cgroup guard): they
	// do not keep the caller from taking its own delegated cgroup over, and
	// they move into its leaf cgroup with it. In a systemd scope they are
	// the scope's processes, and the caller stays where it is.
	Helpers []int `json:"-"`
	// Manager (--cgroup-manager) says whether systemd is asked for a
	// transient scope; "" is ManagerAuto.
	Manager Manager
	// ManagerTimeout bounds the whole exchange with systemd; zero is 2 s.
	ManagerTimeout time.Duration
}

// Manager says who makes the cgroup the jail's cgroup goes in.
type Manager string

// The managers.
const (
	// ManagerAuto asks systemd where it runs the cgroup v2 tree and rljail
	// has no cgroup of its own to use (no --cgroup-parent, no delegated
	// cgroup of its own); cgroupfs otherwise.
	ManagerAuto Manager = "auto"
	// ManagerCgroupfs never asks systemd: the placements of issue 4.
	ManagerCgroupfs Manager = "cgroupfs"
	// ManagerSystemd always asks systemd for a transient scope, in the
	// slice --cgroup-parent names (rljail.slice by default); a host where
	// that cannot work is an error.
	ManagerSystemd Manager = "systemd"
)

// ParseManager reads --cgroup-manager.
func ParseManager(s string) (Manager, error) {
	switch m := Manager(s); m {
	case "", ManagerAuto:
		return ManagerAuto, nil
	case ManagerCgroupfs, ManagerSystemd:
		return m, nil
	}
	return "", fmt.Errorf("--cgroup-manager %q is not auto, cgroupfs or systemd", s)
}

// Placement says where the jail's cgroup went.
type Placement string

// The placements, in the order Create tries them.
const (
	PlacementParentV2 Placement = "cgroup2-parent"   // below --cgroup-parent
	PlacementParentV1 Placement = "cgroup1-parent"   // below --cgroup-parent, in each v1 hierarchy
	PlacementOwn      Placement = "cgroup2-own"      // below the supervisor's own (delegated) cgroup
	PlacementV1       Placement = "cgroup1"          // below the supervisor's own v1 cgroups
	PlacementSystemd  Placement = "systemd-scope"    // in a transient scope of systemd's
	PlacementTopLevel Placement = "cgroup2-toplevel" // root: below /sys/fs/cgroup/rljail
	PlacementNone     Placement = "none"             // no cgroup: the limits fall back to rlimits
)

// Mechanism says what enforces a limit.
type Mechanism string

// The mechanisms.
const (
	MechanismCgroup2 Mechanism = "cgroup2"
	MechanismCgroup1 Mechanism = "cgroup1"
	MechanismRlimit  Mechanism = "rlimit" // the caller's rlimit: RLIMIT_AS for memory, RLIMIT_CPU for CPU time
	MechanismNone    Mechanism = "none"   // not enforced (or no limit asked)
)

// The keys of Mechanisms: the limits of Limits, and the CPU-time limit that
// the supervisor enforces from CPUUsage.
const (
	LimitMemory  = "memory"
	LimitPids    = "pids"
	LimitCPU     = "cpu"
	LimitCPUTime = "cpu_time"
)

// destroyTimeout bounds how long Kill and Destroy wait for the cgroup to
// empty.
const destroyTimeout = 5 * time.Second

// ErrNoAccounting is returned by CPUUsage when no cgroup measures the jail's
// CPU time.
var ErrNoAccounting = errors.New("cgroup: the jail's CPU time is not measured by a cgroup")

// Cgroup is one jail's cgroup. Its methods are safe for concurrent use;
// Destroy comes last.
type Cgroup struct {
	placement  Placement
	mechanisms map[string]Mechanism
	fallbacks  []string

	// scopeUnit is the systemd scope the jail's cgroup is in, if any.
	scopeUnit string
	// scopeTook is how long systemd took to start it.
	scopeTook time.Duration

	// cgroup2
	v2Leaf  string // absolute directory of the jail's cgroup
	v2Path  string // the same as /proc/<pid>/cgroup shows it
	cloneFD int    // O_PATH fd of v2Leaf, -1 when none

	// cgroup1: controller -> directory and path; co-mounted controllers
	// share a directory.
	v1Dirs  map[string]string
	v1Paths map[string]string

	// created are the directories Create made, in order; Destroy removes
	// them in reverse.
	created []string

	announce func(dirs ...string) error
	// swept is closed when the sweep of stale cgroups (sweep) ended.
	swept chan struct{}

	mu        sync.Mutex
	destroyed bool

	// The CPU accounting file (cpu.stat, cpuacct.usage), kept open
	// between readings: a session reads it twice a cell, where an open,
	// two reads and a close cost four system calls and one pread does.
	// Destroy closes it; a reading after that opens the file afresh.
	cpuMu     sync.Mutex
	cpuFD     int
	cpuOpen   bool
	cpuClosed bool
	cpuBuf    []byte
}

// nameSeq numbers the default names.
var nameSeq atomic.Int64

// Create makes the jail's cgroup and applies the limits. When no cgroup can
// hold a limit, Create still succeeds: Mechanisms and Fallbacks say what the
// caller must make up for. An error means rljail itself failed (a bad
// option, --cgroup-parent missing, a limit the kernel refused); nothing is
// left behind then.
func Create(opts Options) (*Cgroup, error) {
	return create(opts, layout{})
}

func create(opts Options, lay layout) (*Cgroup, error) {
	parent, err := opts.check()
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = fmt.Sprintf("rljail-%d-%d", os.Getpid(), nameSeq.Add(1))
	}
	h, err := probe(parent, opts.Manager, lay)
	if err != nil {
		return nil, err
	}
	h.helpers, h.managerTimeout = opts.Helpers, opts.ManagerTimeout
	h.systemd = probeSystemd(h, parent, lay)
	p, err := decide(h, parent)
	if err != nil {
		return nil, err
	}
	c := &Cgroup{cloneFD: -1, announce: opts.Announce}
	var scopeDir string
	if p.placement == PlacementSystemd {
		scopeDir, err = c.startScope(h, p, name)
		if err != nil && h.manager == ManagerSystemd {
			return nil, err
		}
		if err != nil {
			// auto: the placements without systemd, announced.
			h.systemd = systemdHost{failed: err.Error()}
			if p, err = decide(h, parent); err != nil {
				return nil, err
			}
		}
	}
	c.placement = p.placement
	var (
		mech      = MechanismNone
		accounted bool
		extra     []string
	)
	if p.outside != "" {
		extra = append(extra, p.outside)
	}
	switch {
	case p.placement == PlacementNone:
	case p.placement == PlacementSystemd:
		mech = MechanismCgroup2
		var more []string
		more, err = c.setupScope(h, &p, scopeDir, name, opts.Limits)
		extra = append(extra, more...)
		accounted = true
	case h.unified:
		mech = MechanismCgroup2
		var more []string
		more, err = c.setupV2(h, &p, name, opts.Limits)
		extra = append(extra, more...)
		accounted = true // cpu.stat is in every v2 cgroup
	default:
		mech = MechanismCgroup1
		var more []string
		more, err = c.setupV1(&p, name, opts.Limits)
		extra = append(extra, more...)
		_, accounted = c.v1Dirs[accountingController]
	}
	if err != nil {
		if derr := c.Destroy(); derr != nil {
			err = fmt.Errorf("%w; teardown: %v", err, derr)
		}
		return nil, err
	}
	c.mechanisms, c.fallbacks = describe(opts.Limits, mech, p.use, p.why, accounted)
	c.fallbacks = append(c.fallbacks, extra...)
	return c, nil
}

// check validates the options and returns the cleaned parent path.
func (o Options) check() (string, error) {
	l := o.Limits
	switch {
	case l.MemoryBytes < 0:
		return "", fmt.Errorf("cgroup: memory limit %d is negative", l.MemoryBytes)
	case l.PidsMax < 0:
		return "", fmt.Errorf("cgroup: pids limit %d is negative", l.PidsMax)
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return "", fmt.Errorf("cgroup: cpus limit %v is not a non-negative number", l.CPUs)
	}
	if _, err := ParseManager(string(o.Manager)); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	if n := o.Name; n != "" && (n == "." || n == ".." || n == supervisorLeaf || n == guardLeaf ||
		strings.ContainsAny(n, "/\x00\n") || len(n) > 255) {
		return "", fmt.Errorf("cgroup: %q is not a cgroup name", n)
	}
	if o.Parent == "" {
		return "", nil
	}
	for _, elem := range strings.Split(o.Parent, "/") {
		if elem == ".." {
			return "", fmt.Errorf("cgroup: --cgroup-parent %s: a \"..\" element is not allowed", o.Parent)
		}
	}
	return filepath.Join("/", o.Parent), nil
}

// Placement says where the jail's cgroup is.
func (c *Cgroup) Placement() Placement { return c.placement }

// Unit is the systemd scope the jail's cgroup is in (PlacementSystemd),
// and how long systemd took to start it; "" elsewhere.
func (c *Cgroup) Unit() (string, time.Duration) { return c.scopeUnit, c.scopeTook }

// Path is the jail's cgroup v2 path as /proc/<pid>/cgroup shows it, ""
// without a v2 cgroup.
func (c *Cgroup) Path() string { return c.v2Path }

// Mechanisms says, for each of LimitMemory, LimitPids, LimitCPU and
// LimitCPUTime, what enforces it: a cgroup, an rlimit the caller must set
// (RLIMIT_AS for memory, RLIMIT_CPU for CPU time), or nothing. A limit that
// was not asked for is MechanismNone.
func (c *Cgroup) Mechanisms() map[string]Mechanism {
	m := make(map[string]Mechanism, len(c.mechanisms))
	for k, v := range c.mechanisms {
		m[k] = v
	}
	return m
}

// Fallbacks words, one line each, every limit that is weaker than asked and
// why, for stderr and the result report.
func (c *Cgroup) Fallbacks() []string { return append([]string(nil), c.fallbacks...) }

// Dirs are the cgroup directories of the jail (one on v2, one per v1
// hierarchy), for reports and tests.
func (c *Cgroup) Dirs() []string { return append([]string(nil), c.created...) }

// CloneFD returns an O_PATH directory fd of the jail's v2 cgroup for
// CLONE_INTO_CGROUP (clone3's cgroup field), so that the jail's init is
// born inside its limits. It is false without a v2 cgroup; then the init
// joins its cgroups through TaskFiles (or AddProc places a process by pid)
// before it is released. The fd belongs to the Cgroup and is closed by
// Destroy.
func (c *Cgroup) CloneFD() (int, bool) {
	if c.cloneFD < 0 {
		return -1, false
	}
	return c.cloneFD, true
}

// AddProc moves process pid into the jail's cgroup: into each v1
// hierarchy's cgroup, or into the v2 cgroup (a no-op for a process born
// there through CloneFD). Without a cgroup it does nothing.
func (c *Cgroup) AddProc(pid int) error {
	dirs := c.created
	if c.v2Leaf != "" {
		dirs = []string{c.v2Leaf}
	}
	for _, dir := range dirs {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add process: %w", err)
		}
	}
	return nil
}

// Unified reports whether this host mounts cgroup v2 alone at
// /sys/fs/cgroup, where Create makes a v2 cgroup (or none) whose CloneFD a
// process can be born into; elsewhere a process joins its cgroups after it
// started (TaskFiles). One statfs: callers ask before anything else.
func Unified() bool {
	var st unix.Statfs_t
	return unix.Statfs(cgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// TaskFiles opens, for writing, the files through which a process that
// writes "0" to each joins the jail's cgroups; nil without a cgroup. On v1
// they are the "tasks" file of each hierarchy's cgroup: a single-threaded
// process that writes "0" there moves itself, and the kernel then skips
// the global cgroup_threadgroup_rwsem it takes to move a process by pid
// (cgroup_procs_write_start: "If we migrate a single thread ... we can
// skip the global lock"), and so the RCU grace period, several ms, that
// taking it for writing costs. The permission to move was checked at open:
// v1 judges a write by the opener's credentials. On v2 (a process not born
// there through CloneFD) it is the cgroup's cgroup.procs. The caller
// closes them.
func (c *Cgroup) TaskFiles() ([]*os.File, error) {
	if c.v2Leaf != "" {
		f, err := openWriter(filepath.Join(c.v2Leaf, "cgroup.procs"))
		if err != nil {
			return nil, fmt.Errorf("cgroup: open %s for the jail to join: %w", c.v2Leaf, err)
		}
		return []*os.File{f}, nil
	}
	var dirs []string
	for _, dir := range c.v1Dirs {
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	slices.Sort(dirs)
	var out []*os.File
	for _, dir := range dirs {
		f, err := openWriter(filepath.Join(dir, "tasks"))
		if err != nil {
			for _, g := range out {
				g.Close()
			}
			return nil, fmt.Errorf("cgroup: open %s for the jail to join: %w", dir, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// Stats is the jail's resource usage, read from its cgroup.
type Stats struct {
	CPUUserMS       int64
	CPUSystemMS     int64
	MemoryPeakBytes int64
	PidsPeak        int64 // the most tasks at once
	OOMKills        int64 // processes killed by the OOM killer
	PidsMaxHits     int64 // forks refused by the pids limit
	// Missing names each field this host cannot measure, and why; the field
	// is 0 then.
	Missing []string
}

// Stats reads the jail's resource usage. Call it before Destroy.
func (c *Cgroup) Stats() (Stats, error) {
	switch {
	case c.v2Leaf != "":
		return statsV2(c.v2Leaf)
	case len(c.v1Dirs) > 0:
		return statsV1(c.v1Dirs)
	}
	return Stats{Missing: []string{"all: the jail has no cgroup"}}, nil
}

// MeasuresCPU reports whether the jail's cgroup measures its CPU time, as
// CPUUsage does where it returns no ErrNoAccounting; it reads nothing.
func (c *Cgroup) MeasuresCPU() bool {
	return c.v2Leaf != "" || c.v1Dirs[accountingController] != ""
}

// CPUUsage returns the CPU time the jail has used so far, user and system,
// from one small file: cheap enough for the supervisor's --cpu-time poll.
func (c *Cgroup) CPUUsage() (time.Duration, error) {
	switch {
	case c.v2Leaf != "":
		p := filepath.Join(c.v2Leaf, "cpu.stat")
		b, err := c.readCPUFile(p)
		if err != nil {
			return 0, fmt.Errorf("cgroup: %w", err)
		}
		kv, err := parseKV(string(b), p)
		if err != nil {
			return 0, fmt.Errorf("cgroup: %w", err)
		}
		return time.Duration(kv["usage_usec"]) * time.Microsecond, nil
	case c.v1Dirs[accountingController] != "":
		p := filepath.Join(c.v1Dirs[accountingController], "cpuacct.usage")
		b, err := c.readCPUFile(p)
		if err != nil {
			return 0, fmt.Errorf("cgroup: %w", err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cgroup: %s: %w", p, err)
		}
		return time.Duration(ns), nil
	}
	return 0, ErrNoAccounting
}

// readCPUFile reads the CPU accounting file at path (always the same one
// for c) through the descriptor c keeps open, with pread from offset 0
// (the kernel makes a cgroup file's text anew at each read from 0).
func (c *Cgroup) readCPUFile(path string) ([]byte, error) {
	c.cpuMu.Lock()
	defer c.cpuMu.Unlock()
	if c.cpuClosed {
		return readFile(path)
	}
	if !c.cpuOpen {
		fd, err := openFile(path, unix.O_RDONLY)
		if err != nil {
			return nil, err
		}
		c.cpuFD, c.cpuOpen = fd, true
	}
	if c.cpuBuf == nil {
		c.cpuBuf = make([]byte, 0, 512)
	}
	b := c.cpuBuf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Pread(c.cpuFD, b[len(b):cap(b)], int64(len(b)))
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			c.cpuBuf = b
			return append([]byte(nil), b...), nil
		default:
			b = b[:len(b)+n]
		}
	}
}

// closeCPUFile closes the CPU accounting file's descriptor (Destroy).
func (c *Cgroup) closeCPUFile() {
	c.cpuMu.Lock()
	defer c.cpuMu.Unlock()
	if c.cpuOpen {
		unix.Close(c.cpuFD)
		c.cpuOpen = false
	}
	c.cpuClosed = true
}

// Kill sends SIGKILL to every process in the jail's cgroup: through
// cgroup.kill on v2 (the kernel also kills what forks meanwhile), or on v1
// to each pid in cgroup.procs until they are empty. Without a cgroup it does
// nothing; the caller kills the jail's init, PID 1 of its PID namespace,
// which takes every other jailed process with it.
func (c *Cgroup) Kill() error {
	switch {
	case c.v2Leaf != "":
		return killV2(c.v2Leaf, c.v2Path)
	case len(c.v1Dirs) > 0:
		return killV1(c.v1Dirs, c.v1Paths, time.Now().Add(destroyTimeout))
	}
	return nil
}

// Destroy kills every process left in the jail's cgroup, waits until it is
// empty (at most 5 s) and removes the directories Create made. It may run
// after an error anywhere, and more than once: a Destroy that failed may be
// retried, one that succeeded makes later calls no-ops.
func (c *Cgroup) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.swept != nil {
		<-c.swept // the sweep started in setupV1 or setupV2
	}
	if c.destroyed {
		return nil
	}
	c.releaseMemory()
	// Usually nothing is left by now: the jail's init was reaped, and
	// nothing outlives the init of a PID namespace. Removing the
	// directories at once spares reading each one's cgroup.procs (on v2,
	// writing cgroup.kill and watching cgroup.events). A refusal means
	// something is left, or the kernel is still finishing an exit: the
	// kill and the retries below take over.
	c.closeCPUFile()
	if c.removeEmpty() {
		c.closeCloneFD()
		c.destroyed = true
		return nil
	}
	deadline := time.Now().Add(destroyTimeout)
	var errs []error
	switch {
	case c.v2Leaf != "" && exists(c.v2Leaf):
		if err := killV2(c.v2Leaf, c.v2Path); err != nil {
			errs = append(errs, err)
		}
		if err := waitEmptyV2(c.v2Leaf, c.v2Path, deadline); err != nil {
			errs = append(errs, err)
		}
	case len(c.v1Dirs) > 0:
		if err := killV1(c.v1Dirs, c.v1Paths, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	c.releaseMemory() // now that nothing is left in the cgroup
	for i := len(c.created) - 1; i >= 0; i-- {
		if err := rmdirCgroup(c.created[i], deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.closeCloneFD()
	c.destroyed = true
	return nil
}

// removeEmpty removes the directories Create made, the deepest first,
// while the kernel allows it; false at the first refusal (the rest of
// Destroy takes what is removed already as done).
func (c *Cgroup) removeEmpty() bool {
	for i := len(c.created) - 1; i >= 0; i-- {
		if err := unix.Rmdir(c.created[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return false
		}
	}
	return true
}

func (c *Cgroup) closeCloneFD() {
	if c.cloneFD >= 0 {
		unix.Close(c.cloneFD)
		c.cloneFD = -1
	}
}

// rmdirCgroup removes a cgroup directory. The kernel may refuse (EBUSY) for
// a moment after the last process left; that is retried until the deadline.
func rmdirCgroup(dir string, deadline time.Time) error {
	delay := time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// Preview says what Create would do on this host for a run with these
// options, without creating anything: where the jail's cgroup would go,
// what would enforce each limit, and the fallback lines. rljail check
// reports it.
func Preview(opts Options) (Placement, map[string]Mechanism, []string, error) {
	parent, err := opts.check()
	if err != nil {
		return "", nil, nil, err
	}
	h, err := probe(parent, opts.Manager, layout{})
	if err != nil {
		return "", nil, nil, err
	}
	h.systemd = probeSystemd(h, parent, layout{})
	p, err := decide(h, parent)
	if err != nil {
		return "", nil, nil, err
	}
	if p.placement == PlacementSystemd {
		// Whether the manager answers decides it, as at a run's start.
		if _, _, err := systemd.Ping(p.scope.user, managerTimeout(opts.ManagerTimeout)); err != nil {
			if h.manager == ManagerSystemd {
				return "", nil, nil, fmt.Errorf("cgroup: --cgroup-manager systemd: %w", err)
			}
			h.systemd = systemdHost{failed: err.Error()}
			if p, err = decide(h, parent); err != nil {
				return "", nil, nil, err
			}
		}
	}
	mech, accounted := MechanismNone, false
	switch {
	case p.placement == PlacementNone:
	case h.unified: // a systemd scope too: what it delegates shows once it exists
		mech, accounted = MechanismCgroup2, true
	default:
		mech, accounted = MechanismCgroup1, slices.Contains(p.use, accountingController)
	}
	m, lines := describe(opts.Limits, mech, p.use, p.why, accounted)
	if p.outside != "" {
		lines = append([]string{p.outside}, lines...)
	}
	return p.placement, m, lines, nil
}

// mkdirJail creates one directory of the jail's cgroup, announced first.
func (c *Cgroup) mkdirJail(dirs ...string) error {
	if c.announce != nil {
		if err := c.announce(dirs...); err != nil {
			return fmt.Errorf("cgroup: create %s: %w", strings.Join(dirs, ", "), err)
		}
	}
	for _, dir := range dirs {
		if err := mkdirCgroup(dir, false); err != nil {
			return fmt.Errorf("cgroup: create %s: %w", dir, err)
		}
		c.created = append(c.created, dir)
	}
	return nil
}
