package jail

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
)

// Mechanisms of the limits that are not cgroup controllers, as the report
// names them.
const (
	mechanismTimer  = "timer"  // the supervisor's kill timer
	mechanismTmpfs  = "tmpfs"  // the size of a tmpfs
	mechanismPump   = "pump"   // the supervisor's output pump
	mechanismRlimit = "rlimit" // a resource limit of the payload
)

// Limit is one limit in the report: its value and what enforces it
// (cgroup2, cgroup1, rlimit, timer, tmpfs, pump, or none).
type Limit struct {
	Value     float64 `json:"value"`
	Mechanism string  `json:"mechanism"`
}

// jailLimits is the limit machinery of one run: its cgroup (or none), the
// rlimits the payload gets, and the CPU-time watcher.
type jailLimits struct {
	cg        *cgroup.Cgroup
	timeout   time.Duration
	nice      int
	res       Resources
	rlimits   []rlimit
	env       []string // entries for the payload's environment (see setupLimits)
	warnings  []string
	cpuKilled atomic.Bool
	// base and cpuBase are the cgroup's counts when the request of a
	// payload started ahead arrived: not the request's (Prepared.Start).
	base    cgroup.Stats
	cpuBase time.Duration
}

// setupLimits creates the jail's cgroup and decides every mechanism. Each
// limit weaker than asked is one warning; with Resources.Strict any of
// them is an error (and nothing is left behind).
func setupLimits(spec *Spec, runID string, announce func(dirs ...string) error, helpers []int) (*jailLimits, error) {
	r := spec.Resources
	cg, err := cgroup.Create(cgroup.Options{
		Parent:   r.CgroupParent,
		Name:     "rljail-" + runID,
		Limits:   cgroup.Limits{MemoryBytes: r.MemoryBytes, PidsMax: r.PidsMax, CPUs: r.CPUs, PidsByRlimit: cgroup.NprocPerUserNS()},
		Announce: announce,
		Helpers:  helpers,
		Manager:  r.CgroupManager,
		// A zero timeout is the package's own.
		ManagerTimeout: r.CgroupManagerTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("set up the jail's cgroup: %w", err)
	}
	l := &jailLimits{cg: cg, res: r, timeout: spec.Timeout, warnings: cg.Fallbacks()}
	if r.Strict && len(l.warnings) > 0 {
		_ = cg.Destroy()
		return nil, fmt.Errorf("--strict-limits: %s", strings.Join(l.warnings, "; "))
	}
	l.decide(spec)
	return l, nil
}

// decide sets the payload's rlimits, nice and environment entries for
// spec's limits on the mechanisms of l's cgroup: at the cgroup's
// creation, or again for a jail made ahead of its payload (Prepared.Start).
func (l *jailLimits) decide(spec *Spec) {
	r := spec.Resources
	l.res, l.timeout = r, spec.Timeout
	l.nice, l.env = 0, nil
	cg := l.cg
	mech := cg.Mechanisms()
	// Always: no core dumps, the file size and descriptor limits.
	// RLIMIT_CORE is 1, not 0: the kernel ignores a limit of 0 when
	// core_pattern pipes to a helper (which runs as root on the host), but
	// takes 1 as "never call the helper", and a file dump smaller than a
	// page is not written either (fs/coredump.c).
	l.rlimits = []rlimit{
		{Resource: unix.RLIMIT_CORE, Soft: 1, Hard: 1},
		{Resource: unix.RLIMIT_FSIZE, Soft: uint64(r.FileSize), Hard: uint64(r.FileSize)},
		{Resource: unix.RLIMIT_NOFILE, Soft: uint64(r.NoFile), Hard: uint64(r.NoFile)},
	}
	// RLIMIT_CPU is the backstop of the CPU-time limit (and the only
	// mechanism without cgroup accounting): SIGXCPU at the soft limit,
	// SIGKILL a second later. It is per process, so where the cgroup
	// measures the jail's whole CPU time the supervisor's watcher is the
	// real limit, and the backstop sits a second above it so as not to
	// race it.
	secs := uint64(math.Ceil(r.CPUTime.Seconds()))
	if m := cg.Mechanisms()[cgroup.LimitCPUTime]; m == cgroup.MechanismCgroup1 || m == cgroup.MechanismCgroup2 {
		secs++
	}
	l.rlimits = append(l.rlimits, rlimit{Resource: unix.RLIMIT_CPU, Soft: secs, Hard: secs + 1})
	// Queued signals (kill with a real-time signal, sigqueue, timer_create)
	// count against the host user who owns the jail's user namespace, root
	// as root: a payload that queued 100,000 of them made root's
	// sigqueue and timer_create fail on the whole host. init applies this
	// one to itself too (signals sent to PID 1 stay queued).
	l.rlimits = append(l.rlimits, rlimit{Resource: unix.RLIMIT_SIGPENDING, Soft: sigPendingMax, Hard: sigPendingMax})
	// No pids cgroup: RLIMIT_NPROC in the jail's user namespace holds the
	// same count (the init is the jail's user too, as it counts in
	// pids.max): a fork bomb run rootless on a cgroup v1 host was stopped
	// only by the kill timer.
	if mech[cgroup.LimitPids] == cgroup.MechanismRlimit {
		l.rlimits = append(l.rlimits, rlimit{Resource: unix.RLIMIT_NPROC, Soft: uint64(r.PidsMax), Hard: uint64(r.PidsMax)})
	}
	// No CPU cgroup: the payload runs at a lower priority than the
	// supervisor, whose kill timer must win the CPU (fallbackLine says so).
	if mech[cgroup.LimitCPU] == cgroup.MechanismNone {
		l.nice = 10
	}
	if cgroup.Mechanism(mech[cgroup.LimitMemory]) == cgroup.MechanismRlimit {
		l.rlimits = append(l.rlimits, rlimit{Resource: unix.RLIMIT_AS, Soft: uint64(r.MemoryBytes), Hard: uint64(r.MemoryBytes)})
		// RLIMIT_AS counts address space, not memory: glibc reserves 64
		// MiB of it for each malloc arena, and makes one for each thread
		// up to eight per CPU, so that under 512m a Python process could
		// start some 14 threads. Two arenas leave room for forty (each
		// thread's stack reserves 8 MiB more). The caller's -e wins.
		if !envHas(spec.Env, "MALLOC_ARENA_MAX") {
			l.env = append(l.env, "MALLOC_ARENA_MAX=2")
		}
	}
}

// fallbackLine names, in one line, every limit weaker than asked and what
// enforces it instead; "" when every limit has its cgroup.
func (l *jailLimits) fallbackLine() string {
	if len(l.warnings) == 0 {
		return ""
	}
	mech := l.cg.Mechanisms()
	how := func(m cgroup.Mechanism, rlimit string) string {
		switch m {
		case cgroup.MechanismRlimit:
			return "by " + rlimit + " per process"
		case cgroup.MechanismNone:
			return "not enforced"
		}
		return ""
	}
	var parts []string
	for _, k := range []struct{ key, name, rlimit string }{
		{cgroup.LimitMemory, "memory", "RLIMIT_AS"},
		{cgroup.LimitPids, "pids", ""},
		{cgroup.LimitCPU, "cpus", ""},
		{cgroup.LimitCPUTime, "cpu-time", "RLIMIT_CPU"},
	} {
		m := mech[k.key]
		if k.key == cgroup.LimitPids && m == cgroup.MechanismRlimit {
			continue // the jail's own count (cgroup.NprocPerUserNS): not weaker
		}
		if k.key == cgroup.LimitCPUTime && (m == "" || m == cgroup.MechanismNone) {
			m = cgroup.MechanismRlimit
		}
		if h := how(m, k.rlimit); h != "" {
			if k.key == cgroup.LimitCPU && l.nice > 0 {
				h += fmt.Sprintf(" (the payload runs at nice %d)", l.nice)
			}
			parts = append(parts, k.name+" "+h)
		}
	}
	if len(parts) == 0 {
		return strings.Join(l.warnings, "; ")
	}
	return "limits weaker than asked, no cgroup this user may write: " + strings.Join(parts, ", ") +
		" (the result report and rljail check say why; --strict-limits refuses to run so)"
}

// report fills the limits part of the result.
func (l *jailLimits) report(lim *Limits) {
	mech := l.cg.Mechanisms()
	lim.Memory = Limit{float64(l.res.MemoryBytes), string(mech[cgroup.LimitMemory])}
	lim.Pids = Limit{float64(l.res.PidsMax), string(mech[cgroup.LimitPids])}
	lim.CPUs = Limit{l.res.CPUs, string(mech[cgroup.LimitCPU])}
	cpuTime := string(mech[cgroup.LimitCPUTime])
	if cpuTime == "" || cpuTime == string(cgroup.MechanismNone) {
		cpuTime = mechanismRlimit
	}
	lim.CPUTimeMS = Limit{float64(l.res.CPUTime.Milliseconds()), cpuTime}
	lim.Output = Limit{float64(l.res.OutputBytes), mechanismPump}
	lim.FileSize = Limit{float64(l.res.FileSize), mechanismRlimit}
	lim.NoFile = Limit{float64(l.res.NoFile), mechanismRlimit}
	lim.Placement = string(l.cg.Placement())
	if unit, _ := l.cg.Unit(); unit != "" {
		lim.SystemdScope, lim.CgroupPath = unit, l.cg.Path()
	}
}

// watchCPU polls the jail's CPU time and kills the jail when it passes the
// limit, until stop is closed. Without cgroup accounting RLIMIT_CPU does it.
func (l *jailLimits) watchCPU(kill func(), stop <-chan struct{}) {
	if _, err := l.cg.CPUUsage(); errors.Is(err, cgroup.ErrNoAccounting) {
		return
	}
	// Where a CPU quota holds the jail to CPUs, its CPU time cannot pass
	// timeout x CPUs before the timer fires: the timer is the limit then
	// (by default --cpu-time is the timeout and --cpus 1), and the watcher
	// would only race it to the same moment.
	if m := l.cg.Mechanisms()[cgroup.LimitCPU]; (m == cgroup.MechanismCgroup1 || m == cgroup.MechanismCgroup2) &&
		float64(l.res.CPUTime) >= float64(l.timeout)*l.res.CPUs {
		return
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			used, err := l.cg.CPUUsage()
			if err == nil && used-l.cpuBase >= l.res.CPUTime {
				l.cpuKilled.Store(true)
				kill()
				return
			}
		}
	}
}

// jailStats are the cgroup's statistics at the payload's end.
type jailStats struct {
	st  cgroup.Stats
	err error
}

// stats reads the cgroup's statistics, once the payload ended.
func (l *jailLimits) stats() *jailStats {
	st, err := l.cg.Stats()
	return &jailStats{st, err}
}

// collect puts the cgroup's statistics, read when the payload ended, into
// the result and decides whether a limit ended the run; it reports true
// when one did. It runs after the jail is gone and before the cgroup is
// removed. vanished: init died without a report.
func (l *jailLimits) collect(res *Result, usage *syscall.Rusage, vanished bool, stats *jailStats) bool {
	st, err := stats.st, stats.err
	if err == nil {
		res.CPUUserMS, res.CPUSystemMS = max(st.CPUUserMS-l.base.CPUUserMS, 0), max(st.CPUSystemMS-l.base.CPUSystemMS, 0)
		res.MemoryPeakBytes, res.PidsPeak, res.OOMKills = st.MemoryPeakBytes, st.PidsPeak, st.OOMKills
	}
	// Without a cgroup the init's rusage covers every process it reaped,
	// which is every process of the jail.
	// (Not where the cgroup counted a payload started ahead: the rusage
	// holds that payload's own start.)
	if res.CPUUserMS+res.CPUSystemMS == 0 && usage != nil && l.base.CPUUserMS+l.base.CPUSystemMS == 0 {
		res.CPUUserMS = usage.Utime.Nano() / 1e6
		res.CPUSystemMS = usage.Stime.Nano() / 1e6
	}
	if res.MemoryPeakBytes == 0 && usage != nil {
		res.MemoryPeakBytes = usage.Maxrss * 1024
	}
	killed := res.Status == StatusSignaled && res.Signal == int(unix.SIGKILL)
	switch {
	case res.Status == StatusTimeout || res.Status == StatusSeccompViolation:
		return false
	case st.OOMKills > 0 && (killed || vanished):
		res.Status = StatusMemoryLimit
		res.ExitCode = 128 + int(unix.SIGKILL)
		res.Signal = int(unix.SIGKILL)
		res.SignalName = unix.SignalName(unix.SIGKILL)
		res.Error = "killed at the memory limit of " + FormatBytes(l.res.MemoryBytes)
		return true
	case l.cpuKilled.Load() || (res.Status == StatusSignaled && res.Signal == int(unix.SIGXCPU) && l.usedCPUTime(res)):
		res.Status = StatusCPULimit
		res.Error = fmt.Sprintf("killed at the CPU-time limit of %s", l.res.CPUTime)
		if l.cpuKilled.Load() {
			res.ExitCode = 128 + int(unix.SIGKILL)
			res.Signal = int(unix.SIGKILL)
			res.SignalName = unix.SignalName(unix.SIGKILL)
		}
		return true
	case res.Status == StatusSetupError:
		return false
	case st.PidsMaxHits > 0:
		res.Status = StatusPidsLimit
		res.Error = fmt.Sprintf("%d forks refused at the pids limit of %d", st.PidsMaxHits, l.res.PidsMax)
		return true
	}
	return false
}

// cpuTimeSlack is how far below the CPU-time limit the measured CPU time
// of a run that died of SIGXCPU may be and still count as the limit's
// work: a tenth of the limit, at least 50 ms. RLIMIT_CPU fires on the
// process's CPU time sampled at the scheduler's ticks, the rusage is the
// exact runtime: rootless, a busy loop was sent SIGXCPU at 1 s of ticks
// with a rusage of 977 ms.
func cpuTimeSlack(limit time.Duration) time.Duration {
	return max(50*time.Millisecond, limit/10)
}

// measuresCPU reports whether a cgroup measures the jail's CPU time; where
// none does, the CPU figures are the init's rusage, of what it reaped.
func (l *jailLimits) measuresCPU() bool { return l.cg.MeasuresCPU() }

// usedCPUTime reports whether the jail's measured CPU time (its cgroup's,
// or the rusage of every process init reaped) reached the CPU-time limit.
// A SIGXCPU alone says nothing: a payload can send it to itself, or lower
// its own RLIMIT_CPU, and was reported at the limit after a few
// milliseconds. RLIMIT_CPU, the only source of a SIGXCPU that is the
// jail's limit, sits at or above the limit (setupLimits), and its signal
// comes when the process alone has used that much.
func (l *jailLimits) usedCPUTime(res *Result) bool {
	used := time.Duration(res.CPUUserMS+res.CPUSystemMS) * time.Millisecond
	return l.res.CPUTime > 0 && used+cpuTimeSlack(l.res.CPUTime) >= l.res.CPUTime
}

// sigPendingMax is the jail's RLIMIT_SIGPENDING: plenty for a program
// (Python queues none of its own), and 64 jails at once hold at most 16,384
// of their host user's, whose own limit is some 90,000 on a machine of
// 24 GiB.
const sigPendingMax = 256

// envHas reports whether env (KEY=VALUE entries) sets key.
func envHas(env []string, key string) bool {
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k == key {
			return true
		}
	}
	return false
}
