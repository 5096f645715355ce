package jail

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"github.com/rljail/rljail/cgroup"
	"golang.org/x/sys/unix"
)

// takePrestarted returns the init stage's first step that the binary's
// entry started (stage/prestart.c) before the Go runtime, if there is one,
// as a jailRun for a Run by this process. One started for another user or
// cgroup layout than Run would use (which the entry and Go decide alike,
// so this should not happen) is ended, and nil returned.
func takePrestarted(root, unified bool) *jailRun {
	rec := (*prestartRec)(prestartRecord())
	if rec.ok == 0 {
		return nil
	}
	// Only a binary started from its entry can get here, and the entry
	// made the record writable; a test binary's record is read-only zero.
	p := *rec
	rec.ok = 0
	// Non-blocking, so that os.File waits in Go's poller (see
	// awaitExit); each end is its own open file, shared with no one.
	file := func(fd int32, name string) *os.File {
		_ = unix.SetNonblock(int(fd), true)
		return os.NewFile(uintptr(fd), name)
	}
	ends := stage1Ends{
		ctl:     file(p.ctl, "control"),
		statusR: file(p.statusR, "status"),
		stdinW:  file(p.stdinW, "stdin"),
		stdoutR: file(p.stdoutR, "stdout"),
		stderrR: file(p.stderrR, "stderr"),
		notifyR: file(p.notifyR, "notify"),
		guardW:  file(p.guardW, "guard"),
	}
	// The first step waits for a cgroup as it decided (p.unified).
	j := newJailRun(ends, p.unified != 0, p.root != 0, int(p.pid), int(p.pidfd))
	j.merged = p.merged != 0
	uid, gid, _ := jailHostIDs(root)
	if (p.root != 0) != root || (p.unified != 0) != unified || int(p.uid) != uid || int(p.gid) != gid {
		j.drop()
		return nil
	}
	return j
}

// DiscardPrestarted ends the init stage's first step that the binary's
// entry started for a command line that asked for a run, when the CLI
// does not run one after all; nothing of it is left when it returns.
func DiscardPrestarted() {
	if j := takePrestarted(os.Geteuid() == 0, cgroup.Unified()); j != nil {
		j.drop()
	}
}

// prestartRec is struct rljail_prestart (stage/prestart.h), field for
// field.
type prestartRec struct {
	ok, pid, pidfd, uid, gid, root, unified                 int32
	ctl, statusR, stdinW, stdoutR, stderrR, notifyR, guardW int32
	callerSlack                                             int64
	oneProc                                                 int32
	pinned                                                  int32
	callerCPUs                                              [128]byte // RLJAIL_CPUSET_BYTES
	startLock                                               int32
	looked, resultFDs                                       int32
	resultFD, resultFDFlags                                 [4]int32 // RLJAIL_RESULT_FDS
	merged                                                  int32
}

// CallerFD says whether descriptor fd, named by --result-fd, was open when
// the binary started, before rljail made any descriptor of its own, and
// with which status flags (fcntl F_GETFL). A descriptor the caller did not
// pass may since have been taken by one of rljail's own (the jail's pipes
// are made at the entry), which a check now would take for the caller's.
// known is false when the entry did not look: a test binary, which the
// caller checks as it can. looked is true when the entry looked but did
// not find fd among --result-fd's values (a number not in decimal).
func CallerFD(fd int) (flags int, open, known, looked bool) {
	rec := (*prestartRec)(prestartRecord())
	if rec.looked == 0 {
		return 0, false, false, false
	}
	for i := 0; i < int(rec.resultFDs) && i < len(rec.resultFD); i++ {
		if int(rec.resultFD[i]) == fd {
			f := int(rec.resultFDFlags[i])
			return f, f >= 0, true, true
		}
	}
	return 0, false, false, true
}

// DropEntryEnv removes from this process's environment the GOMAXPROCS=1
// that the binary's entry gave the Go runtime for a run (entry_amd64.s),
// so that neither `-e GOMAXPROCS` nor any process rljail starts sees a
// variable its caller did not set. The runtime has read it by now.
func DropEntryEnv() {
	if (*prestartRec)(prestartRecord()).oneProc != 0 {
		_ = os.Unsetenv("GOMAXPROCS")
	}
}

// callerTimerSlack is the timer slack, in ns, that rljail was started
// with, when the binary's entry raised this process's own
// (RLJAIL_SUPERVISOR_SLACK_NS in stage/prestart.h); 0 when it did not. An
// init stage this process starts itself gets the caller's (spawnInit).
func callerTimerSlack() int64 {
	return (*prestartRec)(prestartRecord()).callerSlack
}

// callerCPUs is the CPU set rljail was started with, when the binary's
// entry pinned this process to one CPU (stage/prestart.c); false when it
// did not.
func callerCPUs() (unix.CPUSet, bool) {
	rec := (*prestartRec)(prestartRecord())
	var set unix.CPUSet
	if rec.pinned == 0 {
		return set, false
	}
	for i := range set {
		for b := 0; b < 64; b++ {
			if rec.callerCPUs[8*i+b/8]>>(b%8)&1 != 0 {
				set.Set(64*i + b)
			}
		}
	}
	return set, true
}

// unpinSupervisor puts every thread of this process back on the CPUs
// rljail was started with, when the binary's entry pinned it for the
// start. A thread that a thread not yet put back starts meanwhile may stay
// pinned; nothing depends on it.
func unpinSupervisor() {
	set, ok := callerCPUs()
	if !ok {
		return
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = unix.SchedSetaffinity(tid, &set)
		}
	}
}

// releaseStartLock unbinds the name that says a placed run of this user's
// is under way (stage/prestart.c), so that the next start may be placed
// while this run goes on; once is enough.
func releaseStartLock() {
	rec := (*prestartRec)(prestartRecord())
	if rec.startLock <= 2 { // none: -1, or 0 in a record no entry filled
		return
	}
	unix.Close(int(rec.startLock))
	rec.startLock = -1
}

// withCallerThread runs fork on this goroutine's thread with the thread's
// timer slack set to slack (ns), unless 0, and its CPU set to cpus, unless
// nil, so that a process forked there inherits what rljail was started
// with (callerTimerSlack, callerCPUs); then it puts the thread's own back.
func withCallerThread(slack int64, cpus *unix.CPUSet, fork func() error) error {
	pinned := cpus != nil
	if slack <= 0 && !pinned {
		return fork()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if slack > 0 {
		own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
		if err != nil {
			return fmt.Errorf("read the timer slack: %w", err)
		}
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
			return fmt.Errorf("set the timer slack to %d ns: %w", slack, err)
		}
		defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(own), 0, 0, 0) }()
	}
	if pinned {
		var own unix.CPUSet
		if err := unix.SchedGetaffinity(0, &own); err != nil {
			return fmt.Errorf("read the CPU set: %w", err)
		}
		if err := unix.SchedSetaffinity(0, cpus); err != nil {
			return fmt.Errorf("set the CPU set: %w", err)
		}
		defer func() { _ = unix.SchedSetaffinity(0, &own) }()
	}
	return fork()
}

// prestartRecord returns the address of the stage's rljail_prestarted
// (entry_amd64.s).
func prestartRecord() unsafe.Pointer
