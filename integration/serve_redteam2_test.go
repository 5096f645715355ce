package integration

// rljail serve, a second red-team pass: each test is a finding, judged
// from outside the jail (the HTTP answers, the server's own memory).

import (
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
