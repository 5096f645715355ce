package integration

// Red-team round 6, rljail serve --warm: one request's payload goes for
// the jails waiting in the pool beside it and for the requests after it.
// Decided from the host: the waiting jails' inits live on, no process
// and no cgroup carries the payload's marker once it was answered, its
// listener and the server saw no connection, and the next requests,
// each from the pool, run clean.

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, attackCase{name: "serve_warm_reach_pool", group: groupProcesses, modes: rootOnly,
		mechanism: "a /v1/run payload of a server with --warm 2 lists /proc and sends SIGKILL to pids 1..400 but its own and its launcher's (the waiting jails' inits, were they visible), writes into /sys/fs/cgroup and makes a cgroup there, leaves a marked file in /tmp and /dev/shm, connects to the server's socket and to host loopback ports, and leaves a setsid double-forked process behind, all for the requests the pool serves next",
		layer:     "each jail has a pid namespace, mount namespace (its own /tmp and /dev/shm, a read-only cgroup view) and loopback of its own and is destroyed with everything in it after its one request; the pool refills with new jails",
		run:       attackServeWarmReachPool})
}

// poolReady sums rljail_pool_ready over the runtimes of s's /metrics.
func poolReady(t *testing.T, s *server) int {
	t.Helper()
	code, b, _ := s.do(t, "GET", "/metrics", "", nil)
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, b)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "rljail_pool_ready{") {
			v, _ := strconv.Atoi(f[1])
			n += v
		}
	}
	return n
}

// waitPoolReady waits until s's pool has want jails waiting.
func waitPoolReady(t *testing.T, s *server, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := poolReady(t, s)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rljail_pool_ready is %d, not %d, within 60 s", n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// markedProcs lists the host's processes whose command line or
// environment holds marker.
func markedProcs(marker string) []proc {
	var out []proc
	for _, p := range allProcs() {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if strings.Contains(p.cmdline, marker) || strings.Contains(string(env), marker) {
			out = append(out, p)
		}
	}
	return out
}

func alive(p proc) bool {
	for _, q := range allProcs() {
		if q.key() == p.key() {
			return q.state != "Z"
		}
	}
	return false
}

func attackServeWarmReachPool(t *testing.T, m mode) {
	marker := randomToken("warmmarker")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	s := startServer(t, m, serveOpts{extraArgs: []string{"--warm", "2"}})
	defer s.stop(t)
	waitPoolReady(t, s, 2)
	var inits []proc
	for _, d := range descendants(s.cmd.Process.Pid) {
		if strings.HasPrefix(d.cmdline, "rljail-init") {
			inits = append(inits, d)
		}
	}
	if len(inits) != 2 {
		t.Fatalf("want the two waiting inits below the server, found %d:%s", len(inits), procList(descendants(s.cmd.Process.Pid)))
	}

	hostile := fmt.Sprintf(`
import os, signal, socket, time
M = %[1]q
me = os.getpid()
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me), flush=True)
# Every pid but its own run's (itself and the server's launcher above it,
# whose end would end the run before the rest).
killed = []
for pid in range(1, 401):
    if pid not in (me, os.getppid()):
        try:
            os.kill(pid, signal.SIGKILL); killed.append(pid)
        except OSError:
            pass
print("killed", killed)
for p, data in [("/sys/fs/cgroup/cgroup.procs", str(me)), ("/sys/fs/cgroup/pids.max", "max"), ("/sys/fs/cgroup/cgroup.subtree_control", "+pids"), ("/sys/fs/cgroup/pids/cgroup.procs", str(me))]:
    try:
        open(p, "w").write(data); print("wrote", p)
    except OSError as e:
        print("cgroup", p, e)
for d in ["/sys/fs/cgroup/" + M, "/sys/fs/cgroup/pids/" + M, "/sys/fs/cgroup/unified/" + M]:
    try:
        os.mkdir(d); print("made", d)
    except OSError as e:
        print("cgroup", d, e)
for d in ["/tmp", "/dev/shm"]:
    try:
        open(os.path.join(d, M), "w").write(M); print("wrote", d)
    except OSError as e:
        print("file", d, e)
req = ("GET /" + M + " HTTP/1.0\r\nHost: x\r\n\r\n").encode()
sock = %[2]q
for p in [sock, "/proc/1/root" + sock, "\0" + sock]:
    try:
        name = p
        if not p.startswith("\0"):
            os.chdir(os.path.dirname(p)); name = os.path.basename(p)
        s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(name); s.sendall(req); print("unix connected", repr(p))
    except OSError as e:
        print("unix", repr(p), e)
os.chdir("/tmp")
for port in [%[3]d, 22, 80, 8080]:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1); s.sendall(req); print("tcp connected", port)
    except OSError as e:
        print("tcp", port, e)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.environ["WARM_MARKER"] = M
        os.execvp("python3", ["python3", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN); time.sleep(3600)", M])
    os._exit(0)
os.wait()
# Stay until the host saw the background process (it removes /tmp/hold).
open("/tmp/hold", "w").close()
for _ in range(400):
    if not os.path.exists("/tmp/hold"):
        break
    time.sleep(0.1)
print("done")
`, marker, s.sock, port)
	done := s.postWarm(t, map[string]any{"code": hostile, "limits": map[string]any{"timeout_seconds": 50}})

	// The background process, seen from the host while the request runs.
	var bg proc
	deadline := time.Now().Add(60 * time.Second)
	for bg.pid == 0 {
		for _, p := range markedProcs(marker) {
			if strings.Contains(p.cmdline, "time.sleep(3600)") {
				bg = p
			}
		}
		if bg.pid != 0 {
			break
		}
		select {
		case g := <-done:
			t.Fatalf("the hostile request was answered (%d, status %v) before the host saw its background process: the check cannot work\n%s\n%s", g.code, g.r.Result["status"], g.r.Stdout.Text, g.r.Stderr.Text)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no background process of the payload within 60 s: the check cannot work\nserver stderr:\n%s", s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	root := fmt.Sprintf("/proc/%d/root", bg.pid)
	if !fileExists(filepath.Join(root, "tmp", marker)) {
		t.Errorf("the host does not see the payload's /tmp/%s: the check cannot work", marker)
	}
	t.Logf("the payload's /dev/shm file made: %v", fileExists(filepath.Join(root, "dev/shm", marker)))
	// The host cannot make a file in the jail's /tmp (its uid is not
	// mapped there), but it can remove one.
	hold := filepath.Join(root, "tmp/hold")
	for !fileExists(hold) {
		if time.Now().After(deadline) {
			t.Fatalf("the payload made no /tmp/hold within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatalf("remove the payload's /tmp/hold: %v", err)
	}
	g := <-done
	if g.code != 200 || g.r.Pool != "warm" {
		t.Fatalf("the hostile request: %d pool %q (%s)", g.code, g.r.Pool, g.r.PoolReason)
	}
	t.Logf("the payload said: %s", g.r.Stdout.Text)
	if !strings.Contains(g.r.Stdout.Text, "done") {
		t.Errorf("the payload did not run to its end (status %v): the check cannot work\n%s", g.r.Result["status"], g.r.Stderr.Text)
	}

	// Once answered: nothing of it lives, the other waiting jail does.
	if ps := markedProcs(marker); len(ps) > 0 {
		t.Errorf("processes carrying the marker outlive the request:%s", procList(ps))
	}
	n := 0
	for _, p := range inits {
		if alive(p) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of the two waiting inits live after the request that took one, want 1 (the other jail's)", n)
	}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), marker) {
			t.Errorf("the payload's cgroup %s exists on the host", p)
		}
		return nil
	})
	for _, p := range []string{"/tmp/" + marker, "/dev/shm/" + marker} {
		if fileExists(p) {
			t.Errorf("the payload's file %s is on the host", p)
		}
	}

	// The next requests, each from a refilled pool, run clean.
	check := fmt.Sprintf(`
import os
M = %[1]q
bad = [p for p in ["/tmp/" + M, "/dev/shm/" + M] if os.path.exists(p)]
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if M.encode() in open("/proc/%%s/cmdline" %% p, "rb").read():
                bad.append(p)
        except OSError:
            pass
print("bad", bad)
`, marker)
	for i := 0; i < 4; i++ {
		waitPoolReady(t, s, 2)
		var r warmResponse
		c := s.postJSON(t, "/v1/run", map[string]any{"code": check}, &r)
		if c != 200 || r.Pool != "warm" || r.Result["status"] != "ok" {
			t.Errorf("request %d after the attack: %d pool %q (%s) status %v\n%s", i+1, c, r.Pool, r.PoolReason, r.Result["status"], r.Stderr.Text)
			continue
		}
		if strings.TrimSpace(r.Stdout.Text) != "bad []" {
			t.Errorf("request %d after the attack sees the payload's traces: %s", i+1, r.Stdout.Text)
		}
	}
	waitPoolReady(t, s, 2)
	if code, _, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("/healthz after the attack: %d", code)
	}
	if c := conns.Load(); c != 0 {
		t.Errorf("the host listener on port %d got %d connections from the payload", port, c)
	}
	if log := s.stderr.String(); strings.Contains(log, marker) {
		t.Errorf("the server answered the payload's request (its log holds the marker):\n%s", log)
	}
	if n := strings.Count(s.stderr.String(), `"path":"/v1/run"`); n != 5 {
		t.Errorf("the server logged %d requests, want the attack's and the four after it:\n%s", n, s.stderr.String())
	}
}
