package serve

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte("max_timeout = \"30s\"\nmax_memory = \"1g\"\nrootfs = [\"python\", \"py2\"]\nqueue = 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxTimeout != 30*time.Second || c.MaxMemory != 1<<30 || c.Queue != 4 || len(c.Rootfs) != 2 || c.MaxPids != DefaultConfig.MaxPids {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range []string{"max_timout = \"1s\"", "max_memory = \"-1\"", "max_timeout = \"soon\"", "max_cpus = -1", "default_timeout = \"2m\"\nmax_timeout = \"1m\""} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestJailPath(t *testing.T) {
	for in, want := range map[string]string{"a.txt": "/tmp/a.txt", "d/e": "/tmp/d/e", "/tmp/x": "/tmp/x", "/dev/shm/y": "/dev/shm/y"} {
		if got, err := jailPath("f", in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "../x", "a/../../x", "/etc/passwd", "/tmp", "/tmp/", "a//b", "/tmpx/y", "a\x00b", "/proc/self/environ"} {
		if got, err := jailPath("f", bad); err == nil {
			t.Errorf("%q: %q accepted", bad, got)
		}
	}
}

func TestStreamHeadTail(t *testing.T) {
	s := newStream(10)
	for i := 0; i < 100; i++ {
		_, _ = s.Write([]byte("0123456789"[i%10 : i%10+1]))
	}
	c := s.finish()
	if c.Cut != 90 || !strings.HasPrefix(c.Text, "01234\n[... 90 bytes cut") || !strings.HasSuffix(c.Text, "]\n56789") {
		t.Errorf("%+v", c)
	}
	s = newStream(10)
	_, _ = s.Write([]byte("short"))
	if c := s.finish(); c.Text != "short" || c.Cut != 0 {
		t.Errorf("%+v", c)
	}
}

func TestPistonVersionMatches(t *testing.T) {
	for _, c := range []struct {
		want string
		ok   bool
	}{{"*", true}, {"3.11.2", true}, {"3.x", true}, {"3", true}, {"3.11", true}, {"3.11.x", true}, {"3.10", false}, {"2", false}, {"3.11.2.1", false}} {
		if got := pistonVersionMatches(c.want, "3.11.2"); got != c.ok {
			t.Errorf("%q: %v", c.want, got)
		}
	}
}

// TestRefusals: bad requests are refused before any jail, with the
// field named; a token is checked on every route but /healthz and /readyz.
func TestRefusals(t *testing.T) {
	s := New(Options{Token: "0123456789abcdef0", Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent", PythonVersion: "3.11.2"}}})
	h := s.Handler()
	do := func(method, path, body, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if w := do("GET", probe, "", ""); w.Code != 200 {
			t.Errorf("%s without a token: %d", probe, w.Code)
		}
	}
	if w := do("GET", "/metrics", "", "wrong"); w.Code != 401 {
		t.Errorf("/metrics with a wrong token: %d", w.Code)
	}
	tok := "0123456789abcdef0"
	for _, c := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/run", `{"command":["true"],"limits":{"timeout_seconds":-1}}`, 400, "limits.timeout_seconds"},
		{"/v1/run", `{"command":["true"],"limits":{"output_bytes":99999999999}}`, 400, "limits.output_bytes"},
		{"/v1/run", `{"command":["true"],"files":[{"path":"a","content":"x","content_base64":"eA=="}]}`, 400, "not both"},
		{"/v1/run", `{"command":["true"],"files":[{"path":"a"},{"path":"/tmp/a"}]}`, 400, "twice"},
		{"/v1/run", `{"code":"x","files":[{"path":"main.py"}]}`, 400, "where code goes"},
		{"/v1/run", `[1]`, 400, "the body must be a JSON object, not an array"},
		{"/run_code", `{"code":"x","language":"cobol"}`, 422, "language"},
		{"/run_code", `{"code":"x"}`, 422, "language"},
		{"/run_code", `{"code":"x","language":"python","bogus":1}`, 422, "bogus"},
		{"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"x","encoding":"rot13"}]}`, 400, "encoding"},
		{"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"x"}],"run_memory_limit":-7}`, 400, "run_memory_limit"},
	} {
		w := do("POST", c.path, c.body, tok)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s %s: %d %s, want %d naming %q", c.path, c.body, w.Code, w.Body.String(), c.code, c.want)
		}
	}
	req := httptest.NewRequest("POST", "/api/v2/execute", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 415 {
		t.Errorf("Piston without application/json: %d", w.Code)
	}
}

// TestAdmission: the slots, then the queue, then queueFull; a waiter
// whose request ends leaves the queue.
func TestAdmission(t *testing.T) {
	s := New(Options{MaxConcurrent: 1, Config: Config{Queue: 1}})
	if s.acquire(context.Background()) != admitted {
		t.Fatal("the first request waits")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan admission)
	go func() { got <- s.acquire(ctx) }()
	for s.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if a := s.acquire(context.Background()); a != queueFull {
		t.Errorf("beyond the queue: %v", a)
	}
	cancel()
	if a := <-got; a != gone {
		t.Errorf("a waiter whose request ended: %v", a)
	}
	s.release()
	if s.acquire(context.Background()) != admitted {
		t.Error("a free slot after release")
	}
	// A waiter gives up after QueueWait.
	s2 := New(Options{MaxConcurrent: 1, Config: Config{Queue: 4, QueueWait: 50 * time.Millisecond}})
	s2.acquire(context.Background())
	start := time.Now()
	if a := s2.acquire(context.Background()); a != queueFull || time.Since(start) < 50*time.Millisecond {
		t.Errorf("a wait past QueueWait: %v after %v", a, time.Since(start))
	}
	_ = http.StatusOK
}

// TestAdmissionDrain: a request waiting in the queue when the drain
// begins is told draining at once, though a slot then frees.
func TestAdmissionDrain(t *testing.T) {
	s := New(Options{MaxConcurrent: 1, Config: Config{Queue: 4, QueueWait: time.Hour}})
	if s.acquire(context.Background()) != admitted {
		t.Fatal("the first request waits")
	}
	got := make(chan admission, 2)
	for range 2 {
		go func() { got <- s.acquire(context.Background()) }()
	}
	for s.waiting.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	s.Drain()
	s.release()
	for range 2 {
		if a := <-got; a != draining {
			t.Errorf("a waiter at the drain: %v, want draining", a)
		}
	}
	s.Drain() // a second Drain (the caller's deferred one) is harmless
}

// TestBodyBudget: while one body holds the budget, another is 429; a
// body over max_body is 413 from its Content-Length, unread.
func TestBodyBudget(t *testing.T) {
	s := New(Options{Config: Config{MaxBody: 100, BodyBudget: 150}, Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	h := s.Handler()
	pr, pw := io.Pipe()
	first := httptest.NewRequest("POST", "/v1/run", pr)
	first.ContentLength = 100
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, first)
		done <- w.Code
	}()
	for s.bodies.Load() != 100 {
		time.Sleep(time.Millisecond)
	}
	second := httptest.NewRequest("POST", "/v1/run", strings.NewReader(strings.Repeat(" ", 99)))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, second)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("a body beyond the budget: %d %s", w.Code, w.Body.String())
	}
	big := httptest.NewRequest("POST", "/v1/run", strings.NewReader(strings.Repeat(" ", 101)))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, big)
	if w.Code != 413 {
		t.Errorf("a body over max_body: %d", w.Code)
	}
	pw.Close()
	<-done
	if n := s.bodies.Load(); n != 0 {
		t.Errorf("%d bytes still held", n)
	}
}
