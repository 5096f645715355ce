package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
