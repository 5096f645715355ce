package session

import (
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
	cfg.Record = s.auditCall
	c.br = bridge.New(cfg, a, s.cfg.AuditPrompts)
	return c
}

// openCell starts taking calls for cell.
func (c *calls) openCell(cell int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.cell = true, cell
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

// counts are the session's totals so far, as the exec reply carries them.
func (c *calls) counts() bridge.Counts {
	n := c.br.Counts()
	c.mu.Lock()
	n.Refused += c.refused
	c.mu.Unlock()
	return n
}

// take handles one call line from the worker (the channel's reader calls
// it, one line at a time).
func (c *calls) take(line []byte) {
	var m struct {
		N    json.RawMessage `json:"n"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	var n int64
	if json.Unmarshal(line, &m) != nil || json.Unmarshal(m.N, &n) != nil {
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
		c.reply(n, bridge.Result{ErrorType: bridge.ErrBadCall, Error: msg})
	}
	if !utf8.Valid(line) {
		// encoding/json replaced the bad bytes of the name silently: a
		// call that is not text is refused before the bridge sees it.
		refuse("the call is not valid UTF-8")
		return
	}
	c.mu.Lock()
	if !c.open {
		c.mu.Unlock()
		refuse("no cell is running: a call from a thread an earlier cell left is refused")
		return
	}
	if c.inflight >= maxCallsInFlight {
		c.mu.Unlock()
		refuse(fmt.Sprintf("%d calls of this cell are waiting already, the most at once", maxCallsInFlight))
		return
	}
	c.inflight++
	c.seq++
	call := bridge.Call{ID: c.seq, Cell: c.cell, Name: m.Name, Args: m.Args}
	ctx := c.ctx
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		res := c.br.Serve(ctx, call)
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
		c.wg.Done()
		c.reply(n, res)
	}()
}

// workerResult is a call's result as it goes back to the worker.
type workerResult struct {
	C         string          `json:"c"` // "result", first: the worker's reader matches the prefix
	N         int64           `json:"n"`
	Value     json.RawMessage `json:"value,omitempty"`
	ErrorType string          `json:"error_type,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// reply sends a call's result to the worker. A worker that does not read
// blocks this write only (the socket waits in Go's poller); the cell timer
// still ends the cell.
func (c *calls) reply(n int64, res bridge.Result) {
	r := workerResult{C: "result", N: n, Value: res.Value, ErrorType: res.ErrorType, Error: res.Error}
	if r.ErrorType == "" && len(r.Value) == 0 {
		r.Value = json.RawMessage("null")
	}
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(workerResult{C: "result", N: n, ErrorType: bridge.ErrFailed, Error: "the result could not be encoded"})
	}
	if err := c.s.writeWorker(append(b, '\n')); err != nil {
		c.s.cfg.Log.Debug("send a call's result to the worker", "session", c.s.id, "err", err)
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

// writeLine writes v as one JSON line to the runner.
func (s *Session) writeLine(v any) error {
	b, err := json.Marshal(v)
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
	if _, err := s.w.Write(append(b, '\n')); err != nil {
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
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	s.amu.Lock()
	defer s.amu.Unlock()
	if _, err := s.cfg.Audit.Write(append(b, '\n')); err != nil {
		s.cfg.Log.Warn("write the audit log", "err", err)
	}
}
