package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	var fetched chan fetchResult
	if j.usesLauncher() {
		host, inJail, err := channelPair()
		if err != nil {
			o.err = err
			return o
		}
		defer host.Close()
		var once sync.Once
		closeJailEnd := func() { once.Do(func() { inJail.Close() }) }
		defer closeJailEnd()
		spec.Channel = inJail
		spec.Started = func(*jail.Handle) { closeJailEnd() }
		spec.Command = append([]string{"python3", "-I", "-S", "-c", launcherSource}, j.command...)
		go func() {
			if err := writeFiles(host, j); err != nil {
				_ = err // the launcher says what it missed; the run reports
			}
		}()
		fetched = make(chan fetchResult, 1)
		go func() { fetched <- readFetched(host, len(j.fetch), j.fetchMax) }()
		// Once the jail is gone the reader sees EOF; the writer, should
		// the launcher never read, fails when host closes.
		res, err := s.runSpec(ctx, spec, j.runtime.Name, &o)
		closeJailEnd()
		o.result, o.err = res, err
		select {
		case f := <-fetched:
			o.files = f.files
		case <-time.After(2 * time.Second):
		}
	} else {
		o.result, o.err = s.runSpec(ctx, spec, j.runtime.Name, &o)
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

type launcherFile struct {
	Path string `json:"path"`
	Size int    `json:"size"`
	Mode uint32 `json:"mode"`
}

type launcherHead struct {
	Files    []launcherFile `json:"files"`
	Fetch    []string       `json:"fetch"`
	FetchMax int64          `json:"fetch_max"`
}

// writeFiles sends the launcher its header and the files' bytes.
func writeFiles(w io.Writer, j *job) error {
	head := launcherHead{Files: []launcherFile{}, Fetch: j.fetch, FetchMax: j.fetchMax}
	if head.Fetch == nil {
		head.Fetch = []string{}
	}
	for _, f := range j.files {
		head.Files = append(head.Files, launcherFile{Path: f.path, Size: len(f.data), Mode: f.mode})
	}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return err
	}
	for _, f := range j.files {
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	return nil
}

type fetchResult struct{ files []outFile }

// readFetched reads the launcher's answer as hostile data: a header of
// at most want entries, then at most max bytes in all; anything else
// ends the read with what was taken so far.
func readFetched(r io.Reader, want int, max int64) fetchResult {
	br := bufio.NewReaderSize(io.LimitReader(r, max+1<<20+int64(want)*4096), 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return fetchResult{}
	}
	var head struct {
		Files []struct {
			Path  string `json:"path"`
			Size  *int64 `json:"size"`
			Error string `json:"error"`
		} `json:"files"`
	}
	if json.Unmarshal(line, &head) != nil || len(head.Files) > want {
		return fetchResult{}
	}
	var res fetchResult
	left := max
	for _, f := range head.Files {
		o := outFile{Path: f.Path, Error: f.Error}
		if f.Size != nil {
			if *f.Size < 0 || *f.Size > left {
				break
			}
			o.Data = make([]byte, *f.Size)
			if _, err := io.ReadFull(br, o.Data); err != nil {
				break
			}
			left -= *f.Size
		} else if o.Error == "" {
			o.Error = "not taken"
		}
		res.files = append(res.files, o)
	}
	return res
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
