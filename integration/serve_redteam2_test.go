package integration

// rljail serve, a second red-team pass: each test is a finding, judged
// from outside the jail (the HTTP answers, the server's own memory).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeJSONAmplification: a body within max_body that is mostly
// tiny JSON values (an argv of millions of empty strings, an env of
// millions of short names) decodes to Go values many times its size: one
// 60 MiB body took the server from 70 MiB to 1.1 GiB, and body_budget's
// two at once to twice that, whatever body_budget says. The server must
// refuse such a body with a 400 naming why, and its RSS stay bounded.
func TestServeJSONAmplification(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, m, serveOpts{maxConc: 2})
			hwm := watchHWM(s.cmd.Process.Pid, 20*time.Millisecond)
			n := (60 << 20) / 3
			bodies := map[string]string{
				"/v1/run argv": `{"command":["true"` + strings.Repeat(`,""`, n) + `]}`,
				"/v1/run env": func() string {
					var b strings.Builder
					b.WriteString(`{"command":["true"],"env":{`)
					for i := 0; b.Len() < 60<<20; i++ {
						if i > 0 {
							b.WriteByte(',')
						}
						b.WriteString(`"` + strings.Repeat("a", 1) + itoa(i) + `":""`)
					}
					b.WriteString(`}}`)
					return b.String()
				}(),
				"/api/v2/execute args": `{"language":"python","version":"*","files":[{"content":"print(1)"}],"args":["a"` + strings.Repeat(`,""`, n) + `]}`,
			}
			paths := map[string]string{"/v1/run argv": "/v1/run", "/v1/run env": "/v1/run", "/api/v2/execute args": "/api/v2/execute"}
			var wg sync.WaitGroup
			var mu sync.Mutex
			for name, body := range bodies {
				wg.Add(1)
				go func(name, body string) {
					defer wg.Done()
					code, resp, _ := s.do(t, "POST", paths[name], body, nil)
					mu.Lock()
					defer mu.Unlock()
					if code != 400 && code != 429 {
						t.Errorf("%s: %d %.300s: want 400 (or 429 over body_budget)", name, code, resp)
					}
					if code == 400 && !strings.Contains(string(resp), "JSON values") {
						t.Errorf("%s: 400 %.300s: want a sentence on the count of values", name, resp)
					}
				}(name, body)
			}
			wg.Wait()
			peak := hwm()
			t.Logf("the server's peak RSS %d KiB", peak)
			// body_budget (128 MiB) held as sent, plus the scan: far from
			// the gigabytes the decoded values took.
			if peak > 400<<10 {
				t.Errorf("the server's peak RSS %d KiB is over 400 MiB for bodies of 60 MiB", peak)
			}
			var r v1Response
			if code := s.postJSON(t, "/v1/run", map[string]any{"command": []string{"echo", "still"}}, &r); code != 200 || r.Stdout.Text != "still\n" {
				t.Errorf("the server after the bodies: %d %q", code, r.Stdout.Text)
			}
		})
	}
}

func itoa(i int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= len(digits) {
		b = append([]byte{digits[i%len(digits)]}, b...)
	}
	return string(b)
}

// TestServeTinyDurationsRefused: a duration that rounds to nothing
// (timeout_seconds 1e-10: time.Duration 0) was taken as "none given", so
// the jail's default (10 s) or the session's (a cell's 30 s) applied
// whatever the server's max_timeout or max_cell_timeout: with max_timeout
// 2s, a payload sleeping 4 s ran to its end on /v1/run, /run_code and
// /api/v2/execute, and a session's cells got 30 s. run_cpu_time 1e300 ms
// overflowed past the check into a negative CPU time. cpus 0.001 was a
// 200 setup_error rather than a 400. Each must be refused before a jail.
func TestServeTinyDurationsRefused(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, m, serveOpts{maxConc: 2, config: "max_timeout = \"2s\"\n[sessions]\nmax_cell_timeout = \"2s\"\nmax_call_timeout = \"2s\"\n"})
			sleep := `import time; time.sleep(4); print("ran")`
			cases := []struct{ path, body string }{
				{"/v1/run", `{"command":["sleep","4"],"limits":{"timeout_seconds":1e-10}}`},
				{"/v1/run", `{"code":` + jsonString(sleep) + `,"limits":{"timeout_seconds":1e-300}}`},
				{"/v1/run", `{"command":["true"],"limits":{"cpus":0.001}}`},
				{"/run_code", `{"language":"python","code":` + jsonString(sleep) + `,"run_timeout":1e-10}`},
				{"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":` + jsonString(sleep) + `}],"run_timeout":1e-7}`},
				{"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"while 1: pass"}],"run_cpu_time":1e300,"run_timeout":1500}`},
				{"/v1/sessions", `{"cell_timeout_seconds":1e-10}`},
				{"/v1/sessions", `{"call_timeout_seconds":1e-10}`},
				{"/v1/sessions", `{"limits":{"timeout_seconds":1e-10}}`},
			}
			for _, c := range cases {
				code, body, _ := s.do(t, "POST", c.path, c.body, nil)
				if code < 400 || code >= 500 {
					t.Errorf("POST %s %s: %d %.300s: want a 4xx", c.path, c.body, code, body)
					if c.path == "/v1/sessions" && code == 200 {
						var r struct{ ID string }
						if json.Unmarshal(body, &r) == nil && r.ID != "" {
							s.do(t, "DELETE", "/v1/sessions/"+r.ID, "", nil)
						}
					}
					continue
				}
				if !strings.Contains(string(body), "at least") {
					t.Errorf("POST %s %s: %d %.300s: want a sentence saying the least it may be", c.path, c.body, code, body)
				}
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestServeWrongTypesPlainSentence: a value of the wrong type was
// answered in Go's words, naming Go's types and, for the body itself, no
// field at all ("field : a JSON array cannot be serve.RunRequest",
// "cannot be []serve.RunFile", "cannot be map[string]*string"). The
// answer must be one sentence in JSON's terms naming the field.
func TestServeWrongTypesPlainSentence(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{})
	goType := regexp.MustCompile(`serve\.|map\[|\[\]|\*string|int64|float64`)
	cases := []struct{ path, body, want string }{
		{"/v1/run", `[]`, "the body must be a JSON object, not an array"},
		{"/v1/run", `{"code":5}`, "field code must be a string"},
		{"/v1/run", `{"code":"1","files":{"a":"b"}}`, "field files must be an array of objects"},
		{"/v1/run", `{"command":["true"],"limits":{"memory_bytes":99999999999999999999999}}`, "field limits.memory_bytes must be an integer of 64 bits"},
		{"/run_code", `{"language":"python","code":"1","files":[{"path":"a"}]}`, "field files must be an object of strings"},
		{"/api/v2/execute", `{"language":"python","version":"*","files":{"a":1}}`, "field files must be an array of objects"},
		{"/v1/sessions", `{"env":["A=1"]}`, "field env must be an object of strings"},
	}
	for _, c := range cases {
		code, body, _ := s.do(t, "POST", c.path, c.body, nil)
		if code < 400 || code >= 500 || !strings.Contains(string(body), c.want) || goType.Match(body) {
			t.Errorf("POST %s %s: %d %s: want a 4xx saying %q, in no Go type's name", c.path, c.body, code, body, c.want)
		}
	}
}

// TestServeHeadersAloneHoldNoBudget: a POST's declared length is held in
// body_budget from its headers on, and its body had the request's whole
// minute to arrive: two connections that sent the headers of a 64 MiB
// body and nothing more held the 128 MiB budget, and every other POST was
// answered 429 for that minute, again and again. A body must keep coming:
// the idle ones are answered 408 within the grace, and the server serves.
func TestServeHeadersAloneHoldNoBudget(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, m, serveOpts{maxConc: 2})
			type answer struct {
				status string
				took   time.Duration
			}
			answers := make(chan answer, 2)
			for i := 0; i < 2; i++ {
				c, err := net.Dial("unix", s.sock)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				start := time.Now()
				if _, err := fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 64<<20); err != nil {
					t.Fatal(err)
				}
				go func(c net.Conn) {
					_ = c.SetReadDeadline(time.Now().Add(50 * time.Second))
					line, _ := bufio.NewReader(c).ReadString('\n')
					answers <- answer{strings.TrimSpace(line), time.Since(start)}
				}(c)
			}
			time.Sleep(300 * time.Millisecond)
			if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"]}`, nil); code != 429 {
				// The room is held while the bodies may still come.
				t.Logf("while the two wait for their bodies: %d %s", code, body)
			}
			for i := 0; i < 2; i++ {
				a := <-answers
				if !strings.Contains(a.status, " 408 ") || a.took > 20*time.Second {
					t.Errorf("a connection that sent the headers of a 64 MiB body and no more: %q after %v, want 408 within 20 s", a.status, a.took.Round(time.Millisecond))
				}
			}
			var r v1Response
			if code := s.postJSON(t, "/v1/run", map[string]any{"command": []string{"echo", "served"}}, &r); code != 200 || r.Stdout.Text != "served\n" {
				t.Errorf("a POST after the idle bodies were refused: %d %q", code, r.Stdout.Text)
			}
		})
	}
}

// TestServeLongStagedAnswerArrives: the server's write timeout (queue_wait
// + max_timeout + a minute) counted from the request's headers, while a
// compiled language's request takes its body, a compile stage and a run,
// each up to max_timeout: the answer of one whose stages ran 58 s each
// after an 8 s body was written past the deadline and lost (the client saw
// the connection end, no answer). The answer must arrive.
func TestServeLongStagedAnswerArrives(t *testing.T) {
	cfg := `max_timeout = "60s"
queue_wait = "1s"
[languages.slowc]
rootfs = ` + jsonString(rootfsDir) + `
file = "main.sh"
compile = ["sh", "-c", "sleep 58; cp {file} {out}"]
run = ["sh", "-c", "sleep 58; echo ran"]
`
	s := startServer(t, asRoot, serveOpts{maxConc: 2, config: cfg})
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"code":"true","language":"slowc","limits":{"timeout_seconds":60}}`
	start := time.Now()
	if _, err := fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Fatal(err)
	}
	// The body within the server's grace for a body (10 s), slowly.
	time.Sleep(8 * time.Second)
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer %v after the request: %v\nserver stderr:\n%s", time.Since(start).Round(time.Second), err, s.stderr.String())
	}
	b, _ := io.ReadAll(resp.Body)
	var r v1Response
	_ = json.Unmarshal(b, &r)
	if resp.StatusCode != 200 || r.Result["status"] != "ok" || r.Stdout.Text != "ran\n" {
		t.Errorf("after %v: %d %.400s", time.Since(start).Round(time.Second), resp.StatusCode, b)
	}
}

// TestServeLongPathRefused: a path of megabytes in fetch_files or files
// went to the launcher: in fetch_files its answer for the path was over
// what the server takes (4096 bytes), the server stopped reading, and the
// launcher blocked on the channel until the run's timeout (10 s); in files
// the run ended exit 1 (File name too long). Neither is a 400 naming the
// field.
func TestServeLongPathRefused(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{})
	long := strings.Repeat("a", 20<<20)
	for _, body := range []string{
		`{"code":"1","fetch_files":["` + long + `"]}`,
		`{"code":"1","files":[{"path":"` + long + `","content":"x"}]}`,
	} {
		code, resp, _ := s.do(t, "POST", "/v1/run", body, nil)
		if code != 400 || !strings.Contains(string(resp), "longer than") {
			t.Errorf("a path of 20 MiB: %d %.300s: want 400 naming its length", code, resp)
		}
	}
}
