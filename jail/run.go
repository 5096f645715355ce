package jail

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
	"github.com/rljail/rljail/seccomp"
)

// rootfsSkipped are top-level names of a rootfs that the jail provides
// itself.
var rootfsSkipped = map[string]bool{"dev": true, "proc": true, "sys": true, "tmp": true, "etc": true, "workspace": true}

// loaderCachePath is rootfs.LoaderCachePath (a test keeps them equal; this
// package does not link the rootfs builder).
const loaderCachePath = "/usr/lib/rljail/ld.so.cache"

// packageEtcDir is rootfs.PackageEtcDir: the files the rootfs's packages
// ship in /etc (Debian's matplotlib reads only /etc/matplotlibrc).
const packageEtcDir = "/usr/lib/rljail/etc"

// initEtcNames are the /etc files init or egress write themselves; a
// rootfs's package never replaces one.
var initEtcNames = map[string]bool{"passwd": true, "group": true, "hosts": true, "hostname": true,
	"resolv.conf": true, "nsswitch.conf": true, "ld.so.cache": true, "services": true,
	"protocols": true, "gai.conf": true, "localtime": true, "shadow": true}

// packageEtcLinks links each regular file of the rootfs's packageEtcDir
// into the jail's /etc under its name (none for a rootfs without packages).
func packageEtcLinks(rootfsDir string) []rootSymlink {
	entries, err := os.ReadDir(filepath.Join(rootfsDir, packageEtcDir))
	if err != nil {
		return nil
	}
	var links []rootSymlink
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || initEtcNames[name] {
			continue
		}
		links = append(links, rootSymlink{Name: "etc/" + name, Target: packageEtcDir + "/" + name})
	}
	return links
}

// rootfsEtcFiles are the files of the jail's /etc that lead into the
// rootfs, each linked when the rootfs has it (a rootfs of an older rljail
// may lack them): the loader's cache and netbase's network tables
// (rootfs.LoaderCachePath, ServicesPath, ProtocolsPath).
var rootfsEtcFiles = []rootSymlink{
	{Name: "etc/ld.so.cache", Target: loaderCachePath},
	{Name: "etc/services", Target: "/usr/lib/rljail/services"},
	{Name: "etc/protocols", Target: "/usr/lib/rljail/protocols"},
}

// Run runs spec.Command in a new jail and waits for it. The returned Result
// is always filled in; err is non-nil only when rljail itself failed
// (Result.Status is then StatusSetupError and Result.ExitCode 125, 126 or
// 127). When Run returns, no process of the jail is left.
func Run(ctx context.Context, spec Spec) (result Result, runErr error) {
	start := time.Now()
	spec = spec.withDefaults()
	res := Result{
		RunID: newRunID(),
		Limits: Limits{
			TimeoutMS:    spec.Timeout.Milliseconds(),
			TmpSizeBytes: spec.TmpSize,
			Network:      "none",
		},
	}
	setupFailed := func(code int, err error) (Result, error) {
		res.Status = StatusSetupError
		res.ExitCode = code
		res.Error = err.Error()
		res.WallMS = time.Since(start).Milliseconds()
		return res, err
	}
	if err := CheckBinary(); err != nil {
		return setupFailed(ExitSetupError, err)
	}
	if err := spec.Validate(); err != nil {
		return setupFailed(ExitSetupError, err)
	}
	spec.threadEnv, res.Limits.ThreadPools = threadHints(spec.Resources.CPUs, usableCPUs(), spec.Env)
	root := os.Geteuid() == 0
	warn := func(msg string) {
		res.Warnings = append(res.Warnings, msg)
		if spec.Warn != nil {
			spec.Warn(msg)
		}
	}
	// The init stage starts first: its exec, its libc start and its clone
	// into the namespaces run on another CPU while this process makes the
	// cgroup and the mount trees, which the init receives over its control
	// socket. On cgroup v2 the init is born in its cgroup
	// (CLONE_INTO_CGROUP): the first step waits for it (sendCgroup). The
	// first step then stays as the cgroup's guard.
	var j *jailRun
	var unified bool
	var err error
	merged := OutputMerged(spec.Stdout, spec.Stderr)
	if e := spec.Early; e.usable(root) && e.j.merged == merged {
		e.used = true
		j, unified = e.j, e.unified
	} else {
		unified = cgroup.Unified()
		if j, err = spawnInit(root, unified, spec.Seccomp != nil && spec.Seccomp.Notify, merged); err != nil {
			return setupFailed(ExitSetupError, err)
		}
	}
	// On cgroup v2 the init is cloned into its cgroup, so the cgroup comes
	// first. On v1 (or without a cgroup) the init joins its cgroups itself
	// just before it starts the payload: it gets its config first and
	// builds the jail's root while this process makes the cgroup. Either
	// way the limits come last, and the payload starts on them.
	configFirst := !unified
	var prepWarnings []string
	// Egress (--allow-host): init sends its sockets after the config.
	stopEgress := func() *NetworkReport { return nil }
	if spec.Egress != nil {
		res.Limits.Network = "allowlist"
		defer func() { spec.Egress.Close() }() // a run that failed before wait
	}
	// As root the jail's host ids come with the init's pidfd; this
	// process holds their lock until the jail's files are given back
	// (hostids.go), after the run: here when a setup step failed (the
	// jail is gone by then), below the wait otherwise.
	defer func() {
		for _, msg := range j.ids.reclaim() {
			warn(msg)
		}
		j.ids.release()
	}()
	sendConfig := func() error {
		if !j.receivePidfd() {
			return nil // the first step failed and says why on the status pipe
		}
		if root && j.ids.lock == nil {
			if msg := j.firstStepError(); msg != "" {
				return errors.New(msg)
			}
			return errors.New("start the jail: the first step reserved no host uid")
		}
		cfg, trees, err := prepareConfig(&spec, root, &j.ids, func(msg string) { prepWarnings = append(prepWarnings, msg) })
		if err == nil {
			err = j.configure(cfg, trees)
		}
		closeFiles(trees)
		if err == nil && spec.Egress != nil {
			stopEgress = j.startEgress(spec.Egress)
		}
		return err
	}
	if configFirst {
		if err := sendConfig(); err != nil {
			j.discard() // no cgroup yet
			return setupFailed(ExitSetupError, err)
		}
	}
	lim, err := setupLimits(&spec, res.RunID, j.guard.announce, []int{j.stage1Pid})
	if err != nil {
		j.guard.release() // Create removed what it made
		if errors.Is(err, syscall.EPIPE) {
			// The first step ended before it could guard: its own words
			// (no user namespace, say) beat the broken pipe it left.
			if msg := j.firstStepError(); msg != "" {
				err = errors.New(msg)
			}
		}
		j.abort()
		<-j.stage1Done
		return setupFailed(ExitSetupError, err)
	}
	// The cgroup goes last, whatever happened: after the jail is gone and
	// its statistics are read. If the supervisor dies before, the guard
	// removes it.
	defer func() {
		if derr := lim.cg.Destroy(); derr != nil {
			// In the report too, as every warning (Spec.Warn): a caller
			// that silences stderr (--quiet) still learns of it.
			msg := "remove the jail's cgroup: " + derr.Error()
			result.Warnings = append(result.Warnings, msg)
			if spec.Warn != nil {
				spec.Warn(msg)
			}
		}
		j.guard.release()
		<-j.stage1Done
	}()
	if unified {
		fd, ok := lim.cg.CloneFD()
		if !ok {
			fd = -1
		}
		if err := j.sendCgroup(fd); err != nil {
			j.abort()
			return setupFailed(ExitSetupError, err)
		}
	}
	// The report has every fallback in full; stderr one line naming them.
	res.Warnings = append(res.Warnings, lim.warnings...)
	if line := lim.fallbackLine(); line != "" && spec.Warn != nil {
		spec.Warn(line)
	}
	lim.report(&res.Limits)
	if !configFirst {
		if err := sendConfig(); err != nil {
			j.abort()
			return setupFailed(ExitSetupError, err)
		}
	}
	for _, msg := range prepWarnings {
		warn(msg)
	}
	if spec.SignalsReady != nil {
		<-spec.SignalsReady // the limits let the payload start
	}
	if spec.BeforePayload != nil {
		if err := spec.BeforePayload(warn); err != nil {
			j.abort()
			return setupFailed(ExitSetupError, err)
		}
	}
	if err := j.sendLimits(lim); err != nil {
		j.abort()
		return setupFailed(ExitSetupError, err)
	}
	if spec.Started != nil {
		h := &Handle{lim: lim, limits: res.Limits, initPid: pidOfPidfd(j.pidfd)}
		defer h.release()
		spec.Started(h)
	}
	// The start is placed; the run is not (stage/prestart.c).
	unpinSupervisor()
	res, err = j.wait(ctx, &spec, start, res, lim, stopEgress)
	// No process of the jail is left: what it made in its writable volumes
	// is given back before its host uid can go to another jail.
	for _, msg := range j.ids.reclaim() {
		res.Warnings = append(res.Warnings, msg)
		if spec.Warn != nil {
			spec.Warn(msg)
		}
	}
	return res, err
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// prepareConfig lists what init must mount. As root it also clones every
// granted tree here, on the host, since the jail's unprivileged host uid
// (host) may not be able to reach them (a project below /root, say), and
// makes each writable one writable for that uid (writableGrant), marking
// in host's lock file what is to be given back after the run.
func prepareConfig(spec *Spec, root bool, host *hostIDs, warn func(string)) (*initConfig, []*os.File, error) {
	ids := idmapper{hostUID: host.uid, hostGID: host.gid}
	defer ids.close()
	cfg := &initConfig{
		Command: spec.Command,
		Env:     payloadEnv(spec.threadEnv, spec.Env),
		Workdir: spec.Workdir,
		TmpSize: spec.TmpSize,
	}
	if spec.Seccomp != nil {
		cfg.Filter = spec.Seccomp.BPF
		cfg.Notify = spec.Seccomp.Notify
	}
	if spec.Egress != nil {
		cfg.Egress = spec.Egress
		cfg.Env = payloadEnv(spec.threadEnv, append(spec.Egress.Env(), spec.Env...))
	}
	entries, err := os.ReadDir(spec.Rootfs)
	if err != nil {
		return nil, nil, fmt.Errorf("read rootfs %s: %w", spec.Rootfs, unwrapPathError(err))
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || rootfsSkipped[name] {
			continue
		}
		full := filepath.Join(spec.Rootfs, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return nil, nil, fmt.Errorf("read rootfs link %s: %w", full, unwrapPathError(err))
			}
			cfg.Symlinks = append(cfg.Symlinks, rootSymlink{Name: name, Target: target})
		case e.IsDir():
			cfg.Mounts = append(cfg.Mounts, bindMount{Source: full, Dest: "/" + name, Dir: true})
		}
	}
	// The rootfs's ld.so.cache (rootfs.LoaderCachePath), where the loader looks
	// for it: the jail's /etc is init's own. A rootfs built before rljail
	// wrote one has none, and the loader searches its directories as before.
	// The same for the network tables (rootfs.ServicesPath, ProtocolsPath).
	for _, f := range rootfsEtcFiles {
		if fi, err := os.Lstat(filepath.Join(spec.Rootfs, f.Target)); err == nil && fi.Mode().IsRegular() {
			cfg.Symlinks = append(cfg.Symlinks, f)
		}
	}
	cfg.Symlinks = append(cfg.Symlinks, packageEtcLinks(spec.Rootfs)...)
	if spec.Workspace != "" {
		// Not idmapped: the jail reads the current directory with its own
		// host uid's rights (idmap.go), never its owner's.
		cfg.Mounts = append(cfg.Mounts, bindMount{Source: spec.Workspace, Dest: WorkspaceDir, Dir: true})
	}
	vols := append([]Volume(nil), spec.Volumes...)
	// Parents before children, so /data/sub lands on top of /data.
	sort.SliceStable(vols, func(i, k int) bool {
		return strings.Count(vols[i].Dest, "/") < strings.Count(vols[k].Dest, "/")
	})
	for _, v := range vols {
		st, err := os.Stat(v.Source)
		if err != nil {
			return nil, nil, fmt.Errorf("volume source %s: %w", v.Source, unwrapPathError(err))
		}
		cfg.Mounts = append(cfg.Mounts, bindMount{Source: v.Source, Dest: v.Dest, Dir: st.IsDir(), Writable: v.Writable, Idmap: !v.Writable})
	}

	var trees []*os.File
	for i := range cfg.Mounts {
		m := &cfg.Mounts[i]
		m.FD = -1
		if !root {
			continue
		}
		fd, err := cloneHostPath(m.Source, bindAttrs(m.Writable))
		if err == nil && m.Writable {
			if err = writableGrant(fd, m.Source, host, &ids, spec.Resources.Strict, warn); err != nil {
				unix.Close(fd)
			}
		}
		if err == nil && m.Idmap {
			if ierr := ids.apply(fd, m.Source); ierr != nil {
				// The filesystem cannot be idmapped (tmpfs before Linux
				// 6.3, some network filesystems): grant it as it is; the
				// jail then reads it as any other user could.
				warn(fmt.Sprintf("%s is granted without mapping its owner to the jail's user (%v): the jail reads it with the rights of other users", m.Source, ierr))
			}
		}
		if err != nil {
			closeFiles(trees)
			return nil, nil, err
		}
		m.FD = len(trees)
		trees = append(trees, os.NewFile(uintptr(fd), m.Source))
	}
	if spec.Channel != nil {
		ch, err := dupChannel(spec.Channel)
		if err != nil {
			closeFiles(trees)
			return nil, nil, err
		}
		cfg.HasChannel, cfg.Channel = true, len(trees)
		trees = append(trees, ch)
	}
	return cfg, trees, nil
}

// initEnv is the init stage's whole environment: nothing of the host's.
// Init is C and never starts the Go runtime (init.c), so it needs none.
var initEnv = []string{}

// jailRun is a started jail.
type jailRun struct {
	// merged: the payload's stdout and stderr are one pipe (OutputMerged).
	merged bool
	// The first step, started with vfork and exec (spawnInit): its pid,
	// and its pidfd while it has not been reaped (under stage1Mu).
	stage1Pid   int
	stage1Mu    sync.Mutex
	stage1PidFD int
	pidfd       int
	control     *os.File // descriptors, config, then signal requests; closed when the run ends
	statusR     *os.File
	stdinW      *os.File
	stdoutR     *os.File
	stderrR     *os.File
	notify      *os.File // receives the seccomp listener, in the notify modes
	// joinsCgroup: init was not born in its cgroup and joins it itself.
	joinsCgroup bool
	// awaitingCgroup: the first step waits for sendCgroup.
	awaitingCgroup bool
	// idsMsg: the first step sends the jail's host ids after the pidfd (as
	// root); ids are they, with their lock (hostids.go).
	idsMsg bool
	ids    hostIDs
	guard  *cgroupGuard // the first step, once it has made the init
	// The first step hands over the init's pidfd, then guards the
	// cgroup until released.
	pidfdOnce   sync.Once
	stage1Done  chan struct{}
	stage1Err   error
	stage1Usage *syscall.Rusage
	killOnce    sync.Once
	// reapOnKill: no cgroup measures the jail's CPU time, and the payload
	// runs, so that kill asks init to end the jail (reapKill).
	reapOnKill atomic.Bool
	// reapMu guards reaped: init was waited for, and its pidfd must not be
	// signalled any more.
	reapMu sync.Mutex
	reaped bool
}

// reapGrace is how long init has to kill and reap the jail's processes
// when kill asks it to, before it is killed itself.
const reapGrace = 250 * time.Millisecond

// spawnInit starts the init stage's first step (stage1_main in init.c):
// a plain exec of this binary, which Go makes with vfork, since it has no
// namespaces of its own. That step clones the jail's init into every
// namespace, as a child of this process, in the cgroup of cgroupFD
// (cgroup v2) or, with -1, to join its cgroups itself, and hands over its
// pidfd (configure). Go's own clone into a user namespace would copy this
// process's page tables and exec after it; this way the supervisor goes on
// with the cgroup and the mount trees while the kernel makes the jail.
func spawnInit(root, waitCgroup, notify, merged bool) (*jailRun, error) {
	var err error
	var toClose []*os.File
	pipe := func() (*os.File, *os.File) {
		r, w, perr := os.Pipe()
		if perr != nil && err == nil {
			err = fmt.Errorf("create a pipe: %w", perr)
		}
		toClose = append(toClose, r, w)
		return r, w
	}
	// The control channel is a stream socket, so that descriptors can
	// travel on it before the config.
	ctl, ctlJail, err := socketPair(unix.SOCK_STREAM, "control")
	toClose = append(toClose, ctl, ctlJail)
	statusR, statusW := pipe()
	stdinR, stdinW := pipe()
	stdoutR, stdoutW := pipe()
	stderrR, stderrW := pipe()
	// The seccomp listener travels from the payload's child to here over
	// a Unix socket (fdNotify in the jail); nil leaves that fd closed.
	var notifyR, notifyW *os.File
	if notify && err == nil {
		notifyR, notifyW, err = socketPair(unix.SOCK_SEQPACKET, "notify")
		toClose = append(toClose, notifyR, notifyW)
	}
	// The cgroup guard's pipe (fd 6 in the first step).
	guardR, guardW := pipe()
	extra := []*os.File{ctlJail, statusW, notifyW, guardR}
	// cgroup v2: the init is born in the jail's cgroup (CLONE_INTO_CGROUP),
	// and its new cgroup namespace is rooted there; the first step waits
	// for it. v1 (or no cgroup): it joins its cgroups itself, first thing
	// after its config, and enters its cgroup namespace itself afterwards.
	mode := "now"
	if waitCgroup {
		mode = "cgroup"
	}
	if err != nil {
		closeFiles(toClose)
		return nil, err
	}
	hostUID, hostGID, setgroups := jailHostIDs(root)
	uidArg, gidArg := "-", "-" // as root the first step reserves them
	if hostUID >= 0 {
		uidArg, gidArg = strconv.Itoa(hostUID), strconv.Itoa(hostGID)
	}
	// syscall's fork and exec rather than os/exec's: os/exec first checks,
	// once per process, that pidfds work by forking a child of its own.
	files := make([]uintptr, 0, 7)
	payloadErr := stderrW
	if merged {
		payloadErr = stdoutW // one pipe for both (OutputMerged)
	}
	for _, f := range append([]*os.File{stdinR, stdoutW, payloadErr}, extra...) {
		if f == nil {
			files = append(files, ^uintptr(0)) // closed in the first step
			continue
		}
		files = append(files, f.Fd())
	}
	pidfd, pid := -1, 0
	// The jail gets the timer slack and the CPUs rljail was started with,
	// not the supervisor's (withCallerThread). "-": no CPU to keep off.
	var cpus *unix.CPUSet
	if set, ok := callerCPUs(); ok {
		cpus = &set
	}
	err = withCallerThread(callerTimerSlack(), cpus, func() (ferr error) {
		pid, ferr = syscall.ForkExec("/proc/self/exe",
			[]string{initArg0, uidArg, gidArg, setgroups, mode, "-"},
			// No parent-death signal: should this process die, the first
			// step (the cgroup's guard by then) cleans up after it.
			&syscall.ProcAttr{Env: initEnv, Files: files, Sys: &syscall.SysProcAttr{PidFD: &pidfd}})
		return ferr
	})
	if err != nil {
		closeFiles(toClose)
		return nil, fmt.Errorf("start the jail: %w", err)
	}
	// Only the jail keeps the child ends.
	for _, f := range []*os.File{ctlJail, statusW, stdinR, stdoutW, stderrW, notifyW, guardR} {
		if f != nil {
			f.Close()
		}
	}
	j := newJailRun(stage1Ends{ctl, statusR, stdinW, stdoutR, stderrR, notifyR, guardW}, waitCgroup, root, pid, pidfd)
	j.merged = merged
	return j, nil
}

// OutputMerged tells whether the payload's stdout and stderr go to one
// file (rljail ... 2>&1, or a terminal): the payload then gets one pipe
// for both, so that what it writes to each arrives in the order it wrote
// it, as it would outside the jail (with two pipes, two pumps reordered
// them). The report then counts all of it as stdout.
//
// A writer that wraps a file says so with an Unwrap() io.Writer method.
func OutputMerged(stdout, stderr io.Writer) bool {
	a, ok1 := unwrapWriter(stdout).(*os.File)
	b, ok2 := unwrapWriter(stderr).(*os.File)
	if !ok1 || !ok2 || a == nil || b == nil {
		return false
	}
	sa, errA := fstatNoBlock(a)
	sb, errB := fstatNoBlock(b)
	if errA != nil || errB != nil || sa.Dev != sb.Dev || sa.Ino != sb.Ino {
		return false
	}
	if sa.Mode&unix.S_IFMT != unix.S_IFREG {
		return true // one pipe, terminal or device
	}
	// A regular file opened twice (>f 2>f) has two offsets: writes through
	// one pipe would land where the other's do not, as they would for the
	// payload outside the jail. Only one open file (>f 2>&1) is merged.
	return sameOpenFile(a, b)
}

// sameOpenFile tells whether a and b are one open file description
// (kcmp KCMP_FILE), as after dup.
func sameOpenFile(a, b *os.File) bool {
	ra, err1 := a.SyscallConn()
	rb, err2 := b.SyscallConn()
	if err1 != nil || err2 != nil {
		return false
	}
	same := false
	_ = ra.Control(func(fa uintptr) {
		_ = rb.Control(func(fb uintptr) {
			const kcmpFile = 0
			pid := uintptr(unix.Getpid())
			r, _, errno := unix.Syscall6(unix.SYS_KCMP, pid, pid, kcmpFile, fa, fb, 0)
			same = errno == 0 && r == 0
		})
	})
	return same
}

// unwrapWriter follows Unwrap() io.Writer to the writer underneath.
func unwrapWriter(w io.Writer) io.Writer {
	for i := 0; i < 8; i++ {
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return w
}

// fstatNoBlock stats f without os.File.Fd, which would make a descriptor
// shared with rljail's caller blocking.
func fstatNoBlock(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	rc, err := f.SyscallConn()
	if err != nil {
		return st, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return st, err
	}
	return st, serr
}

// jailHostIDs returns the host uid and gid the jail's user (JailUID) maps
// to, the user's own rootless and -1 as root (the first step reserves the
// jail's own: hostids.go), and the first step's setgroups: as root the
// supplementary groups (root's among them) are cleared; rootless,
// setgroups is denied and the user's own groups stay, which grant nothing
// the user could not do.
func jailHostIDs(root bool) (uid, gid int, setgroups string) {
	if root {
		return -1, -1, "allow"
	}
	return os.Getuid(), os.Getgid(), "deny"
}

// stage1Ends are the supervisor's ends of what a first step was started
// with: the control socket, the status pipe, the payload's stdin, stdout
// and stderr, the seccomp listener socket (nil: none) and the cgroup
// guard's pipe.
type stage1Ends struct {
	ctl, statusR, stdinW, stdoutR, stderrR, notifyR, guardW *os.File
}

// newJailRun makes the jailRun of a first step started with ends, and
// reaps that step when it ends.
func newJailRun(e stage1Ends, waitCgroup, root bool, pid, pidfd int) *jailRun {
	j := &jailRun{pidfd: -1, idsMsg: root, control: e.ctl, statusR: e.statusR, stdinW: e.stdinW, stdoutR: e.stdoutR, stderrR: e.stderrR,
		notify: e.notifyR, guard: &cgroupGuard{w: e.guardW}, joinsCgroup: !waitCgroup, awaitingCgroup: waitCgroup,
		stage1Done: make(chan struct{}), stage1Pid: pid, stage1PidFD: pidfd}
	go func() {
		usage, err := waitPidfd(pidfd)
		j.stage1Mu.Lock()
		unix.Close(pidfd)
		j.stage1PidFD = -1
		j.stage1Usage, j.stage1Err = usage, err
		j.stage1Mu.Unlock()
		close(j.stage1Done)
	}()
	return j
}

// configure sends init the descriptors of its mount trees and its config.
// An init that died meanwhile is not an error here: wait reports why.
func (j *jailRun) configure(cfg *initConfig, trees []*os.File) error {
	if !j.receivePidfd() {
		return nil // the first step failed and said why on the status pipe
	}
	j.send(trees, cfg.encode())
	return nil
}

// sendLimits sends init the payload's limits and, on cgroup v1, the files
// through which it joins its cgroups; init starts the payload on them.
func (j *jailRun) sendLimits(lim *jailLimits) error {
	if j.pidfd < 0 {
		return nil // the first step failed and said why on the status pipe
	}
	l := &initLimits{Rlimits: lim.rlimits, Env: lim.env, Nice: lim.nice}
	var fds []*os.File
	if j.joinsCgroup {
		l.UnshareCgroup = true
		tasks, err := lim.cg.TaskFiles()
		if err != nil {
			return fmt.Errorf("place the jail in its cgroup: %w", err)
		}
		defer closeFiles(tasks)
		for _, f := range tasks {
			l.CgroupTasks = append(l.CgroupTasks, len(fds))
			fds = append(fds, f)
		}
	}
	j.send(fds, l.encode())
	return nil
}

// send sends init one message: its descriptors, then its records. An init
// that cannot take it is killed; wait reports why it ended.
func (j *jailRun) send(fds []*os.File, records []byte) {
	if err := sendFDs(j.control, fds); err != nil {
		j.kill()
		return
	}
	if _, err := j.control.Write(records); err != nil {
		j.kill()
	}
}

// sendCgroup tells the first step, waiting on cgroup v2, which cgroup to
// clone the init into: fd, or none (-1), when the init joins its cgroups
// itself (there are none to be born in).
func (j *jailRun) sendCgroup(fd int) error {
	j.awaitingCgroup = false
	j.joinsCgroup = fd < 0
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	if err := sendMsg(j.control, []byte("cgr!"), fds...); err != nil {
		return fmt.Errorf("pass the jail's cgroup to init: %w", err)
	}
	return nil
}

// receivePidfd takes the init's pidfd from the first step, once; false
// when the first step ended without one. As root it then takes the
// jail's host ids and their lock (send_ids in init.c).
func (j *jailRun) receivePidfd() bool {
	j.pidfdOnce.Do(func() {
		if _, fd, ok := recvTagged(j.control, "pid!", 4); ok {
			j.pidfd = fd
		}
		if j.pidfd < 0 || !j.idsMsg {
			return
		}
		if msg, fd, ok := recvTagged(j.control, "ids!", 16); ok {
			j.ids = hostIDs{
				uid:          int(binary.LittleEndian.Uint32(msg[4:])),
				gid:          int(binary.LittleEndian.Uint32(msg[8:])),
				lock:         os.NewFile(uintptr(fd), "id lock"),
				othersMarked: binary.LittleEndian.Uint32(msg[12:]) != 0,
			}
		}
	})
	return j.pidfd >= 0
}

// recvTagged reads one message of the first step: size bytes that start
// with tag, and a descriptor. false (and nothing kept open) for anything
// else.
func recvTagged(sock *os.File, tag string, size int) ([]byte, int, bool) {
	msg := make([]byte, size)
	n, fd, err := recvFD(sock, msg)
	if err != nil || n != size || string(msg[:len(tag)]) != tag || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, -1, false
	}
	return msg, fd, true
}

// firstStepError is the error the init stage's first step reported, when
// it has ended with one.
func (j *jailRun) firstStepError() string {
	select {
	case <-j.stage1Done:
	case <-time.After(time.Second):
		return ""
	}
	// An init the first step made before it failed may still hold the
	// pipe open for a moment: read what is there, not up to its end.
	_ = j.statusR.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer func() { _ = j.statusR.SetReadDeadline(time.Time{}) }()
	sc := bufio.NewScanner(j.statusR)
	for sc.Scan() {
		if m, err := parseInitMessage(sc.Bytes()); err == nil && m.Error != "" {
			return m.Error
		}
	}
	return ""
}

// waitInit waits for the jail's init to end (or, when there never was
// one, for the first step) and returns how it ended, as exec.Cmd.Wait
// would, with its resource usage (and its reaped descendants').
func (j *jailRun) waitInit() (*syscall.Rusage, error) {
	if j.pidfd < 0 {
		<-j.stage1Done
		return j.stage1Usage, j.stage1Err
	}
	usage, err := waitPidfd(j.pidfd)
	if usage == nil {
		return nil, fmt.Errorf("wait for the jail's init: %w", err)
	}
	return usage, err
}

// awaitExit returns when the process of pidfd has ended (or when it
// cannot wait so), having waited in Go's poller: a pidfd is readable once
// its process is gone. A goroutine blocked in waitid instead holds a
// thread in a system call for the whole run, and Go's sysmon then keeps
// waking every 20 µs to 10 ms to take the thread's processor back, and
// the scheduler starts another thread: about a millisecond of CPU per
// run, more when many run at once.
func awaitExit(pidfd int) {
	d, err := unix.FcntlInt(uintptr(pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	if err := unix.SetNonblock(d, true); err != nil {
		unix.Close(d)
		return
	}
	f := os.NewFile(uintptr(d), "pidfd")
	defer f.Close()
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return n != 0 || (err != nil && err != unix.EINTR)
	})
}

// waitPidfd reaps the child of pidfd and returns how it ended, as
// exec.Cmd.Wait would, with its resource usage (and its reaped
// descendants'); the usage is nil when it could not be waited for.
func waitPidfd(pidfd int) (*syscall.Rusage, error) {
	awaitExit(pidfd)
	var info unix.Siginfo
	var ru unix.Rusage
	for {
		err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, &ru)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			// awaitExit made the pidfd non-blocking and gave up early.
			_ = unix.SetNonblock(pidfd, false)
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	usage := &syscall.Rusage{
		Utime:  syscall.Timeval{Sec: ru.Utime.Sec, Usec: ru.Utime.Usec},
		Stime:  syscall.Timeval{Sec: ru.Stime.Sec, Usec: ru.Stime.Usec},
		Maxrss: ru.Maxrss,
	}
	const cldExited = 1 // si_code of a child that exited (CLD_EXITED)
	code, status := siginfoStatus(&info)
	switch {
	case code == cldExited && status == 0:
		return usage, nil
	case code == cldExited:
		return usage, fmt.Errorf("exit status %d", status)
	default:
		return usage, fmt.Errorf("signal: %s", unix.SignalName(syscall.Signal(status)))
	}
}

// siginfoStatus reads si_code and si_status of a SIGCHLD siginfo, which
// x/sys leaves in the union after the three-int header: si_pid and si_uid
// come first, then si_status (siginfo_t's _sigchld on Linux).
func siginfoStatus(info *unix.Siginfo) (code int, status int) {
	const statusOffset = 16 + 4 + 4 // header, si_pid, si_uid
	p := unsafe.Pointer(uintptr(unsafe.Pointer(info)) + statusOffset)
	return int(info.Code), int(*(*int32)(p))
}

// discard ends an init stage that no Run took over (it made no cgroup):
// the guard goes home, init is killed and reaped, and the first step too.
func (j *jailRun) discard() {
	j.guard.release()
	j.abort()
	<-j.stage1Done
}

// drop discards an init stage that no Run took over, and lets go of its
// host ids (Run gives back those of a jail it took over itself).
func (j *jailRun) drop() {
	j.discard()
	j.ids.release()
}

// abort ends a jail that never got to run: it kills init, reaps it and
// closes every channel. A nil j is nothing to abort.
func (j *jailRun) abort() {
	if j == nil {
		return
	}
	if j.awaitingCgroup {
		// The first step has made no init and must not: it guards, and
		// ends when released.
		j.control.Close()
	}
	// The first step hands the pidfd over quickly, or ends; either way
	// nothing of the jail is left unknown.
	j.receivePidfd()
	j.kill()
	j.control.Close() // an init still reading its config sees the end
	if j.pidfd >= 0 {
		_, _ = j.waitInit()
	}
	closeFiles([]*os.File{j.statusR, j.stdinW, j.stdoutR, j.stderrR})
	if j.notify != nil {
		j.notify.Close()
	}
	if j.pidfd >= 0 {
		unix.Close(j.pidfd)
	}
}

// kill ends the jail: SIGKILL to init through its pidfd, and the kernel
// kills every other process of the PID namespace with it.
//
// Where no cgroup measures the jail's CPU time (rootless on cgroup v1),
// the CPU figures are the init's rusage, which covers only the processes
// it reaped: the processes the kernel kills with a killed init are
// released without a reaper (zap_pid_ns_processes ignores SIGCHLD), so a
// payload that burned seconds of CPU before the kill timer was reported
// with the init's millisecond. There init is asked instead ("kill" on the
// control socket) to kill every other process of the jail and reap them,
// and is killed itself after reapGrace if it has not ended by then.
func (j *jailRun) kill() {
	j.killOnce.Do(func() {
		if j.pidfd >= 0 && j.reapOnKill.Load() {
			if _, err := io.WriteString(j.control, "kill\n"); err == nil {
				time.AfterFunc(reapGrace, func() {
					j.reapMu.Lock()
					defer j.reapMu.Unlock()
					if !j.reaped {
						_ = unix.PidfdSendSignal(j.pidfd, unix.SIGKILL, nil, 0)
					}
				})
				return
			}
		}
		if j.pidfd >= 0 {
			_ = unix.PidfdSendSignal(j.pidfd, unix.SIGKILL, nil, 0)
		} else {
			// No init yet: end the first step, unless it is reaped.
			j.stage1Mu.Lock()
			if j.stage1PidFD >= 0 {
				_ = unix.PidfdSendSignal(j.stage1PidFD, unix.SIGKILL, nil, 0)
			}
			j.stage1Mu.Unlock()
		}
	})
}

// wait pumps the jail's standard streams, enforces the kill timer, and
// collects the result.
func (j *jailRun) wait(ctx context.Context, spec *Spec, start time.Time, res Result, lim *jailLimits, stopEgress func() *NetworkReport) (Result, error) {
	defer func() {
		if j.pidfd >= 0 {
			unix.Close(j.pidfd)
		}
	}()
	// A run that lasts lets the next start be placed (stage/prestart.c).
	release := time.AfterFunc(100*time.Millisecond, releaseStartLock)
	defer release.Stop()
	timedOut := make(chan struct{})
	timer := time.AfterFunc(time.Until(start.Add(spec.Timeout)), func() {
		close(timedOut)
		j.kill()
	})
	defer timer.Stop()

	// A terminal gets the payload's control characters made visible
	// (Spec.TTYPassthrough); merged, the payload's stderr pipe carries
	// nothing, and its terminal is not asked.
	outPump := startPump(spec.Stdout, j.stdoutR, spec.Resources.OutputBytes, !spec.TTYPassthrough && IsTerminal(spec.Stdout), spec.ReportOutput)
	errPump := startPump(spec.Stderr, j.stderrR, spec.Resources.OutputBytes, !spec.TTYPassthrough && !j.merged && IsTerminal(spec.Stderr), spec.ReportOutput)
	stopCPU := make(chan struct{})
	go lim.watchCPU(j.kill, stopCPU)
	go func() {
		if spec.Stdin != nil {
			_, _ = io.Copy(j.stdinW, spec.Stdin)
		}
		j.stdinW.Close()
	}()

	// The strict and learn modes: answer the calls the filter denies.
	var sup *seccomp.Supervisor
	supDone := make(chan struct{})
	stopSup := make(chan struct{})
	if spec.Seccomp != nil && spec.Seccomp.Notify && j.notify != nil {
		sup = seccomp.NewSupervisor(spec.Seccomp, j.kill)
		go func() {
			defer close(supDone)
			defer j.notify.Close()
			listener, err := receiveFD(j.notify)
			if err != nil {
				return // the payload never got that far; init reports why
			}
			sup.Serve(listener, stopSup)
		}()
	} else {
		if j.notify != nil {
			j.notify.Close() // an init stage started early has one either way
		}
		close(supDone)
	}

	// Init reports the payload's end before it exits itself, and its exit
	// (the teardown of the jail's mounts) takes longer than reading the
	// cgroup's statistics: they are read meanwhile, when nothing of the
	// jail but init on its way out is left to count.
	msgs := make(chan []initMessage, 1)
	var ended *jailStats
	go func() {
		var got []initMessage
		sc := bufio.NewScanner(j.statusR)
		for sc.Scan() {
			if m, err := parseInitMessage(sc.Bytes()); err == nil {
				if m.Warning != "" && spec.Warn != nil {
					spec.Warn(m.Warning)
				}
				if m.Exited && ended == nil {
					ended = lim.stats()
				}
				if m.Started && !lim.measuresCPU() {
					j.reapOnKill.Store(true)
				}
				got = append(got, m)
			}
		}
		j.statusR.Close()
		msgs <- got
	}()

	done := make(chan struct{})
	var stop stopper
	stop.grace = spec.StopGrace
	if stop.grace <= 0 {
		stop.grace = DefaultStopGrace
	}
	initGone := make(chan struct{}) // the jail's init has ended
	giveUp := make(chan struct{})   // the caller asked to stop while output waited for its reader
	var giveUpOnce sync.Once
	go func() {
		for {
			select {
			case <-done:
				stop.cancel()
				return
			case <-ctx.Done():
				j.kill()
				return
			case <-stop.expired():
				stop.kill(j.control, "it had not ended "+stop.grace.String()+" after "+stop.stopAsked())
			case s, ok := <-spec.Signals:
				if !ok {
					return
				}
				sig, isSys := s.(syscall.Signal)
				if !isSys {
					continue
				}
				select {
				case <-initGone:
					// Only output is left, waiting for its reader: a
					// request to stop, or an interrupt, gives it up.
					if isStopRequest(sig) || sig == syscall.SIGINT {
						giveUpOnce.Do(func() { close(giveUp) })
					}
					continue
				default:
				}
				// A request on the control pipe, not a signal to init:
				// init ignores every signal, so the payload cannot signal it.
				stop.signal(j.control, sig)
			}
		}
	}()
	defer close(done)

	usage, waitErr := j.waitInit()
	j.reapMu.Lock()
	j.reaped = true // reapKill's fallback must not signal a reused pidfd
	j.reapMu.Unlock()
	close(initGone)
	// The jail is gone: the kill timer has nothing left to kill, and a run
	// that ended before it fired did not time out, however slowly its
	// reader takes the output.
	timer.Stop()
	close(stopCPU)
	j.control.Close()
	j.stdinW.Close()
	// A run the kill timer (or the caller) ended ends now, even when
	// rljail's reader stopped reading and a pump is stuck in its write:
	// that output is given up after a short grace, as timeout(1) would.
	var grace <-chan time.Time
	select {
	case <-timedOut:
		grace = time.After(pumpGrace)
	default:
		if ctx.Err() != nil || stop.stopAsked() != "" {
			grace = time.After(pumpGrace)
		}
	}
	outStats, errStats := outPump.result(grace, giveUp), errPump.result(grace, giveUp)
	got := <-msgs
	for _, m := range got {
		if m.Warning != "" {
			res.Warnings = append(res.Warnings, m.Warning)
		}
	}
	close(stopSup)
	<-supDone
	res.Network = stopEgress()
	res.WallMS = time.Since(start).Milliseconds()
	res.StdoutBytes, res.StdoutTruncated = outStats.total, outStats.truncated
	res.StderrBytes, res.StderrTruncated = errStats.total, errStats.truncated
	if spec.ReportOutput > 0 {
		var o Output
		o.Stdout, o.StdoutTail, o.StdoutOmittedBytes = outPump.capture.text()
		o.Stderr, o.StderrTail, o.StderrOmittedBytes = errPump.capture.text()
		res.Output = &o
	}
	for _, o := range []struct {
		name string
		p    pumped
	}{{"stdout", outStats}, {"stderr", errStats}} {
		if o.p.writeErr == nil {
			continue
		}
		why := o.p.writeErr
		var pe *os.PathError
		if errors.As(why, &pe) {
			why = pe.Err
		}
		msg := fmt.Sprintf("the payload's %s could not be passed on (%v); its later writes there failed", o.name, why)
		if errors.Is(why, errReaderStalled) {
			msg = fmt.Sprintf("the payload's %s was not all passed on: its reader did not read it before the run was ended", o.name)
		}
		res.Warnings = append(res.Warnings, msg)
		// A reader that went away (| head) is routine: the report says it.
		if !errors.Is(o.p.writeErr, syscall.EPIPE) && spec.Warn != nil {
			spec.Warn(msg)
		}
	}
	var report *seccomp.Report
	if spec.Seccomp != nil {
		r := spec.Seccomp.EmptyReport()
		if sup != nil {
			r = sup.Report()
		}
		report = &r
	}
	res, err, vanished := j.verdict(ctx, spec, res, got, waitErr, timedOut, report)
	if why := stop.killedWhy(); why != "" && res.Status == StatusSignaled && res.Signal == int(unix.SIGKILL) {
		res.Error = "the payload was killed: " + why
	}
	if ended == nil { // read after msgs was received: no race
		ended = lim.stats()
	}
	if lim.collect(&res, usage, vanished, ended) {
		err = nil // a limit ended the run: a result, not a failure of rljail
	}
	if err == nil && (res.StdoutTruncated || res.StderrTruncated) && (res.Status == StatusOK || res.Status == StatusExitNonzero) {
		res.Status = StatusOutputTruncated
	}
	return res, err
}

// verdict decides the run's status from the timer, the seccomp
// supervisor and init's messages, before the limits have their say.
//
// vanished reports that init died without a word: killed from outside,
// which the limits may explain (the OOM killer of a cgroup with
// memory.oom.group takes init too).
func (j *jailRun) verdict(ctx context.Context, spec *Spec, res Result, got []initMessage, waitErr error, timedOut <-chan struct{}, report *seccomp.Report) (_ Result, _ error, vanished bool) {
	if report != nil {
		res.Seccomp = report
		if report.Violation != "" {
			res.Status = StatusSeccompViolation
			res.ExitCode = 128 + int(unix.SIGSYS)
			res.Signal = int(unix.SIGSYS)
			res.SignalName = unix.SignalName(unix.SIGSYS)
			res.Error = "the payload called " + report.Violation + ", which the profile " + report.Profile + " does not allow; the jail was ended"
			return res, nil, false
		}
	}

	exited, killedAtLimit := false, false
	for _, m := range got {
		exited = exited || m.Exited
		// A payload killed by RLIMIT_CPU (SIGXCPU, then SIGKILL) as the
		// timer fires: rootless the timer asks init to kill and reap
		// (reapOnKill), and init then reports that end, which may be the
		// CPU limit's of the same moment (the CPU-time limit is the
		// timeout unless --cpu-time says otherwise). The wall clock's
		// limit was reached; that is the verdict.
		killedAtLimit = killedAtLimit || (m.Exited && (m.Signal == int(unix.SIGXCPU) || m.Signal == int(unix.SIGKILL)))
	}
	select {
	case <-timedOut:
		// The timer kills init, which then reports nothing: a payload
		// whose end init reported ended on its own, just before.
		if !exited || killedAtLimit {
			res.Status = StatusTimeout
			res.ExitCode = ExitTimeout
			res.Error = fmt.Sprintf("killed at the time limit of %s", spec.Timeout)
			return res, nil, false
		}
	default:
	}
	for _, m := range got {
		switch {
		case m.Exited:
			res.setExit(m.Code, m.Signal)
			return res, nil, false
		case m.Error != "" && ctx.Err() != nil:
			// Killed in its setup because ctx ended (a client gone, a
			// drain's grace over): the stage's own failure (its init gone
			// before the id maps were written, say) is the kill's effect,
			// not a fault of the host.
			res.Status = StatusSetupError
			res.ExitCode = ExitSetupError
			res.Error = "run canceled: " + ctx.Err().Error() + " (the setup then failed: " + m.Error + ")"
			return res, ctx.Err(), false
		case m.Error != "":
			res.Status = StatusSetupError
			res.ExitCode = m.ExitCode
			res.Error = m.Error
			return res, errors.New(m.Error), false
		}
	}
	if ctx.Err() != nil {
		res.Status = StatusSetupError
		res.ExitCode = ExitSetupError
		res.Error = "run canceled: " + ctx.Err().Error()
		return res, ctx.Err(), false
	}
	res.Status = StatusSetupError
	res.ExitCode = ExitSetupError
	res.Error = fmt.Sprintf("the jail's init ended without a report (%v)", waitErr)
	return res, errors.New(res.Error), true
}

// socketPair makes a Unix socket pair of type typ: this process's end and
// the jail's.
func socketPair(typ int, name string) (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create a socket pair: %w", err)
	}
	// This process's end waits in Go's poller; the jail's stays blocking.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("create a socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name+"-jail"), nil
}

// sendFDs sends fds to init in messages of a 4-byte little-endian count
// and that many descriptors (SCM_RIGHTS), then a count of 0 (init.c,
// receive_fds).
func sendFDs(sock *os.File, fds []*os.File) error {
	for {
		n := min(len(fds), fdChunk)
		ints := make([]int, n)
		for i, f := range fds[:n] {
			ints[i] = int(f.Fd())
		}
		var count [4]byte
		binary.LittleEndian.PutUint32(count[:], uint32(n))
		if err := sendMsg(sock, count[:], ints...); err != nil {
			return fmt.Errorf("send descriptors to init: %w", err)
		}
		fds = fds[n:]
		if n == 0 {
			return nil
		}
	}
}

// sendMsg sends data with fds (SCM_RIGHTS, none when empty) in one
// message; a peer that is gone is EPIPE, not SIGPIPE.
func sendMsg(sock *os.File, data []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	raw, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Write(func(s uintptr) bool {
		serr = unix.Sendmsg(int(s), data, oob, nil, unix.MSG_NOSIGNAL)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	return err
}

// recvFD reads one message of up to len(buf) bytes with at most one
// descriptor (SCM_RIGHTS, close-on-exec). It returns the number of bytes
// (0 at EOF) and the descriptor, -1 when the message carried none; a
// message with more than one is an error, and they are closed.
func recvFD(sock *os.File, buf []byte) (int, int, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	raw, err := sock.SyscallConn()
	if err != nil {
		return 0, -1, err
	}
	var n, oobn int
	var rerr error
	err = raw.Read(func(s uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(s), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return n, -1, err
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	switch len(fds) {
	case 0:
		return n, -1, nil
	case 1:
		return n, fds[0], nil
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return n, -1, fmt.Errorf("%d descriptors in one message", len(fds))
}

// receiveFD reads the seccomp listener, sent with SCM_RIGHTS; EOF (every
// sender gone) is an error.
func receiveFD(sock *os.File) (*os.File, error) {
	n, fd, err := recvFD(sock, make([]byte, 1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("receive the seccomp listener: %w", err)
	case n == 0 && fd < 0:
		return nil, errors.New("receive the seccomp listener: the jail closed the socket")
	case fd < 0:
		return nil, errors.New("receive the seccomp listener: no descriptor in the message")
	}
	return os.NewFile(uintptr(fd), "seccomp-listener"), nil
}

// fdChunk is how many descriptors one message carries (the kernel takes
// at most 253).
const fdChunk = 200
