package integration

// rljail serve through the real binary over its real socket (issue 31's
// first slice): every route, requests shaped as SandboxFusion's and
// Piston's clients send them, auth, bad requests, a client that goes
// away, the queue's 429, a bounded load with nothing left behind, and
// SIGTERM's drain. Each test decides from outside: the HTTP answers, the
// server's process tree, the host's mounts and cgroups.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// server is one `rljail serve` of a test.
type server struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	sock   string // unix socket path, or ""
	tcp    string // host:port, or ""
	token  string
	client *http.Client
	base   string
	done   chan struct{}
}

type serveOpts struct {
	tcp       bool
	token     bool
	insecure  bool
	config    string // extra TOML lines
	maxConc   int
	extraArgs []string
	env       []string // added to rljail's own environment
	sock      string   // the Unix socket's path, if not one in a directory of its own
}

// startServer starts `rljail serve` as mode m and waits until /healthz
// answers. Its rootfs is the tests' (RLJAIL_ROOTFS).
func startServer(t testing.TB, m mode, o serveOpts) *server {
	t.Helper()
	dir := newDir(t)
	if m == asRootless {
		if err := os.Chown(dir, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "serve.toml")
	writeFile(t, cfg, fmt.Sprintf("rootfs = [%q]\n%s\n", rootfsDir, o.config), 0o644)
	args := []string{"serve", "--config", cfg}
	s := &server{stderr: &syncBuffer{}, done: make(chan struct{})}
	if o.tcp {
		args = append(args, "--listen", "tcp:127.0.0.1:0")
	} else {
		s.sock = filepath.Join(dir, "api.sock")
		if o.sock != "" {
			s.sock = o.sock
		}
		args = append(args, "--listen", "unix:"+s.sock)
	}
	if o.token {
		s.token = randomToken("tok")
		tf := filepath.Join(dir, "token")
		writeFile(t, tf, s.token+"\n", 0o600)
		if m == asRootless {
			_ = os.Chown(tf, testUID, testGID)
		}
		args = append(args, "--token-file", tf)
	}
	if o.insecure {
		args = append(args, "--insecure-no-token")
	}
	if o.maxConc > 0 {
		args = append(args, "--max-concurrent", fmt.Sprint(o.maxConc))
	}
	args = append(args, o.extraArgs...)
	s.cmd = exec.Command(testBin, args...)
	s.cmd.Env = append(modeEnv(m), o.env...)
	s.cmd.Stderr = s.stderr
	runAsMode(s.cmd, m)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start rljail serve: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("rljail serve ended at its start: %v\n%s", s.cmd.ProcessState, s.stderr.String())
		default:
		}
		if o.tcp {
			if m := regexp.MustCompile(`"listen":"tcp:([0-9.:]+)"`).FindStringSubmatch(s.stderr.String()); m != nil {
				s.tcp = m[1]
			}
		}
		// A Unix socket's file is there from its bind, a moment before
		// its listen (a connect then is refused): the "serving" line
		// comes once the listener is open.
		if s.tcp != "" || (s.sock != "" && fileExists(s.sock) && strings.Contains(s.stderr.String(), `"msg":"serving"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rljail serve did not listen within 10 s:\n%s", s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	if s.sock != "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.sock)
		}
		s.base = "http://rljail"
	} else {
		s.base = "http://" + s.tcp
	}
	s.client = &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	return s
}

func fileExists(p string) bool { _, err := os.Lstat(p); return err == nil }

// stop ends the server with SIGTERM (its drain) and waits for it.
func (s *server) stop(t testing.TB) { stopServe(t, s.cmd, s.done) }

// stopServe sends a started `rljail serve` SIGTERM (its drain) unless it
// ended already (done closed), and waits for it: 40 s, then SIGKILL and
// a failure.
func stopServe(t testing.TB, cmd *exec.Cmd, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("rljail serve did not end within 40 s of SIGTERM")
	}
}

// do sends a request with the server's token (unless noAuth) and returns
// the status, the body, and the response's headers.
func (s *server) do(t testing.TB, method, path, body string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nserver stderr:\n%s", method, path, err, s.stderr.String())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func (s *server) postJSON(t testing.TB, path string, v any, out any) int {
	t.Helper()
	b, _ := json.Marshal(v)
	code, body, _ := s.do(t, "POST", path, string(b), nil)
	if out != nil && code == 200 {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("POST %s: answer is not JSON: %v\n%s", path, err, body)
		}
	}
	if code != 200 {
		t.Logf("POST %s: %d %s", path, code, body)
	}
	return code
}

type v1Response struct {
	Result map[string]any `json:"result"`
	Stdout struct {
		Text      string `json:"text"`
		Bytes     int64  `json:"bytes"`
		Truncated bool   `json:"truncated"`
	} `json:"stdout"`
	Stderr struct {
		Text string `json:"text"`
	} `json:"stderr"`
	Files []struct {
		Path          string `json:"path"`
		ContentBase64 string `json:"content_base64"`
		Error         string `json:"error"`
	} `json:"files"`
}

func TestServeEndpoints(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			s := startServer(t, m, serveOpts{maxConc: 2})
			if code, body, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 || !strings.Contains(string(body), "ok") {
				t.Errorf("/healthz: %d %s", code, body)
			}
			if code, body, _ := s.do(t, "GET", "/readyz", "", nil); code != 200 {
				t.Errorf("/readyz: %d %s", code, body)
			}
			// /v1/run: a command, its report as --result's.
			var r v1Response
			if code := s.postJSON(t, "/v1/run", map[string]any{"command": []string{"python3", "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"}}, &r); code != 200 {
				t.Fatalf("/v1/run: %d", code)
			}
			if r.Result["status"] != "exit_nonzero" || r.Result["exit_code"] != 3.0 || r.Stdout.Text != "out\n" || r.Stderr.Text != "err\n" {
				t.Errorf("/v1/run command: %+v", r)
			}
			for _, k := range []string{"run_id", "wall_ms", "limits", "memory_peak_bytes", "seccomp"} {
				if _, ok := r.Result[k]; !ok {
					t.Errorf("/v1/run: the report has no %s: %v", k, r.Result)
				}
			}
			// Code, stdin, files in (text and base64) and out, env.
			r = v1Response{}
			code := s.postJSON(t, "/v1/run", map[string]any{
				"code":        "import os,sys\nd=open('in/a.txt').read()+open('/tmp/b.bin','rb').read().decode()\nopen('out.txt','w').write(d.upper()+sys.stdin.read()+os.environ['K'])\nprint(sys.argv[1:])",
				"args":        []string{"x", "y"},
				"stdin":       "-stdin",
				"env":         map[string]string{"K": "-env"},
				"files":       []map[string]any{{"path": "in/a.txt", "content": "hello "}, {"path": "/tmp/b.bin", "content_base64": base64.StdEncoding.EncodeToString([]byte("world"))}},
				"fetch_files": []string{"out.txt", "missing.txt"},
			}, &r)
			if code != 200 || r.Result["status"] != "ok" || r.Stdout.Text != "['x', 'y']\n" {
				t.Fatalf("/v1/run code: %d %+v", code, r)
			}
			if len(r.Files) != 2 || r.Files[0].Path != "out.txt" || r.Files[0].Error != "" || r.Files[1].Path != "missing.txt" || r.Files[1].Error == "" {
				t.Fatalf("/v1/run fetched files: %+v", r.Files)
			}
			if got, _ := base64.StdEncoding.DecodeString(r.Files[0].ContentBase64); string(got) != "HELLO WORLD-stdin-env" {
				t.Errorf("out.txt: %q, want HELLO WORLD-stdin-env", got)
			}
			// Output over the limit: head and tail kept.
			r = v1Response{}
			s.postJSON(t, "/v1/run", map[string]any{"code": "print('A'*100000 + 'Z')", "limits": map[string]any{"output_bytes": 1000}}, &r)
			if !r.Stdout.Truncated || !strings.HasPrefix(r.Stdout.Text, "AAAA") || !strings.HasSuffix(r.Stdout.Text, "AZ\n") || len(r.Stdout.Text) > 1100 || r.Stdout.Bytes != 100002 {
				t.Errorf("output over the limit: truncated %v, bytes %d, %d chars: %.80q...", r.Stdout.Truncated, r.Stdout.Bytes, len(r.Stdout.Text), r.Stdout.Text)
			}
			// A timeout.
			r = v1Response{}
			s.postJSON(t, "/v1/run", map[string]any{"command": []string{"sleep", "10"}, "limits": map[string]any{"timeout_seconds": 0.5}}, &r)
			if r.Result["status"] != "timeout" {
				t.Errorf("timeout: %v", r.Result)
			}
			// Metrics count the runs.
			_, body, _ := s.do(t, "GET", "/metrics", "", nil)
			for _, want := range []string{`rljail_runs_total{language="python",status="ok"}`, `rljail_runs_total{language="command",status="timeout"} 1`, "rljail_run_seconds_bucket", "rljail_runs_in_flight 0", "rljail_queue_depth 0"} {
				if !strings.Contains(string(body), want) {
					t.Errorf("/metrics has no %s", want)
				}
			}
		})
	}
}

// TestServeSandboxFusion posts to /run_code exactly as verl's
// sandbox_fusion reward (verl/utils/reward_score/sandbox_fusion/utils.py,
// call_sandbox_api) does: a json.dumps payload with every field, stdin
// possibly null, Content-Type and Accept application/json.
func TestServeSandboxFusion(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			// verl's client speaks TCP and sends no token: rootless, the
			// server listens on loopback with --insecure-no-token.
			opts := serveOpts{maxConc: 2}
			if m == asRootless {
				opts.tcp, opts.insecure = true, true
			}
			s := startServer(t, m, opts)
			post := func(payload string) (int, map[string]any) {
				code, body, _ := s.do(t, "POST", "/run_code", payload, map[string]string{"Accept": "application/json"})
				var out map[string]any
				_ = json.Unmarshal(body, &out)
				return code, out
			}
			verl := func(code string, stdin any, runTimeout int, lang string) string {
				b, _ := json.Marshal(map[string]any{"compile_timeout": 10, "run_timeout": runTimeout, "code": code, "stdin": stdin,
					"memory_limit_MB": 1024, "language": lang, "files": map[string]any{}, "fetch_files": []string{}})
				return string(b)
			}
			code, out := post(verl("a, b = map(int, input().split())\nprint(a + b)", "2 3\n", 10, "python"))
			rr, _ := out["run_result"].(map[string]any)
			if code != 200 || out["status"] != "Success" || rr["status"] != "Finished" || rr["return_code"] != 0.0 || rr["stdout"] != "5\n" {
				t.Errorf("verl-shaped success: %d %v", code, out)
			}
			if _, ok := out["compile_result"]; !ok || out["compile_result"] != nil {
				t.Errorf("compile_result must be present and null: %v", out)
			}
			code, out = post(verl("raise SystemExit(2)", nil, 10, "python"))
			rr, _ = out["run_result"].(map[string]any)
			if code != 200 || out["status"] != "Failed" || rr["return_code"] != 2.0 {
				t.Errorf("verl-shaped failure: %d %v", code, out)
			}
			code, out = post(verl("while True: pass", nil, 1, "python"))
			rr, _ = out["run_result"].(map[string]any)
			if code != 200 || out["status"] != "Failed" || rr["status"] != "TimeLimitExceeded" || rr["return_code"] != nil {
				t.Errorf("verl-shaped timeout: %d %v", code, out)
			}
			code, out = post(verl("print(1)", nil, 10, "python3"))
			if code != 200 || out["status"] != "Success" {
				t.Errorf("language python3: %d %v", code, out)
			}
			// files and fetch_files, base64 by path.
			b, _ := json.Marshal(map[string]any{"code": "open('r.txt','w').write(open('data/in.txt').read()[::-1])", "language": "python",
				"files": map[string]any{"data/in.txt": base64.StdEncoding.EncodeToString([]byte("abc")), "skip.txt": nil}, "fetch_files": []string{"r.txt", "none.txt"}})
			code, out = post(string(b))
			files, _ := out["files"].(map[string]any)
			if got, _ := base64.StdEncoding.DecodeString(fmt.Sprint(files["r.txt"])); code != 200 || string(got) != "cba" || len(files) != 1 {
				t.Errorf("files/fetch_files: %d %v", code, out)
			}
			// SandboxFusion's own languages that have no runtime here:
			// SandboxError; a language it does not know: its 422.
			code, out = post(verl("int main(){}", nil, 10, "cpp"))
			if code != 200 || out["status"] != "SandboxError" {
				t.Errorf("cpp: %d %v", code, out)
			}
			code, out = post(verl("x", nil, 10, "cobol"))
			if detail, _ := out["detail"].([]any); code != 422 || len(detail) != 1 || !strings.Contains(fmt.Sprint(detail[0]), "language") {
				t.Errorf("an unknown language: %d %v", code, out)
			}
		})
	}
}

// TestServePiston posts to /api/v2/execute as Piston's clients do (its
// README's example: language, version, files [{name, content}], stdin,
// args, compile_timeout, run_timeout, compile_memory_limit,
// run_memory_limit).
func TestServePiston(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 2})
	_, body, _ := s.do(t, "GET", "/api/v2/runtimes", "", nil)
	var rts []map[string]any
	if err := json.Unmarshal(body, &rts); err != nil || len(rts) != 1 || rts[0]["language"] != "python" {
		t.Fatalf("/api/v2/runtimes: %s", body)
	}
	version := rts[0]["version"].(string)
	req := map[string]any{"language": "py", "version": version, "files": []map[string]any{{"name": "my_cool_code.py", "content": "import sys\nprint(sys.argv[1:], input())\nprint('e', file=sys.stderr)"}},
		"stdin": "in", "args": []string{"1", "2", "3"}, "compile_timeout": 10000, "run_timeout": 3000, "compile_memory_limit": -1, "run_memory_limit": -1}
	var out struct {
		Language, Version string
		Run               map[string]any `json:"run"`
		Compile           any            `json:"compile"`
	}
	if code := s.postJSON(t, "/api/v2/execute", req, &out); code != 200 || out.Version != version || out.Run["stdout"] != "['1', '2', '3'] in\n" || out.Run["stderr"] != "e\n" || out.Run["code"] != 0.0 || out.Run["signal"] != nil || out.Compile != nil {
		t.Errorf("execute: %d %+v", code, out)
	}
	req["files"] = []map[string]any{{"content": "while True: pass"}}
	req["version"] = "3.x"
	req["run_timeout"] = 500
	s.postJSON(t, "/api/v2/execute", req, &out)
	if out.Run["status"] != "TO" || out.Run["signal"] != "SIGKILL" || out.Run["code"] != nil {
		t.Errorf("execute timeout: %+v", out.Run)
	}
	for _, c := range []struct{ body, want string }{
		{`{"language":"cobol","version":"*","files":[{"content":"x"}]}`, "cobol-* runtime is unknown"},
		{`{"language":"python","version":"2.7","files":[{"content":"x"}]}`, "python-2.7 runtime is unknown"},
		{`{"version":"*","files":[]}`, "language is required"},
		{`{"language":"python","version":"*"}`, "files is required"},
		{`{"language":"python","version":"*","files":[{"name":"a.py"}]}`, "files[0].content is required"},
		{`{"language":"python","version":"*","files":[{"content":"x"}],"run_timeout":-5}`, "run_timeout"},
	} {
		code, body, _ := s.do(t, "POST", "/api/v2/execute", c.body, nil)
		var msg map[string]string
		_ = json.Unmarshal(body, &msg)
		if code != 400 || !strings.Contains(msg["message"], c.want) {
			t.Errorf("%s: %d %s, want 400 and a message with %q", c.body, code, body, c.want)
		}
	}
}

// TestServeAuth: TCP on loopback with a token: none and a wrong one are
// 401, the probes /healthz and /readyz need none; TCP without a token
// refuses to start.
func TestServeAuth(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{tcp: true, token: true})
	for _, c := range []struct {
		name, auth string
		want       int
	}{{"none", "", 401}, {"wrong", "Bearer not-the-token-0123456789", 401}, {"basic", "Basic " + s.token, 401}, {"right", "Bearer " + s.token, 200}} {
		code, body, hdr := s.do(t, "GET", "/metrics", "", map[string]string{"Authorization": c.auth})
		if code != c.want {
			t.Errorf("token %s: %d %s, want %d", c.name, code, body, c.want)
		}
		if code == 401 && hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("token %s: a 401 without WWW-Authenticate", c.name)
		}
		code, _, _ = s.do(t, "POST", "/v1/run", `{"command":["true"]}`, map[string]string{"Authorization": c.auth})
		if code != c.want {
			t.Errorf("token %s on /v1/run: %d, want %d", c.name, code, c.want)
		}
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if code, _, _ := s.do(t, "GET", probe, "", map[string]string{"Authorization": ""}); code != 200 {
			t.Errorf("%s without a token: %d", probe, code)
		}
	}
	// No token on TCP: refused at the start, exit 125.
	for _, args := range [][]string{{"serve", "--listen", "tcp:127.0.0.1:0"}, {"serve", "--listen", "tcp:0.0.0.0:0", "--insecure-no-token"}} {
		cmd := exec.Command(testBin, args...)
		cmd.Env = modeEnv(asRoot)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "token") {
			t.Errorf("rljail %s: %v %s, want exit 125 naming the token", strings.Join(args, " "), err, out)
		}
	}
	// Loopback with --insecure-no-token serves without one.
	s2 := startServer(t, asRoot, serveOpts{tcp: true, insecure: true})
	if code, body, _ := s2.do(t, "POST", "/v1/run", `{"command":["true"]}`, nil); code != 200 {
		t.Errorf("--insecure-no-token on loopback: %d %s", code, body)
	}
	// The Unix socket's mode is its access control.
	s3 := startServer(t, asRoot, serveOpts{})
	if st, err := os.Stat(s3.sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v, want 0600", st.Mode(), err)
	}
}

// TestServeBadRequests: each is a 4xx with one sentence naming the field,
// and the server goes on.
func TestServeBadRequests(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{config: "max_body = \"1m\"", maxConc: 1})
	for _, c := range []struct{ path, body, want string }{
		{"/v1/run", `not json`, "not JSON"},
		{"/v1/run", ``, "empty"},
		{"/v1/run", `{"command":["true"],"bogus":1}`, `unknown field \"bogus\"`},
		{"/v1/run", `{"command":"true"}`, "field command"},
		{"/v1/run", `{"command":["true"]} {}`, "more than one JSON value"},
		{"/v1/run", `{}`, "command or code"},
		{"/v1/run", `{"command":["true"],"code":"x"}`, "not both"},
		{"/v1/run", `{"command":["true"],"limits":{"memory_bytes":-1}}`, "limits.memory_bytes"},
		{"/v1/run", `{"command":["true"],"limits":{"memory_bytes":1099511627776}}`, "limits.memory_bytes"},
		{"/v1/run", `{"command":["true"],"limits":{"timeout_seconds":1e9}}`, "limits.timeout_seconds"},
		{"/v1/run", `{"command":["true"],"limits":{"cpus":-2}}`, "limits.cpus"},
		{"/v1/run", `{"command":["true"],"limits":{"pids":99999}}`, "limits.pids"},
		{"/v1/run", `{"command":["true"],"limits":{"bogus":1}}`, `unknown field \"bogus\"`},
		{"/v1/run", `{"command":["true"],"files":[{"path":"../etc/x","content":"x"}]}`, "files[0].path"},
		{"/v1/run", `{"command":["true"],"files":[{"path":"/etc/passwd","content":"x"}]}`, "files[0].path"},
		{"/v1/run", `{"command":["true"],"files":[{"path":"a","content_base64":"!!"}]}`, "files[0].content_base64"},
		{"/v1/run", `{"command":["true"],"fetch_files":["/proc/self/environ"]}`, "fetch_files[0]"},
		{"/v1/run", `{"command":["true"],"rootfs":"other"}`, "rootfs"},
		{"/v1/run", `{"command":["a\u0000b"]}`, "command[0]"},
		{"/v1/run", `{"command":["true"],"env":{"A=B":"x"}}`, "env"},
		{"/run_code", `{"language":"python"}`, "code"},
		{"/run_code", `{"code":"x","language":"python","memory_limit_MB":999999}`, "memory_limit_MB"},
		{"/run_code", `{"code":"x","language":"python","run_timeout":-1}`, "run_timeout"},
		{"/run_code", `{"code":"x","language":"python","files":{"/etc/x":"eA=="}}`, "files"},
	} {
		code, body, _ := s.do(t, "POST", c.path, c.body, nil)
		if code < 400 || code >= 500 || !strings.Contains(string(body), c.want) {
			t.Errorf("POST %s %s: %d %s, want a 4xx naming %q", c.path, c.body, code, body, c.want)
		}
	}
	// A body over max_body: 413; then the server still serves.
	big := `{"command":["true"],"stdin":"` + strings.Repeat("x", 2<<20) + `"}`
	if code, body, _ := s.do(t, "POST", "/v1/run", big, nil); code != 413 {
		t.Errorf("a 2 MiB body over a 1 MiB limit: %d %s", code, body)
	}
	if code, _, _ := s.do(t, "GET", "/nope", "", nil); code != 404 {
		t.Errorf("an unknown route: %d", code)
	}
	if code, _, _ := s.do(t, "GET", "/v1/run", "", nil); code != 405 {
		t.Errorf("GET /v1/run: %d", code)
	}
	// Slow clients: 20 connections that never finish their headers hold
	// no slot, and are closed by the header timeout (10 s).
	var slow []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("POST /v1/run HTTP/1.1\r\nHost: x\r\n"))
		slow = append(slow, c)
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, nil); code != 200 {
		t.Errorf("a run beside 20 slow clients: %d %s", code, body)
	}
	closed := 0
	for _, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.ReadAll(c); err == nil {
			closed++
		}
		c.Close()
	}
	if closed != len(slow) {
		t.Errorf("%d of %d slow clients were closed by the server within 15 s", closed, len(slow))
	}
	if code, _, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("the server after the bad requests: %d", code)
	}
}

// TestServeClientGone: a client that disconnects mid-run gets its jail
// killed: the payload, found on the host by a marker in its argv, is gone
// within seconds, long before its own timeout.
func TestServeClientGone(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			s := startServer(t, m, serveOpts{maxConc: 2})
			marker := randomToken("gonemarker")
			ctx, cancel := context.WithCancel(context.Background())
			body := fmt.Sprintf(`{"command":["python3","-c","import time; time.sleep(60)","%s"],"limits":{"timeout_seconds":60}}`, marker)
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/run", strings.NewReader(body))
			errc := make(chan error, 1)
			go func() {
				resp, err := s.client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			p, ok := findPayload(marker, s.cmd.Process.Pid, 10*time.Second)
			if !ok {
				t.Fatalf("the payload never ran:\n%s", s.stderr.String())
			}
			cancel()
			<-errc
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, alive := readProc(p.pid); !alive {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the payload %v outlived its client by 5 s", p)
				}
				time.Sleep(50 * time.Millisecond)
			}
			waitNoDescendants(t, s.cmd.Process.Pid, 5*time.Second)
		})
	}
}

// waitNoDescendants waits until the server has no process below it.
func waitNoDescendants(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		d := descendants(pid)
		if len(d) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes below the server:%s", procList(d))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeQueueFull: one slot and a queue of one: a third request at
// once is 429 with Retry-After.
func TestServeQueueFull(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 1, config: "queue = 1"})
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := s.do(t, "POST", "/v1/run", `{"command":["sleep","2"]}`, nil)
			codes <- code
		}()
		time.Sleep(300 * time.Millisecond)
	}
	code, body, hdr := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, nil)
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), "queue") {
		t.Errorf("a request beyond the queue: %d %s (Retry-After %q)", code, body, hdr.Get("Retry-After"))
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("a queued request: %d", c)
		}
	}
}

// TestServeLoad: 2,000 requests from 16 clients as root (200 rootless);
// every one answered 200 and ok, and nothing left behind, judged only on
// what this test made: no process below the server after, no cgroup
// below the server's own --cgroup-parent (root), no mount naming the
// test's directories or rljail's own paths, no file in the TMPDIR it
// gave the server, no process of the server's binary, no process of a
// host uid its jails were seen running as nor a file of one in its
// directories; the server's RSS after the load stated and bounded.
func TestServeLoad(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveLoad(t, m) })
	}
}

// ownMounts counts the mount table's entries that name one of dirs.
func ownMounts(t *testing.T, dirs ...string) map[string]int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		for _, d := range dirs {
			if strings.Contains(line, d) {
				out[line]++
				break
			}
		}
	}
	return out
}

func serveLoad(t *testing.T, m mode) {
	n, clients := 2000, 16
	if m == asRootless {
		n = 200
	}
	marker := randomToken("loadmarker")
	privTmp := newOpenDir(t)
	opts := serveOpts{maxConc: 2, config: "queue = 32", env: []string{"TMPDIR=" + privTmp}}
	var cgDirs []string
	if m == asRoot {
		var parent string
		parent, cgDirs = newServeCgroupParent(t)
		opts.extraArgs = []string{"--cgroup-parent", parent}
	}
	watched := []string{privTmp, "/run/rljail/", rootfsDir}
	mountsBefore := ownMounts(t, watched...)
	s := startServer(t, m, opts)
	watched = append(watched, filepath.Dir(s.sock))
	hwm := watchHWM(s.cmd.Process.Pid, 100*time.Millisecond)
	uids := watchJailUIDs(s.cmd.Process.Pid, 25*time.Millisecond)
	// The cgroup check can work only if the runs' cgroups were below the
	// parent: seen there at least once while the load ran.
	placed := make(chan bool, 1)
	stopWatch := make(chan struct{})
	go func() {
		seen := false
		for !seen {
			select {
			case <-stopWatch:
				placed <- false
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, d := range cgDirs {
				if ents, _ := os.ReadDir(d); slices.ContainsFunc(ents, fs.DirEntry.IsDir) {
					seen = true
				}
			}
		}
		placed <- true
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[string]int{}
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var body string
				want := fmt.Sprint(i)
				switch i % 4 {
				case 0:
					body = fmt.Sprintf(`{"command":["python3","-c","print(%d)","%s"]}`, i, marker)
				case 1:
					body = fmt.Sprintf(`{"code":"open('o','w').write(open('f').read()+'!'); print(open('f').read())","files":[{"path":"f","content":"%d"}],"fetch_files":["o"],"args":["%s"]}`, i, marker)
					want = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(i, "!")))
				case 2:
					body = fmt.Sprintf(`{"code":"print(%d)","language":"python","stdin":null}`, i)
				case 3:
					body = fmt.Sprintf(`{"language":"python","version":"*","files":[{"content":"print(%d)"}],"args":["%s"]}`, i, marker)
				}
				path := map[int]string{0: "/v1/run", 1: "/v1/run", 2: "/run_code", 3: "/api/v2/execute"}[i%4]
				if i%100 == 50 { // a few that time out
					body = fmt.Sprintf(`{"code":"print(%d, flush=True)\nwhile True: pass","args":["%s"],"limits":{"timeout_seconds":0.3}}`, i, marker)
					path, want = "/v1/run", `"status":"timeout"`
				}
				code, resp, _ := s.do(t, "POST", path, body, nil)
				if code != 200 || !bytes.Contains(resp, []byte(want)) {
					mu.Lock()
					bad[fmt.Sprintf("%s %d %.200s", path, code, resp)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopWatch)
	if !<-placed && len(cgDirs) > 0 {
		t.Errorf("no run's cgroup was ever seen below the --cgroup-parent %v: the check cannot work", cgDirs)
	}
	peak := hwm()
	rss := procStatusKiB(s.cmd.Process.Pid, "VmRSS")
	t.Logf("%d requests from %d clients in %v (%.1f/s); the server's RSS after the load %d KiB, its peak %d KiB", n, clients, elapsed, float64(n)/elapsed.Seconds(), rss, peak)
	for k, c := range bad {
		t.Errorf("%d× %s", c, k)
	}
	if rss <= 0 || rss > 300<<10 {
		t.Errorf("the server's RSS after the load %d KiB: want (0, 300 MiB)", rss)
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 5*time.Second)
	s.stop(t)
	if !s.cmd.ProcessState.Success() {
		t.Errorf("the server after its drain: %v", s.cmd.ProcessState)
	}
	for k, c := range ownMounts(t, watched...) {
		if c > mountsBefore[k] {
			t.Errorf("a mount was left on the host: %s", k)
		}
	}
	if left, _ := os.ReadDir(privTmp); len(left) > 0 {
		t.Errorf("the server left %d files in its TMPDIR %s, the first %s", len(left), privTmp, left[0].Name())
	}
	for _, d := range cgDirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Errorf("the server's --cgroup-parent %s: %v", d, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("a cgroup was left below the server's --cgroup-parent: %s/%s", d, e.Name())
			}
		}
		if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(bytes.TrimSpace(procs)) > 0 {
			t.Errorf("processes left in the server's --cgroup-parent %s: %s", d, procs)
		}
	}
	for _, p := range allProcs() {
		if strings.Contains(p.cmdline, marker) {
			t.Errorf("a process of this test's runs was left: %v", p)
		}
	}
	seen := uids()
	if m == asRoot && len(seen) == 0 {
		t.Errorf("no run was ever seen running as a host uid of the jails' range: the uid check cannot work")
	}
	t.Logf("%d host uids seen in the runs", len(seen))
	checkNoJailUIDs(t, seen, privTmp, filepath.Dir(s.sock))
}

// procStatusKiB is a field of /proc/PID/status in KiB (0 if absent).
func procStatusKiB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			var v int64
			fmt.Sscan(f[1], &v)
			return v
		}
	}
	return 0
}

// TestServeDrain: SIGTERM while a run goes on: the run finishes and is
// answered, a new connection is refused, and the server exits 0.
func TestServeDrain(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 1})
	got := make(chan string, 1)
	go func() {
		_, body, _ := s.do(t, "POST", "/v1/run", `{"command":["python3","-c","import time; time.sleep(1.5); print('finished')"]}`, nil)
		got <- string(body)
	}()
	time.Sleep(700 * time.Millisecond)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	// The listener closes at once: a new client is refused.
	refused := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			refused = true
			break
		}
		c.Close()
	}
	if !refused {
		t.Errorf("a new connection was still accepted 2 s after SIGTERM")
	}
	select {
	case body := <-got:
		if !strings.Contains(body, "finished") || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("the run under way at SIGTERM: %s", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run under way at SIGTERM was never answered")
	}
	select {
	case <-s.done:
		if !s.cmd.ProcessState.Success() {
			t.Errorf("the server after its drain: %v\n%s", s.cmd.ProcessState, s.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end after its drain")
	}
	if !strings.Contains(s.stderr.String(), `"msg":"drained"`) {
		t.Errorf("no drained line:\n%s", s.stderr.String())
	}
}

// TestServeDrainKills: a run that outlasts --drain-grace is killed at
// its end, and still answered; the server then exits 0 with nothing
// below it.
func TestServeDrainKills(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 1, extraArgs: []string{"--drain-grace", "1s"}})
	marker := randomToken("drainmarker")
	got := make(chan string, 1)
	go func() {
		_, body, _ := s.do(t, "POST", "/v1/run", fmt.Sprintf(`{"command":["python3","-c","import time; time.sleep(30)","%s"],"limits":{"timeout_seconds":30}}`, marker), nil)
		got <- string(body)
	}()
	p, ok := findPayload(marker, s.cmd.Process.Pid, 10*time.Second)
	if !ok {
		t.Fatal("the payload never ran")
	}
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case body := <-got:
		if !strings.Contains(body, `"result"`) || strings.Contains(body, `"status":"ok"`) {
			t.Errorf("the run killed at the drain's end: %s", body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the run was not answered within 15 s of SIGTERM with a 1 s grace")
	}
	if d := time.Since(start); d < time.Second || d > 8*time.Second {
		t.Errorf("answered %v after SIGTERM, want the 1 s grace and a little", d)
	}
	if _, alive := readProc(p.pid); alive {
		t.Errorf("the payload %v outlived the drain", p)
	}
	select {
	case <-s.done:
		if !s.cmd.ProcessState.Success() {
			t.Errorf("the server after its drain: %v", s.cmd.ProcessState)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not end")
	}
}

// TestServeLauncherSignal: a payload run through the launcher (code,
// files) that dies by a signal is reported as signaled with that signal,
// SIGKILL included (whose action the launcher cannot set), from a warm
// pool's jail and a one-shot one alike.
func TestServeLauncherSignal(t *testing.T) {
	for _, warm := range []bool{false, true} {
		o := serveOpts{}
		if warm {
			o.extraArgs = []string{"--warm", "1"}
		}
		s := startServer(t, asRoot, o)
		for _, sig := range []string{"SIGKILL", "SIGTERM", "SIGSEGV"} {
			var out v1Response
			code := s.postJSON(t, "/v1/run", map[string]any{"code": "import os, signal\nos.kill(os.getpid(), signal." + sig + ")\n"}, &out)
			if code != 200 || out.Result["status"] != "signaled" || out.Result["signal_name"] != sig {
				t.Errorf("warm %v, %s: %d, result %v, stderr %q; want signaled by %s", warm, sig, code, out.Result, out.Stderr.Text, sig)
			}
		}
		s.stop(t)
	}
}

// TestServeSocketSuccessor: a server whose socket file was deleted, and
// another server bound a socket of its own at the same path since, leaves
// the successor's socket in place when it ends (net's listener would
// remove whatever the path holds by then, cutting the successor off from
// every new client).
func TestServeSocketSuccessor(t *testing.T) {
	sock := filepath.Join(newDir(t), "api.sock")
	first := startServer(t, asRoot, serveOpts{sock: sock})
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	second := startServer(t, asRoot, serveOpts{sock: sock})
	first.stop(t)
	if !fileExists(sock) {
		t.Fatalf("the first server's end removed the second's socket %s", sock)
	}
	if code, body, _ := second.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Fatalf("the second server after the first ended: %d %s", code, body)
	}
	second.stop(t)
	if fileExists(sock) {
		t.Errorf("the second server left its socket %s behind", sock)
	}
}
