package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// workerMark is in every session worker's command line (its source is
// its argument): a leak check finds any worker left on the host by it.
const workerMark = "rljail's session worker"

var (
	sessionTmpOnce sync.Once
	sessionTmp     string
)

// sessionTmpDir is the TMPDIR of every session the tests start (1777, so
// that the rootless user may write it): a leak check finds there anything
// rljail left in its temporary directory.
func sessionTmpDir(t testing.TB) string {
	sessionTmpOnce.Do(func() {
		dir, err := os.MkdirTemp(baseDir, "session-tmp-")
		if err == nil {
			err = os.Chmod(dir, 0o1777)
		}
		if err != nil {
			t.Fatal(err)
		}
		sessionTmp = dir
	})
	return sessionTmp
}

// sessionProc is one `rljail session` the test drives over its stdin and
// stdout.
type sessionProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr *syncBuffer
	mu     sync.Mutex
	byID   map[string]chan map[string]any
	other  chan map[string]any // lines without an id the test waits for
	done   chan struct{}
	nextID int
	// maxLine is the longest line rljail wrote on its stdout, in bytes as
	// written (before any decoding of the test's).
	maxLine atomic.Int64
}

func startSession(t testing.TB, m mode, args ...string) *sessionProc {
	t.Helper()
	return startSessionEnv(t, m, nil, args...)
}

// startSessionEnv is startSession with env added to rljail's own
// environment (not the jail's).
func startSessionEnv(t testing.TB, m mode, env []string, args ...string) *sessionProc {
	t.Helper()
	full := append([]string{"session", "--rootfs", rootfsDir, "--no-workspace"}, args...)
	cmd := exec.Command(testBin, full...)
	cmd.Dir = baseDir
	cmd.Env = append(append(modeEnv(m), "TMPDIR="+sessionTmpDir(t)), env...)
	runAsMode(cmd, m)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &sessionProc{cmd: cmd, in: in, stderr: &syncBuffer{}, byID: map[string]chan map[string]any{},
		other: make(chan map[string]any, 16), done: make(chan struct{})}
	cmd.Stderr = s.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if n := int64(len(sc.Bytes())); n > s.maxLine.Load() {
				s.maxLine.Store(n)
			}
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				s.other <- map[string]any{"unparsed": sc.Text()}
				continue
			}
			id := fmt.Sprint(v["id"])
			s.mu.Lock()
			ch := s.byID[id]
			s.mu.Unlock()
			if ch == nil {
				s.other <- v
				continue
			}
			ch <- v
		}
	}()
	t.Cleanup(func() { s.kill() })
	return s
}

// send writes one request (an id is added) and returns its reply's
// channel.
func (s *sessionProc) send(t testing.TB, req map[string]any) (string, chan map[string]any) {
	t.Helper()
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprint(s.nextID)
	ch := make(chan map[string]any, 1)
	s.byID[id] = ch
	s.mu.Unlock()
	req["id"] = id
	b, _ := json.Marshal(req)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("write a request: %v (stderr: %s)", err, s.stderr.String())
	}
	return id, ch
}

// wait takes a reply within d.
func (s *sessionProc) wait(t testing.TB, ch chan map[string]any, d time.Duration) map[string]any {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-s.done:
		select {
		case v := <-ch:
			return v
		default:
		}
		t.Fatalf("rljail session ended without the reply (stderr: %s)", s.stderr.String())
	case <-time.After(d):
		t.Fatalf("no reply within %v (stderr: %s)", d, s.stderr.String())
	}
	return nil
}

// do sends a request and waits for its reply.
func (s *sessionProc) do(t testing.TB, req map[string]any) map[string]any {
	t.Helper()
	_, ch := s.send(t, req)
	return s.wait(t, ch, 30*time.Second)
}

func (s *sessionProc) exec(t testing.TB, code string) map[string]any {
	t.Helper()
	return s.do(t, map[string]any{"op": "exec", "code": code})
}

// close sends close and waits for rljail to exit.
func (s *sessionProc) close(t testing.TB) map[string]any {
	t.Helper()
	r := s.do(t, map[string]any{"op": "close"})
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("rljail session ended with %v (stderr: %s)", err, s.stderr.String())
	}
	return r
}

func (s *sessionProc) kill() {
	if s.cmd.ProcessState == nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func errType(r map[string]any) string {
	e, _ := r["error"].(map[string]any)
	if e == nil {
		return ""
	}
	s, _ := e["type"].(string)
	return s
}

func errReason(r map[string]any) string {
	e, _ := r["error"].(map[string]any)
	s, _ := e["reason"].(string)
	return s
}

func sessionLeftovers(t *testing.T, before faultHostState) []string {
	t.Helper()
	var left []string
	deadline := time.Now().Add(2 * time.Second)
	for {
		left = nil
		for _, l := range faultLeftovers(t, before, sessionTmpDir(t), workerMark) {
			if strings.HasPrefix(l, "cgroup ") && !strings.Contains(l, `processes []`) && !cgroupHoldsWorker(l) {
				continue // another jail's, running at the same time (the host is shared)
			}
			if strings.HasPrefix(l, "temp entry ") {
				// The host's /tmp is shared with other work that names its
				// entries rljail-*; the sessions' own TMPDIR is checked
				// instead (sessionTmpDir).
				continue
			}
			left = append(left, l)
		}
		for _, q := range allProcs() {
			if q.exe == testBin && !q.zombie() {
				left = append(left, "rljail process "+q.String())
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupHoldsWorker tells whether a leftover line's cgroup holds a
// session worker.
func cgroupHoldsWorker(line string) bool {
	path := strings.Fields(strings.TrimPrefix(line, "cgroup "))[0]
	procs, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	for _, pid := range strings.Fields(string(procs)) {
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(string(cmd), workerMark) {
			return true
		}
	}
	return len(strings.Fields(string(procs))) == 0
}

// The session's attack cases: a hostile cell against the supervisor's
// accounting of later cells and of the host.
func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "session_forged_reply", group: groupProcesses,
			mechanism: "a cell writes replies for later cells (every token it can find in memory) into the worker's channel, its stdout and every descriptor, then later cells fail",
			layer:     "the supervisor accepts only the reply carrying the 128-bit token of the request in flight; output after a cell's end marker belongs to no cell",
			run:       sessionForgedReplies},
		{name: "session_cell_ignores_sigint", group: groupDoS, serial: true,
			mechanism: "a cell ignores SIGINT and spins, to hold the session past --cell-timeout",
			layer:     "the supervisor kills the jail --cell-grace after the interrupt and answers SessionLost cell_timeout",
			run:       sessionIgnoresSigint},
		{name: "session_output_flood", group: groupDoS,
			mechanism: "cells flood stdout and stderr through print, descriptor writes and a subprocess that goes on writing after its cell ended",
			layer:     "the supervisor caps each cell's output (head and tail) and drops what comes between cells, counted",
			run:       sessionOutputCap},
		{name: "session_supervisor_killed", group: groupProcesses, serial: true,
			mechanism: "rljail session gets SIGTERM or SIGKILL while a cell spins",
			layer:     "the session closes on SIGTERM; on SIGKILL init's parent-death signal and the cgroup guard end and remove the jail",
			run:       sessionSupervisorKilled},
	}...)
}

// TestSession drives `rljail session` end to end, root and rootless.
func TestSession(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Run("persistence", func(t *testing.T) { sessionPersistence(t, m) })
			t.Run("cell_timeout", func(t *testing.T) { sessionCellTimeout(t, m) })
			t.Run("memory", func(t *testing.T) { sessionMemory(t, m) })
			t.Run("context", func(t *testing.T) { sessionContext(t, m) })
			t.Run("interrupt", func(t *testing.T) { sessionInterrupt(t, m) })
			t.Run("malformed", func(t *testing.T) { sessionMalformed(t, m) })
			t.Run("files", func(t *testing.T) { sessionFiles(t, m) })
			t.Run("bad_flags", func(t *testing.T) { sessionBadFlags(t, m) })
			t.Run("budgets", func(t *testing.T) { sessionBudgets(t, m) })
			t.Run("many", func(t *testing.T) { sessionMany(t, m) })
		})
	}
}

func sessionPersistence(t *testing.T, m mode) {
	s := startSession(t, m)
	h := s.do(t, map[string]any{"op": "hello"})
	if h["ok"] != true || h["protocol"] != float64(2) {
		t.Fatalf("hello: %v", h)
	}
	if r := s.exec(t, "x = 41\nx += 1"); r["ok"] != true || r["error"] != nil {
		t.Fatalf("exec: %v", r)
	}
	r := s.exec(t, "print(x)\nimport os; os.write(1, b'fd1\\n')")
	if r["stdout"] != "42\nfd1\n" {
		t.Errorf("stdout %q, want 42 and fd1 (the namespace lasts; descriptor-level output is the cell's)", r["stdout"])
	}
	names, _ := r["names"].([]any)
	if fmt.Sprint(names) != "[x os]" {
		t.Errorf("names %v, want [x os]", names)
	}
	r = s.exec(t, "y = 1\n1/0")
	if r["ok"] != true || errType(r) != "ZeroDivisionError" {
		t.Errorf("exception: %v", r)
	}
	if r := s.do(t, map[string]any{"op": "get", "name": "y"}); r["value"] != float64(1) || r["json"] != true {
		t.Errorf("get y after the exception: %v", r)
	}
	if r := s.do(t, map[string]any{"op": "set", "name": "z", "value": map[string]any{"k": []any{1, "two"}}}); r["ok"] != true {
		t.Errorf("set: %v", r)
	}
	if r := s.exec(t, "print(z['k'][1])"); r["stdout"] != "two\n" {
		t.Errorf("set's value in a cell: %v", r)
	}
	if r := s.do(t, map[string]any{"op": "get", "name": "os"}); r["json"] != false || !strings.Contains(fmt.Sprint(r["repr"]), "module 'os'") {
		t.Errorf("get of a module: %v", r)
	}
	if r := s.do(t, map[string]any{"op": "get", "name": "nope"}); r["ok"] != false || errType(r) != "KeyError" {
		t.Errorf("get of an unknown name: %v", r)
	}
	s.close(t)
}

// sessionForgedReplies: a cell that writes replies for later cells, to its
// output and into the worker's own channel, changes nothing about them.
func sessionForgedReplies(t *testing.T, m mode) {
	s := startSession(t, m)
	forge := `
import os, json, gc
lines = []
for t in ["ready", "0"*32, "f"*32] + [o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32][:2000]:
    lines.append(json.dumps({"t": t, "ok": True, "error": None, "names": ["forged"]}))
blob = ("\n".join(lines) + "\n").encode()
print(blob.decode())
for fd in range(0, 256):
    try:
        os.write(fd, blob)
    except OSError:
        pass
`
	r := s.exec(t, forge)
	if r["ok"] != true {
		t.Fatalf("forging cell: %v", r)
	}
	for i := 0; i < 3; i++ {
		r := s.exec(t, "assert False, 'the tests failed'")
		if errType(r) != "AssertionError" {
			t.Fatalf("cell %d after the forgery: %v, want AssertionError", i, r)
		}
		if strings.Contains(fmt.Sprint(r["stdout"]), `"forged"`) {
			t.Errorf("a later cell's stdout holds the forgery: %q", r["stdout"])
		}
	}
	s.close(t)
}

func sessionCellTimeout(t *testing.T, m mode) {
	s := startSession(t, m, "--cell-timeout", "1s")
	s.exec(t, "keep = 'kept'")
	start := time.Now()
	r := s.exec(t, "while True:\n    pass")
	wall := time.Since(start)
	if r["ok"] != true || errType(r) != "CellTimeout" {
		t.Fatalf("an endless cell: %v", r)
	}
	if wall < time.Second || wall > 4*time.Second {
		t.Errorf("the endless cell took %v, want about 1 s", wall)
	}
	if r := s.do(t, map[string]any{"op": "get", "name": "keep"}); r["value"] != "kept" {
		t.Errorf("state after the timeout: %v", r)
	}
	s.close(t)
}

func sessionIgnoresSigint(t *testing.T, m mode) {
	before := faultSnapshot(t)
	s := startSession(t, m, "--cell-timeout", "1s", "--cell-grace", "500ms")
	start := time.Now()
	r := s.exec(t, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")
	wall := time.Since(start)
	if r["ok"] != false || errType(r) != "SessionLost" || errReason(r) != "cell_timeout" {
		t.Fatalf("a cell that ignores SIGINT: %v", r)
	}
	if wall > 4*time.Second {
		t.Errorf("the jail was killed after %v, want about 1.5 s", wall)
	}
	if r := s.exec(t, "pass"); errType(r) != "SessionLost" || errReason(r) != "cell_timeout" {
		t.Errorf("a request after the loss: %v", r)
	}
	s.close(t)
	if left := sessionLeftovers(t, before); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}

func sessionMemory(t *testing.T, m mode) {
	s := startSession(t, m, "--memory", "128m")
	s.exec(t, "a = 1")
	r := s.exec(t, "b = b'x' * (512 << 20)")
	if m == asRoot {
		// The cgroup's OOM killer ends the worker: the state is gone.
		if errType(r) != "SessionLost" || errReason(r) != "memory_limit" {
			t.Errorf("over the memory limit: %v, want SessionLost memory_limit", r)
		}
	} else {
		// Rootless here the limit is RLIMIT_AS: the allocation fails.
		if errType(r) != "MemoryError" {
			t.Errorf("over the memory limit (RLIMIT_AS): %v, want MemoryError", r)
		}
		if r := s.do(t, map[string]any{"op": "get", "name": "a"}); r["value"] != float64(1) {
			t.Errorf("state after a MemoryError: %v", r)
		}
	}
	s.close(t)
}

func sessionOutputCap(t *testing.T, m mode) {
	s := startSession(t, m, "--max-output-chars", "100")
	r := s.exec(t, "print('A' * 1000 + 'Z' * 1000)")
	out := fmt.Sprint(r["stdout"])
	if r["stdout_truncated"] != true || r["stdout_bytes"] != float64(2001) ||
		!strings.HasPrefix(out, strings.Repeat("A", 50)) || !strings.HasSuffix(out, strings.Repeat("Z", 49)+"\n") {
		t.Errorf("capped print: %v", r)
	}
	r = s.exec(t, "import os\nfor _ in range(100): os.write(2, b'e' * 1000)")
	if r["stderr_truncated"] != true || r["stderr_bytes"] != float64(100000) || len(fmt.Sprint(r["stderr"])) > 200 {
		t.Errorf("capped descriptor-level stderr: %v", r)
	}
	// A process that goes on writing after its cell ended: its output
	// between cells is counted and dropped, what it writes during a later
	// cell is that cell's, within the cap.
	s.exec(t, "import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'import os, time\\nwhile True:\\n    os.write(1, b\"late\" * 100)\\n    time.sleep(0.005)'])")
	time.Sleep(300 * time.Millisecond)
	r = s.exec(t, "import time; time.sleep(0.3)")
	if r["stdout_truncated"] != true || len(fmt.Sprint(r["stdout"])) > 200 || r["output_between_cells_bytes"].(float64) == 0 {
		t.Errorf("a writer that outlives its cell: %v", r)
	}
	s.exec(t, "p.kill(); p.wait()")
	s.close(t)
}

func sessionContext(t *testing.T, m mode) {
	dir := newDir(t)
	big := filepath.Join(dir, "corpus.txt")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Chmod(big, 0o644)
	s := startSession(t, m, "-v", big+":/context/corpus.txt")
	r := s.do(t, map[string]any{"op": "load_context", "path": "/context/corpus.txt"})
	// An mmap; a file read on demand where RLIMIT_AS leaves no room for one.
	if r["ok"] != true || (r["kind"] != "mmap" && r["kind"] != "file") || fmt.Sprint(r["names"]) != "[context context_0]" {
		t.Fatalf("load_context of a 2 GiB file: %v", r)
	}
	r = s.exec(t, "print(len(context), context[:5] == b'hello', context.find(b'hello'))")
	if r["stdout"] != "2147483648 True 0\n" {
		t.Errorf("the context: %v", r)
	}
	r = s.do(t, map[string]any{"op": "load_context", "value": map[string]any{"q": "question"}})
	if fmt.Sprint(r["names"]) != "[context_1]" {
		t.Errorf("a second context: %v", r)
	}
	if r := s.exec(t, "print(context_1['q'])"); r["stdout"] != "question\n" {
		t.Errorf("the second context: %v", r)
	}
	c := s.close(t)
	// The kernel's count (the cgroup's peak as root, the init's reaped
	// children's peak RSS rootless), never the worker's word.
	if peak, _ := c["memory_peak_bytes"].(float64); peak == 0 || peak > 200<<20 {
		t.Errorf("the session's memory peak was %.0f bytes with a 2 GiB context, want under 200 MiB", peak)
	}
}

func sessionInterrupt(t *testing.T, m mode) {
	s := startSession(t, m)
	s.exec(t, "n = 7")
	start := time.Now()
	_, ch := s.send(t, map[string]any{"op": "exec", "code": "import time\ntime.sleep(30)"})
	time.Sleep(300 * time.Millisecond)
	// An exec while one runs waits behind it (protocol 2), and interrupt
	// is answered at once, stopping only the running cell.
	_, queued := s.send(t, map[string]any{"op": "exec", "code": "print('after', n)"})
	if r := s.do(t, map[string]any{"op": "interrupt"}); r["interrupted"] != true {
		t.Errorf("interrupt: %v", r)
	}
	r := s.wait(t, ch, 10*time.Second)
	if errType(r) != "KeyboardInterrupt" || time.Since(start) > 5*time.Second {
		t.Errorf("the interrupted cell: %v after %v", r, time.Since(start))
	}
	if r := s.wait(t, queued, 10*time.Second); r["stdout"] != "after 7\n" {
		t.Errorf("the exec queued behind the interrupted one: %v", r)
	}
	if r := s.exec(t, "print(n)"); r["stdout"] != "7\n" {
		t.Errorf("after the interrupt: %v", r)
	}
	s.close(t)
}

func sessionMalformed(t *testing.T, m mode) {
	s := startSession(t, m)
	huge := make([]byte, 100<<20)
	for i := range huge {
		huge[i] = 'a'
	}
	bad := []struct {
		line []byte
		typ  string
	}{
		{[]byte("not json"), "BadRequest"},
		{[]byte(`{"op":"exec","code":"pass"}`), "BadRequest"},
		{[]byte(`{"id":1,"op":"frobnicate"}`), "UnknownOp"},
		{[]byte("{\"id\":2,\"op\":\"exec\",\"code\":\"\xff\xfe\"}"), "BadRequest"},
		{append(append([]byte(`{"id":3,"op":"exec","code":"`), huge...), `"}`...), "RequestTooLarge"},
		{[]byte(`[1,2]`), "BadRequest"},
	}
	for _, b := range bad {
		if _, err := s.in.Write(append(b.line, '\n')); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-s.other:
			if r["ok"] != false || errType(r) != b.typ {
				t.Errorf("%.40q: %v, want %s", b.line, r, b.typ)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%.40q: no reply", b.line)
		}
	}
	if r := s.exec(t, "print('alive')"); r["stdout"] != "alive\n" {
		t.Errorf("after the malformed requests: %v", r)
	}
	s.close(t)
}

func sessionFiles(t *testing.T, m mode) {
	s := startSession(t, m)
	if r := s.do(t, map[string]any{"op": "put_file", "path": "/tmp/in.txt", "data": "aGVsbG8="}); r["ok"] != true || r["size"] != float64(5) {
		t.Errorf("put_file: %v", r)
	}
	s.exec(t, "open('/tmp/out.txt', 'w').write(open('/tmp/in.txt').read().upper())")
	if r := s.do(t, map[string]any{"op": "get_file", "path": "/tmp/out.txt"}); r["data"] != "SEVMTE8=" {
		t.Errorf("get_file: %v", r)
	}
	for _, p := range []string{"/etc/passwd", "/usr/bin/x", "tmp/rel", "/tmp/../etc/x"} {
		if r := s.do(t, map[string]any{"op": "put_file", "path": p, "data": ""}); errType(r) != "BadPath" {
			t.Errorf("put_file %s: %v, want BadPath", p, r)
		}
	}
	// A FIFO a cell made: each request on it is refused at once, and the
	// session goes on (the worker blocked in open until the session ended;
	// red-team pass). s.do's own deadline decides "at once".
	s.exec(t, "import os; os.mkfifo('/tmp/ff')")
	for _, req := range []map[string]any{
		{"op": "load_context", "path": "/tmp/ff"},
		{"op": "get_file", "path": "/tmp/ff"},
		{"op": "put_file", "path": "/tmp/ff", "data": "eA=="},
	} {
		start := time.Now()
		if r := s.do(t, req); r["ok"] == true || time.Since(start) > 5*time.Second {
			t.Errorf("%v on a FIFO: %v after %v, want an error at once", req["op"], r, time.Since(start))
		}
	}
	if r := s.exec(t, "print('after')"); r["stdout"] != "after\n" {
		t.Errorf("the session did not go on after the FIFO requests: %v", r)
	}
	s.close(t)
}

// sessionSupervisorKilled: SIGTERM and SIGKILL of rljail while a cell runs
// leave nothing behind.
func sessionSupervisorKilled(t *testing.T, m mode) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		before := faultSnapshot(t)
		s := startSession(t, m)
		s.do(t, map[string]any{"op": "hello"})
		s.send(t, map[string]any{"op": "exec", "code": "while True:\n    pass"})
		time.Sleep(200 * time.Millisecond)
		_ = s.cmd.Process.Signal(sig)
		_ = s.cmd.Wait()
		if left := sessionLeftovers(t, before); len(left) > 0 {
			t.Errorf("%v of the supervisor mid-cell left: %v", sig, left)
		}
	}
}

// sessionMany: 100 sessions in a row (root) or 20 (rootless), then 8 at
// once, leave nothing behind.
func sessionMany(t *testing.T, m mode) {
	before := faultSnapshot(t)
	n := 100
	if m == asRootless || testing.Short() {
		n = 20
	}
	one := func(t *testing.T) {
		s := startSession(t, m)
		if r := s.exec(t, "print(6 * 7)"); r["stdout"] != "42\n" {
			t.Errorf("exec: %v", r)
		}
		s.close(t)
	}
	for i := 0; i < n && !t.Failed(); i++ {
		one(t)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(t)
		}()
	}
	wg.Wait()
	if left := sessionLeftovers(t, before); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}

// sessionBudgets: --max-cells, the audit log (a line per cell before its
// reply), --timeout (SessionLost timeout) and --idle-timeout.
func sessionBudgets(t *testing.T, m mode) {
	dir := newOpenDir(t)
	audit := filepath.Join(dir, "audit.jsonl")
	s := startSession(t, m, "--max-cells", "2", "--audit-log", audit, "--timeout", "2s")
	s.exec(t, "a = 1")
	if r := s.exec(t, "print('two')"); r["stdout"] != "two\n" {
		t.Errorf("second cell: %v", r)
	}
	b, _ := os.ReadFile(audit)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"code":"print('two')"`) || !strings.Contains(lines[1], `"cell":2`) || !strings.Contains(lines[1], `"code_sha256":"`) {
		t.Errorf("the audit log after two cells: %q", b)
	}
	if r := s.exec(t, "pass"); errType(r) != "CellLimit" {
		t.Errorf("a third cell with --max-cells 2: %v", r)
	}
	time.Sleep(2500 * time.Millisecond)
	if r := s.do(t, map[string]any{"op": "get", "name": "a"}); errType(r) != "SessionLost" || errReason(r) != "timeout" {
		t.Errorf("a request after --timeout: %v", r)
	}
	s.close(t)

	s = startSession(t, m, "--idle-timeout", "300ms")
	start := time.Now()
	select {
	case v := <-s.other:
		if v["event"] != "closed" || v["reason"] != "idle_timeout" {
			t.Errorf("at the idle timeout: %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle session did not end")
	}
	_ = s.cmd.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the idle session ended after %v", d)
	}
}

// sessionBadFlags: a bad command line is one line on stderr, exit 125,
// nothing on stdout and nothing left.
func sessionBadFlags(t *testing.T, m mode) {
	before := faultSnapshot(t)
	for _, args := range [][]string{
		{"--cell-timeout", "soon"}, {"--cell-grace", "-1s"}, {"--max-cells", "-1"}, {"--max-output-chars", "1"},
		{"--idle-timeout", "0"}, {"--bogus"}, {"--memory", "1k"}, {"-v", "/nonexistent-rljail-src:/x"},
		{"--result-fd", "1"}, {"--", "python3"},
		// stdout carries the protocol: no report there (issue 30), and
		// a run's --result-output is not a session's.
		{"--result", "-"}, {"--result", "/dev/stdout"}, {"--result-output", "1k"},
		// The bridge's flags (issue 20).
		{"--llm", "bogus"}, {"--tool", "1bad"}, {"--tool", "llm_query"}, {"--tool", "a:x,x"}, {"--tool", "a", "--tool", "a"},
		{"--max-llm-calls", "-1"}, {"--call-timeout", "soon"}, {"--llm-model", "m"}, {"--llm", "openai", "--llm-model", "m"},
		{"--llm", "openai", "--llm-endpoint", "http://127.0.0.1:1", "--llm-model", "m", "--llm-key-env", "RLJAIL_NO_SUCH_KEY"},
		{"--llm", "openai", "--llm-endpoint", "ftp://x", "--llm-model", "m", "--llm-key-env", "RLJAIL_BADFLAGS_KEY"},
		{"--llm", "openai", "--llm-endpoint", "http://127.0.0.1:1", "--llm-key-env", "RLJAIL_BADFLAGS_KEY"},
		// The key would enter the jail.
		{"--llm", "openai", "--llm-endpoint", "http://127.0.0.1:1", "--llm-model", "m", "--llm-key-env", "RLJAIL_BADFLAGS_KEY", "-e", "RLJAIL_BADFLAGS_KEY"},
	} {
		cmd := exec.Command(testBin, append([]string{"session", "--rootfs", rootfsDir, "--no-workspace"}, args...)...)
		cmd.Dir = baseDir
		cmd.Env = append(modeEnv(m), "TMPDIR="+sessionTmpDir(t), "RLJAIL_BADFLAGS_KEY=sk-badflags")
		runAsMode(cmd, m)
		cmd.Stdin = strings.NewReader(`{"id":1,"op":"hello"}` + "\n")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 125 || out.Len() != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 125, nothing, one line", args, code, out.String(), errb.String())
		}
	}
	if left := sessionLeftovers(t, before); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}
