// Package session is rljail's persistent jailed Python: one jail holding
// one worker (worker.py) whose namespace lasts from cell to cell, driven
// over JSON lines (docs/session-protocol.md). It is what an agent or a
// Recursive Language Model runner plugs in: one session per trajectory.
//
// New starts the jail through jail.Run with the embedded worker as its
// payload; Serve speaks the protocol on any reader and writer, the CLI's
// stdin and stdout (rljail session) or a socket. The worker shares its
// process with the cells, so nothing it says is trusted: the supervisor
// talks to it on a channel of its own (descriptor 3 in the jail), accepts
// only the reply carrying the token of the request in flight, caps every
// line, and enforces every limit itself (cell timeout, output cap,
// budgets), from outside the jail.
package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/bridge"
	"github.com/rljail/rljail/jail"
)

// Defaults of a zero Config.
const (
	DefaultCellTimeout     = 30 * time.Second
	DefaultCellGrace       = time.Second
	DefaultMaxOutputChars  = 10000
	DefaultMaxRequestBytes = 16 << 20
	DefaultMaxReplyBytes   = 16 << 20
	DefaultMaxFileBytes    = 8 << 20
	// DefaultMaxCallBytes caps one call a cell sends (its line on the
	// worker's channel) and one call's result; DefaultMaxCallBytesHeld
	// what all of a session's calls in flight may hold at once (their
	// lines while they wait, then their results on the way back). Both
	// bound host memory that the supervisor spends for the jail and that
	// no cgroup of the jail's is charged for (SECURITY.md).
	DefaultMaxCallBytes     = 8 << 20
	DefaultMaxCallBytesHeld = 32 << 20
	// DefaultMaxQueued and DefaultMaxQueuedBytes bound the requests for
	// the worker waiting in order behind the one running.
	DefaultMaxQueued      = 64
	DefaultMaxQueuedBytes = 64 << 20
	DefaultPython         = "python3"
	// markerWait bounds the wait, after the worker's reply, for its end
	// markers on stdout and stderr: a cell that closed or redirected its
	// descriptor 1 costs itself this much.
	markerWait = 250 * time.Millisecond
)

// Config is one session's configuration.
type Config struct {
	// Spec is the jail, as for a run: rootfs, grants, limits, profile,
	// Timeout (the whole session). Command, Stdin, Stdout, Stderr,
	// Signals, Channel and Started are the session's own.
	Spec jail.Spec
	// CellTimeout is one cell's wall-clock limit: the cell is interrupted
	// (SIGINT, a KeyboardInterrupt in the cell, state kept); CellGrace
	// later without the worker's reply the jail is killed.
	CellTimeout time.Duration
	CellGrace   time.Duration
	// MaxOutputChars caps each cell's stdout and stderr, counted in bytes
	// of UTF-8: head and tail are kept, half each.
	MaxOutputChars int
	// MaxCells ends the budget of cells (0: none); IdleTimeout ends the
	// session when no request came for that long (0: never).
	MaxCells    int
	IdleTimeout time.Duration
	// MaxRequestBytes caps a runner's line; MaxReplyBytes a worker's line
	// (over it the worker is taken as lost); MaxFileBytes put_file and
	// get_file.
	MaxRequestBytes int
	MaxReplyBytes   int
	MaxFileBytes    int
	// MaxCallBytes caps one call line from a cell and one call's result;
	// MaxCallBytesHeld what the calls in flight hold at once.
	MaxCallBytes     int
	MaxCallBytesHeld int
	// MaxQueued and MaxQueuedBytes bound the queue of requests for the
	// worker (their number, the bytes of their lines); over them Busy.
	MaxQueued      int
	MaxQueuedBytes int
	// Audit, when set, gets one JSON line per cell, written before the
	// reply.
	Audit io.Writer
	// Version is rljail's version, for hello.
	Version string
	// Python is the interpreter inside the jail.
	Python string
	// Log receives the supervisor's own diagnostics (never the protocol's
	// stream); nil discards them.
	Log *slog.Logger
	// Bridge is the policy of the calls cells make to the host (budgets,
	// the per-call timeout, the runner's tools); its Record is the
	// session's own (the audit log).
	Bridge bridge.Config
	// LLM answers the model calls (llm_query, rlm_query and their batched
	// forms); nil hands them to the runner as call events (--llm client),
	// as every tool call is. LLMMode names it for hello: client or openai.
	LLM     bridge.Answerer
	LLMMode string
	// AuditPrompts puts the prompt texts into the audit log's call records.
	AuditPrompts bool
}

func (c Config) withDefaults() Config {
	if c.CellTimeout <= 0 {
		c.CellTimeout = DefaultCellTimeout
	}
	if c.CellGrace <= 0 {
		c.CellGrace = DefaultCellGrace
	}
	if c.MaxOutputChars <= 0 {
		c.MaxOutputChars = DefaultMaxOutputChars
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxReplyBytes <= 0 {
		c.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxCallBytes <= 0 {
		c.MaxCallBytes = DefaultMaxCallBytes
	}
	if c.MaxCallBytesHeld <= 0 {
		c.MaxCallBytesHeld = DefaultMaxCallBytesHeld
	}
	c.MaxCallBytesHeld = max(c.MaxCallBytesHeld, c.MaxCallBytes)
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.Python == "" {
		c.Python = DefaultPython
	}
	if c.LLMMode == "" {
		c.LLMMode = "client"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Session is one running jail with its worker.
type Session struct {
	cfg     Config
	id      string
	start   time.Time
	started time.Duration // until the worker was ready
	cancel  context.CancelFunc
	conn    *os.File // the supervisor's end of the worker's channel
	sigs    chan os.Signal
	out     *capture
	errs    *capture
	handle  *jail.Handle
	places  filePlaces // where put_file may write and get_file read

	runDone chan struct{}
	result  jail.Result // valid once runDone is closed
	runErr  error

	lostCh   chan struct{}
	lostOnce sync.Once

	mu          sync.Mutex
	lost        string // why the session was lost; "" while alive
	token       string // the request in flight
	replyCh     chan []byte
	discarded   int64    // worker lines that were not the reply in flight
	busy        bool     // a queued request is running
	queue       []queued // requests for the worker (and a close) in order
	queueBytes  int
	closeQueued bool          // a close is queued: nothing more is
	wake        chan struct{} // a request was queued
	execing     bool          // an exec is in flight: interrupt sends SIGINT
	cells       int
	closed      bool
	lastReq     time.Time

	wmu      sync.Mutex // one writer for every line to the runner
	w        io.Writer  // the runner's stream, once Serve runs (under wmu)
	writeErr error      // its first failure (under wmu)
	amu      sync.Mutex // one writer for the audit log
	cmu      sync.Mutex // one writer for the worker's channel

	calls *calls // the bridge's side of the worker's channel
}

// New starts a session's jail and waits until its worker can run the
// first cell. ctx bounds the start only.
func New(ctx context.Context, cfg Config) (*Session, error) {
	cfg = cfg.withDefaults()
	s := &Session{
		cfg: cfg, id: newToken()[:16], start: time.Now(),
		sigs: make(chan os.Signal, 8), runDone: make(chan struct{}), lostCh: make(chan struct{}),
		out: newCapture(cfg.MaxOutputChars), errs: newCapture(cfg.MaxOutputChars),
		replyCh: make(chan []byte, 1), token: "ready", wake: make(chan struct{}, 1),
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create the worker's channel: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("create the worker's channel: %w", err)
	}
	s.conn = os.NewFile(uintptr(fds[0]), "session-channel")
	s.calls = newCalls(s)
	jailEnd := os.NewFile(uintptr(fds[1]), "session-channel-jail")

	spec := cfg.Spec
	spec.Command = workerCommand(cfg.Python, cfg.Bridge.Tools, cfg.MaxCallBytes)
	spec.Stdin = nil // a cell's stdin reads as empty
	spec.Stdout, spec.Stderr = s.out, s.errs
	// The pumps pass everything to the captures, which cap each cell: a
	// session's total output is not limited (--output-limit is a run's).
	spec.Resources.OutputBytes = math.MaxInt64 / 2
	spec.Signals = s.sigs
	spec.SignalsReady = nil
	spec.Channel = jailEnd
	startedCh := make(chan struct{})
	spec.Started = func(h *jail.Handle) {
		s.handle = h
		close(startedCh)
	}
	s.places = placesOf(spec)
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		res, err := jail.Run(runCtx, spec)
		s.result, s.runErr = res, err
		close(s.runDone)
	}()
	// The jail holds its own copy of the channel once started: ours goes,
	// so that the worker's end is gone when the worker is.
	select {
	case <-startedCh:
	case <-s.runDone:
	}
	jailEnd.Close()
	go s.readWorker()
	go s.watchRun()

	var ready []byte
	select {
	case ready = <-s.replyCh:
	case <-s.lostCh:
	case <-ctx.Done():
		s.lose("start_canceled")
	}
	if ready == nil {
		<-s.runDone
		msg := s.lostReason()
		if s.runErr != nil {
			msg = s.runErr.Error()
		} else if s.result.Error != "" {
			msg = s.result.Error
		}
		return nil, fmt.Errorf("start the session's worker: %s", msg)
	}
	s.started = time.Since(s.start)
	s.lastReq = time.Now()
	cfg.Log.Debug("session started", "session", s.id, "start", s.started)
	return s, nil
}

// filePlaces are the jail directories the file requests may use:
// put_file writes below Write (/tmp, /dev/shm and the volumes granted
// rw), get_file reads below Write and Read (the read-only volumes, which
// the jail's code reads as well). The worker in the jail does the I/O,
// so no place gives a request more than the jail's own code has.
type filePlaces struct {
	Write, Read []string
}

func placesOf(spec jail.Spec) filePlaces {
	p := filePlaces{Write: []string{"/tmp", "/dev/shm"}}
	for _, v := range spec.Volumes {
		if v.Writable {
			p.Write = append(p.Write, v.Dest)
		} else {
			p.Read = append(p.Read, v.Dest)
		}
	}
	return p
}

// ID is the session's id (in hello, the audit log and diagnostics).
func (s *Session) ID() string { return s.id }

// readWorker reads the worker's channel: each line that carries the token
// of the request in flight is its reply; anything else is counted and
// dropped. A line over MaxReplyBytes, or the channel's end, loses the
// session.
func (s *Session) readWorker() {
	lr := newLineReader(s.conn, s.cfg.MaxReplyBytes)
	lr.reuse = true // take copies what it keeps; the reply is cloned below
	for {
		line, err := lr.next()
		if errors.Is(err, errLineTooLong) {
			s.lose("worker_protocol")
			return
		}
		if err != nil {
			// The worker is gone: why is the jail's to say.
			select {
			case <-s.runDone:
			case <-time.After(2 * time.Second):
			}
			s.lose(s.runReason())
			return
		}
		var head struct {
			T string `json:"t"`
			C string `json:"c"`
		}
		err = json.Unmarshal(line, &head)
		if err == nil && head.C == "call" {
			s.calls.take(line)
			continue
		}
		if err != nil || head.T == "" {
			s.mu.Lock()
			s.discarded++
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		if head.T != s.token {
			s.discarded++
			s.mu.Unlock()
			continue
		}
		s.token = "" // one reply per request
		s.mu.Unlock()
		// The cell has ended with its reply: a call read after it (a
		// thread the cell left running) belongs to no cell.
		s.calls.closeCell()
		s.replyCh <- bytes.Clone(line)
	}
}

// watchRun loses the session when the jail ends.
func (s *Session) watchRun() {
	<-s.runDone
	s.lose(s.runReason())
}

// runReason names why the jail ended, from its result; a session the
// runner closed (its worker ends at the channel's close) is "closed".
func (s *Session) runReason() string {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "closed"
	}
	select {
	case <-s.runDone:
	default:
		return "worker_exited"
	}
	switch s.result.Status {
	case jail.StatusTimeout:
		return "timeout"
	case jail.StatusMemoryLimit:
		return "memory_limit"
	case jail.StatusSeccompViolation:
		return "seccomp"
	case jail.StatusCPULimit:
		return "cpu_limit"
	case jail.StatusPidsLimit:
		return "pids_limit"
	case jail.StatusSetupError:
		if s.runErr != nil && errors.Is(s.runErr, context.Canceled) {
			return "killed"
		}
		return "setup_error"
	}
	return "worker_exited"
}

// lose marks the session lost (once) and kills the jail.
func (s *Session) lose(reason string) {
	s.lostOnce.Do(func() {
		s.mu.Lock()
		s.lost = reason
		s.mu.Unlock()
		s.cancel()
		close(s.lostCh)
		s.cfg.Log.Debug("session lost", "session", s.id, "reason", reason)
	})
}

func (s *Session) lostReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Close ends the session: the worker's channel closes (the worker exits),
// and the jail is killed if it has not ended within a second. It returns
// once nothing of the jail is left. It may be called more than once.
func (s *Session) Close() jail.Result {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.conn.Close()
	select {
	case <-s.runDone:
	case <-time.After(time.Second):
		s.lose("closed")
		<-s.runDone
	}
	s.lose("closed")
	return s.result
}

// call sends one request to the worker with a fresh token and waits for
// its reply, or for the session's loss (then it returns the reason).
func (s *Session) call(req map[string]any) ([]byte, string) {
	token := newToken()
	req["t"] = token
	return s.callWith(req, token)
}

func (s *Session) callWith(req map[string]any, token string) ([]byte, string) {
	b, err := marshalLine(req)
	if err != nil {
		return nil, "worker_protocol"
	}
	s.mu.Lock()
	if s.lost != "" {
		s.mu.Unlock()
		return nil, s.lost
	}
	s.token = token
	s.mu.Unlock()
	// The socket waits in Go's poller: a worker that does not read blocks
	// this write only, never the protocol's reader.
	if err := s.writeWorker(b); err != nil {
		s.lose(s.runReason())
	}
	select {
	case line := <-s.replyCh:
		return line, ""
	case <-s.lostCh:
		return nil, s.lostReason()
	}
}

// writeWorker writes one line to the worker's channel: requests and the
// calls' results share it, a line at a time.
func (s *Session) writeWorker(b []byte) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	_, err := s.conn.Write(b)
	return err
}

// signalWorker passes sig to the worker (the jail's init sends it on; a
// SIGINT never kills the jail).
func (s *Session) signalWorker(sig syscall.Signal) {
	select {
	case s.sigs <- sig:
	default:
	}
}

// Interrupt interrupts the running cell, if any (a KeyboardInterrupt in
// it); it reports whether a cell was running.
func (s *Session) Interrupt() bool {
	s.mu.Lock()
	running := s.execing
	s.mu.Unlock()
	if running {
		s.signalWorker(syscall.SIGINT)
	}
	return running
}
