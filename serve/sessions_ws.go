package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/rljail/rljail/session"
)

// handleSessionWS is GET /v1/sessions/{id}/ws: the session protocol over
// a WebSocket, each line one text message each way (call events and
// call_result included). One socket holds a session at a time (a second
// gets 409); the session outlives a socket that goes away, and its end
// closes the socket (1000, or 1001 at the drain).
func (s *Server) handleSessionWS(w http.ResponseWriter, r *http.Request) {
	ls := s.lookupSession(w, r)
	if ls == nil {
		return
	}
	ls.mu.Lock()
	busy := ls.wsBusy
	ls.wsBusy = true
	ls.mu.Unlock()
	if busy {
		writeError(w, 409, "another WebSocket holds this session: one at a time")
		return
	}
	// The server's read and write timeouts are for requests; a socket
	// lives as long as its session (net/http leaves them on a hijacked
	// connection).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	// Accept checks the Origin header against the Host (a browser page of
	// another site cannot drive a session with the user's credentials).
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		ls.mu.Lock()
		ls.wsBusy = false
		ls.mu.Unlock()
		// The connection gets deadlines again: net/http reads what is left
		// of the body once the handler returns, and with none a client
		// that sent a Content-Length and no body would hold the connection
		// (a descriptor and a goroutine of the server) for ever, as many
		// times over as it likes. Nothing more is read (a refused upgrade
		// has no body worth waiting for: the connection closes after the
		// answer), and the answer has the time of a socket's write.
		_ = rc.SetReadDeadline(time.Now())
		_ = rc.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
		return // Accept answered
	}
	// The bound is the session's own line cap, read here message by
	// message (the library's limit would close the socket instead).
	c.SetReadLimit(-1)
	ls.mu.Lock()
	ended := false
	select {
	case <-ls.ended:
		ended = true
	default:
		ls.ws = c
	}
	ls.mu.Unlock()
	if ended {
		c.Close(websocket.StatusNormalClosure, "the session ended")
		return
	}
	// A reload that revoked this request's token while it was being
	// upgraded found no socket to close (Reload stores the policy before
	// it looks): this check, after ls.ws is set, sees the new policy.
	if cl := requestClient(r); cl != nil && !s.policy.Load().tokens.holds(cl) {
		ls.detachWS(c)
		c.Close(websocket.StatusPolicyViolation, revokedMsg)
		return
	}
	ls.readWS(c)
	ls.detachWS(c)
}

// detachWS lets the socket c go, if it still holds the session.
func (ls *liveSession) detachWS(c *websocket.Conn) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ws == c {
		ls.ws = nil
		ls.wsBusy = false
	}
}

// readWS puts each text message of c into the session as one line, until
// the socket or the session ends. A message over the session's line cap
// is read to its end, dropped and answered RequestTooLarge, as a long
// line on rljail session's stdin is; a binary message is BadRequest. A
// newline inside a message (JSON whitespace) becomes a space, so that a
// message is one line whatever its formatting.
func (ls *liveSession) readWS(c *websocket.Conn) {
	// The session's end closes the socket with its status (run), which
	// ends the read; cancelling the read would close it abruptly instead,
	// so that is only the fallback, should the close handshake hang.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-ls.ended:
			select {
			case <-time.After(2 * wsWriteTimeout):
				cancel()
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	var buf bytes.Buffer
	for {
		typ, rd, err := c.Reader(ctx)
		if err != nil {
			return
		}
		buf.Reset()
		n, err := buf.ReadFrom(io.LimitReader(rd, int64(ls.maxLine)+1))
		if err != nil {
			return
		}
		if n > int64(ls.maxLine) {
			if _, err := io.Copy(io.Discard, rd); err != nil {
				return
			}
			ls.refuseWS(session.ErrRequestTooLarge, fmt.Sprintf("the message is longer than the cap of %d bytes", ls.maxLine))
			continue
		}
		if typ != websocket.MessageText {
			ls.refuseWS(session.ErrBadRequest, "a message of the session protocol is text: one JSON request")
			continue
		}
		line := buf.Bytes()
		for i, b := range line {
			if b == '\n' {
				line[i] = ' '
			}
		}
		ls.mu.Lock()
		held := ls.ws == c
		ls.mu.Unlock()
		if !held {
			return // let go (revokeSessions): its messages are no longer the session's
		}
		if err := ls.feed(append(line, '\n')); err != nil {
			return
		}
		if buf.Cap() > 64<<10 {
			buf = bytes.Buffer{} // an idle socket keeps no large message's buffer
		}
	}
}

// refuseWS answers a message that never became a request with the
// protocol's error reply (id null, as for a line that does not read).
func (ls *liveSession) refuseWS(typ, msg string) {
	b, err := json.Marshal(session.ErrorReply{ReplyHead: session.ReplyHead{ID: json.RawMessage("null")},
		Error: session.ErrorInfo{Type: typ, Origin: session.OriginRljail, Message: msg}})
	if err != nil {
		return
	}
	ls.sendWS(b)
}

// Unwrap gives http.ResponseController and the WebSocket's Accept the
// connection's own ResponseWriter (its Hijacker and deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

const revokedMsg = "a reload revoked this client's token"

// revokeSessions ends every session owners hold (a reload took their
// client away or changed its token): each socket is closed with 1008 at
// once, each jail killed and the session removed (reason "revoked"), one
// audit line and one log line each; the session is out of the set when
// it returns. A session lives by the token that
// made it; none may outlive it, holding a jail for a client that can no
// longer reach or end it. It does not wait for the jails: the caller
// (a reload) goes on serving while they go; the drain waits for them
// (sessionSet.leaving).
func (s *Server) revokeSessions(owners map[string]bool) {
	if len(owners) == 0 {
		return
	}
	ss := s.sessions
	ss.mu.Lock()
	var held []*liveSession
	for _, ls := range ss.byID {
		if owners[ls.owner] {
			held = append(held, ls)
		}
	}
	ss.mu.Unlock()
	for _, ls := range held {
		ls.mu.Lock()
		c := ls.ws
		ls.mu.Unlock()
		if c != nil {
			ls.detachWS(c)
			// Close waits for the peer's close frame: a client that reads
			// nothing must not hold the reload.
			go c.Close(websocket.StatusPolicyViolation, revokedMsg)
		}
		ls.setReason("revoked")
		// Removed now, not when its jail is gone: from the reload on no
		// route finds it (remove is once; run's own is then a no-op).
		// It stays leaving until its jail is gone: a SIGTERM right after
		// the reload waits for it (closeAll), else the server could exit
		// with the jail half killed and its cgroup left behind.
		if !ss.revoke(ls) {
			continue // it ended by itself meanwhile, or was revoked already
		}
		go ls.end()
		if s.opts.Log != nil {
			s.opts.Log.Info("session revoked", "session", ls.id, "client", strings.TrimPrefix(ls.owner, "client:"))
		}
		if s.audit != nil {
			if err := s.audit.sessionEnded(ls.id, ls.owner, "revoked"); err != nil && s.opts.Log != nil {
				s.opts.Log.Warn("audit", "session", ls.id, "error", err.Error())
			}
		}
	}
}
