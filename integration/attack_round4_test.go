package integration

// Red-team round 4: the surfaces behind a session (the bridge's model
// endpoint, the worker's claims about a cell, requests the worker cannot
// answer) and the jail's init. Every case decides from the host: what the
// supervisor wrote on the session's stdout (a secret that appears there
// reached the jail: nothing else there knew it), what the supervisor
// itself measured, rljail's exit status.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "bridge_llm_key_echoed", group: groupSecrets,
			mechanism: "with --llm openai, the endpoint echoes what it was sent: a 401 whose error message holds the key (\"Incorrect API key provided: sk-...\"), an answer that quotes the Authorization header, and a dropped connection whose error names the endpoint's URL with a token in its query; the cell prints every answer and CallFailed message it gets",
			layer:     "bridge.OpenAI takes the key out of every answer and error text bound for the jail, and leaves the URL out of a transport error",
			run:       attackBridgeKeyEchoed},
		{name: "session_forged_verdicts", group: groupProcesses,
			mechanism: "a cell raises an exception class of its own named CellTimeout, and makes get fail with one named SessionLost (a __repr__ that raises it), so that the runner counts a timeout that never happened and gives up a session whose jail lives",
			layer:     "session.workerError: CellTimeout and SessionLost are the supervisor's verdicts only; the worker's claim of one becomes a WorkerError saying what it claimed, and a lost session's reason is never the worker's",
			run:       attackSessionForgedVerdicts},
		{name: "session_request_hangs", group: groupDoS,
			mechanism: "requests the worker cannot decode (set of a value nested 1200 deep, an integer of 5000 digits, as a context from a hostile document would be) and a get whose value's __repr__ (the cell's code) sleeps: the worker's reply never comes, and the session, with the runner's request and rljail's end at EOF, waits for ever",
			layer:     "the worker answers a request it cannot decode under its token; every request for the worker is bounded by --cell-timeout (SIGINT, a KeyboardInterrupt) and its grace, as a cell is",
			run:       attackSessionRequestHangs},
		{name: "init_rlimits_from_payload", group: groupProcesses,
			mechanism: "the payload sets the jail's init's RLIMIT_NOFILE to 0 with prlimit(1, ...) (init runs as the payload's user, which is all the kernel asks), catches SIGTERM to exit 7, and waits for rljail's caller's SIGTERM: init cannot pass it on, and rljail reports a setup error (exit 125) for the payload's own end",
			layer:     "seccomp allows prlimit64 for pid 0 only (the caller's own limits, as glibc asks), so no payload changes the limits of another process of the jail",
			run:       attackInitRlimits},
	}...)
}

func attackBridgeKeyEchoed(t *testing.T, m mode) {
	var kb [12]byte
	_, _ = rand.Read(kb[:])
	key := "sk-rljail-echo-" + hex.EncodeToString(kb[:])
	_, _ = rand.Read(kb[:])
	urlToken := "urltoken" + hex.EncodeToString(kb[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		prompt := ""
		if len(in.Messages) > 0 {
			prompt = in.Messages[0].Content
		}
		auth := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
		switch prompt {
		case "deny":
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "Incorrect API key provided: " + auth}})
		case "drop":
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.(*net.TCPConn).SetLinger(0)
					_ = c.Close()
				}
			}
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "you sent the key " + auth}}}})
		}
	}))
	defer srv.Close()
	s := startSessionEnv(t, m, []string{"RLJAIL_TEST_KEY=" + key}, "--llm", "openai",
		"--llm-endpoint", srv.URL+"/v1/chat/completions?token="+urlToken,
		"--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY")
	rep := s.exec(t, `for p in ("deny", "drop", "echo"):
    try:
        print(p, "answer:", llm_query(p))
    except Exception as e:
        print(p, type(e).__name__, e)
try:
    print("batch", llm_query_batched(["echo", "deny"]))
except Exception as e:
    print("batch", type(e).__name__, e)`)
	s.close(t)
	b, _ := json.Marshal(rep)
	out := string(b)
	stdout, _ := rep["stdout"].(string)
	t.Logf("the cell saw: %s", stdout)
	if strings.Contains(out, key) {
		t.Errorf("the API key reached the jail through what the endpoint echoed: %s", stdout)
	}
	if strings.Contains(out, urlToken) {
		t.Errorf("the endpoint URL's query token reached the jail in a transport error: %s", stdout)
	}
	// The calls did reach the endpoint, and its words the cell.
	for _, want := range []string{"deny CallFailed", "401", "drop CallFailed", "echo answer: you sent the key ", "batch CallFailed"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the cell's output lacks %q: %s", want, stdout)
		}
	}
}

func attackSessionForgedVerdicts(t *testing.T, m mode) {
	s := startSession(t, m, "--cell-timeout", "1s")
	errType := func(rep map[string]any) string {
		e, _ := rep["error"].(map[string]any)
		typ, _ := e["type"].(string)
		return typ
	}
	rep := s.exec(t, "class CellTimeout(Exception): pass\nraise CellTimeout('the cell overran its timeout of 1s and was interrupted; the namespace is kept')")
	if typ := errType(rep); typ == "CellTimeout" || typ == "" {
		t.Errorf("a cell's own exception named CellTimeout, raised at once, is reported as %q: %v", typ, rep)
	}
	if w, _ := rep["wall_ms"].(float64); w >= 1000 {
		t.Errorf("the forging cell took %.0f ms: not the case under test", w)
	}
	s.exec(t, "class SessionLost(Exception): pass\nclass X:\n    def __repr__(self):\n        raise SessionLost('memory_limit')\nx = X()")
	rep = s.do(t, map[string]any{"op": "get", "name": "x"})
	e, _ := rep["error"].(map[string]any)
	if typ := errType(rep); typ == "SessionLost" || typ == "" || e["reason"] != nil {
		t.Errorf("get whose repr raises the cell's own SessionLost is reported as %q (reason %v): %v", typ, e["reason"], rep)
	}
	// The jail lives on, and the supervisor's own verdict still reads as one.
	rep = s.exec(t, "import time\ntime.sleep(5)")
	if typ := errType(rep); typ != "CellTimeout" {
		t.Errorf("a cell that overran --cell-timeout: error %q, want the supervisor's CellTimeout: %v", typ, rep)
	}
	if rep = s.exec(t, "print('alive')"); rep["stdout"] != "alive\n" {
		t.Errorf("the session after the forged verdicts: %v", rep)
	}
	s.close(t)
}

func attackSessionRequestHangs(t *testing.T, m mode) {
	s := startSession(t, m, "--cell-timeout", "2s", "--cell-grace", "1s")
	deep := json.RawMessage(strings.Repeat("[", 1200) + strings.Repeat("]", 1200))
	big := json.RawMessage(strings.Repeat("9", 5000))
	for _, req := range []map[string]any{
		{"op": "set", "name": "deep", "value": deep},
		{"op": "set", "name": "big", "value": big},
		{"op": "load_context", "value": map[string]any{"n": big}},
	} {
		t0 := time.Now()
		_, ch := s.send(t, req)
		rep := s.wait(t, ch, 10*time.Second)
		if rep["ok"] != false || time.Since(t0) > 5*time.Second {
			t.Errorf("%v of an undecodable value: %v after %v, want a refusal at once", req["op"], rep, time.Since(t0))
		}
	}
	s.exec(t, "import time\nclass Slow:\n    def __repr__(self):\n        time.sleep(1000)\n        return 'slow'\nslow = Slow()")
	t0 := time.Now()
	_, ch := s.send(t, map[string]any{"op": "get", "name": "slow"})
	rep := s.wait(t, ch, 15*time.Second)
	e, _ := rep["error"].(map[string]any)
	if d := time.Since(t0); rep["ok"] != false || e["type"] != "CellTimeout" || d > 8*time.Second {
		t.Errorf("get of a value whose __repr__ sleeps: %v after %v, want CellTimeout within the cell timeout", rep, d)
	}
	if rep = s.exec(t, "print('alive')"); rep["stdout"] != "alive\n" {
		t.Errorf("the session after the requests: %v", rep)
	}
	s.close(t)
}

func attackInitRlimits(t *testing.T, m mode) {
	cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--no-workspace", "--timeout", "60s", "--", "python3", "-c", `
import os, resource, signal, time
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE, (0, 0))
    print("SET init's RLIMIT_NOFILE", flush=True)
except OSError as e:
    print("REFUSED", e.errno, flush=True)
signal.signal(signal.SIGTERM, lambda *a: os._exit(7))
print("READY", flush=True)
time.sleep(50)
`)
	cmd.Dir = baseDir
	cmd.Env = modeEnv(m)
	runAsMode(cmd, m)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	sc := bufio.NewScanner(out)
	var lines []string
	ready := make(chan bool, 1)
	go func() {
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if sc.Text() == "READY" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the payload ended before it was ready: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the payload was not ready within 30s: %s", stderr.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("rljail did not end within 20s of its SIGTERM")
	}
	for range ready {
	}
	exit := cmd.ProcessState.ExitCode()
	if exit != 7 {
		t.Errorf("rljail ended with %d after its caller's SIGTERM, want the payload's own 7 (its handler): stdout %q, stderr %s", exit, lines, stderr.String())
	}
}
