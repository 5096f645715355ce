package integration

// rljail serve's sessions through the real binary over its real socket:
// the protocol over a WebSocket (a call answered by the test on the
// socket), REST with a callback served by the test on loopback, bad
// messages and bodies, ownership (another Unix peer gets 404), the caps'
// 429, idle expiry, DELETE leaving no process (by PID, from the host),
// and the server's RSS holding 100 idle sessions. Each decides from
// outside: HTTP answers, socket frames, the host's /proc.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// createSession makes a session with body and returns its id.
func createSession(t *testing.T, s *server, body string) string {
	t.Helper()
	code, b, _ := s.do(t, "POST", "/v1/sessions", body, nil)
	if code != 200 {
		t.Fatalf("POST /v1/sessions %s: %d %s\n%s", body, code, b, s.stderr.String())
	}
	var r struct {
		ID        string         `json:"id"`
		WebSocket string         `json:"websocket"`
		Hello     map[string]any `json:"hello"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.ID) != 32 || r.WebSocket != "/v1/sessions/"+r.ID+"/ws" || r.Hello["ok"] != true {
		t.Fatalf("POST /v1/sessions: answer %s (%v)", b, err)
	}
	return r.ID
}

// reply is a protocol reply as the tests read it.
type reply struct {
	ID     any            `json:"id"`
	OK     bool           `json:"ok"`
	Stdout string         `json:"stdout"`
	Error  map[string]any `json:"error"`
	Event  string         `json:"event"`
	Call   int64          `json:"call"`
	Name   string         `json:"name"`
	Args   map[string]any `json:"args"`
	Value  any            `json:"value"`
	Reason string         `json:"reason"`
}

func (s *server) sessionOp(t *testing.T, method, id, op, body string) (int, reply) {
	t.Helper()
	path := "/v1/sessions/" + id
	if op != "" {
		path += "/" + op
	}
	code, b, _ := s.do(t, method, path, body, nil)
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		// The server's own error shape: {"error": SENTENCE}.
		var e struct{ Error string }
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Fatalf("%s %s: %d, not JSON: %s", method, path, code, b)
		}
		r = reply{Error: map[string]any{"message": e.Error}}
	}
	return code, r
}

// dialSession opens the session's WebSocket.
func (s *server) dialSession(ctx context.Context, id string) (*websocket.Conn, *http.Response, error) {
	hdr := http.Header{}
	if s.token != "" {
		hdr.Set("Authorization", "Bearer "+s.token)
	}
	hc := &http.Client{Transport: s.client.Transport}
	return websocket.Dial(ctx, strings.Replace(s.base, "http://", "ws://", 1)+"/v1/sessions/"+id+"/ws",
		&websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr})
}

func wsSend(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		b, _ = json.Marshal(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("write to the socket: %v", err)
	}
}

func wsRead(t *testing.T, c *websocket.Conn) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read the socket: %v", err)
	}
	if typ != websocket.MessageText || bytes.Contains(b, []byte("\n")) {
		t.Fatalf("a message that is not one line of text: %v %q", typ, b)
	}
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("a message that is not JSON: %q", b)
	}
	return r
}

// wsReply reads until the reply of id, answering nothing else.
func wsReply(t *testing.T, c *websocket.Conn, id any) reply {
	t.Helper()
	for {
		r := wsRead(t, c)
		if fmt.Sprint(r.ID) == fmt.Sprint(id) && r.Event == "" {
			return r
		}
		t.Logf("message before the reply of %v: %+v", id, r)
	}
}

// TestServeSessionWebSocket: the protocol over the socket: a cell's
// llm_query reaches the test as a call event and its call_result goes
// back; a second socket is 409; malformed messages (not JSON, binary, over
// the line cap, a newline inside) get the protocol's error and leave the
// session working; close ends the session and its socket with 1000.
func TestServeSessionWebSocket(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{})
	id := createSession(t, s, `{"max_llm_calls":5}`)
	ctx := context.Background()
	c, _, err := s.dialSession(ctx, id)
	if err != nil {
		t.Fatalf("dial the session's socket: %v\n%s", err, s.stderr.String())
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	if _, resp, err := s.dialSession(ctx, id); err == nil || resp == nil || resp.StatusCode != 409 {
		t.Errorf("a second socket: %v %v, want 409", resp, err)
	}
	wsSend(t, c, map[string]any{"id": 1, "op": "hello"})
	if r := wsReply(t, c, 1); !r.OK {
		t.Fatalf("hello: %+v", r)
	}
	wsSend(t, c, map[string]any{"id": 2, "op": "exec", "code": "print(llm_query('ping'))"})
	ev := wsRead(t, c)
	if ev.Event != "call" || ev.Name != "llm_query" || ev.Args["prompt"] != "ping" {
		t.Fatalf("want the call event, got %+v", ev)
	}
	wsSend(t, c, map[string]any{"op": "call_result", "call": ev.Call, "value": "pong from the runner"})
	if r := wsReply(t, c, 2); !r.OK || r.Stdout != "pong from the runner\n" || r.Error != nil {
		t.Fatalf("exec with a call: %+v", r)
	}
	// Malformed messages.
	wsSend(t, c, "this is not json")
	if r := wsRead(t, c); r.OK || r.ID != nil || r.Error["type"] != "BadRequest" {
		t.Errorf("not JSON: %+v", r)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := c.Write(wctx, websocket.MessageBinary, []byte(`{"id":3,"op":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if r := wsRead(t, c); r.OK || r.Error["type"] != "BadRequest" {
		t.Errorf("a binary message: %+v", r)
	}
	big := `{"id":4,"op":"exec","code":"` + strings.Repeat("x", 17<<20) + `"}`
	wsSend(t, c, big)
	if r := wsRead(t, c); r.OK || r.Error["type"] != "RequestTooLarge" {
		t.Errorf("a message over the cap: %+v", r)
	}
	wsSend(t, c, "{\"id\": 5,\n \"op\": \"exec\",\n \"code\": \"print(6*7)\"}")
	if r := wsReply(t, c, 5); !r.OK || r.Stdout != "42\n" {
		t.Errorf("a message with newlines: %+v", r)
	}
	// The session and the server are unharmed.
	wsSend(t, c, map[string]any{"id": 6, "op": "exec", "code": "print('still here')"})
	if r := wsReply(t, c, 6); r.Stdout != "still here\n" {
		t.Errorf("after the bad messages: %+v", r)
	}
	if code, _, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("/healthz after the bad messages: %d", code)
	}
	// A socket that goes away leaves the session; a new one takes it.
	c.Close(websocket.StatusNormalClosure, "")
	var c2 *websocket.Conn
	for i := 0; ; i++ {
		var resp *http.Response
		c2, resp, err = s.dialSession(ctx, id)
		if err == nil {
			break
		}
		if i > 50 || resp == nil || resp.StatusCode != 409 {
			t.Fatalf("a socket after the first went away: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c2.CloseNow()
	wsSend(t, c2, map[string]any{"id": 7, "op": "get", "name": "__name__"})
	if r := wsReply(t, c2, 7); !r.OK || r.Value != "__main__" {
		t.Errorf("get on the second socket: %+v", r)
	}
	wsSend(t, c2, map[string]any{"id": 8, "op": "close"})
	if r := wsReply(t, c2, 8); !r.OK {
		t.Errorf("close: %+v", r)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	_, _, err = c2.Read(rctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the socket after close: %v, want a normal closure", err)
	}
	if code, r := s.sessionOp(t, "GET", id, "", ""); code != 404 {
		t.Errorf("GET a closed session: %d %+v", code, r)
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 5*time.Second)
}

// TestServeSessionREST: REST requests with the calls answered by a
// callback the test serves on loopback; bad bodies and refused fields.
func TestServeSessionREST(t *testing.T) {
	var seen []string
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev reply
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &ev) != nil || ev.Event != "call" {
			http.Error(w, "not an event", 400)
			return
		}
		seen = append(seen, ev.Name)
		switch ev.Name {
		case "llm_query":
			fmt.Fprintf(w, `{"value":"cb says %v"}`, ev.Args["prompt"])
		case "search":
			fmt.Fprintf(w, `{"value":{"hits":[%v]}}`, ev.Args["k"])
		default:
			fmt.Fprint(w, `{"error":"no such thing"}`)
		}
	}))
	defer cb.Close()
	// Another service of the host, beside the runner's: callback_allow
	// names only the runner's /calls, so no session may be aimed here.
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		fmt.Fprint(w, `{"value":"the other service"}`)
	}))
	defer other.Close()
	s := startServer(t, asRoot, serveOpts{config: fmt.Sprintf("max_memory = \"1g\"\n[sessions]\nmax_cell_timeout = \"1m\"\nmax_llm_calls = 10\ncallback_allow = [%q]", cb.URL+"/calls/")})
	// Refused fields: each named.
	for _, c := range []struct{ body, field string }{
		{fmt.Sprintf(`{"callback_url":%q}`, other.URL+"/calls/"), "callback_allow"},
		{fmt.Sprintf(`{"callback_url":%q}`, cb.URL+"/admin"), "callback_allow"},
		{fmt.Sprintf(`{"callback_url":%q}`, cb.URL+"/calls/../admin"), "callback_url"},
		{`{"limits":{"memory_bytes":4294967296}}`, "limits.memory_bytes"},
		{`{"cell_timeout_seconds":600}`, "cell_timeout_seconds"},
		{`{"max_llm_calls":11}`, "max_llm_calls"},
		{`{"rootfs":"nope"}`, "rootfs"},
		{`{"callback_url":"ftp://127.0.0.1/x"}`, "callback_url"},
		{`{"callback_url":"http://169.254.169.254/latest"}`, "callback_url"},
		{`{"callback_url":"http://[fe80::1]/x"}`, "callback_url"},
		{`{"tools":["llm_query"]}`, "tools[0]"},
		{`{"nonsense":1}`, "nonsense"},
		{`{"limits":{"timeout_seconds":99999}}`, "limits.timeout_seconds"},
	} {
		code, b, _ := s.do(t, "POST", "/v1/sessions", c.body, nil)
		if code != 400 || !strings.Contains(string(b), c.field) {
			t.Errorf("POST /v1/sessions %s: %d %s, want 400 naming %s", c.body, code, b, c.field)
		}
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 2*time.Second)
	id := createSession(t, s, fmt.Sprintf(`{"callback_url":%q,"tools":["search:query,k"],"cell_timeout_seconds":20}`, cb.URL+"/calls"))
	code, r := s.sessionOp(t, "POST", id, "exec", `{"code":"print(llm_query('hi'))\nprint(search('q', 3))"}`)
	if code != 200 || !r.OK || r.Stdout != "cb says hi\n{'hits': [3]}\n" {
		t.Fatalf("exec through the callback: %d %+v\n%s", code, r, s.stderr.String())
	}
	if strings.Join(seen, ",") != "llm_query,search" {
		t.Errorf("the callback saw %v", seen)
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the service callback_allow does not name got %d requests", n)
	}
	if code, r := s.sessionOp(t, "POST", id, "set", `{"name":"v","value":{"a":[1,2]}}`); code != 200 || !r.OK {
		t.Errorf("set: %d %+v", code, r)
	}
	if code, r := s.sessionOp(t, "POST", id, "get", `{"name":"v"}`); code != 200 || fmt.Sprint(r.Value) != "map[a:[1 2]]" {
		t.Errorf("get: %d %+v", code, r)
	}
	if code, r := s.sessionOp(t, "POST", id, "load_context", `{"value":"the text"}`); code != 200 || !r.OK {
		t.Errorf("load_context: %d %+v", code, r)
	}
	if code, r := s.sessionOp(t, "POST", id, "files", `{"path":"/tmp/f.txt","data":"aGVsbG8K"}`); code != 200 || !r.OK {
		t.Errorf("put_file: %d %+v", code, r)
	}
	code, b, _ := s.do(t, "GET", "/v1/sessions/"+id+"/files?path=/tmp/f.txt", "", nil)
	if code != 200 || !strings.Contains(string(b), `"data":"aGVsbG8K"`) {
		t.Errorf("get_file: %d %s", code, b)
	}
	if code, r := s.sessionOp(t, "POST", id, "interrupt", ""); code != 200 || !r.OK {
		t.Errorf("interrupt: %d %+v", code, r)
	}
	// Bad bodies: HTTP's 400, or the protocol's refusal; nothing harmed.
	for _, c := range []struct {
		op, body string
		code     int
		want     string
	}{
		{"exec", `not json`, 400, "not JSON"},
		{"exec", `{"code":1}`, 400, "code"},
		{"exec", `{"code":"x","extra":1}`, 400, "extra"},
		{"exec", ``, 400, "empty"},
		{"set", `{"name":"1bad","value":1}`, 400, "BadRequest"},
		{"set", `{"name":"ok"}`, 400, "BadRequest"},
		{"files", `{"path":"/etc/passwd","data":""}`, 400, "BadPath"},
		{"files", `{"path":"/tmp/x","data":"!!!"}`, 400, "base64"},
		{"load_context", `{}`, 400, "BadRequest"},
	} {
		code, b, _ := s.do(t, "POST", "/v1/sessions/"+id+"/"+c.op, c.body, nil)
		if code != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("POST %s %q: %d %s, want %d with %q", c.op, c.body, code, b, c.code, c.want)
		}
	}
	if code, b, _ := s.do(t, "GET", "/v1/sessions/"+id+"/files", "", nil); code != 400 || !strings.Contains(string(b), "path") {
		t.Errorf("GET files without a path: %d %s", code, b)
	}
	if code, r := s.sessionOp(t, "POST", id, "exec", `{"code":"print(v['a'][1])"}`); r.Stdout != "2\n" {
		t.Errorf("the session after the bad bodies: %d %+v", code, r)
	}
	// The REST exec of a session without a callback: its call is refused
	// with the protocol's error (CallFailed in the cell).
	id2 := createSession(t, s, `{}`)
	code, r = s.sessionOp(t, "POST", id2, "exec", `{"code":"llm_query('x')"}`)
	if code != 200 || r.Error["type"] != "CallFailed" || !strings.Contains(fmt.Sprint(r.Error["message"]), "callback_url") {
		t.Errorf("a call without a runner: %d %+v", code, r)
	}
	for _, sid := range []string{id, id2} {
		if code, r := s.sessionOp(t, "DELETE", sid, "", ""); code != 200 || !r.OK {
			t.Errorf("DELETE: %d %+v", code, r)
		}
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 2*time.Second)
}

// peerCurl runs curl as the rootless test user against the server's
// socket (made 0660 and given the test user's group): another Unix peer.
func peerCurl(t *testing.T, s *server, method, path, body string) (int, string) {
	t.Helper()
	args := []string{"-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", s.sock, "-X", method, "http://rljail" + path}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "-d", body)
	}
	cmd := exec.Command("curl", args...)
	cmd.Env = modeEnv(asRootless)
	runAsMode(cmd, asRootless)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as the test user: %v %s", err, out)
	}
	text := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(text, '\n')
	code, _ := strconv.Atoi(text[i+1:])
	return code, text[:max(i, 0)]
}

// TestServeSessionOwnersCapsIdle: a session is its maker's (another Unix
// peer gets 404 for every route of it); the per-client and total caps
// answer 429 naming their key; idle sessions are closed with their jails
// and a socket holding one gets the closed event and a normal closure.
func TestServeSessionOwnersCapsIdle(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("this test needs curl, to be a second Unix peer")
	}
	s := startServer(t, asRoot, serveOpts{config: "[sessions]\nidle_timeout = \"3s\"\nmax_sessions = 3\nmax_per_client = 2",
		extraArgs: []string{"--socket-mode", "0660"}})
	if err := os.Chown(s.sock, 0, testGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(s.sock), 0o755); err != nil {
		t.Fatal(err)
	}
	a := createSession(t, s, `{}`)
	b := createSession(t, s, `{}`)
	code, body, _ := s.do(t, "POST", "/v1/sessions", `{}`, nil)
	if code != 429 || !strings.Contains(string(body), "max_per_client") {
		t.Errorf("a third session of one client: %d %s", code, body)
	}
	if code, _ := peerCurl(t, s, "GET", "/healthz", ""); code != 200 {
		t.Fatalf("the second peer cannot reach the server: %d", code)
	}
	for _, rt := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + a, ""},
		{"POST", "/v1/sessions/" + a + "/exec", `{"code":"print(1)"}`},
		{"DELETE", "/v1/sessions/" + a, ""},
		{"GET", "/v1/sessions/" + a + "/ws", ""},
	} {
		if code, out := peerCurl(t, s, rt.method, rt.path, rt.body); code != 404 {
			t.Errorf("another peer's %s %s: %d %s, want 404", rt.method, rt.path, code, out)
		}
	}
	code, out := peerCurl(t, s, "POST", "/v1/sessions", `{}`)
	if code != 200 {
		t.Fatalf("the second peer's own session: %d %s", code, out)
	}
	var other struct{ ID string }
	_ = json.Unmarshal([]byte(out), &other)
	if code, r := s.sessionOp(t, "GET", other.ID, "", ""); code != 404 {
		t.Errorf("the first peer on the second's session: %d %+v", code, r)
	}
	code, out = peerCurl(t, s, "POST", "/v1/sessions", `{}`)
	if code != 429 || !strings.Contains(out, "max_sessions") {
		t.Errorf("a session beyond max_sessions: %d %s", code, out)
	}
	// Every session is idle: each expires, a socket holding one sees it.
	c, _, err := s.dialSession(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	procs := descendants(s.cmd.Process.Pid)
	if len(procs) == 0 {
		t.Fatal("no process below the server with three sessions")
	}
	start := time.Now()
	ev := wsRead(t, c)
	if ev.Event != "closed" || ev.Reason != "idle_timeout" {
		t.Errorf("the socket's last message: %+v", ev)
	}
	if since := time.Since(start); since > 6*time.Second {
		t.Errorf("idle expiry after %v, idle_timeout 3s", since)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Read(rctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the socket at idle expiry: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range procs {
		for {
			q, alive := readProc(p.pid)
			if !alive || q.start != p.start {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("a process of an expired session is left: %v", p)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, id := range []string{a, b} {
		if code, _ := s.sessionOp(t, "GET", id, "", ""); code != 404 {
			t.Errorf("GET an expired session: %d", code)
		}
	}
	_, m, _ := s.do(t, "GET", "/metrics", "", nil)
	for _, want := range []string{`rljail_sessions_ended_total{reason="idle_timeout"} 3`, "rljail_sessions_open 0", "rljail_sessions_created_total 3", `rljail_rejected_total{reason="session_cap"} 2`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(string(m), "session"))
		}
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeSessionDelete: DELETE answers with close's reply once the
// session's processes, seen by PID from the host, are gone.
func TestServeSessionDelete(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{})
	id := createSession(t, s, `{}`)
	marker := randomToken("sessdel")
	if code, r := s.sessionOp(t, "POST", id, "exec", fmt.Sprintf(`{"code":"import subprocess; p = subprocess.Popen(['python3', '-c', 'import time; time.sleep(300)', '%s'])"}`, marker)); code != 200 || !r.OK || r.Error != nil {
		t.Fatalf("exec: %d %+v", code, r)
	}
	child, ok := findPayload(marker, s.cmd.Process.Pid, 5*time.Second)
	if !ok {
		t.Fatal("the session's subprocess never showed on the host")
	}
	procs := descendants(s.cmd.Process.Pid)
	if len(procs) < 2 {
		t.Fatalf("the session's processes: %s", procList(procs))
	}
	code, r := s.sessionOp(t, "DELETE", id, "", "")
	if code != 200 || !r.OK {
		t.Fatalf("DELETE: %d %+v", code, r)
	}
	for _, p := range append(procs, child) {
		if q, alive := readProc(p.pid); alive && q.start == p.start && !q.zombie() {
			t.Errorf("alive after DELETE answered: %v", p)
		}
	}
	if code, _ := s.sessionOp(t, "GET", id, "", ""); code != 404 {
		t.Errorf("GET after DELETE: %d", code)
	}
	if code, _ := s.sessionOp(t, "DELETE", id, "", ""); code != 404 {
		t.Errorf("a second DELETE: %d", code)
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 2*time.Second)
}

// TestServeSessionRSS states the server's own RSS (VmRSS from /proc)
// holding 100 idle sessions, and holds it under 200 MiB: the sessions'
// jails are processes of their own, not counted. SIGTERM then closes
// them all.
func TestServeSessionRSS(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{config: "[sessions]\nmax_sessions = 100\nmax_per_client = 100"})
	pid := s.cmd.Process.Pid
	before, _ := vmRSS(pid)
	start := time.Now()
	for i := 0; i < 100; i++ {
		createSession(t, s, `{"limits":{"memory_bytes":134217728}}`)
	}
	took := time.Since(start)
	time.Sleep(time.Second)
	after, ok := vmRSS(pid)
	if !ok {
		t.Fatal("no VmRSS for the server")
	}
	_, m, _ := s.do(t, "GET", "/metrics", "", nil)
	t.Logf("server VmRSS: %d KiB with no session, %d KiB with 100 idle sessions (%.0f KiB each); 100 sessions made in %v; %s",
		before>>10, after>>10, float64(after-before)/1024/100, took.Round(time.Millisecond), grepLines(string(m), "rljail_sessions_memory_bound_bytes "))
	if after > 200<<20 {
		t.Errorf("the server's RSS with 100 idle sessions is %d MiB, over 200 MiB", after>>20)
	}
	if code, _, _ := s.do(t, "POST", "/v1/sessions", `{}`, nil); code != 429 {
		t.Errorf("session 101: %d, want 429", code)
	}
	procs := descendants(pid)
	stopStart := time.Now()
	s.stop(t)
	t.Logf("SIGTERM with 100 sessions (%d processes below the server): it ended in %v", len(procs), time.Since(stopStart).Round(time.Millisecond))
	for _, p := range procs {
		if q, alive := readProc(p.pid); alive && q.start == p.start && !q.zombie() {
			t.Errorf("left after the drain: %v", p)
		}
	}
	if o := orphanedInits(); len(o) > 0 {
		t.Errorf("orphaned inits after the drain:%s", procList(o))
	}
}

// vmRSS is a process's VmRSS in bytes.
func vmRSS(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10, err == nil
		}
	}
	return 0, false
}

// TestServeSessionLLMOpenAI: serve --llm openai answers the sessions'
// model calls itself (an endpoint the test serves on loopback, its key
// from the server's environment, sent only there); a session whose env
// would hold the key is refused; tool calls still go to the runner.
func TestServeSessionLLMOpenAI(t *testing.T) {
	key := randomToken("sk-rljail-test-")
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		auths = append(auths, req.Header.Get("Authorization"))
		text := in.Model + " says "
		if len(in.Messages) > 0 {
			text += in.Messages[0].Content
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}}}})
	}))
	defer srv.Close()
	s := startServer(t, asRoot, serveOpts{env: []string{"RLJAIL_TEST_KEY=" + key},
		extraArgs: []string{"--llm", "openai", "--llm-endpoint", srv.URL + "/v1", "--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY"}})
	code, b, _ := s.do(t, "POST", "/v1/sessions", fmt.Sprintf(`{"env":{"K":%q}}`, key), nil)
	if code != 400 || !strings.Contains(string(b), "env") {
		t.Errorf("a session whose env holds the key: %d %s", code, b)
	}
	code, b, _ = s.do(t, "POST", "/v1/sessions", `{"tools":["lookup:k"]}`, nil)
	if code != 200 || !strings.Contains(string(b), `"llm":"openai"`) {
		t.Fatalf("create: %d %s", code, b)
	}
	var created struct{ ID string }
	_ = json.Unmarshal(b, &created)
	code, r := s.sessionOp(t, "POST", created.ID, "exec", `{"code":"print(llm_query('hello'))\ntry:\n    lookup('x')\nexcept CallFailed as e:\n    print('tool:', e)"}`)
	if code != 200 || !strings.HasPrefix(r.Stdout, "m1 says hello\ntool: ") || !strings.Contains(r.Stdout, "callback_url") {
		t.Errorf("exec: %d %+v", code, r)
	}
	if len(auths) != 1 || auths[0] != "Bearer "+key {
		t.Errorf("the endpoint saw Authorization %q", auths)
	}
}
