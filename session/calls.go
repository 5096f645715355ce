package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/rljail/rljail/bridge"
)

// maxCallsInFlight bounds the calls one cell may have waiting at once: a
// cell that starts thousands of threads gets BadCall for the rest, not a
// goroutine each in the supervisor.
const maxCallsInFlight = 64

// maxRefusedRecords bounds the audit records of one cell's refused calls:
// a refusal costs the cell nothing (no budget, no answer), so a loop of
// them would grow the host's audit log at megabytes a second for the
// whole session. The rest are counted in the cell's own record
// (calls_unrecorded). A call the bridge takes is always recorded: the
// budgets bound those.
const maxRefusedRecords = 64

// calls is the session's side of the bridge: it takes the calls a cell
// sends over the worker's channel ({"c":"call","n":N,"name":..,"args":..}),
// has bridge.Serve check, count and answer each in a goroutine of its own,
// and sends the result back ({"c":"result","n":N,...}). Everything in a
// call is the jail's: the worker's number N is only echoed back, the
// runner sees the supervisor's own numbers, and a call is taken only
// while a cell runs.
type calls struct {
	s   *Session
	br  *bridge.Bridge
	fwd *bridge.Forwarder

	mu       sync.Mutex
	open     bool // a cell is running: its calls are taken
	cell     int
	ctx      context.Context // the running cell's: cancelled when it ends
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the cell's calls being served
	inflight int
	seq      int64 // the supervisor's call numbers (events' "call")
	refused  int   // calls refused before the bridge saw them
	// held is what the calls in flight hold, in bytes: each call's line
	// from the moment it is taken, then its result until the worker has
	// it (Config.MaxCallBytesHeld bounds it).
	held int
	// The running cell's refused calls recorded in the audit log, and
	// those left out of it (maxRefusedRecords).
	refusedRecords, unrecorded int
}

func newCalls(s *Session) *calls {
	c := &calls{s: s}
	c.fwd = bridge.NewForwarder(s.emitEvent)
	var a bridge.Answerer = c.fwd
	if s.cfg.LLM != nil {
		// --llm openai: the model calls go to the endpoint, the tools
		// still to the runner.
		a = bridge.Router{LLM: s.cfg.LLM, Tools: c.fwd}
	}
	cfg := s.cfg.Bridge
	cfg.Record = c.record
	if cfg.MaxResultBytes <= 0 || cfg.MaxResultBytes > s.cfg.MaxCallBytes {
		cfg.MaxResultBytes = s.cfg.MaxCallBytes
	}
	c.br = bridge.New(cfg, a, s.cfg.AuditPrompts)
	return c
}

// openCell starts taking calls for cell.
func (c *calls) openCell(cell int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.cell = true, cell
	c.refusedRecords, c.unrecorded = 0, 0
	c.ctx, c.cancel = context.WithCancel(context.Background())
}

// closeCell stops taking calls: the worker's reply to the request in
// flight has been read, and what follows it is no cell's.
func (c *calls) closeCell() {
	c.mu.Lock()
	c.open = false
	c.mu.Unlock()
}

// endCell stops taking calls, cancels the ones in flight (a cell that
// timed out or was interrupted leaves none behind) and waits until the
// bridge has finished with each, so that the exec reply's counts and the
// audit log are complete.
func (c *calls) endCell() {
	c.mu.Lock()
	c.open = false
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.wg.Wait()
}

// record writes a call's audit record, unless it is a refusal past the
// cell's maxRefusedRecords: that one is only counted.
func (c *calls) record(rec bridge.Record) {
	if c.s.cfg.Audit == nil {
		return
	}
	if rec.Outcome != "ok" {
		c.mu.Lock()
		skip := c.refusedRecords >= maxRefusedRecords
		if skip {
			c.unrecorded++
		} else {
			c.refusedRecords++
		}
		c.mu.Unlock()
		if skip {
			return
		}
	}
	c.s.auditCall(rec)
}

// unrecordedCalls is how many refused calls of the last cell the audit
// log left out (read after endCell).
func (c *calls) unrecordedCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unrecorded
}

// counts are the session's totals so far, as the exec reply carries them.
func (c *calls) counts() bridge.Counts {
	n := c.br.Counts()
	c.mu.Lock()
	n.Refused += c.refused
	c.mu.Unlock()
	return n
}

// take handles one call line from the worker (the channel's reader calls
// it, one line at a time, and reuses line's memory after it returns).
// Everything a call makes the supervisor hold is counted against the
// session's caps before it is kept: a line over MaxCallBytes, or one that
// would take the calls in flight over MaxCallBytesHeld, is refused at once
// with BadCall, as a call over the count of calls in flight is. A refusal
// is written to the worker from the reader itself, so that a cell that
// floods the channel and reads nothing stalls its own channel, not the
// host's memory.
func (c *calls) take(line []byte) {
	var num struct {
		N json.RawMessage `json:"n"`
	}
	var n int64
	if json.Unmarshal(line, &num) != nil || json.Unmarshal(num.N, &n) != nil {
		// Without a number there is nobody to answer.
		c.s.mu.Lock()
		c.s.discarded++
		c.s.mu.Unlock()
		return
	}
	refuse := func(msg string) {
		c.mu.Lock()
		c.refused++
		c.mu.Unlock()
		c.reply(n, bridge.Result{ErrorType: bridge.ErrBadCall, Error: msg}, 0)
	}
	size := len(line)
	if size > c.s.cfg.MaxCallBytes {
		refuse(fmt.Sprintf("the call is %d bytes of JSON, over the %d one call may be", size, c.s.cfg.MaxCallBytes))
		return
	}
	if !utf8.Valid(line) {
		// encoding/json replaced the bad bytes of the name silently: a
		// call that is not text is refused before the bridge sees it.
		refuse("the call is not valid UTF-8")
		return
	}
	c.mu.Lock()
	switch {
	case !c.open:
		c.mu.Unlock()
		refuse("no cell is running: a call from a thread an earlier cell left is refused")
		return
	case c.inflight >= maxCallsInFlight:
		c.mu.Unlock()
		refuse(fmt.Sprintf("%d calls of this cell are waiting already, the most at once", maxCallsInFlight))
		return
	case c.held+size > c.s.cfg.MaxCallBytesHeld:
		c.mu.Unlock()
		refuse(fmt.Sprintf("the calls in flight hold %d bytes already: a call of %d bytes would pass the %d they may hold at once", c.held, size, c.s.cfg.MaxCallBytesHeld))
		return
	}
	c.held += size
	c.inflight++
	c.seq++
	id, cell, ctx := c.seq, c.cell, c.ctx
	c.wg.Add(1)
	c.mu.Unlock()
	var m struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	_ = json.Unmarshal(line, &m) // it read as JSON above
	// The call goes to its goroutine as an argument, so that its
	// arguments are garbage once the bridge has taken what it needs.
	go func(call bridge.Call) {
		res := c.br.Serve(ctx, call)
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
		c.wg.Done()
		c.reply(n, res, size)
	}(bridge.Call{ID: id, Cell: cell, Name: m.Name, Args: m.Args})
}

// workerResult is a call's result as it goes back to the worker.
type workerResult struct {
	C         string          `json:"c"` // "result", first: the worker's reader matches the prefix
	N         int64           `json:"n"`
	Value     json.RawMessage `json:"value,omitempty"`
	ErrorType string          `json:"error_type,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// reply sends a call's result to the worker and gives back the held
// bytes of its line (reserved, 0 for a refusal). The result takes the
// line's place among the held bytes while it waits for the channel: one
// that would pass MaxCallBytesHeld goes back as CallFailed instead. A
// worker that does not read blocks this write only (the socket waits in
// Go's poller); the cell timer still ends the cell.
func (c *calls) reply(n int64, res bridge.Result, reserved int) {
	r := workerResult{C: "result", N: n, Value: res.Value, ErrorType: res.ErrorType, Error: res.Error}
	if r.ErrorType == "" && len(r.Value) == 0 {
		r.Value = json.RawMessage("null")
	}
	b, err := marshalLine(r)
	if err != nil {
		b, _ = marshalLine(workerResult{C: "result", N: n, ErrorType: bridge.ErrFailed, Error: "the result could not be encoded"})
	}
	res.Value, r.Value = nil, nil
	c.mu.Lock()
	if reserved > 0 && len(b) > reserved && c.held-reserved+len(b) > c.s.cfg.MaxCallBytesHeld {
		msg := fmt.Sprintf("the result is %d bytes: with the calls in flight it would pass the %d they may hold at once", len(b), c.s.cfg.MaxCallBytesHeld)
		b, _ = marshalLine(workerResult{C: "result", N: n, ErrorType: bridge.ErrFailed, Error: msg})
	}
	if reserved > 0 {
		c.held += len(b) - reserved
		reserved = len(b)
	}
	c.mu.Unlock()
	if err := c.s.writeWorker(b); err != nil {
		c.s.cfg.Log.Debug("send a call's result to the worker", "session", c.s.id, "err", err)
	}
	if reserved > 0 {
		c.mu.Lock()
		c.held -= reserved
		c.mu.Unlock()
	}
}

// deliver hands the runner's call_result to the call waiting for it.
func (c *calls) deliver(call int64, value json.RawMessage, errMsg *string) error {
	msg := ""
	if errMsg != nil {
		msg = *errMsg
		if msg == "" {
			msg = "the runner's handler failed"
		}
	}
	return c.fwd.Deliver(call, value, msg)
}

// emitEvent writes a call event to the runner, through the one writer of
// the runner's stream (lines never interleave).
func (s *Session) emitEvent(ev bridge.Event) error {
	return s.writeLine(ev)
}

// marshalLine encodes v as one JSON line, its newline included, without
// encoding/json's HTML escaping: a '<' the jail wrote stays one byte, not
// six, so that no reply or event grows past what its caps counted.
func marshalLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLine writes v as one JSON line to the runner.
func (s *Session) writeLine(v any) error {
	b, err := marshalLine(v)
	if err != nil {
		return fmt.Errorf("encode a line for the runner: %w", err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.w == nil {
		return fmt.Errorf("no runner is connected")
	}
	if s.writeErr != nil {
		return s.writeErr
	}
	if _, err := s.w.Write(b); err != nil {
		s.writeErr = err
		return err
	}
	return nil
}

// auditCall writes one call's record to the audit log: bridge.Serve calls
// it before the result goes back to the jail, so that a crash leaves the
// evidence.
func (s *Session) auditCall(rec bridge.Record) {
	if s.cfg.Audit == nil {
		return
	}
	line := struct {
		SessionID string `json:"session_id"`
		Kind      string `json:"kind"`
		bridge.Record
	}{s.id, "call", rec}
	b, err := marshalLine(line)
	if err != nil {
		return
	}
	s.amu.Lock()
	defer s.amu.Unlock()
	if _, err := s.cfg.Audit.Write(b); err != nil {
		s.cfg.Log.Warn("write the audit log", "err", err)
	}
}
