package session

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rljail/rljail/jail"
)

// Serve speaks the protocol: requests from r, replies to w, one JSON
// object a line. Requests are read continuously, also while a cell runs:
// interrupt, hello, call_result and malformed lines are answered at once;
// the requests for the worker, and close, are queued and run in the order
// they came (MaxQueued of them at most, beyond that Busy), so that a
// script of request lines piped in works as it reads. It returns at
// close, at the end of r (both end the session, once the queue is done),
// at the idle timeout, or when a write to w fails. The goroutine that
// reads r ends with r: a caller serving a connection closes it once Serve
// has returned.
func (s *Session) Serve(r io.Reader, w io.Writer) error {
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	closed := make(chan struct{})
	go func() {
		lr := newLineReader(r, s.cfg.MaxRequestBytes)
		for {
			line, err := lr.next()
			if errors.Is(err, errLineTooLong) {
				line, err = nil, nil // a nil line: answered RequestTooLarge
			}
			if err != nil {
				readErr <- err
				return
			}
			select {
			case lines <- line:
			case <-stop:
				return
			}
		}
	}()
	// One writer for the runner's stream: replies, and the call events
	// the bridge writes while a cell runs.
	s.wmu.Lock()
	s.w, s.writeErr = w, nil
	s.wmu.Unlock()
	werr := func() error {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return s.writeErr
	}
	send := func(v any) {
		if err := s.writeLine(v); err != nil && werr() == nil {
			// The reply itself could not be encoded.
			var id json.RawMessage
			if h, ok := v.(interface{ head() *ReplyHead }); ok {
				id = h.head().ID
			}
			_ = s.writeLine(errReply(id, ErrWorker, "the reply could not be encoded"))
		}
	}
	go s.runQueue(send, stop, closed)
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if s.cfg.IdleTimeout > 0 {
		idleTimer = time.NewTimer(s.cfg.IdleTimeout)
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	for {
		select {
		case <-readErr:
			// EOF (or a broken reader) ends the session, once the queued
			// requests are answered: a runner that pipes its requests and
			// closes its end still gets every reply.
			s.drain(closed)
			s.Close()
			return werr()
		case <-closed:
			// A queued close was answered.
			return werr()
		case <-idle:
			s.mu.Lock()
			busy := s.busy || len(s.queue) > 0
			since := time.Since(s.lastReq)
			s.mu.Unlock()
			if busy || since < s.cfg.IdleTimeout {
				idleTimer.Reset(max(s.cfg.IdleTimeout-since, s.cfg.IdleTimeout/10))
				continue
			}
			s.Close()
			send(ClosedEvent{ID: nullID, Event: "closed", Reason: "idle_timeout"})
			return werr()
		case line := <-lines:
			s.mu.Lock()
			s.lastReq = time.Now()
			s.mu.Unlock()
			if done := s.handle1(line, send); done {
				return werr()
			}
			select {
			case <-closed:
				return werr()
			default:
			}
		}
		if err := werr(); err != nil {
			s.Close()
			return err
		}
	}
}

// drain waits until the queue is done: no request for the worker queued
// or in flight (the cell timer and its grace bound each), or a queued
// close answered.
func (s *Session) drain(closed <-chan struct{}) {
	for {
		s.mu.Lock()
		busy := s.busy || len(s.queue) > 0
		s.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-closed:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitIdle waits, at most d, until no request for the worker is in
// flight (its reply written).
func (s *Session) waitIdle(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		busy := s.busy
		s.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// queued is a request waiting for the worker (or a close behind them).
type queued struct {
	req  Request
	id   json.RawMessage
	cell int // an exec's number, given as it was queued
	size int // the request's line, counted against the queue's bytes
}

// enqueue adds a request to the queue, or refuses it when the queue is
// full (MaxQueued requests, or MaxQueuedBytes of their lines). A close is
// never refused.
func (s *Session) enqueue(q queued) *protocolError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeQueued {
		// Nothing runs after the close: a request behind it would never
		// be answered by the worker.
		return refuse(ErrBadRequest, "a close is queued: the session ends once the requests before it are answered")
	}
	if q.req.Op == "close" {
		// One close is queued at most, holding nothing of its line but
		// its id: a line's other fields (a 16 MiB code) are not kept.
		s.closeQueued = true
		q.req, q.size = Request{Op: "close"}, len(q.id)
	} else {
		if len(s.queue) >= s.cfg.MaxQueued || s.queueBytes+q.size > s.cfg.MaxQueuedBytes {
			return refuse(ErrBusy, "%d requests for the worker are queued already (%d bytes), the most the queue holds (%d, %d bytes); wait for a reply, or interrupt the running cell", len(s.queue), s.queueBytes, s.cfg.MaxQueued, s.cfg.MaxQueuedBytes)
		}
		if q.req.Op == "exec" {
			s.cells++
			q.cell = s.cells
		}
	}
	s.queue = append(s.queue, q)
	s.queueBytes += q.size
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// runQueue runs the queued requests one at a time, in order, until stop;
// a queued close ends the session, replies, and closes closed.
func (s *Session) runQueue(send func(any), stop <-chan struct{}, closed chan<- struct{}) {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-stop:
				return
			}
		}
		q := s.queue[0]
		s.queue[0] = queued{}
		s.queue = s.queue[1:]
		s.queueBytes -= q.size
		s.busy = true
		s.mu.Unlock()
		if q.req.Op == "close" {
			send(s.closeReply(q.id))
			s.mu.Lock()
			s.busy = false
			s.mu.Unlock()
			close(closed)
			return
		}
		rep := s.workerOp(q.req, q.cell)
		rep.setID(q.id)
		// Busy until the reply is written: whoever waits for the queue
		// to be done (drain at EOF, a close with "now") ends the process
		// only after it.
		send(rep)
		s.mu.Lock()
		s.busy = false
		s.lastReq = time.Now()
		s.mu.Unlock()
	}
}

// closeReply ends the session and is close's reply: the session's totals.
// Requests still queued (a close with "now") are answered SessionLost.
func (s *Session) closeReply(id json.RawMessage) *CloseReply {
	reason := s.lostReason()
	res := s.Close()
	return &CloseReply{ReplyHead: ReplyHead{ID: id, OK: true}, Cells: s.cellCount(), WallMS: ms(time.Since(s.start)),
		MemoryPeakBytes: res.MemoryPeakBytes, CPUMS: res.CPUUserMS + res.CPUSystemMS, Lost: reason}
}

// handle1 answers one line; true when it was close.
func (s *Session) handle1(line []byte, send func(any)) bool {
	if line == nil {
		send(errReply(nullID, ErrRequestTooLarge, "the request is longer than the cap of %d bytes", s.cfg.MaxRequestBytes))
		return false
	}
	req, perr := parseRequest(line)
	id := req.ID
	if len(id) == 0 {
		id = nullID
	}
	if perr != nil {
		send(errReply(id, perr.typ, "%s", perr.msg))
		return false
	}
	if req.Op == "close" {
		// In order behind the queued requests, unless it is to close now
		// (or the session is lost, and nothing queued can run).
		if req.Now || s.lostReason() != "" {
			queuedClose := s.answerQueued(send)
			rep := s.closeReply(id)
			// The request that was running (lost with the jail) is
			// answered before the close, and a close that was queued
			// gets the same reply under its own id.
			s.waitIdle(5 * time.Second)
			if queuedClose != nil {
				qrep := *rep
				qrep.ID = queuedClose
				send(&qrep)
			}
			send(rep)
			return true
		}
		if perr := s.enqueue(queued{req: req, id: id}); perr != nil {
			send(errReply(id, perr.typ, "%s", perr.msg))
		}
		return false
	}
	if req.Op == "call_result" {
		s.callResult(req, send)
		return false
	}
	if reason := s.lostReason(); reason != "" {
		send(lostReply(id, reason))
		return false
	}
	switch req.Op {
	case "hello":
		send(s.hello(id))
	case "interrupt":
		send(&InterruptReply{ReplyHead{ID: id, OK: true}, s.Interrupt()})
	case "exec", "set", "get", "load_context", "put_file", "get_file":
		if perr := s.check(req); perr != nil {
			send(errReply(id, perr.typ, "%s", perr.msg))
			return false
		}
		if perr := s.enqueue(queued{req: req, id: id, size: len(line)}); perr != nil {
			send(errReply(id, perr.typ, "%s", perr.msg))
		}
	default:
		send(errReply(id, ErrUnknownOp, "unknown op %q (hello, exec, set, get, load_context, put_file, get_file, call_result, interrupt, close)", req.Op))
	}
	return false
}

// callResult hands the runner's answer to a call event to the call
// waiting for it; with an id it is answered, without one it is not.
func (s *Session) callResult(req Request, send func(any)) {
	var err error
	if req.Call == nil {
		err = refuse(ErrBadRequest, "call_result needs the event's call number")
	} else if e := s.calls.deliver(*req.Call, req.Value, req.Error); e != nil {
		err = refuse(ErrUnknownCall, "call %d is waiting for no result: answered already, timed out, or never made", *req.Call)
	}
	if len(req.ID) == 0 || string(req.ID) == "null" {
		return
	}
	if pe, ok := err.(*protocolError); ok {
		send(errReply(req.ID, pe.typ, "%s", pe.msg))
		return
	}
	send(&AckReply{ReplyHead{ID: req.ID, OK: true}})
}

// check refuses a request for the worker that the supervisor can judge
// without it.
func (s *Session) check(req Request) *protocolError {
	switch req.Op {
	case "exec":
		s.mu.Lock()
		n := s.cells
		s.mu.Unlock()
		if s.cfg.MaxCells > 0 && n >= s.cfg.MaxCells {
			return refuse(ErrCellLimit, "the session's budget of %d cells is spent", s.cfg.MaxCells)
		}
	case "set":
		if err := checkName(req.Name); err != nil {
			return err
		}
		if len(req.Value) == 0 {
			return refuse(ErrBadRequest, "set needs a value")
		}
	case "get":
		return checkName(req.Name)
	case "load_context":
		if (req.Path == "") == (len(req.Value) == 0) {
			return refuse(ErrBadRequest, "load_context needs a value or a path, one of them")
		}
	case "put_file":
		if err := checkPutPath(req.Path, s.places); err != nil {
			return err
		}
		if base64.StdEncoding.DecodedLen(len(req.Data)) > s.cfg.MaxFileBytes+2 {
			return refuse(ErrFileTooLarge, "the file is over the cap of %d bytes", s.cfg.MaxFileBytes)
		}
		data, err := base64.StdEncoding.DecodeString(req.Data)
		if err != nil {
			return refuse(ErrBadRequest, "data is not base64: %s", err)
		}
		// DecodedLen above is an upper bound (padding): the exact size.
		if len(data) > s.cfg.MaxFileBytes {
			return refuse(ErrFileTooLarge, "the file is %d bytes, over the cap of %d bytes", len(data), s.cfg.MaxFileBytes)
		}
	case "get_file":
		return checkGetPath(req.Path, s.places)
	}
	return nil
}

func (s *Session) hello(id json.RawMessage) *HelloReply {
	lim := map[string]any{
		"cell_timeout_ms":   s.cfg.CellTimeout.Milliseconds(),
		"cell_grace_ms":     s.cfg.CellGrace.Milliseconds(),
		"max_output_chars":  s.cfg.MaxOutputChars,
		"max_cells":         s.cfg.MaxCells,
		"idle_timeout_ms":   s.cfg.IdleTimeout.Milliseconds(),
		"max_request_bytes": s.cfg.MaxRequestBytes,
		"max_file_bytes":    s.cfg.MaxFileBytes,
		"max_queued":        s.cfg.MaxQueued,
		"max_call_bytes":    s.cfg.MaxCallBytes,
	}
	if s.handle != nil {
		// The jail's limits as a run's report gives them; output is the
		// session's per-cell cap, not a run's total.
		jl := s.handle.Limits()
		jl.Output = jail.Limit{Value: float64(s.cfg.MaxOutputChars), Mechanism: "session"}
		lim["jail"] = jl
	}
	for k, v := range s.calls.br.Limits() {
		lim[k] = v
	}
	lim["llm"] = s.cfg.LLMMode
	tools := []ToolInfo{}
	for _, t := range s.calls.br.Tools() {
		tools = append(tools, ToolInfo{t.Name, append([]string{}, t.Params...)})
	}
	return &HelloReply{ReplyHead: ReplyHead{ID: id, OK: true}, Protocol: ProtocolVersion, Rljail: s.cfg.Version,
		SessionID: s.id, StartMS: ms(s.started), Limits: lim, Tools: tools}
}

// answerQueued answers every request still queued SessionLost (the
// session was closed at once); a queued close is not answered here, but
// its id returned, for the close's own reply.
func (s *Session) answerQueued(send func(any)) (closeID json.RawMessage) {
	s.mu.Lock()
	q := s.queue
	s.queue, s.queueBytes = nil, 0
	s.mu.Unlock()
	for _, r := range q {
		if r.req.Op == "close" {
			closeID = r.id
			continue
		}
		if r.req.Op == "exec" {
			// Counted as it was queued; it never ran.
			s.mu.Lock()
			s.cells--
			s.mu.Unlock()
		}
		send(lostReply(r.id, "closed"))
	}
	return closeID
}

// workerOp runs one request through the worker; cell is an exec's number.
func (s *Session) workerOp(req Request, cell int) Reply {
	if req.Op == "exec" {
		return s.exec(req, cell)
	}
	msg := map[string]any{"op": req.Op}
	switch req.Op {
	case "set":
		msg["name"], msg["value"] = req.Name, req.Value
	case "get":
		msg["name"] = req.Name
	case "load_context":
		if req.Path != "" {
			msg["path"] = req.Path
		} else {
			msg["value"] = req.Value
		}
	case "put_file":
		msg["path"], msg["data"] = req.Path, req.Data
	case "get_file":
		msg["path"], msg["max"] = req.Path, s.cfg.MaxFileBytes
	}
	// These run the cells' code too (a __repr__ of theirs, a FIFO one
	// made at the path asked for): bounded as a cell is, so that no
	// request waits on the worker for ever.
	stopTimer := s.armTimer("request_timeout")
	line, lost := s.call(msg)
	timedOut := stopTimer()
	if lost != "" {
		return lostReply(nil, lost)
	}
	var w struct {
		OK    bool            `json:"ok"`
		Error *ErrorInfo      `json:"error"`
		Value json.RawMessage `json:"value"`
		JSON  *bool           `json:"json"`
		Repr  *string         `json:"repr"`
		Trunc bool            `json:"repr_truncated"`
		Names []string        `json:"names"`
		Kind  string          `json:"kind"`
		Size  int64           `json:"size"`
		Data  string          `json:"data"`
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return errReply(nil, ErrWorker, "the worker's reply does not read: %s", err)
	}
	if !w.OK {
		e := verdict(ErrWorker, "the worker's reply says the request failed, and not why")
		if w.Error != nil {
			e = s.workerError(*w.Error)
		}
		if timedOut {
			tb := e.Traceback
			e = verdict(ErrCellTimeout, req.Op+" overran --cell-timeout of "+s.cfg.CellTimeout.String()+" in the worker and was interrupted; the namespace is kept")
			e.Traceback = tb
		}
		return &ErrorReply{Error: e}
	}
	ok := ReplyHead{OK: true}
	switch req.Op {
	case "get":
		if w.JSON != nil && *w.JSON {
			return &GetReply{ReplyHead: ok, JSON: true, Value: w.Value}
		}
		r := ""
		if w.Repr != nil {
			r = *w.Repr
		}
		// The worker cuts a repr to MaxRepr; a worker a cell changed
		// would not.
		if len(r) > MaxRepr {
			r, w.Trunc = cutUTF8(r, MaxRepr), true
		}
		return &GetReply{ReplyHead: ok, Repr: &r, ReprTruncated: &w.Trunc}
	case "load_context":
		return &LoadContextReply{ok, capNames(w.Names), capKind(w.Kind)}
	case "put_file":
		return &PutFileReply{ok, w.Size}
	case "get_file":
		data, err := base64.StdEncoding.DecodeString(w.Data)
		switch {
		case err != nil:
			return errReply(nil, ErrWorker, "the worker's file data is not base64")
		case len(data) > s.cfg.MaxFileBytes:
			return errReply(nil, ErrFileTooLarge, "%s is over the cap of %d bytes", req.Path, s.cfg.MaxFileBytes)
		}
		return &GetFileReply{ok, len(data), w.Data}
	}
	return &AckReply{ok}
}

// exec runs one cell: the supervisor opens the cell's output windows,
// arms the cell timer, sends the code, and takes the worker's reply and
// end markers; what it measures (time, CPU, output) is its own.
func (s *Session) exec(req Request, cell int) *ExecReply {
	token := newToken()
	marker := endMarker(token)
	betweenOut, betweenErr := s.out.takeBetween(), s.errs.takeBetween()
	s.out.openWindow(marker)
	s.errs.openWindow(marker)
	cpu0, cpuErr := s.cpuTimeOfKnown()

	stopTimer := s.armTimer("cell_timeout")
	s.mu.Lock()
	s.execing = true
	s.mu.Unlock()
	s.calls.openCell(cell)
	t0 := time.Now()
	line, lost := s.callToken(map[string]any{"op": "exec", "code": req.Code}, token)
	wall := time.Since(t0)
	// The cell's calls end with it (cancelled if still waiting).
	s.calls.endCell()
	to := stopTimer()
	s.mu.Lock()
	s.execing = false
	s.mu.Unlock()
	if lost == "" {
		// What the cell wrote before the worker replied is in the pipes:
		// the markers say when the pumps have all of it.
		// One deadline for both: once it has passed, the other stream
		// is not waited for (a time.After's one value would have been
		// taken by the first wait, and a cell that closed both of its
		// descriptors left the second wait with nothing to end it).
		deadline := time.NewTimer(markerWait)
	markers:
		for _, c := range []*capture{s.out, s.errs} {
			select {
			case <-c.done():
			case <-deadline.C:
				break markers
			}
		}
		deadline.Stop()
	}
	stdout, stderr := s.out.finish(), s.errs.finish()
	rep := &ExecReply{ReplyHead: ReplyHead{OK: true}, Cell: cell, WallMS: ms(wall),
		Stdout: stdout.Text, Stderr: stderr.Text,
		StdoutTruncated: stdout.Truncated, StderrTruncated: stderr.Truncated,
		StdoutBytes: stdout.Bytes, StderrBytes: stderr.Bytes,
		OutputBetweenCellsBytes: betweenOut + betweenErr, Calls: s.calls.counts()}
	if cpu1, err := s.cpuTime(); err == nil && cpuErr == nil {
		v := ms(cpu1 - cpu0)
		rep.CPUMS = &v
	}
	outcome := "ok"
	switch {
	case lost != "":
		// What the supervisor measured stays in the reply.
		e := lostError(lost)
		if lost == "cell_timeout" {
			e.Message = "the cell overran its timeout of " + s.cfg.CellTimeout.String() + " and had not stopped " + s.cfg.CellGrace.String() + " after its interrupt: the jail was killed"
		}
		rep.OK, rep.Error = false, &e
		outcome = ErrSessionLost + ":" + lost
	default:
		var w struct {
			OK     bool         `json:"ok"`
			Error  *ErrorInfo   `json:"error"`
			Names  []string     `json:"names"`
			Result *ValueResult `json:"result"`
		}
		var e *ErrorInfo
		if err := json.Unmarshal(line, &w); err != nil {
			v := verdict(ErrWorker, "the worker's reply does not read: "+err.Error())
			e = &v
		} else if w.Error != nil {
			v := s.workerError(*w.Error)
			e = &v
		}
		rep.Error = e
		if e != nil {
			outcome = e.Type
		}
		if to {
			v := verdict(ErrCellTimeout, "the cell overran its timeout of "+s.cfg.CellTimeout.String()+" and was interrupted; the namespace is kept")
			if e != nil {
				v.Traceback = e.Traceback
			}
			rep.Error = &v
			outcome = ErrCellTimeout
		}
		rep.Names = capNames(w.Names)
		if w.Result != nil && e == nil && !to {
			// The worker cuts the repr to MaxRepr; a changed worker would not.
			r := *w.Result
			if len(r.Repr) > MaxRepr {
				r.Repr, r.Truncated = cutUTF8(r.Repr, MaxRepr), true
			}
			rep.Result = &r
		}
	}
	if s.cfg.Audit != nil {
		s.audit(cell, req.Code, outcome, wall, rep, stdout, stderr)
	}
	return rep
}

// armTimer bounds one request for the worker: SIGINT at --cell-timeout
// (a KeyboardInterrupt in the worker), the jail killed, for reason,
// --cell-grace later. The returned stop disarms it and says whether the
// timeout was reached; finished, under tmu, keeps a timer that fires as
// the reply arrives from arming the kill for a request that has ended.
func (s *Session) armTimer(reason string) (stop func() bool) {
	var tmu sync.Mutex
	var timedOut, finished bool
	var grace *time.Timer
	timer := time.AfterFunc(s.cfg.CellTimeout, func() {
		tmu.Lock()
		defer tmu.Unlock()
		if finished {
			return
		}
		timedOut = true
		s.signalWorker(syscall.SIGINT)
		grace = time.AfterFunc(s.cfg.CellGrace, func() { s.lose(reason) })
	})
	return func() bool {
		timer.Stop()
		tmu.Lock()
		defer tmu.Unlock()
		finished = true
		if grace != nil {
			grace.Stop()
		}
		return timedOut
	}
}

// callToken is call with a token chosen by the caller (exec's markers
// carry it).
func (s *Session) callToken(req map[string]any, token string) ([]byte, string) {
	req["t"] = token
	return s.callWith(req, token)
}

func (s *Session) cpuTime() (time.Duration, error) {
	if s.handle == nil {
		return 0, errors.New("no handle")
	}
	return s.handle.CPUTime()
}

// cpuTimeOfKnown is cpuTime for a cell's start (Handle.CPUTimeOfKnown).
func (s *Session) cpuTimeOfKnown() (time.Duration, error) {
	if s.handle == nil {
		return 0, errors.New("no handle")
	}
	return s.handle.CPUTimeOfKnown()
}

func (s *Session) cellCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cells
}

// audit writes the cell's record (before its reply, so that a crash
// leaves the evidence).
func (s *Session) audit(cell int, code, outcome string, wall time.Duration, rep *ExecReply, stdout, stderr cellOutput) {
	sum := sha256.Sum256([]byte(code))
	rec := map[string]any{
		"time": time.Now().UTC().Format(time.RFC3339Nano), "session_id": s.id, "cell": cell,
		"code": code, "code_sha256": hex.EncodeToString(sum[:]), "outcome": outcome,
		"wall_ms": ms(wall), "cpu_ms": rep.CPUMS,
		"stdout_bytes": stdout.Bytes, "stderr_bytes": stderr.Bytes,
		"stdout_truncated": stdout.Truncated, "stderr_truncated": stderr.Truncated,
	}
	if n := s.calls.unrecordedCalls(); n > 0 {
		rec["calls_unrecorded"] = n
	}
	b, _ := marshalLine(rec)
	s.amu.Lock()
	defer s.amu.Unlock()
	if _, err := s.cfg.Audit.Write(b); err != nil {
		s.cfg.Log.Warn("write the audit log", "err", err)
	}
}

// workerError is the worker's account of an exception, which the cell
// can make say anything (an exception class of its own named CellLimit, a
// __repr__ raising one named SessionLost, a patched worker, a reply it
// wrote itself). What it says goes to the runner with origin "cell", its
// texts held to the output cap (message and traceback, head and tail
// each) and its type to a name's length; a type that only the supervisor
// gives (every one of the protocol's) becomes the supervisor's WorkerError
// that says what was claimed; and the reason of a lost session is never
// the worker's. So a runner tells the supervisor's verdicts from the
// cell's exceptions by origin, and is never made to count a timeout that
// did not happen, a budget that is not spent, or a session lost that
// lives.
func (s *Session) workerError(e ErrorInfo) ErrorInfo {
	out := ErrorInfo{Type: cleanName(e.Type), Origin: OriginCell,
		Message: capText(e.Message, s.cfg.MaxOutputChars), Traceback: capText(e.Traceback, s.cfg.MaxOutputChars)}
	if out.Type == "" {
		out.Type = "Exception"
	}
	if supervisorTypes[out.Type] {
		v := verdict(ErrWorker, "the worker claimed "+out.Type+" (a type only rljail gives): "+out.Message)
		v.Message = capText(v.Message, s.cfg.MaxOutputChars)
		v.Traceback = out.Traceback
		return v
	}
	return out
}

// supervisorTypes are the error types only the supervisor gives.
var supervisorTypes = map[string]bool{
	ErrBadRequest: true, ErrRequestTooLarge: true, ErrUnknownOp: true, ErrBusy: true,
	ErrCellTimeout: true, ErrCellLimit: true, ErrSessionLost: true, ErrBadPath: true,
	ErrFileTooLarge: true, ErrWorker: true, ErrUnknownCall: true,
}

// verdict is an error the supervisor decided (origin "rljail").
func verdict(typ, msg string) ErrorInfo {
	return ErrorInfo{Type: typ, Message: msg, Origin: OriginRljail}
}

// cleanName keeps of an exception's type name what a name can hold: at
// most 200 bytes, no control characters.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
	return cutUTF8(s, 200)
}

// capKind keeps load_context's kind (the worker's word) to a short name.
func capKind(k string) string {
	return cleanName(cutUTF8(k, 32))
}

// capText holds s to max bytes of UTF-8: its head and tail, half each,
// with a mark between that says how much was cut.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	half := max / 2
	head := cutUTF8(s, half)
	tail := s[len(s)-half:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + fmt.Sprintf("\n[... %d bytes cut ...]\n", len(s)-len(head)-len(tail)) + tail
}

// cutUTF8 is s cut to at most n bytes, at a character's start.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// capNames keeps the worker's list of names within bounds.
func capNames(names []string) []string {
	if names == nil {
		return []string{}
	}
	if len(names) > 1000 {
		names = names[:1000]
	}
	out := names[:0:0]
	for _, n := range names {
		if len(n) <= 255 {
			out = append(out, n)
		}
	}
	return out
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
