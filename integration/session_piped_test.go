package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSessionPiped (issue 30): the README's request lines, piped into
// `rljail session` at once (a here-doc), each get their reply in order:
// requests for the worker and close queue behind the one running, and
// EOF ends the session once they are answered. On 36b5d19 the second
// request got Busy and close lost the session.
func TestSessionPiped(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			corpus := newDir(t)
			writeFile(t, filepath.Join(corpus, "book.txt"), strings.Repeat("word ", 1000), 0o644)
			script := `{"id":1,"op":"load_context","path":"/context/book.txt"}
{"id":2,"op":"exec","code":"n = len(context.split())\nprint(n)"}
{"id":3,"op":"exec","code":"import time\ntime.sleep(0.3)\nprint(n * 2)"}
{"id":4,"op":"get","name":"n"}
{"id":5,"op":"close"}
`
			cmd := exec.Command(testBin, "session", "--rootfs", rootfsDir, "--no-workspace", "-v", corpus+":/context")
			cmd.Dir = baseDir
			cmd.Env = append(modeEnv(m), "TMPDIR="+sessionTmpDir(t))
			runAsMode(cmd, m)
			cmd.Stdin = strings.NewReader(script)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.Output(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("the piped session did not end within 60 s: %s", stderr.String())
			}
			if err != nil {
				t.Errorf("rljail session: %v (%s)", err, stderr.String())
			}
			var replies []map[string]any
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var v map[string]any
				if json.Unmarshal(sc.Bytes(), &v) != nil {
					t.Fatalf("a line that is not JSON: %q", sc.Text())
				}
				replies = append(replies, v)
			}
			var ids []float64
			for _, r := range replies {
				id, _ := r["id"].(float64)
				ids = append(ids, id)
				if r["ok"] != true {
					t.Errorf("reply %v: %v", r["id"], r)
				}
			}
			if len(ids) != 5 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 || ids[3] != 4 || ids[4] != 5 {
				t.Fatalf("replies in the order %v, want 1 to 5: %s", ids, out)
			}
			if replies[1]["stdout"] != "1000\n" || replies[2]["stdout"] != "2000\n" || replies[3]["value"] != float64(1000) {
				t.Errorf("the piped script's results: %v", replies)
			}
			if c, _ := replies[4]["cells"].(float64); c != 2 {
				t.Errorf("close: %v, want 2 cells", replies[4])
			}
			_ = os.Remove(filepath.Join(corpus, "book.txt"))
		})
	}
}

// TestSessionQueueBound: the queue of requests for the worker is bounded
// (64 behind the one running); beyond it a request gets Busy from rljail
// at once, and the queued ones are answered in order.
func TestSessionQueueBound(t *testing.T) {
	s := startSession(t, asRoot)
	_, first := s.send(t, map[string]any{"op": "exec", "code": "import time\ntime.sleep(1)"})
	time.Sleep(200 * time.Millisecond)
	var queued []chan map[string]any
	busy := 0
	for i := 0; i < 70; i++ {
		_, ch := s.send(t, map[string]any{"op": "exec", "code": "x = 1"})
		queued = append(queued, ch)
	}
	s.wait(t, first, 20*time.Second)
	for i, ch := range queued {
		r := s.wait(t, ch, 20*time.Second)
		e, _ := r["error"].(map[string]any)
		switch {
		case r["ok"] == true && i < 64:
		case e != nil && e["type"] == "Busy" && e["origin"] == "rljail" && i >= 64:
			busy++
		default:
			t.Errorf("request %d of 70 behind a running cell: %v", i, r)
		}
	}
	if busy != 6 {
		t.Errorf("%d of 70 requests got Busy, want the 6 beyond the 64 the queue holds", busy)
	}
	s.close(t)
}

// TestSessionQueuedClose: a queued close holds nothing of its line but its
// id, and nothing is queued behind it: a request after it, or a second
// close, is refused at once (BadRequest from rljail), never left without a
// reply; twenty closes of 15 MiB lines behind a running cell leave the
// supervisor's peak RSS bounded (a red-team pass: 521 MB and no reply).
func TestSessionQueuedClose(t *testing.T) {
	s := startSession(t, asRoot)
	_, first := s.send(t, map[string]any{"op": "exec", "code": "import time\ntime.sleep(60)"})
	time.Sleep(200 * time.Millisecond)
	_, closeCh := s.send(t, map[string]any{"op": "close"})
	big := strings.Repeat("x", 15<<20)
	for i := 0; i < 20; i++ {
		r := s.do(t, map[string]any{"op": "close", "code": big})
		if e, _ := r["error"].(map[string]any); e["type"] != "BadRequest" || e["origin"] != "rljail" {
			t.Fatalf("a second close behind a queued one: %.200v, want BadRequest from rljail", r)
		}
	}
	if r := s.do(t, map[string]any{"op": "exec", "code": "print(1)"}); errType(r) != "BadRequest" {
		t.Errorf("an exec behind a queued close: %.200v, want BadRequest at once", r)
	}
	kb, ok := vmHWM(s.cmd.Process.Pid, filepath.Base(testBin))
	if !ok || kb > 160<<10 {
		t.Errorf("the supervisor's peak RSS after 20 closes of 15 MiB: %d KiB (ok %v), want under 160 MiB", kb, ok)
	}
	s.do(t, map[string]any{"op": "interrupt"})
	if r := s.wait(t, first, 20*time.Second); r["ok"] != true || errType(r) != "KeyboardInterrupt" {
		t.Errorf("the cell before the close, interrupted: %.300v", r)
	}
	if r := s.wait(t, closeCh, 20*time.Second); r["ok"] != true || r["cells"] != float64(1) {
		t.Errorf("the queued close: %v, want ok and 1 cell", r)
	}
}
