package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
)

// Prepared is a jail made ahead of its request, for a service that wants
// a request to pay only for handing it over (rljail serve --warm): the
// namespaces, the host uid (as root), the cgroup and the root's mounts
// are made, the rootfs is checked, and the payload, a launcher of the
// caller's, is started at once as for a one-shot run (rljail_spawn in
// spawn.c: capabilities dropped, securebits locked, no_new_privs, the
// seccomp filter last) with the most any request may have; it waits on
// its channel for the request, which Start hands to the caller
// (Handle.Handover). The kill timer runs from the start time Start is
// given. A Prepared serves one request; after it, or after Destroy,
// nothing of it is left.
//
// What is fixed at PrepareStarted is what the jail is made of: the
// rootfs, the size of /tmp, the seccomp program, the cgroup's placement
// and mechanisms, and limits that a request may only lower. Egress,
// volumes, a workspace and a terminal need the one-shot Run. Fits says
// whether a spec can start in a Prepared jail.
type Prepared struct {
	spec    Spec // the template, with its defaults
	root    bool
	j       *jailRun
	lim     *jailLimits
	runID   string
	created time.Time

	mu       sync.Mutex
	used     bool // Start or Destroy took it
	warnings []string

	// What init gave the payload started ahead: a request may only lower
	// them.
	aheadRlimits []rlimit
	aheadNice    int
}

// ErrNotStarted wraps the reason a Prepared jail was not given a payload
// (it did not fit, it had died, its cgroup took no new limits): no
// payload ran, and the caller may run the spec one-shot instead.
var ErrNotStarted = errors.New("the prepared jail was not started")

// PrepareStarted makes a jail for spec's rootfs, /tmp size, seccomp
// program and limits, and starts spec's payload in it at once, with
// spec's command, environment, working directory and limits (the most
// any request of the jail may ask: a request can only lower them), and
// spec.Channel as its descriptor 3. It is for a payload of the caller's
// own that waits on the channel for its request and applies it: a
// launcher whose interpreter then no request waits for (rljail serve's
// warm pool). Start hands the request's environment, working directory
// and limits to the caller's Spec.Started (Handle.Handover); the caller
// passes them over the channel. spec.BeforePayload (the rootfs check)
// runs before the payload starts: a rootfs that changed since its build
// ends it. The caller closes its spec.Channel once PrepareStarted
// returns.
func PrepareStarted(spec Spec) (*Prepared, error) {
	if spec.Channel == nil || len(spec.Command) == 0 {
		return nil, errors.New("prepare a started jail: its payload needs a command and a channel")
	}
	spec = spec.withDefaults()
	if err := CheckBinary(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Egress != nil || len(spec.Volumes) > 0 || spec.Workspace != "" || spec.Early != nil {
		return nil, errors.New("prepare a jail: egress, volumes, a workspace or an early init stage need a one-shot run")
	}
	p := &Prepared{spec: spec, root: os.Geteuid() == 0, runID: newRunID(), created: time.Now()}
	warn := func(msg string) { p.warnings = append(p.warnings, msg) }
	unified := cgroup.Unified()
	j, err := spawnInit(p.root, unified, spec.Seccomp != nil && spec.Seccomp.Notify, false)
	if err != nil {
		return nil, err
	}
	p.j = j
	release := func() {
		for _, msg := range j.ids.reclaim() {
			warn(msg)
		}
		j.ids.release()
	}
	sendConfig := func() error {
		if !j.receivePidfd() {
			if msg := j.firstStepError(); msg != "" {
				return errors.New(msg)
			}
			return errors.New("start the jail: the first step made no init")
		}
		if p.root && j.ids.lock == nil {
			if msg := j.firstStepError(); msg != "" {
				return errors.New(msg)
			}
			return errors.New("start the jail: the first step reserved no host uid")
		}
		cfg, trees, err := prepareConfig(&spec, p.root, &j.ids, warn)
		if err != nil {
			return err
		}
		// The payload's command and environment come with the limits
		// (sendPayload); the working directory there replaces this one.
		cfg.Command, cfg.Env = nil, nil
		err = j.configure(cfg, trees)
		closeFiles(trees)
		return err
	}
	if !unified {
		if err := sendConfig(); err != nil {
			j.discard()
			release()
			return nil, err
		}
	}
	lim, err := setupLimits(&spec, p.runID, j.guard.announce, []int{j.stage1Pid})
	if err != nil {
		j.guard.release()
		j.abort()
		<-j.stage1Done
		release()
		return nil, err
	}
	p.lim = lim
	fail := func(err error) (*Prepared, error) {
		j.abort()
		p.finish()
		return nil, err
	}
	if unified {
		fd, ok := lim.cg.CloneFD()
		if !ok {
			fd = -1
		}
		if err := j.sendCgroup(fd); err != nil {
			return fail(err)
		}
		if err := sendConfig(); err != nil {
			return fail(err)
		}
	}
	p.warnings = append(p.warnings, lim.warnings...)
	if spec.BeforePayload != nil {
		if err := spec.BeforePayload(warn); err != nil {
			return fail(err)
		}
	}
	if !p.Alive() {
		if msg := j.firstStepError(); msg != "" {
			return fail(errors.New(msg))
		}
		return fail(errors.New("prepare a jail: its init ended before its payload"))
	}
	spec.threadEnv, _ = threadHints(spec.Resources.CPUs, usableCPUs(), spec.Env)
	if err := j.sendPayload(&spec, lim); err != nil {
		return fail(err)
	}
	p.aheadRlimits = append([]rlimit(nil), lim.rlimits...)
	p.aheadNice = lim.nice
	return p, nil
}

// Alive reports whether the jail's init still waits: false once it (or
// its first step, the cgroup's guard) has ended.
func (p *Prepared) Alive() bool {
	select {
	case <-p.j.stage1Done:
		return false
	default:
	}
	if p.j.pidfd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.j.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// InitPid is the host pid of the waiting jail's init (0 when none).
func (p *Prepared) InitPid() int { return pidOfPidfd(p.j.pidfd) }

// Age is how long ago Prepare made the jail.
func (p *Prepared) Age() time.Duration { return time.Since(p.created) }

// Fits says why spec cannot start in p (nil: it can). A limit is never
// weakened: what p's jail is made of must be what spec asks, and a cgroup
// limit p's cgroup has no controller for must be so in spec too.
func (p *Prepared) Fits(spec Spec) error {
	spec = spec.withDefaults()
	t := p.spec
	switch {
	case spec.Rootfs != t.Rootfs:
		return fmt.Errorf("%w: rootfs %s, not the prepared %s", ErrNotStarted, spec.Rootfs, t.Rootfs)
	case spec.Egress != nil:
		return fmt.Errorf("%w: egress needs a one-shot run", ErrNotStarted)
	case len(spec.Volumes) > 0:
		return fmt.Errorf("%w: volumes need a one-shot run", ErrNotStarted)
	case spec.Workspace != "":
		return fmt.Errorf("%w: a workspace needs a one-shot run", ErrNotStarted)
	case spec.Early != nil || spec.TTYPassthrough || OutputMerged(spec.Stdout, spec.Stderr):
		return fmt.Errorf("%w: a terminal or merged output needs a one-shot run", ErrNotStarted)
	case spec.Channel != nil:
		return fmt.Errorf("%w: the started payload has its channel already", ErrNotStarted)
	case spec.TmpSize != t.TmpSize:
		return fmt.Errorf("%w: a /tmp of %d bytes, not the prepared %d", ErrNotStarted, spec.TmpSize, t.TmpSize)
	case !sameSeccomp(spec, t):
		return fmt.Errorf("%w: another seccomp program", ErrNotStarted)
	}
	r, q := spec.Resources, t.Resources
	switch {
	case r.CgroupParent != q.CgroupParent || r.CgroupManager != q.CgroupManager:
		return fmt.Errorf("%w: another cgroup placement", ErrNotStarted)
	case r.Strict != q.Strict:
		return fmt.Errorf("%w: --strict-limits differs", ErrNotStarted)
	case (r.MemoryBytes > 0) != (q.MemoryBytes > 0) || (r.PidsMax > 0) != (q.PidsMax > 0) || (r.CPUs > 0) != (q.CPUs > 0):
		return fmt.Errorf("%w: a cgroup limit the prepared jail's cgroup was made without", ErrNotStarted)
	}
	l := &jailLimits{cg: p.lim.cg}
	l.decide(&spec)
	if err := p.lowersOnly(l); err != nil {
		return fmt.Errorf("%w: %v", ErrNotStarted, err)
	}
	return nil
}

func sameSeccomp(a, b Spec) bool {
	if a.Seccomp == nil || b.Seccomp == nil {
		return a.Seccomp == b.Seccomp
	}
	return a.Seccomp.Notify == b.Seccomp.Notify && bytes.Equal(a.Seccomp.BPF, b.Seccomp.BPF)
}

// Start runs spec's payload in p's jail and waits for it, as Run does;
// the kill timer runs from start (the request's arrival), not from
// Prepare. spec must fit (Fits); an error wrapping ErrNotStarted means no
// payload ran and p is used up (destroyed), and the caller may Run spec
// one-shot. Otherwise the Result is Run's.
func (p *Prepared) Start(ctx context.Context, spec Spec, start time.Time) (result Result, runErr error) {
	p.mu.Lock()
	if p.used {
		p.mu.Unlock()
		return Result{}, fmt.Errorf("%w: it was used already", ErrNotStarted)
	}
	p.used = true
	p.mu.Unlock()
	spec = spec.withDefaults()
	notStarted := func(err error) (Result, error) {
		p.j.abort()
		p.finish()
		return Result{}, fmt.Errorf("%w: %v", ErrNotStarted, err)
	}
	if err := spec.Validate(); err != nil {
		return notStarted(err)
	}
	if err := p.Fits(spec); err != nil {
		return notStarted(err)
	}
	if !p.Alive() {
		return notStarted(errors.New("its init had ended while it waited"))
	}
	if spec.Started == nil {
		return notStarted(errors.New("a payload started ahead takes its request through Started, and spec has none"))
	}
	j, lim := p.j, p.lim
	spec.threadEnv = nil
	res := Result{
		RunID: p.runID,
		Limits: Limits{
			TimeoutMS:    spec.Timeout.Milliseconds(),
			TmpSizeBytes: spec.TmpSize,
			Network:      "none",
		},
	}
	spec.threadEnv, res.Limits.ThreadPools = threadHints(spec.Resources.CPUs, usableCPUs(), spec.Env)
	// The request's cgroup limits, written before the payload starts.
	r := spec.Resources
	if r.MemoryBytes != p.spec.Resources.MemoryBytes || r.PidsMax != p.spec.Resources.PidsMax || r.CPUs != p.spec.Resources.CPUs {
		if err := lim.cg.SetLimits(cgroup.Limits{MemoryBytes: r.MemoryBytes, PidsMax: r.PidsMax, CPUs: r.CPUs, PidsByRlimit: cgroup.NprocPerUserNS()}); err != nil {
			return notStarted(err)
		}
	}
	lim.decide(&spec)
	// (Fits, above, held these rlimits to the payload's.) What the
	// payload used before the request is not the request's.
	lim.base, _ = lim.cg.Stats()
	lim.cpuBase, _ = lim.cg.CPUUsage()
	warn := func(msg string) {
		res.Warnings = append(res.Warnings, msg)
		if spec.Warn != nil {
			spec.Warn(msg)
		}
	}
	for _, msg := range p.warnings {
		warn(msg)
	}
	if line := lim.fallbackLine(); line != "" && spec.Warn != nil {
		spec.Warn(line)
	}
	lim.report(&res.Limits)
	defer p.finishInto(&result, spec.Warn)
	handover := &Handover{Env: append(payloadEnv(spec.threadEnv, spec.Env), lim.env...), Workdir: spec.Workdir, Nice: lim.nice}
	for _, r := range lim.rlimits {
		handover.Rlimits = append(handover.Rlimits, Rlimit(r))
	}
	h := &Handle{lim: lim, limits: res.Limits, initPid: pidOfPidfd(j.pidfd), handover: handover}
	defer h.release()
	spec.Started(h)
	return j.wait(ctx, &spec, start, res, lim, func() *NetworkReport { return nil })
}

// lowersOnly says why lim's rlimits and nice (a request's) are not within
// what the payload started ahead was given: a process may lower its
// limits, never raise them.
func (p *Prepared) lowersOnly(lim *jailLimits) error {
	given := map[int]rlimit{}
	for _, r := range p.aheadRlimits {
		given[r.Resource] = r
	}
	for _, r := range lim.rlimits {
		g, ok := given[r.Resource]
		if !ok || r.Hard > g.Hard || r.Soft > r.Hard {
			return fmt.Errorf("rlimit %d of %d/%d is beyond the started payload's", r.Resource, r.Soft, r.Hard)
		}
	}
	if lim.nice < p.aheadNice {
		return fmt.Errorf("nice %d is below the started payload's %d", lim.nice, p.aheadNice)
	}
	return nil
}

// Handover is what a payload started ahead (PrepareStarted) is to give the
// request's program: its environment as Run would give it (the thread
// pools' hints and the limits' entries included), its working directory,
// its rlimits and its nice value.
type Handover struct {
	Env     []string
	Workdir string
	Rlimits []Rlimit
	Nice    int
}

// Rlimit is one resource limit, as setrlimit(2) takes it.
type Rlimit struct {
	Resource int
	Soft     uint64
	Hard     uint64
}

// Destroy ends a jail that was not started: nothing of it is left when it
// returns (its processes, cgroup, mounts, host uid's lock).
func (p *Prepared) Destroy() {
	p.mu.Lock()
	if p.used {
		p.mu.Unlock()
		return
	}
	p.used = true
	p.mu.Unlock()
	p.j.abort()
	p.finish()
}

// finish removes the cgroup and lets the host ids go, once the jail's
// processes are gone (abort or wait).
func (p *Prepared) finish() {
	var r Result
	p.finishInto(&r, nil)
}

func (p *Prepared) finishInto(res *Result, warnf func(string)) {
	if p.lim != nil {
		if err := p.lim.cg.Destroy(); err != nil {
			msg := "remove the jail's cgroup: " + err.Error()
			res.Warnings = append(res.Warnings, msg)
			if warnf != nil {
				warnf(msg)
			}
		}
	}
	p.j.guard.release()
	<-p.j.stage1Done
	res.Warnings = append(res.Warnings, p.j.ids.reclaim()...)
	p.j.ids.release()
}

// sendPayload sends init the limits message of a prepared jail: the
// limits as sendLimits sends them, and the payload's command,
// environment, working directory and channel, which a one-shot run sends
// with the config (PrepareStarted sends the config without them). init reads both messages with one reader
// (read_message in init.c), and starts the payload on this one.
func (j *jailRun) sendPayload(spec *Spec, lim *jailLimits) error {
	if j.pidfd < 0 {
		return errors.New("start the jail: it has no init")
	}
	var fds []*os.File
	var tasks []int
	if j.joinsCgroup {
		files, err := lim.cg.TaskFiles()
		if err != nil {
			return fmt.Errorf("place the jail in its cgroup: %w", err)
		}
		defer closeFiles(files)
		for _, f := range files {
			tasks = append(tasks, len(fds))
			fds = append(fds, f)
		}
	}
	channel := -1
	if spec.Channel != nil {
		ch, err := dupChannel(spec.Channel)
		if err != nil {
			return err
		}
		defer ch.Close()
		channel = len(fds)
		fds = append(fds, ch)
	}
	env := payloadEnv(spec.threadEnv, spec.Env)
	records := encodeRecords(func(rec func(byte, ...string)) {
		for _, a := range spec.Command {
			rec(tagArg, a)
		}
		for _, e := range append(env, lim.env...) {
			rec(tagEnv, e)
		}
		rec(tagWorkdir, spec.Workdir)
		for _, r := range lim.rlimits {
			rec(tagRlimit, strconv.Itoa(r.Resource), strconv.FormatUint(r.Soft, 10), strconv.FormatUint(r.Hard, 10))
		}
		if j.joinsCgroup {
			rec(tagUnshareCgroup)
		}
		for _, fd := range tasks {
			rec(tagCgroupTasks, strconv.Itoa(fd))
		}
		if lim.nice > 0 {
			rec(tagNice, strconv.Itoa(lim.nice))
		}
		if channel >= 0 {
			rec(tagChannel, strconv.Itoa(channel))
		}
	})
	j.send(fds, records)
	return nil
}
