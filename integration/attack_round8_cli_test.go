package integration

// Red-team round 8: the one-shot CLI and sessions, as the code in the
// jail and as a careless user. Every case decides from the host: the
// files rljail writes there, its exit status and stderr, what is left.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "session_audit_refused_flood", group: groupDoS,
			mechanism: "a session with --audit-log: a cell calls llm_query in a loop from four threads with a prompt over --max-llm-prompt-chars (any refused call does: a spent budget, an undeclared tool), for 3 s; every refusal was one line of rljail's audit log on the host, about 4 MB a second for as long as the session lasts (a 30-minute session, 7 GB of the host's disk)",
			layer:     "session.calls: the audit log records at most 64 refused calls of a cell; the cell's own record counts the rest (calls_unrecorded); a call the bridge takes is always recorded (budgets bound those)",
			run:       attackSessionAuditRefusedFlood},
		{name: "bridge_openai_answers_held", group: groupDoS, serial: true,
			mechanism: "with --llm openai and --max-llm-calls 400, a cell's 8 threads each ask llm_query_batched of 50 prompts of an endpoint whose every answer is 3.5 MiB (a model told to repeat a long text, or an endpoint that echoes): each request's body was bounded, but the answers of a batch were all held until its last one came, 400 of them at once (1.4 GiB of the supervisor's memory, which no cgroup of the jail's is charged for)",
			layer:     "bridge.OpenAI: the answers held at once, across the session's calls, are at most 32 MiB; a call whose answer would pass that fails with CallFailed at once; the supervisor's peak RSS, read from /proc, stays under 256 MiB",
			run:       attackBridgeOpenAIAnswersHeld},
		{name: "session_cell_closes_stdio", group: groupDoS,
			mechanism: "a cell closes its descriptors 1 and 2 (os.close(1); os.close(2)), so that neither of the worker's end markers arrives: the supervisor waited for the second marker on a deadline the first wait had already taken, for ever; the cell timer was stopped by then, so no reply came, and no later request was answered",
			layer:     "session.exec: one deadline for both markers, 250 ms after the reply; the cell's reply and the next cell's come within seconds by the host's clock",
			run:       attackSessionCellClosesStdio},
	}...)
}

func attackSessionAuditRefusedFlood(t *testing.T, m mode) {
	audit := filepath.Join(newOpenDir(t), "audit.jsonl")
	s := startSession(t, m, "--audit-log", audit, "--max-llm-prompt-chars", "1", "--cell-timeout", "20s")
	rep := s.exec(t, `import threading, time
def spin():
    end = time.time() + 3
    while time.time() < end:
        try:
            llm_query("xx")
        except LLMBudgetExceeded:
            pass
ts = [threading.Thread(target=spin) for _ in range(4)]
for x in ts: x.start()
for x in ts: x.join()
print("done")`)
	s.close(t)
	if rep["stdout"] != "done\n" {
		t.Fatalf("the flooding cell did not finish: %.500v", rep)
	}
	refused := callCounts(t, rep)["refused"]
	st, err := os.Stat(audit)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var callLines int
	var unrecorded float64 = -1
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("an audit line does not read: %v", err)
		}
		if rec["kind"] == "call" {
			callLines++
		} else if rec["cell"] == float64(1) {
			unrecorded, _ = rec["calls_unrecorded"].(float64)
		}
	}
	t.Logf("%d calls refused; the audit log: %d bytes, %d call records, calls_unrecorded %v", refused, st.Size(), callLines, unrecorded)
	if refused < 1000 {
		t.Fatalf("only %d calls were refused in 3 s: the flood did not happen", refused)
	}
	if st.Size() > 256<<10 || callLines > 64 {
		t.Errorf("one cell's refused calls wrote %d bytes (%d call records) to the host's audit log, over the 64 records a cell's refusals may write", st.Size(), callLines)
	}
	if int(unrecorded)+callLines != refused {
		t.Errorf("the cell's audit record says %v calls unrecorded, %d are recorded, of %d refused: they must add up", unrecorded, callLines, refused)
	}
}

// TestSessionSignalWhileStarting: SIGTERM, SIGHUP or SIGQUIT end a session
// whose worker has not become ready yet (a rootfs package whose .pth
// hangs at start), exit 128+N, and leave nothing. rljail caught the
// signal and waited for the start, bounded only by the session's
// --timeout (30 minutes by default).
func TestSessionSignalWhileStarting(t *testing.T) {
	data := dataRootfs(t)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			pkgs := newOpenDir(t)
			writeFile(t, filepath.Join(pkgs, "hang.pth"), "import time; time.sleep(3600)\n", 0o644)
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
				before := faultSnapshot(t)
				s := startSession(t, m, "--rootfs", data, "-v", pkgs+":/usr/lib/python3/dist-packages")
				_, ch := s.send(t, map[string]any{"op": "hello"})
				// The worker is started and hangs in site.main().
				deadline := time.Now().Add(20 * time.Second)
				for !workerStarted(s.cmd.Process.Pid) && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond)
				select {
				case r := <-ch:
					t.Fatalf("the hanging worker answered hello: %v", r)
				default:
				}
				t0 := time.Now()
				_ = s.cmd.Process.Signal(sig)
				ended := make(chan error, 1)
				go func() { ended <- s.cmd.Wait() }()
				var err error
				select {
				case err = <-ended:
				case <-time.After(15 * time.Second):
					s.kill()
					t.Fatalf("%v to rljail session while its worker started: still running after 15 s", sig)
				}
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
					t.Errorf("%v while starting: %v after %v, want exit %d (stderr %q)", sig, err, time.Since(t0), 128+int(sig), s.stderr.String())
				}
				if left := sessionLeftovers(t, before); len(left) > 0 {
					t.Errorf("%v while starting left: %v", sig, left)
				}
			}
		})
	}
}

// workerStarted reports whether a session worker runs below the process
// pid (its jail's init's child).
func workerStarted(pid int) bool {
	procs := allProcs()
	byPID := map[int]proc{}
	for _, q := range procs {
		byPID[q.pid] = q
	}
	for _, q := range procs {
		if q.zombie() || !strings.Contains(q.cmdline, workerMark) {
			continue
		}
		for p, n := q, 0; p.ppid > 1 && n < 8; n++ {
			if p.ppid == pid {
				return true
			}
			p = byPID[p.ppid]
		}
	}
	return false
}

func attackBridgeOpenAIAnswersHeld(t *testing.T, m mode) {
	answer := strings.Repeat("a", 7<<19) // 3.5 MiB, under the 4 MiB a response may be
	body, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": answer}}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	s := startSessionEnv(t, m, []string{"RLJAIL_TEST_KEY=sk-rljail-held-0123456789"}, "--llm", "openai",
		"--llm-endpoint", srv.URL+"/v1", "--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY",
		"--max-llm-calls", "400", "--memory", "512m", "--cell-timeout", "100s", "--call-timeout", "90s")
	rep := s.do(t, map[string]any{"op": "exec", "code": `import threading
out = []
def ask():
    try:
        out.append(sum(len(a) for a in llm_query_batched(["x"] * 50)))
    except Exception as e:
        out.append(type(e).__name__)
ts = [threading.Thread(target=ask) for _ in range(8)]
for x in ts: x.start()
for x in ts: x.join()
print(len(out), sorted(set(map(str, out))))`})
	kb, ok := vmHWM(s.cmd.Process.Pid, filepath.Base(testBin))
	if !ok {
		t.Fatalf("no peak RSS of the session's supervisor (pid %d)", s.cmd.Process.Pid)
	}
	peak := kb << 10
	t.Logf("the supervisor's peak RSS: %.1f MiB; the cell: %.300v", float64(peak)/(1<<20), rep["stdout"])
	if out, _ := rep["stdout"].(string); !strings.HasPrefix(out, "8 ") {
		t.Errorf("the cell's threads did not all end: %.500v", rep)
	}
	if peak > 256<<20 {
		t.Errorf("the supervisor's peak RSS reached %.1f MiB for the endpoint's answers, over the 256 MiB bound (SECURITY.md)", float64(peak)/(1<<20))
	}
	if rep = s.exec(t, "print('alive')"); rep["stdout"] != "alive\n" {
		t.Errorf("the session after the answers: %v", rep)
	}
	s.close(t)
}

// TestSessionReportOnFullFS: rljail session's --result and --audit-log on
// a full filesystem are refused before the jail starts, as a run's are
// (exit 125, one line, no empty file left); the session left an empty
// report, said nothing and exited 0.
func TestSessionReportOnFullFS(t *testing.T) {
	for _, m := range bothModes {
		for _, flag := range []string{"--result", "--audit-log"} {
			t.Run(string(m)+"/"+flag[2:], func(t *testing.T) {
				full := faultMountTmpfs(t, "size=4k,mode=0777")
				if err := os.WriteFile(filepath.Join(full, "fill"), make([]byte, 4096), 0o644); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(full, "out.json")
				cmd := exec.Command(testBin, "session", "--rootfs", rootfsDir, "--no-workspace", flag, p)
				cmd.Dir = baseDir
				cmd.Env = append(modeEnv(m), "TMPDIR="+sessionTmpDir(t))
				cmd.Stdin = strings.NewReader(`{"id":1,"op":"exec","code":"print(6*7)"}` + "\n" + `{"id":2,"op":"close"}` + "\n")
				stdout, stderr, exit := attackExec(t, m, cmd)
				t.Logf("exit %d, stdout %q, stderr %q", exit, stdout, stderr)
				if exit != 125 {
					t.Errorf("%s on a full filesystem: exit %d, want 125", flag, exit)
				}
				if lines := attackErrorLines(stderr); len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: ") {
					t.Errorf("stderr must hold one error line starting \"rljail: \": %q", stderr)
				}
				if strings.Contains(stdout, "42") {
					t.Errorf("the session ran its cell although %s has no room: %q", flag, stdout)
				}
				if exists(p) {
					t.Errorf("%s left %s on the full filesystem", flag, p)
				}
			})
		}
	}
}

// TestSessionCloseNowAnswersRunning: close with "now" while a cell runs
// with calls waiting for the runner, requests and a close queued behind
// it and stdin closed right after: every request gets its reply, the
// running one SessionLost "closed" before the close's own reply. The
// running cell's reply was lost (rljail exited before the queue's runner
// had written it), and so was the queued close's.
func TestSessionCloseNowAnswersRunning(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			for round := 0; round < 3; round++ {
				cmd := exec.Command(testBin, "session", "--rootfs", rootfsDir, "--no-workspace")
				cmd.Dir = baseDir
				cmd.Env = append(modeEnv(m), "TMPDIR="+sessionTmpDir(t))
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				var out, errb syncBuffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				runAsMode(cmd, m)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				w := func(v map[string]any) {
					b, _ := json.Marshal(v)
					_, _ = in.Write(append(b, '\n'))
				}
				w(map[string]any{"id": 1, "op": "exec", "code": "import threading\nts = [threading.Thread(target=llm_query, args=('t',)) for _ in range(5)]\n[x.start() for x in ts]\n[x.join() for x in ts]"})
				w(map[string]any{"id": 2, "op": "exec", "code": "1"})
				w(map[string]any{"id": 3, "op": "hello"})
				w(map[string]any{"id": "q", "op": "close"})
				// The cell's five calls are waiting for the runner.
				deadline := time.Now().Add(20 * time.Second)
				for strings.Count(out.String(), `"event":"call"`) < 5 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				w(map[string]any{"id": "c", "op": "close", "now": true})
				in.Close()
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					_ = cmd.Process.Kill()
					t.Fatalf("rljail session did not end after close now")
				}
				replies := map[string]map[string]any{}
				var order []string
				for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var v map[string]any
					if json.Unmarshal([]byte(l), &v) != nil {
						t.Fatalf("a line does not read: %q", l)
					}
					if id, ok := v["id"]; ok && id != nil {
						k := fmt.Sprint(id)
						replies[k] = v
						order = append(order, k)
					}
				}
				if err != nil {
					t.Errorf("round %d: rljail session: %v (stderr %q)", round, err, errb.String())
				}
				for _, id := range []string{"1", "2", "3", "q", "c"} {
					if replies[id] == nil {
						t.Errorf("round %d: request %s got no reply: %q", round, id, out.String())
					}
				}
				if r := replies["1"]; r != nil && (errType(r) != "SessionLost" || errReason(r) != "closed") {
					t.Errorf("round %d: the running cell's reply: %v, want SessionLost closed", round, r)
				}
				if len(order) > 0 && order[len(order)-1] != "c" {
					t.Errorf("round %d: the close's reply must come last: %v", round, order)
				}
			}
		})
	}
}

func attackSessionCellClosesStdio(t *testing.T, m mode) {
	s := startSession(t, m, "--cell-timeout", "5s", "--cell-grace", "1s")
	_, ch := s.send(t, map[string]any{"op": "exec", "code": "import os\nos.close(1)\nos.close(2)"})
	t0 := time.Now()
	rep := s.wait(t, ch, 20*time.Second)
	if d := time.Since(t0); d > 5*time.Second || rep["ok"] != true {
		t.Fatalf("the cell that closed its stdout and stderr: %v after %v, want its reply within 5 s", rep, d)
	}
	if rep = s.exec(t, "x = 6 * 7\nx"); rep["ok"] != true || rep["result"] == nil {
		t.Errorf("the next cell: %v", rep)
	}
	s.close(t)
}

// TestSessionToolNamesRefused: a --tool name the namespace cannot hold
// as a function (a dunder name such as __builtins__, which made every
// cell fail with "'function' object is not subscriptable", or a Python
// keyword, which no cell can call) is refused: exit 125, one line.
func TestSessionToolNamesRefused(t *testing.T) {
	for _, tool := range []string{"__builtins__", "__name__", "class", "None", "search:k,lambda"} {
		cmd := exec.Command(testBin, "session", "--rootfs", rootfsDir, "--no-workspace", "--tool", tool)
		cmd.Dir = baseDir
		cmd.Env = append(modeEnv(asRoot), "TMPDIR="+sessionTmpDir(t))
		cmd.Stdin = strings.NewReader(`{"id":1,"op":"exec","code":"print(6*7)"}` + "\n")
		stdout, stderr, exit := attackExec(t, asRoot, cmd)
		if exit != 125 || strings.Contains(stdout, "42") {
			t.Errorf("--tool %s: exit %d, stdout %q, want exit 125 before the session starts", tool, exit, stdout)
		}
		if lines := attackErrorLines(stderr); len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: --tool") {
			t.Errorf("--tool %s: stderr %q, want one line naming --tool", tool, stderr)
		}
	}
}
