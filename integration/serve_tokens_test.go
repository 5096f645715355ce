package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestServeTokensFile: --tokens-file names clients, each with its token
// (or its hash) and quotas. A client over its max_concurrent gets 429
// with Retry-After while another client is served; an unknown token is
// 401; the audit log and the request log name the client, never the
// token; max_sessions caps that client's sessions; a bad tokens file, or
// both token flags, is exit 125.
func TestServeTokensFile(t *testing.T) {
	alpha, beta := randomToken("alpha"), randomToken("beta")
	sum := sha256.Sum256([]byte(beta))
	dir := newDir(t)
	tf := filepath.Join(dir, "tokens.toml")
	writeFile(t, tf, fmt.Sprintf("[tokens.alpha]\ntoken = %q\nmax_concurrent = 1\nmax_sessions = 1\n[tokens.beta]\ntoken_sha256 = %q\n", alpha, hex.EncodeToString(sum[:])), 0o600)
	audit := filepath.Join(dir, "audit.jsonl")
	s := startServer(t, asRoot, serveOpts{tcp: true, maxConc: 4, extraArgs: []string{"--tokens-file", tf, "--audit-log", audit}})
	as := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for _, c := range []struct {
		name, tok string
		want      int
	}{{"alpha", alpha, 200}, {"beta", beta, 200}, {"unknown", randomToken("nobody"), 401}, {"the hash as a token", hex.EncodeToString(sum[:]), 401}} {
		if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(c.tok)); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}

	// alpha's second run while its first sleeps: 429; beta meanwhile 200.
	slow := `{"command":["python3","-c","import time; time.sleep(3)"]}`
	first := make(chan int, 1)
	go func() {
		code, _, _ := s.do(t, "POST", "/v1/run", slow, as(alpha))
		first <- code
	}()
	waitFor(t, "alpha's first run to be in flight", func() bool {
		_, body, _ := s.do(t, "GET", "/metrics", "", as(beta))
		return strings.Contains(string(body), "rljail_runs_in_flight 1")
	})
	code, body, hdr := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(alpha))
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), "max_concurrent") {
		t.Errorf("alpha over max_concurrent 1: %d %s (Retry-After %q), want 429 naming max_concurrent", code, body, hdr.Get("Retry-After"))
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(beta)); code != 200 {
				t.Errorf("beta while alpha is at its quota: %d %s", code, body)
			}
		}()
	}
	wg.Wait()
	if c := <-first; c != 200 {
		t.Errorf("alpha's first run: %d", c)
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(alpha)); code != 200 {
		t.Errorf("alpha after its run ended: %d %s (its quota was not given back)", code, body)
	}

	// max_sessions 1: alpha's second session is 429; beta's is made.
	code, body, _ = s.do(t, "POST", "/v1/sessions", `{}`, as(alpha))
	if code != 200 && code != 201 {
		t.Fatalf("alpha's session: %d %s", code, body)
	}
	if code, body, _ := s.do(t, "POST", "/v1/sessions", `{}`, as(alpha)); code != 429 || !strings.Contains(string(body), "max_sessions") {
		t.Errorf("alpha's second session: %d %s, want 429 naming max_sessions", code, body)
	}
	if code, body, _ := s.do(t, "POST", "/v1/sessions", `{}`, as(beta)); code != 200 && code != 201 {
		t.Errorf("beta's session: %d %s", code, body)
	}

	s.stop(t)
	logs, _ := os.ReadFile(audit)
	for _, secret := range []string{alpha, beta} {
		if strings.Contains(string(logs), secret) || strings.Contains(s.stderr.String(), secret) {
			t.Errorf("a token appears in the audit log or the server's log")
		}
	}
	if !strings.Contains(string(logs), `"client":"alpha@`) || !strings.Contains(string(logs), `"client":"beta@`) {
		t.Errorf("the audit log does not name the clients:\n%s", logs)
	}
	if !strings.Contains(s.stderr.String(), `"client":"alpha"`) {
		t.Errorf("the request log does not name the client")
	}

	// Bad files and flags: exit 125, one sentence.
	bad := filepath.Join(dir, "bad.toml")
	writeFile(t, bad, "[tokens.a]\ntoken = \"short\"\n", 0o600)
	tok := filepath.Join(dir, "token")
	writeFile(t, tok, randomToken("single")+"\n", 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens-file", bad}, "at least 16 characters"},
		{[]string{"--tokens-file", filepath.Join(dir, "missing.toml")}, "tokens file"},
		{[]string{"--tokens-file", tf, "--token-file", tok}, "both given"},
	} {
		cmd := exec.Command(testBin, append([]string{"serve", "--listen", "unix:" + filepath.Join(dir, "x.sock")}, c.args...)...)
		cmd.Env = modeEnv(asRoot)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), c.want) {
			t.Errorf("rljail serve %v: %v %s, want exit 125 with %q", c.args, err, out, c.want)
		}
	}
}

// waitFor polls cond every 20 ms until it holds, failing t after 30 s (a
// hang bound, not a timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
	}
}

// TestServeReload: SIGHUP reads --config and --tokens-file again. A
// request under way when it comes finishes as it began; after it a
// removed client is 401, a new one is served, and a lowered maximum is
// enforced; a file that does not parse keeps the policy as it was, with
// one log line, and the server goes on serving.
func TestServeReload(t *testing.T) {
	alpha, beta := randomToken("alpha"), randomToken("beta")
	dir := newDir(t)
	tf := filepath.Join(dir, "tokens.toml")
	writeFile(t, tf, fmt.Sprintf("[tokens.alpha]\ntoken = %q\n", alpha), 0o600)
	s := startServer(t, asRoot, serveOpts{tcp: true, extraArgs: []string{"--tokens-file", tf}})
	cfg := s.cmd.Args[slices.Index(s.cmd.Args, "--config")+1]
	as := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	big := `{"command":["true"],"limits":{"memory_bytes":1073741824}}`
	if code, body, _ := s.do(t, "POST", "/v1/run", big, as(alpha)); code != 200 {
		t.Fatalf("before the reload: %d %s", code, body)
	}
	slow := make(chan int, 1)
	go func() {
		code, _, _ := s.do(t, "POST", "/v1/run", `{"command":["python3","-c","import time; time.sleep(2)"]}`, as(alpha))
		slow <- code
	}()
	waitFor(t, "the slow run to be in flight", func() bool {
		_, body, _ := s.do(t, "GET", "/metrics", "", as(alpha))
		return strings.Contains(string(body), "rljail_runs_in_flight 1")
	})
	raw, _ := os.ReadFile(cfg)
	writeFile(t, cfg, string(raw)+"max_memory = \"256m\"\ndefault_memory = \"128m\"\n", 0o644)
	writeFile(t, tf, fmt.Sprintf("[tokens.beta]\ntoken = %q\n", beta), 0o600)
	hup := func(n int) {
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reload's log line", func() bool {
			return strings.Count(s.stderr.String(), `"msg":"reloaded"`)+strings.Count(s.stderr.String(), `"msg":"reload refused`) >= n
		})
	}
	hup(1)
	if c := <-slow; c != 200 {
		t.Errorf("the run under way at the reload: %d", c)
	}
	if code, _, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(alpha)); code != 401 {
		t.Errorf("a client the reload removed: %d, want 401", code)
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(beta)); code != 200 {
		t.Errorf("a client the reload added: %d %s", code, body)
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", big, as(beta)); code != 400 || !strings.Contains(string(body), "memory_bytes") {
		t.Errorf("1 GiB after max_memory became 256m: %d %s, want 400", code, body)
	}
	// A broken file: the policy stays, the server serves.
	writeFile(t, tf, "[tokens.beta]\ntoken = \"short\"\n", 0o600)
	hup(2)
	if !strings.Contains(s.stderr.String(), "reload refused") {
		t.Errorf("no log line says the reload was refused:\n%s", s.stderr.String())
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, as(beta)); code != 200 {
		t.Errorf("after a refused reload: %d %s", code, body)
	}
}

// TestServeReloadRevokesSessions: a reload that takes a client's token
// away ends that client's sessions: its socket is closed with 1008, its
// jail's processes (a marked one its cell started) and, as root, its
// cgroup below the server's --cgroup-parent are gone, the session is
// 404 to the client's new token, rljail_sessions_ended_total counts it
// revoked and the audit log has its line; another client's session
// survives and still runs cells. Nothing is left once the server ends.
func TestServeReloadRevokesSessions(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveReloadRevokesSessions(t, m) })
	}
}

func serveReloadRevokesSessions(t *testing.T, m mode) {
	alpha, beta := randomToken("alpha"), randomToken("beta")
	dir := newDir(t)
	if m == asRootless {
		if err := os.Chown(dir, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	tf, auditPath := filepath.Join(dir, "tokens.toml"), filepath.Join(dir, "audit.jsonl")
	writeTokens := func(body string) {
		writeFile(t, tf, body, 0o600)
		if m == asRootless {
			_ = os.Chown(tf, testUID, testGID)
		}
	}
	writeTokens(fmt.Sprintf("[tokens.alpha]\ntoken = %q\n[tokens.beta]\ntoken = %q\n", alpha, beta))
	s, e := startLoadServer(t, m, serveOpts{extraArgs: []string{"--tokens-file", tf, "--audit-log", auditPath}})
	as := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	ids := map[string]string{}
	procs := map[string]proc{}
	for name, tok := range map[string]string{"alpha": alpha, "beta": beta} {
		code, b, _ := s.do(t, "POST", "/v1/sessions", `{}`, as(tok))
		var r struct{ ID string }
		if code != 200 || json.Unmarshal(b, &r) != nil || r.ID == "" {
			t.Fatalf("%s: POST /v1/sessions: %d %s", name, code, b)
		}
		ids[name] = r.ID
		mk := e.marker + name
		cell := fmt.Sprintf(`{"code":"import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '%s'])"}`, mk)
		if code, b, _ := s.do(t, "POST", "/v1/sessions/"+r.ID+"/exec", cell, as(tok)); code != 200 || !strings.Contains(string(b), `"ok":true`) {
			t.Fatalf("%s: exec: %d %s", name, code, b)
		}
		p, ok := findPayload(mk, s.cmd.Process.Pid, 30*time.Second)
		if !ok {
			t.Fatalf("%s: the session's marked process was not seen", name)
		}
		procs[name] = p
	}
	// As root: the session's cgroups (one per hierarchy the server's
	// --cgroup-parent is in: v2's, or v1's controllers).
	var alphaCgroups []string
	if m == asRoot {
		cg, err := procCgroup(procs["alpha"].pid)
		if err != nil {
			t.Fatalf("the cgroups of alpha's session: %v", err)
		}
		for ctl, p := range cg {
			d := filepath.Join("/sys/fs/cgroup", ctl, p)
			for _, parent := range e.cgDirs {
				if strings.HasPrefix(d, parent+"/") {
					alphaCgroups = append(alphaCgroups, d)
				}
			}
		}
		if len(alphaCgroups) == 0 {
			t.Fatalf("alpha's session's cgroups %v: none below the server's --cgroup-parent %v", cg, e.cgDirs)
		}
	}
	c, _, err := websocket.Dial(context.Background(), strings.Replace(s.base, "http://", "ws://", 1)+"/v1/sessions/"+ids["alpha"]+"/ws",
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: s.client.Transport}, HTTPHeader: http.Header{"Authorization": {"Bearer " + alpha}}})
	if err != nil {
		t.Fatalf("dial alpha's session's socket: %v", err)
	}
	defer c.CloseNow()

	// The reload changes alpha's token and keeps beta's.
	alpha2 := randomToken("alpha2")
	writeTokens(fmt.Sprintf("[tokens.alpha]\ntoken = %q\n[tokens.beta]\ntoken = %q\n", alpha2, beta))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's log line", func() bool { return strings.Contains(s.stderr.String(), `"msg":"reloaded"`) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if st := websocket.CloseStatus(err); st != websocket.StatusPolicyViolation {
				t.Errorf("alpha's socket ended with %v (status %d), want 1008", err, st)
			}
			break
		}
	}
	waitFor(t, "alpha's session's marked process to go", func() bool { return !alive(procs["alpha"]) })
	for _, d := range alphaCgroups {
		waitFor(t, "alpha's session's cgroup "+d+" to go", func() bool { return !fileExists(d) })
	}
	if code, b, _ := s.do(t, "GET", "/v1/sessions/"+ids["alpha"], "", as(alpha2)); code != 404 {
		t.Errorf("alpha's old session, with alpha's new token: %d %s, want 404 (it ended at the reload)", code, b)
	}
	// beta's session is as it was.
	if !alive(procs["beta"]) {
		t.Errorf("beta's session's process went at a reload that kept beta's token")
	}
	if code, b, _ := s.do(t, "POST", "/v1/sessions/"+ids["beta"]+"/exec", `{"code":"print(p.poll())"}`, as(beta)); code != 200 || !strings.Contains(string(b), `"stdout":"None\n"`) {
		t.Errorf("beta's session after the reload: %d %s", code, b)
	}
	_, metrics, _ := s.do(t, "GET", "/metrics", "", as(beta))
	if !strings.Contains(string(metrics), `rljail_sessions_ended_total{reason="revoked"} 1`) || !strings.Contains(string(metrics), "\nrljail_sessions_open 1\n") {
		t.Errorf("the metrics after the revocation:\n%s", grepLines(string(metrics), "rljail_sessions"))
	}
	logged, _ := os.ReadFile(auditPath)
	if want := fmt.Sprintf(`"event":"session_ended","session":%q,"client":"alpha","reason":"revoked"`, ids["alpha"]); !strings.Contains(string(logged), want) {
		t.Errorf("the audit log has no %s:\n%s", want, logged)
	}
	s.stop(t)
	e.checkLeftovers(t, s)
}
