package serve

// Sessions: the persistent Python of `rljail session` behind HTTP. Each
// session is one session.Session whose Serve loop runs for the session's
// whole life on a pipe (the requests) and on a liveSession (the lines it
// writes); a WebSocket (sessions_ws.go) or a REST request only puts lines
// into that pipe and takes the lines meant for it. The protocol, the
// worker, the queue and the budgets are the session package's and the
// bridge's: nothing here answers a request of the protocol itself.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/bridge"
	"github.com/rljail/rljail/egress"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/session"
)

// SessionRequest is POST /v1/sessions's body: the flags of `rljail
// session`, each within the server's policy.
type SessionRequest struct {
	Rootfs string            `json:"rootfs,omitempty"`
	Limits *SessionLimits    `json:"limits,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	// CellTimeoutSeconds is --cell-timeout; MaxOutputChars
	// --max-output-chars; MaxCells --max-cells.
	CellTimeoutSeconds float64 `json:"cell_timeout_seconds,omitempty"`
	MaxOutputChars     int     `json:"max_output_chars,omitempty"`
	MaxCells           int     `json:"max_cells,omitempty"`
	// MaxLLMCalls and MaxToolCalls are the bridge's budgets (0: none may
	// be made; absent: the default); MaxLLMPromptChars and
	// CallTimeoutSeconds as the flags of the same names.
	MaxLLMCalls        *int    `json:"max_llm_calls,omitempty"`
	MaxToolCalls       *int    `json:"max_tool_calls,omitempty"`
	MaxLLMPromptChars  int     `json:"max_llm_prompt_chars,omitempty"`
	CallTimeoutSeconds float64 `json:"call_timeout_seconds,omitempty"`
	// Tools are --tool values: NAME or NAME:param1,param2.
	Tools []string `json:"tools,omitempty"`
	// CallbackURL, when set, is where the server itself POSTs each call
	// event while no WebSocket holds the session; the answer is the
	// call_result.
	CallbackURL string `json:"callback_url,omitempty"`
	// Volumes are configured host paths asked for by name, as /v1/run's.
	Volumes []VolumeRequest `json:"volumes,omitempty"`
	// Egress are --allow-host rules, as /v1/run's.
	Egress []string `json:"egress,omitempty"`
	// Profile is a permitted built-in profile, as /v1/run's.
	Profile string `json:"profile,omitempty"`
}

// SessionLimits are a session's jail limits, each within the server's
// max_* (timeout_seconds within [sessions] max_timeout): the whole
// session's, as for `rljail session`.
type SessionLimits struct {
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	MemoryBytes    int64   `json:"memory_bytes,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	Pids           int64   `json:"pids,omitempty"`
	TmpSizeBytes   int64   `json:"tmp_size_bytes,omitempty"`
}

// SessionResponse is POST /v1/sessions's answer.
type SessionResponse struct {
	// ID names the session in every route; it is 128 bits of
	// crypto/rand and belongs to the client that made it.
	ID string `json:"id"`
	// WebSocket is the path of the session's socket.
	WebSocket          string  `json:"websocket"`
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds"`
	// Hello is the protocol's hello reply: the limits in force.
	Hello rawJSON `json:"hello"`
}

// The REST bodies: each is one request of the protocol without id and op.
type (
	// SessionExecRequest is exec's body.
	SessionExecRequest struct {
		Code string `json:"code"`
	}
	// SessionSetRequest is set's body.
	SessionSetRequest struct {
		Name  string          `json:"name"`
		Value json.RawMessage `json:"value"`
	}
	// SessionGetRequest is get's body.
	SessionGetRequest struct {
		Name string `json:"name"`
	}
	// SessionLoadContextRequest is load_context's body: value or path.
	SessionLoadContextRequest struct {
		Value json.RawMessage `json:"value,omitempty"`
		Path  string          `json:"path,omitempty"`
	}
	// SessionFileRequest is POST files' body (put_file): data in base64.
	SessionFileRequest struct {
		Path string `json:"path"`
		Data string `json:"data"`
	}
)

// Bounds the server sets on each session's own buffers (the session
// package's, lowered where a server holds many sessions).
const (
	sessionMaxQueuedBytes = 32 << 20
	sessionStartTimeout   = 30 * time.Second
	maxSessionTools       = 64
	maxPromptCharsCap     = session.DefaultMaxCallBytes
)

// sessionSet is the server's sessions: by id, counted by client.
type sessionSet struct {
	mu       sync.Mutex
	byID     map[string]*liveSession
	perOwner map[string]int
	count    int // open and being made
	closing  bool
	// leaving holds the sessions a reload revoked whose jails are still
	// ending: out of byID (no route finds them), but the drain waits for
	// them as for the sessions it ends itself, so that the server never
	// exits while one's jail is still being killed and cleaned up.
	leaving map[*liveSession]struct{}

	open    *gauge
	memory  *gauge
	created *counterVec
	ended   *counterVec
}

func newSessionSet(reg *metrics) *sessionSet {
	ss := &sessionSet{byID: map[string]*liveSession{}, perOwner: map[string]int{}, leaving: map[*liveSession]struct{}{},
		open:    &gauge{name: "rljail_sessions_open", help: "Sessions open now."},
		memory:  &gauge{name: "rljail_sessions_memory_bound_bytes", help: "The host memory the open sessions may hold at most by their own bounds (lines, queue, calls, output captures), not counting their jails."},
		created: newCounterVec("rljail_sessions_created_total", "Sessions created."),
		ended:   newCounterVec("rljail_sessions_ended_total", "Sessions ended, by reason: deleted, closed (the protocol's close), idle_timeout, drain, revoked (a reload took the client's token away).", "reason"),
	}
	for _, f := range []family{ss.open, ss.memory, ss.created, ss.ended} {
		reg.add(f)
	}
	return ss
}

// reserve counts a session about to be made for owner, or says which cap
// it would pass.
func (ss *sessionSet) reserve(owner string, p SessionPolicy, c *Client) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.closing:
		return errDraining
	case ss.count >= p.MaxSessions:
		return fmt.Errorf("the server holds %d sessions, its most ([sessions] max_sessions): close one (DELETE) or retry later", p.MaxSessions)
	case ss.perOwner[owner] >= p.MaxPerClient:
		return fmt.Errorf("this client holds %d sessions, the most one client may ([sessions] max_per_client): close one (DELETE /v1/sessions/ID) first", p.MaxPerClient)
	case c != nil && c.MaxSessions > 0 && ss.perOwner[owner] >= c.MaxSessions:
		return fmt.Errorf("client %s holds %d sessions, its most (max_sessions in the tokens file): close one (DELETE /v1/sessions/ID) first", c.Name, c.MaxSessions)
	}
	ss.count++
	ss.perOwner[owner]++
	return nil
}

func (ss *sessionSet) unreserve(owner string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.count--
	if ss.perOwner[owner]--; ss.perOwner[owner] <= 0 {
		delete(ss.perOwner, owner)
	}
}

var errDraining = errors.New("the server is draining: no new sessions")

func (ss *sessionSet) add(ls *liveSession) {
	ss.mu.Lock()
	ss.byID[ls.id] = ls
	ss.mu.Unlock()
	ss.open.Inc()
	ss.memory.n.Add(ls.memBound)
	ss.created.WithLabelValues().Inc()
}

// remove takes ls out of the set and counts its end; once is all it
// counts (run's own remove of a session revoke took out is a no-op). It
// also forgets ls as leaving: run calls it once ls's jail is gone.
func (ss *sessionSet) remove(ls *liveSession, reason string) {
	ss.mu.Lock()
	delete(ss.leaving, ls)
	if ss.byID[ls.id] != ls {
		ss.mu.Unlock()
		return
	}
	delete(ss.byID, ls.id)
	ss.mu.Unlock()
	ss.ended1(ls, reason)
}

// revoke takes ls out of the set as remove does, and holds it as leaving
// until its jail is gone (run's remove), for the drain to wait for. False:
// ls was no longer in the set (it had ended, or was revoked already).
func (ss *sessionSet) revoke(ls *liveSession) bool {
	ss.mu.Lock()
	if ss.byID[ls.id] != ls {
		ss.mu.Unlock()
		return false
	}
	delete(ss.byID, ls.id)
	select {
	case <-ls.ended: // its jail is gone already: nothing to wait for
	default:
		ss.leaving[ls] = struct{}{}
	}
	ss.mu.Unlock()
	ss.ended1(ls, "revoked")
	return true
}

// ended1 counts the end of ls, which has just left byID.
func (ss *sessionSet) ended1(ls *liveSession, reason string) {
	ss.unreserve(ls.owner)
	ss.open.Dec()
	ss.memory.n.Add(-ls.memBound)
	ss.ended.WithLabelValues(reason).Inc()
}

func (ss *sessionSet) get(id string) *liveSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byID[id]
}

// closeAll ends every session (the drain) and waits, at most wait, until
// their jails are gone, and the jails of the sessions a reload revoked
// that are still ending (leaving) too.
func (ss *sessionSet) closeAll(wait time.Duration) {
	ss.mu.Lock()
	ss.closing = true
	open := make([]*liveSession, 0, len(ss.byID))
	for _, ls := range ss.byID {
		open = append(open, ls)
	}
	all := append(make([]*liveSession, 0, len(open)+len(ss.leaving)), open...)
	for ls := range ss.leaving {
		all = append(all, ls) // revokeSessions is ending it already
	}
	ss.mu.Unlock()
	for _, ls := range open {
		ls.setReason("drain")
		go ls.end()
	}
	deadline := time.After(wait)
	for _, ls := range all {
		select {
		case <-ls.ended:
		case <-deadline:
			return
		}
	}
}

// liveSession is one session of the server: the session's Serve loop on
// a pipe, and what takes the lines it writes.
type liveSession struct {
	id, owner string
	srv       *Server
	sess      *session.Session
	in        *io.PipeWriter
	out       *io.PipeReader
	callback  string
	maxLine   int
	memBound  int64
	ended     chan struct{}

	mu      sync.Mutex
	reason  string
	pending map[string]chan []byte // REST requests waiting, by their id's JSON
	wsBusy  bool                   // a socket holds the session (or is being accepted)
	ws      *websocket.Conn
}

// run serves the session until it ends, then removes it: its jail is gone
// when ended closes.
func (ls *liveSession) run() {
	_ = ls.sess.Serve(ls.out, ls)
	ls.sess.Close()
	ls.out.CloseWithError(errSessionEnded)
	ls.setReason("closed")
	ls.mu.Lock()
	ws, reason := ls.ws, ls.reason
	ls.ws = nil
	ls.mu.Unlock()
	close(ls.ended)
	ls.srv.sessions.remove(ls, reason)
	if ws != nil {
		code := websocket.StatusNormalClosure
		switch reason {
		case "drain":
			code = websocket.StatusGoingAway
		case "revoked":
			code = websocket.StatusPolicyViolation
		}
		go ws.Close(code, "the session ended: "+reason)
	}
}

// end kills the session's jail and ends its Serve loop (the queued
// requests are answered SessionLost).
func (ls *liveSession) end() {
	ls.sess.Close()
	ls.in.Close()
}

func (ls *liveSession) setReason(r string) {
	ls.mu.Lock()
	if ls.reason == "" {
		ls.reason = r
	}
	ls.mu.Unlock()
}

var errSessionEnded = errors.New("the session has ended")

// feed puts one request line into the session.
func (ls *liveSession) feed(line []byte) error {
	if _, err := ls.in.Write(line); err != nil {
		return errSessionEnded
	}
	return nil
}

// lineHead is what the server reads of a line the session writes.
type lineHead struct {
	ID     json.RawMessage `json:"id"`
	Event  string          `json:"event"`
	Call   *int64          `json:"call"`
	Reason string          `json:"reason"`
}

// Write takes one line of the session (Serve writes a line at a time):
// a reply to a REST request goes to it, a call event to the socket, the
// callback or a refusal, anything else to the socket if one holds the
// session. It never fails: a failed socket is let go, and the session
// goes on.
func (ls *liveSession) Write(p []byte) (int, error) {
	line := bytes.TrimSuffix(p, []byte("\n"))
	var h lineHead
	_ = json.Unmarshal(line, &h) // the session's own line: it reads
	if len(h.ID) > 0 && string(h.ID) != "null" {
		ls.mu.Lock()
		ch := ls.pending[string(h.ID)]
		delete(ls.pending, string(h.ID))
		ls.mu.Unlock()
		if ch != nil {
			ch <- bytes.Clone(line)
			return len(p), nil
		}
	}
	switch {
	case h.Event == "call" && h.Call != nil:
		if ls.sendWS(line) {
			break
		}
		// Answered from a goroutine: Write runs under the session's
		// writer lock, which its loop may be waiting for.
		if ls.callback != "" {
			go ls.callCallback(*h.Call, bytes.Clone(line))
		} else {
			go ls.answerCall(*h.Call, nil, "no runner answers this session's calls: no WebSocket holds it and it has no callback_url")
		}
	case h.Event == "closed":
		ls.setReason(h.Reason)
		ls.sendWS(line)
	default:
		ls.sendWS(line)
	}
	return len(p), nil
}

// wsWriteTimeout bounds one message to a socket: a client that does not
// read loses its socket, not the session.
const wsWriteTimeout = 10 * time.Second

// sendWS writes line to the socket holding the session; false when none
// does or the write failed (the socket is then let go).
func (ls *liveSession) sendWS(line []byte) bool {
	ls.mu.Lock()
	ws := ls.ws
	ls.mu.Unlock()
	if ws == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), wsWriteTimeout)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, line); err != nil {
		ls.detachWS(ws)
		ws.CloseNow()
		return false
	}
	return true
}

// answerCall sends the session the call_result of call: value, or the
// error message (the cell gets CallFailed with it).
func (ls *liveSession) answerCall(call int64, value json.RawMessage, errMsg string) {
	res := map[string]any{"op": "call_result", "call": call}
	if value != nil {
		res["value"] = value
	} else {
		res["error"] = errMsg
	}
	b, err := json.Marshal(res)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"op": "call_result", "call": call, "error": "the callback's answer could not be encoded"})
	}
	_ = ls.feed(append(b, '\n'))
}

// callCallback POSTs a call event to the session's callback_url and gives
// its answer to the session as the call_result. The answer is the
// runner's: at most CallbackMaxBytes of JSON, {"value": ...} or {"error":
// "..."} (a whole call_result line is taken too). What the cell learns of
// a failure is a fixed sentence; the server's log has the cause.
func (ls *liveSession) callCallback(call int64, event []byte) {
	p := ls.srv.conf().Sessions
	ctx, cancel := context.WithTimeout(context.Background(), p.CallbackTimeout)
	defer cancel()
	go func() {
		select {
		case <-ls.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(why string, err error) {
		if ls.srv.opts.Log != nil {
			ls.srv.opts.Log.Warn("session callback", "session", ls.id, "call", call, "why", why, "error", fmt.Sprint(err))
		}
		ls.answerCall(call, nil, "the runner's callback failed: "+why)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ls.callback, bytes.NewReader(event))
	if err != nil {
		fail("the request could not be made", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Rljail-Session", ls.id)
	resp, err := ls.srv.callbacks.Do(req)
	if err != nil {
		fail("no answer", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		fail(fmt.Sprintf("it answered HTTP %d", resp.StatusCode), nil)
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.CallbackMaxBytes+1))
	if err != nil {
		fail("its answer could not be read", err)
		return
	}
	if int64(len(body)) > p.CallbackMaxBytes {
		fail(fmt.Sprintf("its answer is over %d bytes", p.CallbackMaxBytes), nil)
		return
	}
	var ans struct {
		Call  *int64          `json:"call"`
		Value json.RawMessage `json:"value"`
		Error *string         `json:"error"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		fail("its answer is not a JSON object", err)
		return
	}
	switch {
	case ans.Call != nil && *ans.Call != call:
		fail(fmt.Sprintf("its answer is for call %d, not %d", *ans.Call, call), nil)
	case ans.Error != nil:
		ls.answerCall(call, nil, *ans.Error)
	case len(ans.Value) == 0:
		fail("its answer has neither value nor error", nil)
	default:
		ls.answerCall(call, ans.Value, "")
	}
}

// request sends one protocol request (req without id) and waits for its
// reply line, the client's going away, or the session's end.
func (ls *liveSession) request(ctx context.Context, req map[string]any) ([]byte, error) {
	id := "rest-" + randomHex(12)
	req["id"] = id
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode the request: %w", err)
	}
	key := `"` + id + `"`
	ch := make(chan []byte, 1)
	ls.mu.Lock()
	ls.pending[key] = ch
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		delete(ls.pending, key)
		ls.mu.Unlock()
	}()
	if err := ls.feed(append(b, '\n')); err != nil {
		return nil, err
	}
	select {
	case line := <-ch:
		return line, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-ls.ended:
		select {
		case line := <-ch:
			return line, nil
		default:
		}
		return nil, errSessionEnded
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error()) // the kernel's; never
	}
	return hex.EncodeToString(b)
}

// peerKey is the context key of a Unix peer's uid (ConnContext).
type peerKey struct{}

// ConnContext is the http.Server's ConnContext: on a Unix socket it notes
// the peer's uid (SO_PEERCRED), which owns the sessions it makes when the
// server has no token.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := unwrapConn(c).(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, cred.Uid)
}

// clientOf names who owns what r makes: the token it carried (hashed)
// when the server checks tokens, else the Unix peer's uid, else the TCP
// peer's address.
func (s *Server) clientOf(r *http.Request) string {
	if c := requestClient(r); c != nil {
		return "client:" + c.Name
	}
	if s.opts.Token != "" {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return "token:" + sha256Hex([]byte(tok))[:32]
	}
	if uid, ok := r.Context().Value(peerKey{}).(uint32); ok {
		return fmt.Sprintf("uid:%d", uid)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// sessionRoutes are the routes of sessions (docs/api.md, "Sessions").
func (s *Server) sessionRoutes() []route {
	op := func(build func(r *http.Request) (map[string]any, int, error)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.sessionOp(w, r, build) })
	}
	return []route{
		{"POST /v1/sessions", http.HandlerFunc(s.handleSessionCreate)},
		{"GET /v1/sessions/{id}", op(func(*http.Request) (map[string]any, int, error) { return map[string]any{"op": "hello"}, 0, nil })},
		{"DELETE /v1/sessions/{id}", http.HandlerFunc(s.handleSessionDelete)},
		{"GET /v1/sessions/{id}/ws", http.HandlerFunc(s.handleSessionWS)},
		{"POST /v1/sessions/{id}/exec", op(func(r *http.Request) (map[string]any, int, error) {
			var b SessionExecRequest
			if code, err := decodeStrict(r, &b); err != nil {
				return nil, code, err
			}
			return map[string]any{"op": "exec", "code": b.Code}, 0, nil
		})},
		{"POST /v1/sessions/{id}/set", op(func(r *http.Request) (map[string]any, int, error) {
			var b SessionSetRequest
			if code, err := decodeStrict(r, &b); err != nil {
				return nil, code, err
			}
			m := map[string]any{"op": "set", "name": b.Name}
			if len(b.Value) > 0 {
				m["value"] = b.Value
			}
			return m, 0, nil
		})},
		{"POST /v1/sessions/{id}/get", op(func(r *http.Request) (map[string]any, int, error) {
			var b SessionGetRequest
			if code, err := decodeStrict(r, &b); err != nil {
				return nil, code, err
			}
			return map[string]any{"op": "get", "name": b.Name}, 0, nil
		})},
		{"POST /v1/sessions/{id}/load_context", op(func(r *http.Request) (map[string]any, int, error) {
			var b SessionLoadContextRequest
			if code, err := decodeStrict(r, &b); err != nil {
				return nil, code, err
			}
			m := map[string]any{"op": "load_context"}
			if len(b.Value) > 0 {
				m["value"] = b.Value
			}
			if b.Path != "" {
				m["path"] = b.Path
			}
			return m, 0, nil
		})},
		{"POST /v1/sessions/{id}/files", op(func(r *http.Request) (map[string]any, int, error) {
			var b SessionFileRequest
			if code, err := decodeStrict(r, &b); err != nil {
				return nil, code, err
			}
			return map[string]any{"op": "put_file", "path": b.Path, "data": b.Data}, 0, nil
		})},
		{"GET /v1/sessions/{id}/files", op(func(r *http.Request) (map[string]any, int, error) {
			p := r.URL.Query().Get("path")
			if p == "" {
				return nil, 400, errors.New("path: get_file needs ?path=PATH, a path in the jail")
			}
			return map[string]any{"op": "get_file", "path": p}, 0, nil
		})},
		{"POST /v1/sessions/{id}/interrupt", op(func(*http.Request) (map[string]any, int, error) {
			return map[string]any{"op": "interrupt"}, 0, nil
		})},
	}
}

// lookupSession is the session r names, when r's client owns it; else it
// answers 404 itself (another client's session is not told apart from
// none).
func (s *Server) lookupSession(w http.ResponseWriter, r *http.Request) *liveSession {
	id := r.PathValue("id")
	ls := s.sessions.get(id)
	if ls == nil || subtle.ConstantTimeCompare([]byte(ls.owner), []byte(s.clientOf(r))) != 1 {
		writeError(w, 404, fmt.Sprintf("no session %q of this client: it never was, it ended, or another client made it", cutText(id, 64)))
		return nil
	}
	return ls
}

func cutText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// sessionOp answers a REST route with the protocol's reply.
func (s *Server) sessionOp(w http.ResponseWriter, r *http.Request, build func(*http.Request) (map[string]any, int, error)) {
	ls := s.lookupSession(w, r)
	if ls == nil {
		return
	}
	req, code, err := build(r)
	if err != nil {
		writeError(w, code, err.Error())
		return
	}
	line, err := ls.request(r.Context(), req)
	if err != nil {
		if errors.Is(err, errSessionEnded) {
			writeError(w, 410, "the session has ended")
		}
		return // the client went away: nothing to answer
	}
	// The reply may come long after the request: the server's write
	// timeout counts from the reply.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
	writeReply(w, line)
}

// writeReply answers with a protocol reply as it is. The status says
// what an HTTP client most wants to know of it: 200 when the request was
// taken by the session (ok true, or an error of the cell's), 400 for the
// supervisor's refusals of the request itself, 429 Busy, 410 SessionLost.
func writeReply(w http.ResponseWriter, line []byte) {
	var h struct {
		OK    bool `json:"ok"`
		Error *struct {
			Type   string `json:"type"`
			Origin string `json:"origin"`
		} `json:"error"`
	}
	code := 200
	if json.Unmarshal(line, &h) == nil && !h.OK && h.Error != nil && h.Error.Origin == session.OriginRljail {
		switch h.Error.Type {
		case session.ErrBadRequest, session.ErrRequestTooLarge, session.ErrUnknownOp, session.ErrBadPath, session.ErrFileTooLarge:
			code = 400
		case session.ErrBusy:
			code = 429
		case session.ErrSessionLost:
			code = 410
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(line, '\n'))
}

func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request) {
	ls := s.lookupSession(w, r)
	if ls == nil {
		return
	}
	ls.setReason("deleted")
	line, err := ls.request(context.Background(), map[string]any{"op": "close", "now": true})
	select {
	case <-ls.ended:
	case <-time.After(15 * time.Second):
		ls.end()
		<-ls.ended
	}
	if err != nil {
		writeError(w, 410, "the session has ended")
		return
	}
	writeReply(w, line)
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, 503, "the server is draining: no new sessions")
		return
	}
	var req SessionRequest
	if code, err := decodeStrict(r, &req); err != nil {
		writeError(w, code, err.Error())
		return
	}
	cfg, err := s.sessionConfig(&req)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	owner := s.clientOf(r)
	if err := s.sessions.reserve(owner, s.conf().Sessions, requestClient(r)); err != nil {
		if errors.Is(err, errDraining) {
			writeError(w, 503, err.Error())
			return
		}
		s.rejected.WithLabelValues("session_cap").Inc()
		w.Header().Set("Retry-After", "10")
		writeError(w, 429, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), sessionStartTimeout)
	sess, err := session.New(ctx, cfg)
	cancel()
	if err != nil {
		s.sessions.unreserve(owner)
		writeError(w, 500, err.Error())
		return
	}
	pr, pw := io.Pipe()
	ls := &liveSession{id: randomHex(16), owner: owner, srv: s, sess: sess, in: pw, out: pr,
		callback: req.CallbackURL, maxLine: session.DefaultMaxRequestBytes, ended: make(chan struct{}),
		pending: map[string]chan []byte{}, memBound: sessionMemoryBound(cfg)}
	s.sessions.add(ls)
	go ls.run()
	if s.draining.Load() {
		// The drain began while the jail started: closeAll missed it.
		ls.setReason("drain")
		ls.end()
		writeError(w, 503, "the server is draining: no new sessions")
		return
	}
	if cl := requestClient(r); cl != nil && !s.policy.Load().tokens.holds(cl) {
		// A reload revoked this request's token while the jail started:
		// revokeSessions missed it (Reload stores the policy before it
		// looks; this check, after add, sees the new one).
		ls.setReason("revoked")
		ls.end()
		writeError(w, 401, revokedMsg)
		return
	}
	hello, err := ls.request(r.Context(), map[string]any{"op": "hello"})
	if err != nil {
		ls.setReason("deleted")
		ls.end()
		return
	}
	writeJSON(w, 200, SessionResponse{ID: ls.id, WebSocket: "/v1/sessions/" + ls.id + "/ws",
		IdleTimeoutSeconds: s.conf().Sessions.IdleTimeout.Seconds(), Hello: rawJSON(hello)})
}

// sessionMemoryBound is what one session may hold of the server's memory
// by its own bounds: a socket's message, the session's request and
// worker lines, its queue, its calls in flight, its two output captures,
// and the line readers' buffers.
func sessionMemoryBound(c session.Config) int64 {
	return int64(c.MaxRequestBytes)*2 + int64(session.DefaultMaxReplyBytes) + int64(c.MaxQueuedBytes) +
		int64(session.DefaultMaxCallBytesHeld) + 2*int64(c.MaxOutputChars) + 4*64<<10
}

// sessionConfig checks a session request against the policy and makes
// the session's configuration; every refusal names its field.
func (s *Server) sessionConfig(req *SessionRequest) (session.Config, error) {
	conf := s.conf()
	p := conf.Sessions
	var cfg session.Config
	rt, err := s.runtime("rootfs", req.Rootfs)
	if err != nil {
		return cfg, err
	}
	j := &job{}
	var lim SessionLimits
	if req.Limits != nil {
		lim = *req.Limits
	}
	if err := s.limits(&RunLimits{MemoryBytes: lim.MemoryBytes, CPUs: lim.CPUs, Pids: lim.Pids, TmpSizeBytes: lim.TmpSizeBytes}, j); err != nil {
		return cfg, err
	}
	timeout := p.DefaultTimeout
	if t := lim.TimeoutSeconds; t != 0 {
		d, ok := durationWithin(t, time.Second, p.MaxTimeout)
		if !ok {
			return cfg, fmt.Errorf("limits.timeout_seconds %v must be at least 0.001 and at most %v (the server's [sessions] max_timeout)", t, p.MaxTimeout.Seconds())
		}
		timeout = d
	}
	var env []string
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return cfg, fmt.Errorf("env %q: a name must be non-empty without = or NUL, a value without NUL", k)
		}
		if s.opts.LLMKey != "" && (strings.Contains(v, s.opts.LLMKey) || strings.Contains(k, s.opts.LLMKey)) {
			// The bridge keeps the model's key on the host.
			return cfg, fmt.Errorf("env %q: the jail's environment would hold the model's key (--llm openai)", k)
		}
		env = append(env, k+"="+v)
	}
	seconds := func(field string, v float64, def, most time.Duration, key string) (time.Duration, error) {
		if v == 0 {
			return min(def, most), nil
		}
		d, ok := durationWithin(v, time.Second, most)
		if !ok {
			return 0, fmt.Errorf("%s %v must be at least 0.001 and at most %v (the server's [sessions] %s)", field, v, most.Seconds(), key)
		}
		return d, nil
	}
	if cfg.CellTimeout, err = seconds("cell_timeout_seconds", req.CellTimeoutSeconds, session.DefaultCellTimeout, p.MaxCellTimeout, "max_cell_timeout"); err != nil {
		return cfg, err
	}
	var callTimeout time.Duration
	if callTimeout, err = seconds("call_timeout_seconds", req.CallTimeoutSeconds, bridge.DefaultCallTimeout, p.MaxCallTimeout, "max_call_timeout"); err != nil {
		return cfg, err
	}
	switch n := req.MaxOutputChars; {
	case n == 0:
		cfg.MaxOutputChars = int(min(int64(session.DefaultMaxOutputChars), conf.MaxOutput))
	case n < 2 || int64(n) > conf.MaxOutput:
		return cfg, fmt.Errorf("max_output_chars %d must be 2 at least (head and tail) and at most %d (the server's max_output)", n, conf.MaxOutput)
	default:
		cfg.MaxOutputChars = n
	}
	if req.MaxCells < 0 {
		return cfg, fmt.Errorf("max_cells %d is negative", req.MaxCells)
	}
	cfg.MaxCells = req.MaxCells
	budget := func(field string, v *int, def, most int, key string) (int, error) {
		switch {
		case v == nil:
			return min(def, most), nil
		case *v < 0 || *v > most:
			return 0, fmt.Errorf("%s %d must be 0 (none) to %d (the server's [sessions] %s)", field, *v, most, key)
		case *v == 0:
			return -1, nil // bridge.Config: none may be made
		}
		return *v, nil
	}
	b := bridge.Config{CallTimeout: callTimeout, MaxPromptChars: bridge.DefaultMaxPromptChars}
	if b.MaxLLMCalls, err = budget("max_llm_calls", req.MaxLLMCalls, bridge.DefaultMaxLLMCalls, p.MaxLLMCalls, "max_llm_calls"); err != nil {
		return cfg, err
	}
	if b.MaxToolCalls, err = budget("max_tool_calls", req.MaxToolCalls, bridge.DefaultMaxToolCalls, p.MaxToolCalls, "max_tool_calls"); err != nil {
		return cfg, err
	}
	if n := req.MaxLLMPromptChars; n != 0 {
		if n < 0 || n > maxPromptCharsCap {
			return cfg, fmt.Errorf("max_llm_prompt_chars %d must be above 0 and at most %d (a call's size cap)", n, maxPromptCharsCap)
		}
		b.MaxPromptChars = n
	}
	if len(req.Tools) > maxSessionTools {
		return cfg, fmt.Errorf("tools: at most %d", maxSessionTools)
	}
	seen := map[string]bool{}
	for i, v := range req.Tools {
		t, err := bridge.ParseTool(v)
		if err != nil {
			return cfg, fmt.Errorf("tools[%d]: %s", i, strings.TrimPrefix(err.Error(), "--tool "))
		}
		if seen[t.Name] {
			return cfg, fmt.Errorf("tools[%d]: %s is declared twice", i, t.Name)
		}
		seen[t.Name] = true
		b.Tools = append(b.Tools, t)
	}
	if req.CallbackURL != "" {
		if err := checkCallbackURL(req.CallbackURL); err != nil {
			return cfg, fmt.Errorf("callback_url: %w", err)
		}
		if err := allowedCallback(req.CallbackURL, conf.Sessions.CallbackAllow); err != nil {
			return cfg, fmt.Errorf("callback_url: %w", err)
		}
	}
	vols, err := s.volumes(req.Volumes)
	if err != nil {
		return cfg, err
	}
	allow, err := s.egressEntries(req.Egress)
	if err != nil {
		return cfg, err
	}
	prof, err := s.profile("profile", req.Profile)
	if err != nil {
		return cfg, err
	}
	eg, err := jailEgress(allow)
	if err != nil {
		return cfg, err
	}
	cfg.Bridge = b
	cfg.Spec = jail.Spec{
		Env:     env,
		Rootfs:  rt.Dir,
		Volumes: vols,
		Egress:  eg,
		Workdir: "/tmp",
		Timeout: timeout,
		TmpSize: j.tmpSize,
		Resources: jail.Resources{
			MemoryBytes:  j.memory,
			PidsMax:      j.pids,
			CPUs:         j.cpus,
			CgroupParent: s.opts.CgroupParent,
		},
		Seccomp:       s.program(prof),
		BeforePayload: rt.Check,
	}
	cfg.IdleTimeout = p.IdleTimeout
	cfg.MaxRequestBytes = session.DefaultMaxRequestBytes
	cfg.MaxQueuedBytes = sessionMaxQueuedBytes
	if s.opts.LLM != nil {
		cfg.LLM, cfg.LLMMode = s.opts.LLM, s.opts.LLMMode
	}
	cfg.Version = s.opts.Version
	cfg.Log = s.opts.Log
	return cfg, nil
}

// checkCallbackURL refuses a callback the server should not call: not
// http(s), no host, or a literal address that egress.RefusedForCallback
// refuses (a name is checked on each address it is dialled at).
func checkCallbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", raw)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if why := egress.RefusedForCallback(a); why != "" {
			return fmt.Errorf("%q: %s is %s, which the server does not call", raw, a, why)
		}
	}
	return nil
}

// newCallbackClient is the client of the servers' requests to callbacks:
// no proxy from the environment, no redirect followed, and every address
// dialled checked (egress.RefusedForCallback), so that a name that
// resolves to the metadata service is refused as its literal address is.
func newCallbackClient(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, Control: func(network, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("callback address %q: %w", address, err)
		}
		if why := egress.RefusedForCallback(a); why != "" {
			return fmt.Errorf("callback address %s is %s", a, why)
		}
		return nil
	}}
	return &http.Client{
		Timeout:       timeout,
		Transport:     &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
