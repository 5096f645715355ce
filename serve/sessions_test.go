package serve

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func testServer(cfg Config) *Server {
	return New(Options{Config: cfg, Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent", PythonVersion: "3.11.2"}}})
}

func intp(n int) *int { return &n }

// TestSessionConfigRefusals: every field over the policy is refused with
// a sentence naming it; what is granted is what was asked.
func TestSessionConfigRefusals(t *testing.T) {
	s := testServer(Config{MaxMemory: 1 << 30, Sessions: SessionPolicy{MaxCellTimeout: time.Minute, MaxLLMCalls: 10, MaxTimeout: time.Hour}})
	for _, c := range []struct {
		req   SessionRequest
		field string
	}{
		{SessionRequest{Rootfs: "other"}, "rootfs"},
		{SessionRequest{Limits: &SessionLimits{MemoryBytes: 2 << 30}}, "limits.memory_bytes"},
		{SessionRequest{Limits: &SessionLimits{CPUs: 99}}, "limits.cpus"},
		{SessionRequest{Limits: &SessionLimits{Pids: -1}}, "limits.pids"},
		{SessionRequest{Limits: &SessionLimits{TimeoutSeconds: 7200}}, "limits.timeout_seconds"},
		{SessionRequest{CellTimeoutSeconds: 61}, "cell_timeout_seconds"},
		{SessionRequest{CellTimeoutSeconds: -1}, "cell_timeout_seconds"},
		{SessionRequest{CallTimeoutSeconds: 1e9}, "call_timeout_seconds"},
		{SessionRequest{MaxOutputChars: 1}, "max_output_chars"},
		{SessionRequest{MaxOutputChars: 1 << 30}, "max_output_chars"},
		{SessionRequest{MaxCells: -1}, "max_cells"},
		{SessionRequest{MaxLLMCalls: intp(11)}, "max_llm_calls"},
		{SessionRequest{MaxToolCalls: intp(-1)}, "max_tool_calls"},
		{SessionRequest{MaxLLMPromptChars: 1 << 30}, "max_llm_prompt_chars"},
		{SessionRequest{Tools: []string{"bad name"}}, "tools[0]"},
		{SessionRequest{Tools: []string{"a", "a:x"}}, "tools[1]"},
		{SessionRequest{Env: map[string]string{"A=B": "c"}}, "env"},
		{SessionRequest{CallbackURL: "file:///etc/passwd"}, "callback_url"},
		{SessionRequest{CallbackURL: "http://169.254.169.254/"}, "callback_url"},
		{SessionRequest{CallbackURL: "http://[::ffff:169.254.169.254]/"}, "callback_url"},
		{SessionRequest{CallbackURL: "http:///x"}, "callback_url"},
	} {
		_, err := s.sessionConfig(&c.req)
		if err == nil || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("%+v: %v, want an error naming %s", c.req, err, c.field)
		}
	}
	cfg, err := s.sessionConfig(&SessionRequest{CellTimeoutSeconds: 5, MaxLLMCalls: intp(0), MaxToolCalls: intp(3),
		Tools: []string{"search:query,k"}, CallbackURL: "http://127.0.0.1:9/cb", Limits: &SessionLimits{MemoryBytes: 1 << 28, TimeoutSeconds: 60}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CellTimeout != 5*time.Second || cfg.Bridge.MaxLLMCalls != -1 || cfg.Bridge.MaxToolCalls != 3 || len(cfg.Bridge.Tools) != 1 ||
		cfg.Spec.Resources.MemoryBytes != 1<<28 || cfg.Spec.Timeout != time.Minute || cfg.IdleTimeout != DefaultSessionPolicy.IdleTimeout {
		t.Errorf("granted: %+v", cfg)
	}
	cfg, err = s.sessionConfig(&SessionRequest{})
	if err != nil || cfg.Bridge.MaxLLMCalls != 10 || cfg.Spec.Timeout != 30*time.Minute || cfg.CellTimeout != 30*time.Second {
		t.Errorf("defaults: %v %+v", err, cfg)
	}
}

func TestParseConfigSessions(t *testing.T) {
	c, err := ParseConfig([]byte("[sessions]\nidle_timeout = \"2s\"\nmax_sessions = 5\nmax_per_client = 2\ncallback_max_bytes = \"1m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Sessions; p.IdleTimeout != 2*time.Second || p.MaxSessions != 5 || p.MaxPerClient != 2 || p.CallbackMaxBytes != 1<<20 || p.MaxTimeout != time.Hour {
		t.Errorf("policy: %+v", p)
	}
	for _, bad := range []string{
		"[sessions]\nidle = \"2s\"",
		"[sessions]\nidle_timeout = \"soon\"",
		"[sessions]\nmax_sessions = -1",
		"[sessions]\nmax_sessions = 2\nmax_per_client = 3",
		"[sessions]\nmax_timeout = \"1m\"\ndefault_timeout = \"2m\"",
		"[sessions]\ncallback_max_bytes = \"lots\"",
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%q: taken", bad)
		}
	}
}

func TestSessionCaps(t *testing.T) {
	ss := newSessionSet(&metrics{})
	p := SessionPolicy{MaxSessions: 3, MaxPerClient: 2}
	for i, c := range []struct {
		owner, want string
	}{{"a", ""}, {"a", ""}, {"a", "max_per_client"}, {"b", ""}, {"b", "max_sessions"}} {
		err := ss.reserve(c.owner, p, nil)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%d %s: %v, want %q", i, c.owner, err, c.want)
		}
	}
	ss.unreserve("a")
	if err := ss.reserve("b", p, nil); err != nil {
		t.Errorf("after one ended: %v", err)
	}
}

// TestCloseAllWaitsForRevoked: a session revoke took out of the set is
// held as leaving until its jail is gone, and closeAll (the drain) waits
// for it; one whose jail had gone already is not held.
func TestCloseAllWaitsForRevoked(t *testing.T) {
	ss := newSessionSet(&metrics{})
	p := SessionPolicy{MaxSessions: 3, MaxPerClient: 3}
	mk := func(id string) *liveSession {
		if err := ss.reserve("a", p, nil); err != nil {
			t.Fatal(err)
		}
		ls := &liveSession{id: id, owner: "a", ended: make(chan struct{})}
		ss.add(ls)
		return ls
	}
	ending, gone := mk("ending"), mk("gone")
	close(gone.ended)
	if !ss.revoke(ending) || !ss.revoke(gone) {
		t.Fatal("revoke: a session of the set was not found")
	}
	if ss.revoke(ending) {
		t.Error("a session revoked twice was found in the set again")
	}
	if ss.get("ending") != nil || ss.get("gone") != nil {
		t.Error("a revoked session is still in the set")
	}
	if _, held := ss.leaving[gone]; held || len(ss.leaving) != 1 {
		t.Errorf("leaving holds %d sessions, want the one whose jail is still ending", len(ss.leaving))
	}
	const jailEnds = 200 * time.Millisecond
	go func() { // what run does once the jail is gone
		time.Sleep(jailEnds)
		close(ending.ended)
		ss.remove(ending, "closed")
	}()
	start := time.Now()
	ss.closeAll(10 * time.Second)
	if took := time.Since(start); took < jailEnds {
		t.Errorf("closeAll returned after %v, before the revoked session's jail was gone (%v)", took, jailEnds)
	}
	time.Sleep(20 * time.Millisecond) // the remove after close(ended)
	ss.mu.Lock()
	n := len(ss.leaving)
	ss.mu.Unlock()
	if n != 0 {
		t.Errorf("leaving still holds %d sessions after their jails were gone", n)
	}
	if err := ss.reserve("a", p, nil); err == nil {
		t.Error("a session was reserved after closeAll")
	}
}

// TestSessionRoutesNotFound: an unknown or another client's session is
// 404 on every route; a wrong token is 401 before that.
func TestSessionRoutesNotFound(t *testing.T) {
	s := New(Options{Token: "0123456789abcdef0", Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	h := s.Handler()
	for _, rt := range s.sessionRoutes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if path == "/v1/sessions" {
			continue
		}
		path = strings.Replace(path, "{id}", "0123456789abcdef0123456789abcdef", 1)
		for _, c := range []struct {
			token string
			code  int
		}{{"0123456789abcdef0", 404}, {"another-token-000", 401}} {
			req := httptest.NewRequest(method, path, strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+c.token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != c.code {
				t.Errorf("%s %s with token %s: %d %s, want %d", method, path, c.token, w.Code, w.Body, c.code)
			}
		}
	}
	req := httptest.NewRequest("POST", "/v1/sessions", strings.NewReader(`{"limits":{"memory_bytes":-5}}`))
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 400 || !strings.Contains(w.Body.String(), "limits.memory_bytes") {
		t.Errorf("a bad session request: %d %s", w.Code, w.Body)
	}
}

func TestWriteReplyStatus(t *testing.T) {
	for _, c := range []struct {
		line string
		code int
	}{
		{`{"id":"x","ok":true}`, 200},
		{`{"id":"x","ok":false,"error":{"type":"KeyError","origin":"cell"}}`, 200},
		{`{"id":"x","ok":false,"error":{"type":"BadRequest","origin":"cell"}}`, 200},
		{`{"id":"x","ok":false,"error":{"type":"BadRequest","origin":"rljail"}}`, 400},
		{`{"id":"x","ok":false,"error":{"type":"BadPath","origin":"rljail"}}`, 400},
		{`{"id":"x","ok":false,"error":{"type":"Busy","origin":"rljail"}}`, 429},
		{`{"id":"x","ok":false,"error":{"type":"SessionLost","origin":"rljail","reason":"timeout"}}`, 410},
	} {
		w := httptest.NewRecorder()
		writeReply(w, []byte(c.line))
		if w.Code != c.code || strings.TrimSpace(w.Body.String()) != c.line {
			t.Errorf("%s: %d %s, want %d", c.line, w.Code, w.Body, c.code)
		}
	}
}

// TestLiveSessionLines: the lines a session writes go where they
// belong: a REST request's reply to it, a call event with no socket and
// no callback back to the session as the protocol's call_result error.
func TestLiveSessionLines(t *testing.T) {
	pr, pw := io.Pipe()
	ls := &liveSession{id: "x", srv: testServer(Config{}), in: pw, out: pr, ended: make(chan struct{}), pending: map[string]chan []byte{}}
	ch := make(chan []byte, 1)
	ls.pending[`"rest-1"`] = ch
	if n, err := ls.Write([]byte(`{"id":"rest-1","ok":true}` + "\n")); err != nil || n == 0 {
		t.Fatal(n, err)
	}
	if got := string(<-ch); got != `{"id":"rest-1","ok":true}` {
		t.Errorf("the reply: %s", got)
	}
	if _, err := ls.Write([]byte(`{"id":"rest-1","ok":true}` + "\n")); err != nil {
		t.Errorf("a second reply of the same id (nobody waits): %v", err)
	}
	if _, err := ls.Write([]byte(`{"event":"call","call":7,"cell":1,"name":"llm_query","args":{"prompt":"p","model":null}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(pr).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Op    string `json:"op"`
		Call  int64  `json:"call"`
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &res) != nil || res.Op != "call_result" || res.Call != 7 || !strings.Contains(res.Error, "callback_url") {
		t.Errorf("the refused call's result: %s", line)
	}
	// A line that does not read (never the session's) is dropped.
	if _, err := ls.Write([]byte("garbage\n")); err != nil {
		t.Error(err)
	}
}

// TestCallbackAnswers: the callback's answers become call_result lines;
// a bad answer is a fixed sentence for the cell.
func TestCallbackAnswers(t *testing.T) {
	answer := ""
	code := 200
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Rljail-Session") != "x" {
			http.Error(w, "no session header", 400)
			return
		}
		w.WriteHeader(code)
		io.WriteString(w, answer)
	}))
	defer cb.Close()
	s := testServer(Config{Sessions: SessionPolicy{CallbackMaxBytes: 64}})
	for _, c := range []struct {
		answer string
		code   int
		want   string
	}{
		{`{"value":"hi"}`, 200, `"value":"hi"`},
		{`{"op":"call_result","call":3,"value":[1]}`, 200, `"value":[1]`},
		{`{"error":"down"}`, 200, `"error":"down"`},
		{`{"call":4,"value":1}`, 200, "is for call 4"},
		{`{}`, 200, "neither value nor error"},
		{`not json`, 200, "not a JSON object"},
		{`{"value":"` + strings.Repeat("x", 100) + `"}`, 200, "over 64 bytes"},
		{`{"value":1}`, 500, "HTTP 500"},
	} {
		answer, code = c.answer, c.code
		pr, pw := io.Pipe()
		ls := &liveSession{id: "x", srv: s, in: pw, out: pr, callback: cb.URL, ended: make(chan struct{}), pending: map[string]chan []byte{}}
		go ls.callCallback(3, []byte(`{"event":"call","call":3}`))
		line, err := bufio.NewReader(pr).ReadBytes('\n')
		if err != nil || !strings.Contains(string(line), c.want) || !strings.Contains(string(line), `"call":3`) {
			t.Errorf("answer %s (%d): %s %v, want %q", c.answer, c.code, line, err, c.want)
		}
	}
}
