package integration

import (
	"fmt"
	"os"
	"path/filepath"
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
		for _, pat := range []string{"/sys/fs/cgroup/pids/rljail-*", "/sys/fs/cgroup/pids/*/rljail-*", "/sys/fs/cgroup/rljail/rljail-*", "/sys/fs/cgroup/*/rljail-*"} {
			got, _ := filepath.Glob(pat)
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
