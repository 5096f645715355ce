package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// warmResponse is /v1/run's answer with the pool it started from.
type warmResponse struct {
	v1Response
	Pool       string `json:"pool"`
	PoolReason string `json:"pool_reason"`
}

// warmAnswer is a /v1/run answer postWarm delivers.
type warmAnswer struct {
	r    warmResponse
	code int
}

// postWarm posts body to /v1/run in the background and delivers the
// answer, so that the test can look at the run from the host meanwhile.
func (s *server) postWarm(t *testing.T, body map[string]any) <-chan warmAnswer {
	done := make(chan warmAnswer, 1)
	go func() {
		var r warmResponse
		c := s.postJSON(t, "/v1/run", body, &r)
		done <- warmAnswer{r, c}
	}()
	return done
}

// findMarked waits for a process below pid whose command line holds
// marker and returns its host pid.
func findMarked(t *testing.T, pid int, marker string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range descendants(pid) {
			if strings.Contains(d.cmdline, marker) && !strings.Contains(d.cmdline, "rljail") && !strings.Contains(d.cmdline, "execvp") {
				return d.pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no process below the server runs %q", marker)
	return 0
}

func procUID(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Uid:") {
			return strings.Fields(l)[1]
		}
	}
	return ""
}

// TestServeWarmNothingCarriesOver: with --warm 1 two requests in a row
// start warm, and the host sees nothing of the first in the second: its
// file in /tmp, its background process (dead by pid), its environment,
// its host uid.
func TestServeWarmNothingCarriesOver(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{extraArgs: []string{"--warm", "1"}})
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, _ := s.do(t, "GET", "/readyz", "", nil)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	spid := s.cmd.Process.Pid
	first := `import os, subprocess, time
open('/tmp/carry', 'w').write('x')
subprocess.Popen(['sleep', '1001.5'], start_new_session=True)
time.sleep(1.5)
import sys; sys.argv.append('marker-one')
os.execvp('python3', ['python3', '-c', 'import time; time.sleep(1.5)', 'marker-one'])`
	done := s.postWarm(t, map[string]any{"code": first, "env": map[string]string{"CARRY_SECRET": "s3"}})
	bg := findMarked(t, spid, "1001.5")
	one := findMarked(t, spid, "marker-one")
	if !fileExists(fmt.Sprintf("/proc/%d/root/tmp/carry", one)) {
		t.Errorf("the host does not see the first request's /tmp/carry: the check cannot work")
	}
	env1, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", one))
	if !strings.Contains(string(env1), "CARRY_SECRET=s3") {
		t.Errorf("the host does not see the first request's environment: the check cannot work")
	}
	uid1 := procUID(one)
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", bg))
	g1 := <-done
	if g1.code != 200 || g1.r.Pool != "warm" {
		t.Fatalf("first request: %d pool %q (%s)", g1.code, g1.r.Pool, g1.r.PoolReason)
	}
	if fileExists(fmt.Sprintf("/proc/%d", bg)) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", bg)); strings.Contains(string(b), "1001.5") {
			t.Errorf("the first request's background process %d lives on", bg)
		}
	}
	for _, l := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && strings.Contains(parts[2], "rljail-") && strings.Contains(parts[1], "pids") {
			if fileExists(filepath.Join("/sys/fs/cgroup/pids", parts[2])) {
				t.Errorf("the first request's cgroup %s is left", parts[2])
			}
		}
	}
	done = s.postWarm(t, map[string]any{"command": []string{"python3", "-c", "import time; time.sleep(1.5)", "marker-two"}})
	two := findMarked(t, spid, "marker-two")
	if fileExists(fmt.Sprintf("/proc/%d/root/tmp/carry", two)) {
		t.Errorf("the second request sees the first's /tmp/carry")
	}
	env2, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", two))
	if strings.Contains(string(env2), "CARRY_SECRET") {
		t.Errorf("the second request has the first's environment")
	}
	if uid2 := procUID(two); uid2 == "" || uid2 == uid1 {
		t.Errorf("host uids: first %q, second %q: want two different", uid1, uid2)
	}
	g2 := <-done
	if g2.code != 200 || g2.r.Pool != "warm" {
		t.Fatalf("second request: %d pool %q (%s)", g2.code, g2.r.Pool, g2.r.PoolReason)
	}
}

// TestServeWarmDrainLeavesNothing: SIGTERM with a filled pool of two
// leaves no process, no cgroup and no held host uid lock of the waiting
// jails.
func TestServeWarmDrainLeavesNothing(t *testing.T) {
	// On cgroup v1 a waiting init joins its cgroup only with its
	// payload, so the pool's cgroups are the rljail-* directories new
	// since before the server (a concurrent run's may be among them;
	// the check wants each gone once the server ended).
	glob := func() map[string]bool {
		m := map[string]bool{}
		for _, root := range attackCgroupRoots() {
			got, _ := filepath.Glob(filepath.Join(root, "rljail-*"))
			for _, g := range got {
				m[g] = true
			}
		}
		return m
	}
	before := glob()
	s := startServer(t, asRoot, serveOpts{extraArgs: []string{"--warm", "2"}})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _, _ := s.do(t, "GET", "/readyz", "", nil); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	spid := s.cmd.Process.Pid
	var inits []proc
	var cgroups, uids []string
	for _, d := range descendants(spid) {
		if !strings.HasPrefix(d.cmdline, "rljail-init") {
			continue
		}
		inits = append(inits, d)
		uids = append(uids, procUID(d.pid))
	}
	for g := range glob() {
		if !before[g] {
			cgroups = append(cgroups, g)
		}
	}
	if len(inits) != 2 {
		t.Fatalf("want the two waiting inits below the server, found %d:%s", len(inits), procList(descendants(spid)))
	}
	if len(cgroups) < 2 {
		t.Fatalf("want the two waiting jails' pids cgroups, found %v: the check cannot work", cgroups)
	}
	for _, c := range cgroups {
		if !fileExists(c) {
			t.Fatalf("the waiting jail's cgroup %s is not there: the check cannot work", c)
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not end within 20 s of SIGTERM")
	}
	for _, p := range inits {
		if fileExists(fmt.Sprintf("/proc/%d", p.pid)) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid)); strings.HasPrefix(string(b), "rljail-init") {
				t.Errorf("waiting init %d lives on", p.pid)
			}
		}
	}
	for _, c := range cgroups {
		if fileExists(c) {
			t.Errorf("cgroup %s is left", c)
		}
	}
	for _, u := range uids {
		f, err := os.Open(filepath.Join("/run/rljail/uid", u))
		if err != nil {
			t.Errorf("host uid %s of a waiting jail has no lock file: %v", u, err)
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("host uid %s's lock is still held: %v", u, err)
		}
		f.Close()
	}
}

// TestServeWarmLikeCold: a request answered by a jail of the pool, whose
// launcher runs a Python program in its own child rather than start an
// interpreter, gets the answer a one-shot jail gives it: the same status,
// exit code, error, stdout, stderr and files, for programs that look at
// what a fresh interpreter would differ in (argv, __main__, __file__,
// sys.path, the environment, uncaught exceptions, SystemExit, signals,
// atexit, threads, stdin, descriptors, rlimits, a missing command); and
// the host sees the request's own command line and environment in /proc.
func TestServeWarmLikeCold(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			warm := startServer(t, m, serveOpts{maxConc: 2, extraArgs: []string{"--warm", "2"}})
			cold := startServer(t, m, serveOpts{maxConc: 2})
			waitReady(t, warm)
			cases := []map[string]any{
				{"command": []string{"python3", "-c", "import sys; print(sys.argv, __name__, sorted(globals()), sys.orig_argv)", "x", "-y"}},
				{"code": "import sys, os; print(sys.argv, __file__, __cached__, sys.path[0], os.getcwd(), os.environ.get('FOO'), sorted(globals()))", "env": map[string]string{"FOO": "bar"}},
				{"code": "def f():\n  1/0\nf()"},
				{"code": "import sys; sys.exit(3)"},
				{"code": "import sys; sys.exit('bye')"},
				{"code": "raise KeyboardInterrupt"},
				{"code": "1 +"},
				{"code": "import os; os.kill(os.getpid(), 9)"},
				{"command": []string{"nonexistent-program"}},
				{"command": []string{"/etc/passwd"}},
				{"command": []string{"/tmp/nope"}},
				{"command": []string{"nonexistent-program"}, "files": []map[string]any{{"path": "f", "content": "1"}}},
				{"command": []string{"/etc/passwd"}, "fetch_files": []string{"f"}},
				{"command": []string{"f"}, "files": []map[string]any{{"path": "f", "content": "#!/bin/sh\necho x", "executable": true}}, "env": map[string]string{"PATH": "/tmp"}},
				{"command": []string{"f"}, "files": []map[string]any{{"path": "f", "content": "#!/bin/sh\necho x"}}, "env": map[string]string{"PATH": "/tmp"}},
				{"command": []string{"sh", "-c", "echo hi; echo err >&2; exit 4"}},
				{"command": []string{"python3", "-I", "-c", "import sys; print(sys.flags.isolated)"}},
				{"command": []string{"python3", "-c", "import sys; print(sys.flags.safe_path)"}, "env": map[string]string{"PYTHONSAFEPATH": "1"}},
				{"code": "print(input())", "stdin": "abc\n"},
				{"code": "open('o.txt', 'w').write('zz')", "fetch_files": []string{"o.txt", "nope"}},
				{"code": "import os; print(sorted(os.environ.items()))"},
				{"code": "import sys; print('json' in sys.modules, 'resource' in sys.modules, '_signal' in sys.modules, '__main__' in sys.modules)"},
				{"code": "import atexit; atexit.register(print, 'atexit ran'); print('x', end='')"},
				{"code": "import threading, time; threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()"},
				{"code": "import resource as r; print([r.getrlimit(x) for x in (r.RLIMIT_CPU, r.RLIMIT_NOFILE, r.RLIMIT_FSIZE, r.RLIMIT_CORE)])", "limits": map[string]any{"timeout_seconds": 3}},
				{"code": "import os; print(os.getcwd(), sorted(os.listdir('/tmp')), sorted(os.listdir('/proc/self/fd')))"},
				{"code": "import signal; print([signal.getsignal(s) for s in (signal.SIGPIPE, signal.SIGINT, signal.SIGXFSZ, signal.SIGTERM)])"},
				{"code": "import sys, io; print(sys.stdout.isatty(), sys.stdin.encoding, sys.getfilesystemencoding(), type(sys.stdout.buffer))"},
				{"code": "import subprocess; print(subprocess.run(['python3', '-c', 'import os; print(os.environ.get(\"K\"))'], capture_output=True, text=True).stdout)", "env": map[string]string{"K": "v"}},
			}
			drop := map[string]bool{"run_id": true, "wall_ms": true, "cpu_user_ms": true, "cpu_system_ms": true, "memory_peak_bytes": true, "pids_peak": true}
			norm := func(r warmResponse) string {
				res := map[string]any{}
				for k, v := range r.Result {
					if !drop[k] {
						res[k] = v
					}
				}
				return fmt.Sprintf("result %v\nstdout %q\nstderr %q\nfiles %+v", res, r.Stdout.Text, r.Stderr.Text, r.Files)
			}
			pools := map[string]int{}
			for i, c := range cases {
				var a, b warmResponse
				ca := warm.postJSON(t, "/v1/run", c, &a)
				cb := cold.postJSON(t, "/v1/run", c, &b)
				pools[a.Pool]++
				if ca != cb || norm(a) != norm(b) {
					t.Errorf("case %d %v:\nwarm (%d, pool %s %s):\n%s\ncold (%d):\n%s", i, c, ca, a.Pool, a.PoolReason, norm(a), cb, norm(b))
				}
			}
			if pools["warm"] != len(cases) {
				t.Errorf("answers by pool %v: want all %d warm", pools, len(cases))
			}

			// From the host: the command line and environment of a
			// program the launcher runs itself are the request's.
			done := warm.postWarm(t, map[string]any{"command": []string{"python3", "-c", "import time; time.sleep(2)", "marker-like-cold"}, "env": map[string]string{"LIKE_COLD": "v1"}})
			pid := findMarked(t, warm.cmd.Process.Pid, "marker-like-cold")
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if got := strings.TrimRight(string(cmdline), "\x00"); got != "python3\x00-c\x00import time; time.sleep(2)\x00marker-like-cold" {
				t.Errorf("/proc/%d/cmdline %q: want the request's argv", pid, got)
			}
			if env := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00"); !slices.Contains(env, "LIKE_COLD=v1") || strings.Contains(string(environ), "RLJAIL_LAUNCHER_ROOM") {
				t.Errorf("/proc/%d/environ %q: want the request's environment", pid, env)
			}
			if g := <-done; g.code != 200 || g.r.Pool != "warm" || g.r.Result["status"] != "ok" {
				t.Errorf("the marked request: %d pool %q %v", g.code, g.r.Pool, g.r.Result)
			}
		})
	}
}

// TestServeWarmOutlivesSweep: a jail of the pool that waited 31 s (past
// the age at which a run's sweep removes an empty rljail cgroup as
// abandoned), while another run started below the same cgroup parent,
// still serves its request warm. On cgroup v1 a waiting init used to sit
// outside its cgroup, which the sweep then took: the request failed with
// a setup error ("place the jail in its cgroup").
func TestServeWarmOutlivesSweep(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{extraArgs: []string{"--warm", "1"}})
	waitReady(t, s)
	time.Sleep(31 * time.Second)
	if _, stderr, exit, _ := runJail(t, asRoot, runOpts{}, "--no-workspace", "--", "true"); exit != 0 {
		t.Fatalf("the sweeping run: exit %d: %s", exit, stderr)
	}
	var r warmResponse
	if code := s.postJSON(t, "/v1/run", map[string]any{"command": []string{"python3", "-c", "print('after')"}}, &r); code != 200 || r.Result["status"] != "ok" || r.Stdout.Text != "after\n" || r.Pool != "warm" {
		t.Fatalf("after 31 s and a sweep: %d pool %q %v stdout %q\nserver stderr:\n%s", code, r.Pool, r.Result, r.Stdout.Text, s.stderr.String())
	}
}
