package integration

// Red-team round 7, rljail serve: what a client keeps of its access when
// a reload (SIGHUP) of --tokens-file revokes its token. Decided from the
// outside: the server closes the client's open WebSocket with 1008, no
// reply to a statement sent on it after the reload comes back, and the
// session itself ended at the reload (the client, let back in by a later
// reload, finds none).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func init() {
	attackCases = append(attackCases, attackCase{name: "serve_reload_revoked_socket", group: groupSecrets, modes: rootOnly,
		mechanism: "a client of --tokens-file opens a session's WebSocket, the operator revokes its token (SIGHUP with a file without it), and the client goes on sending exec requests on the socket it already holds",
		layer:     "Reload ends the sessions of every client it takes away or whose token it changes (their WebSockets closed with 1008, their jails killed), and a socket being upgraded or a session being made during the reload checks the new policy once it holds the session",
		run:       attackServeReloadRevokedSocket})
}

func attackServeReloadRevokedSocket(t *testing.T, m mode) {
	alpha := randomToken("alpha")
	tf := filepath.Join(newDir(t), "tokens.toml")
	writeFile(t, tf, fmt.Sprintf("[tokens.alpha]\ntoken = %q\n", alpha), 0o600)
	s := startServer(t, m, serveOpts{tcp: true, extraArgs: []string{"--tokens-file", tf}})
	defer s.stop(t)
	as := map[string]string{"Authorization": "Bearer " + alpha}
	code, b, _ := s.do(t, "POST", "/v1/sessions", `{}`, as)
	id := ""
	if i := strings.Index(string(b), `"id":"`); code == 200 && i >= 0 {
		id = string(b[i+6 : i+6+32])
	}
	if id == "" {
		t.Fatalf("POST /v1/sessions: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer " + alpha}}
	c, _, err := websocket.Dial(ctx, strings.Replace(s.base, "http://", "ws://", 1)+"/v1/sessions/"+id+"/ws",
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: s.client.Transport}, HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial the session's socket: %v", err)
	}
	defer c.CloseNow()
	wsSend(t, c, map[string]any{"id": 1, "op": "exec", "code": "x = 'before'"})
	if r := wsReply(t, c, 1); !r.OK {
		t.Fatalf("exec before the reload: %+v", r)
	}
	reloads := 0
	hup := func() {
		t.Helper()
		reloads++
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reload's log line", func() bool { return strings.Count(s.stderr.String(), `"msg":"reloaded"`) >= reloads })
	}
	writeFile(t, tf, fmt.Sprintf("[tokens.beta]\ntoken = %q\n", randomToken("beta")), 0o600)
	hup()
	if code, _, _ := s.do(t, "GET", "/v1/sessions/"+id, "", as); code != 401 {
		t.Errorf("REST with the revoked token: %d, want 401", code)
	}
	// The attack: the socket the revoked token opened goes on. A write may
	// still land in the socket's buffer; what counts is what the server
	// does with it.
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"id":2,"op":"exec","code":"x = 'after the revocation'\nprint('ran')"}`))
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != websocket.StatusPolicyViolation {
				t.Errorf("the socket ended with %v (status %d), want the server's close 1008", err, st)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the socket of a revoked token stayed open")
			}
			break
		}
		if strings.Contains(string(msg), `"ran`) || strings.Contains(string(msg), `"id":2`) {
			t.Errorf("the session answered a request on the socket of a revoked token: %s", msg)
		}
	}
	// Let alpha back in: the session did not outlive the revocation (its
	// jail went with it, TestServeReloadRevokesSessions), so nothing sent
	// on the revoked socket can have run later either.
	writeFile(t, tf, fmt.Sprintf("[tokens.alpha]\ntoken = %q\n", alpha), 0o600)
	hup()
	code, b, _ = s.do(t, "POST", "/v1/sessions/"+id+"/exec", `{"code":"print(x)"}`, as)
	if code != 404 {
		t.Errorf("after alpha came back, its session revoked at the reload answers %d %s, want 404", code, b)
	}
}

func init() {
	attackCases = append(attackCases, attackCase{name: "serve_ws_refused_upgrade_hold", group: groupDoS, modes: rootOnly,
		mechanism: "a client with one session sends GET /v1/sessions/ID/ws on 20 connections in turn, none a WebSocket handshake, each with Content-Length: 4096 and no body, to hold the server's descriptors (the handler clears the connection's deadlines before the upgrade)",
		layer:     "a refused upgrade gives the connection a deadline again, so net/http's read of the unread body ends and the server answers and closes it",
		run:       attackServeWSRefusedUpgradeHold})
}

func attackServeWSRefusedUpgradeHold(t *testing.T, m mode) {
	s := startServer(t, m, serveOpts{tcp: true, token: true})
	defer s.stop(t)
	id := createSession(t, s, `{}`)
	addr := strings.TrimPrefix(s.base, "http://")
	const n = 20
	fds := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
		return len(ents)
	}
	// One after the other (two at once would get 409, answered as any
	// request: its unread body is bounded by the server's ReadTimeout).
	// A generous hang bound, below that ReadTimeout (1 minute), which the
	// handler cleared for the upgrade.
	deadline := time.Now().Add(45 * time.Second)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/sessions/%s/ws HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 4096\r\n\r\n", id, addr, s.token)
		_ = c.SetReadDeadline(deadline)
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("connection %d: the server neither answered nor closed it (%v; read %q); it holds %d descriptors", i, err, b, fds())
		}
		if !strings.HasPrefix(string(b), "HTTP/1.1 4") {
			t.Errorf("connection %d: answer %q, want a 4xx refusal", i, b)
		}
	}
	// The session is free for a real socket afterwards.
	c, _, err := s.dialSession(context.Background(), id)
	if err != nil {
		t.Fatalf("a WebSocket after the refused upgrades: %v", err)
	}
	c.CloseNow()
}

func init() {
	attackCases = append(attackCases, attackCase{name: "serve_session_reach_own_server", group: groupNetwork, modes: rootOnly,
		mechanism: "a session's cell (POST /v1/sessions/ID/exec) connects to the server that holds the session: its Unix socket's host path, the same path below /proc/1/root and /proc/self/root, the abstract name, and its loopback TCP port, and sends GET /MARKER on each connection it gets, to drive the server (other sessions, other runs) from inside",
		layer:     "a session's jail is a jail as a run's is: a mount namespace without the host's paths, a network namespace with a loopback of its own, no descriptor of the server's but its session channel",
		run:       attackServeSessionReachOwnServer})
}

func attackServeSessionReachOwnServer(t *testing.T, m mode) {
	marker := randomToken("sessmarker")
	for _, tcp := range []bool{false, true} {
		s := startServer(t, m, serveOpts{tcp: tcp, insecure: tcp})
		port := "0"
		if tcp {
			port = s.tcp[strings.LastIndex(s.tcp, ":")+1:]
		}
		id := createSession(t, s, `{}`)
		code := fmt.Sprintf(`
import os, socket
req = b"GET /%[1]s HTTP/1.0\r\nHost: x\r\n\r\n"
hits = []
sock = %[2]q
for p in [sock, "/proc/1/root" + sock, "/proc/self/root" + sock, "\0" + sock] if sock else []:
    try:
        name = p
        if not p.startswith("\0"):
            os.chdir(os.path.dirname(p)); name = os.path.basename(p)
        s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(name); s.sendall(req); hits.append(p); s.recv(100)
    except OSError as e:
        print("unix", repr(p), e)
for host in ["127.0.0.1", "::1", "localhost"]:
    try:
        s = socket.create_connection((host, %[3]s), timeout=1); s.sendall(req); hits.append(host); s.recv(100)
    except OSError as e:
        print("tcp", host, e)
print("connected:", hits)
`, marker, s.sock, port)
		body, _ := json.Marshal(map[string]any{"code": code})
		c, r := s.sessionOp(t, "POST", id, "exec", string(body))
		if c != 200 || !r.OK || !strings.Contains(r.Stdout, "connected:") {
			t.Fatalf("tcp=%v: the attack's cell: %d %+v", tcp, c, r)
		}
		s.stop(t)
		if log := s.stderr.String(); strings.Contains(log, marker) {
			t.Errorf("tcp=%v: the server saw the cell's request (its log holds the marker):\n%s\ncell said: %s", tcp, log, r.Stdout)
		}
		t.Logf("tcp=%v: cell said: %s", tcp, r.Stdout)
	}
}
