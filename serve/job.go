package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/jail"
)

// Runtime is a root filesystem a request may name, resolved and checked
// by the caller (cmd/rljail: the same place checks as a run's).
type Runtime struct {
	Name          string
	Dir           string
	PythonVersion string
	// Check, when set, runs before each jail's payload may start
	// (jail.Spec.BeforePayload): the CLI's comparison of the rootfs with
	// its build's fingerprint, so that no file of a changed rootfs runs.
	Check func(warn func(string)) error
}

// job is one jail's worth of a request, whichever endpoint it came from.
type job struct {
	command  []string
	stdin    string
	env      []string
	files    []inFile
	fetch    []string // absolute paths in the jail
	asked    []string // fetch as the request spelt them
	fetchMax int64
	runtime  *Runtime
	timeout  time.Duration
	memory   int64
	cpus     float64
	pids     int64
	tmpSize  int64
	cpuTime  time.Duration
	keep     int64 // bytes of stdout and of stderr the response keeps
	language string
	// compile, when set, runs first in a jail of its own (languages.go).
	compile *compileStage
	// volumes are the request's granted volumes (volumes.go).
	volumes []jail.Volume
	// egress are the request's checked egress rules (egress.go); each
	// jail of the job gets an egress of its own from them.
	egress []string
	// profile names the payload's seccomp program ("": the default).
	profile string
}

// inFile is a file put into the jail before the command runs.
type inFile struct {
	path string // absolute, clean, below a writable place
	data []byte
	mode uint32
}

// outFile is a file taken out of the jail after the command.
type outFile struct {
	Path  string
	Data  []byte
	Error string
}

// outcome is what a job did: the run's report, its streams, its files.
type outcome struct {
	result         jail.Result
	stdout, stderr captured
	files          []outFile
	err            error
	// pool is how the jail started: "warm" (a waiting jail of the pool)
	// or "cold" (one-shot), and poolReason why cold (pool.go).
	pool, poolReason string
}

// codePath is where a request's code goes in the jail (a file, so that
// tracebacks and __file__ are as for `python3 main.py`).
const codePath = "/tmp/main.py"

// execute runs j in one fresh jail through jail.Run, the run path every
// mode of rljail shares; ctx's end (the client went away, the drain's
// grace ran out) kills the jail.
func (s *Server) execute(ctx context.Context, j *job) outcome {
	spec := s.jobSpec(j)
	var o outcome
	if spec.Egress, o.err = jailEgress(j.egress); o.err != nil {
		return o
	}
	out := newStream(j.keep)
	errs := newStream(j.keep)
	spec.Stdout, spec.Stderr = out, errs
	if len(j.stdin) > 0 {
		spec.Stdin = strings.NewReader(j.stdin)
	}
	start := time.Now()
	var ran bool
	wj, why := s.pool.take(j.runtime.Name, spec)
	if wj != nil {
		ran = s.executeWarm(ctx, j, spec, wj, start, &o)
		if !ran {
			why = coldDied
		}
	}
	if !ran {
		o.pool, o.poolReason = poolCold, why
		s.pool.runs.WithLabelValues(poolCold, why).Inc()
		s.executeCold(ctx, j, spec, &o)
	}
	o.stdout, o.stderr = out.finish(), errs.finish()
	// The launcher answers for fetch in order; an entry that is not the
	// path asked for in its place is the payload's forgery and is
	// dropped. Each is named as the request spelt it.
	var named []outFile
	for i, f := range o.files {
		if i < len(j.fetch) && f.Path == j.fetch[i] {
			f.Path = j.asked[i]
			named = append(named, f)
		}
	}
	o.files = named
	return o
}

// executeWarm runs j in wj, a jail of the pool with its launcher started
// ahead: the request goes to the launcher on the channel once the jail
// hands it over (jail.Handover). It reports false when no payload ran
// (wj had died or did not fit): the caller runs j cold.
func (s *Server) executeWarm(ctx context.Context, j *job, spec jail.Spec, wj *warmJail, start time.Time, o *outcome) bool {
	defer wj.ch.Close()
	fetched := make(chan fetchResult, 1)
	path := jail.DefaultPath
	spec.Started = func(h *jail.Handle) {
		path = envPath(h.Handover().Env)
		go func() {
			if err := writeHead(wj.ch, j, h.Handover()); err != nil {
				_ = err // the launcher says what it missed; the run reports
			}
		}()
		go func() { fetched <- readFetched(wj.ch, len(j.fetch), j.fetchMax) }()
	}
	res, err := wj.Start(ctx, spec, start)
	if errors.Is(err, jail.ErrNotStarted) {
		s.pool.failed.WithLabelValues(j.runtime.Name).Inc()
		if s.opts.Log != nil {
			s.opts.Log.Warn("warm pool: a waiting jail could not take its request; the request starts cold", "runtime", j.runtime.Name, "error", err.Error())
		}
		return false
	}
	o.pool = poolWarm
	s.pool.runs.WithLabelValues(poolWarm, "").Inc()
	o.result, o.err = res, err
	// The jail is gone: the reader has its answer or EOF at once.
	select {
	case f := <-fetched:
		o.files = f.files
		refused(&o.result, f, j.command[0], path)
	case <-time.After(2 * time.Second):
	}
	return true
}

// executeCold runs j one-shot (jail.Run): with the launcher when it has
// files to put in or take out, else its command as the payload.
func (s *Server) executeCold(ctx context.Context, j *job, spec jail.Spec, o *outcome) {
	if !j.usesLauncher() {
		o.result, o.err = jail.Run(ctx, spec)
		return
	}
	host, inJail, err := channelPair()
	if err != nil {
		o.err = err
		return
	}
	defer host.Close()
	var once sync.Once
	closeJailEnd := func() { once.Do(func() { inJail.Close() }) }
	defer closeJailEnd()
	spec.Channel = inJail
	spec.Started = func(*jail.Handle) { closeJailEnd() }
	spec.Command = append(append(append([]string(nil), launcherColdArgv...), launcherSource), j.command...)
	go func() {
		if err := writeHead(host, j, nil); err != nil {
			_ = err // the launcher says what it missed; the run reports
		}
	}()
	fetched := make(chan fetchResult, 1)
	go func() { fetched <- readFetched(host, len(j.fetch), j.fetchMax) }()
	// Once the jail is gone the reader sees EOF; the writer, should
	// the launcher never read, fails when host closes.
	o.result, o.err = jail.Run(ctx, spec)
	closeJailEnd()
	select {
	case f := <-fetched:
		o.files = f.files
		refused(&o.result, f, j.command[0], envPath(j.env))
	case <-time.After(2 * time.Second):
	}
}

// envPath is the PATH of env (its last entry, as the payload's
// environment takes it: payloadEnv), or the payload's default.
func envPath(env []string) string {
	path := jail.DefaultPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	return path
}

// refused makes r, the report of a run whose launcher said it could not
// run prog ("E"), the setup error init reports for a one-shot run's
// payload. The launcher's word is taken only where the run ended as it
// says, and the words are the server's (init's): a payload that forged it
// changes no more than its own status.
func refused(r *jail.Result, f fetchResult, prog, path string) {
	if f.notFound == 0 || r.Status != jail.StatusExitNonzero || r.ExitCode != f.notFound {
		return
	}
	r.Status = jail.StatusSetupError
	switch {
	case f.errno != 0:
		r.Error = fmt.Sprintf("cannot run %s: %s", prog, f.errno.Error())
	case f.notFound == 127:
		r.Error = fmt.Sprintf("%s: command not found in the jail (PATH=%s)", prog, path)
	default:
		r.Error = fmt.Sprintf("%s: found on PATH but not executable", prog)
	}
}

// jobSpec is the jail.Spec of j, without its streams.
func (s *Server) jobSpec(j *job) jail.Spec {
	return jail.Spec{
		Command: j.command,
		Env:     j.env,
		Rootfs:  j.runtime.Dir,
		Volumes: j.volumes,
		Workdir: "/tmp",
		Timeout: j.timeout,
		TmpSize: j.tmpSize,
		Resources: jail.Resources{
			MemoryBytes:  j.memory,
			CPUTime:      j.cpuTime,
			PidsMax:      j.pids,
			CPUs:         j.cpus,
			OutputBytes:  s.conf().PumpOutput,
			CgroupParent: s.opts.CgroupParent,
		},
		Seccomp:       s.program(j.profile),
		BeforePayload: j.runtime.Check,
	}
}

func (j *job) usesLauncher() bool { return len(j.files) > 0 || len(j.fetch) > 0 }

// channelPair makes the socket pair of a jail's channel: the server's
// end, polled (a blocked write ends when it is closed), and the jail's.
func channelPair() (host, inJail *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("make the jail's channel: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("make the jail's channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "channel"), os.NewFile(uintptr(fds[1]), "channel-jail"), nil
}

// stream keeps the head and the tail of one output stream within keep
// bytes, and counts the rest: a response carries at most keep bytes of
// each stream however much the payload wrote.
type stream struct {
	mu    sync.Mutex
	keep  int64
	head  []byte
	tail  []byte // a ring: tail[at:] then tail[:at] once full
	at    int
	full  bool
	total int64
}

// captured is a stream as a response gives it: head, a line saying how
// much was cut, tail; total counts what the pump passed.
type captured struct {
	Text  string
	total int64
	Cut   int64
}

func newStream(keep int64) *stream { return &stream{keep: keep} }

func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	s.total += int64(n)
	half := int(s.keep / 2)
	if room := half - len(s.head); room > 0 {
		k := min(room, len(p))
		s.head = append(s.head, p[:k]...)
		p = p[k:]
	}
	tailCap := int(s.keep) - half
	if tailCap <= 0 || len(p) == 0 {
		return n, nil
	}
	if len(p) >= tailCap {
		s.tail = append(s.tail[:0], p[len(p)-tailCap:]...)
		s.at, s.full = 0, true
		return n, nil
	}
	for len(p) > 0 {
		if !s.full {
			k := min(tailCap-len(s.tail), len(p))
			s.tail = append(s.tail, p[:k]...)
			p = p[k:]
			if len(s.tail) == tailCap {
				s.full, s.at = true, 0
			}
			continue
		}
		k := copy(s.tail[s.at:], p)
		p = p[k:]
		s.at = (s.at + k) % tailCap
	}
	return n, nil
}

// finish returns the stream as a response gives it.
func (s *stream) finish() captured {
	s.mu.Lock()
	defer s.mu.Unlock()
	tail := s.tail
	if s.full {
		tail = append(append([]byte(nil), s.tail[s.at:]...), s.tail[:s.at]...)
	}
	kept := int64(len(s.head) + len(tail))
	out := captured{total: s.total}
	if s.total > kept {
		out.Cut = s.total - kept
		out.Text = validText(s.head) + fmt.Sprintf("\n[... %d bytes cut by rljail ...]\n", out.Cut) + validText(tail)
	} else {
		out.Text = validText(append(append([]byte(nil), s.head...), tail...))
	}
	return out
}

// validText makes b valid UTF-8 (a JSON string): each invalid sequence,
// such as a character cut at the head's edge, becomes U+FFFD.
func validText(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
