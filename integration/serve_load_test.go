package integration

// rljail serve under load when it is told to stop (SIGTERM) and when
// clients go away mid-run (issue 31), and the host uids of root-run jails
// after a load. Each test judges only what it made: its server's own
// --cgroup-parent, the TMPDIR it gave, mounts naming its directories,
// processes carrying its marker or running as the host uids its jails ran
// as, and the files in its own directories.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// requestBound is how long one request of these tests may take before it
// counts as hung: far beyond any run they send (1 s) and its queue.
const requestBound = 90 * time.Second

// loadEnv is what a load test gives its server and judges afterwards.
type loadEnv struct {
	m            mode
	marker       string
	privTmp      string   // the server's TMPDIR
	parent       string   // --cgroup-parent (root), else ""
	cgDirs       []string // its directory in each hierarchy
	watched      []string // mounts naming these are the server's
	mountsBefore map[string]int
	uids         func() map[int]bool // stops the uid watch: the host uids seen
}

// startLoadServer starts a server for a load test: its own TMPDIR, and as
// root its own --cgroup-parent; it watches the host uids of its runs.
func startLoadServer(t *testing.T, m mode, o serveOpts) (*server, *loadEnv) {
	t.Helper()
	e := &loadEnv{m: m, marker: randomToken("loadmarker"), privTmp: newOpenDir(t)}
	o.env = append(o.env, "TMPDIR="+e.privTmp)
	if m == asRoot {
		e.parent, e.cgDirs = newServeCgroupParent(t)
		o.extraArgs = append(o.extraArgs, "--cgroup-parent", e.parent)
	}
	e.watched = []string{e.privTmp, "/run/rljail/", rootfsDir}
	e.mountsBefore = ownMounts(t, e.watched...)
	s := startServer(t, m, o)
	e.watched = append(e.watched, filepath.Dir(s.sock))
	e.uids = watchJailUIDs(s.cmd.Process.Pid, 25*time.Millisecond)
	return s, e
}

// checkLeftovers judges what the server left once it ended: no process of
// the marker, no process below or file of a host uid its jails ran as, no
// mount naming the test's directories, nothing in its TMPDIR, nothing in
// its --cgroup-parent.
func (e *loadEnv) checkLeftovers(t *testing.T, s *server) {
	t.Helper()
	uids := e.uids()
	if e.m == asRoot && len(uids) == 0 {
		t.Errorf("no run was ever seen running as a host uid of the jails' range: the uid check cannot work")
	}
	t.Logf("%d host uids seen in the runs", len(uids))
	checkNoJailUIDs(t, uids, e.privTmp, filepath.Dir(s.sock))
	for k, c := range ownMounts(t, e.watched...) {
		if c > e.mountsBefore[k] {
			t.Errorf("a mount was left on the host: %s", k)
		}
	}
	if left, _ := os.ReadDir(e.privTmp); len(left) > 0 {
		t.Errorf("the server left %d files in its TMPDIR %s, the first %s", len(left), e.privTmp, left[0].Name())
	}
	for _, d := range e.cgDirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Errorf("the server's --cgroup-parent %s: %v", d, err)
		}
		for _, en := range ents {
			if en.IsDir() {
				t.Errorf("a cgroup was left below the server's --cgroup-parent: %s/%s", d, en.Name())
			}
		}
		if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(bytes.TrimSpace(procs)) > 0 {
			t.Errorf("processes left in the server's --cgroup-parent %s: %s", d, procs)
		}
	}
	for _, p := range allProcs() {
		if strings.Contains(p.cmdline, e.marker) {
			t.Errorf("a process of this test's runs was left: %v", p)
		}
	}
}

// procUIDs reads the real, effective, saved and filesystem uids of pid.
func procUIDs(pid int) ([]int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, false
	}
	u, ok := lineValue(string(b), "Uid:")
	if !ok {
		return nil, false
	}
	var out []int
	for _, f := range strings.Fields(u) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, len(out) == 4
}

// procPPID is pid's parent, from /proc/PID/stat (0 if gone).
func procPPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// watchJailUIDs samples the host's processes every interval until the
// returned function is called, which returns the host uids of the jails'
// range that a process below server ran as. The run report names no host
// uid, so they are read from outside, as the kernel states them
// (/proc/PID/status); a run shorter than the interval may be missed.
func watchJailUIDs(server int, every time.Duration) func() map[int]bool {
	stop := make(chan struct{})
	done := make(chan map[int]bool)
	go func() {
		seen := map[int]bool{}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			ents, _ := os.ReadDir("/proc")
			for _, en := range ents {
				pid, err := strconv.Atoi(en.Name())
				if err != nil {
					continue
				}
				uids, ok := procUIDs(pid)
				if !ok || !inJailIDRange(uids[0]) {
					continue
				}
				// Below the server? (A short chain: server, init, payload.)
				for p, depth := procPPID(pid), 0; p > 1 && depth < 16; p, depth = procPPID(p), depth+1 {
					if p == server {
						for _, u := range uids {
							seen[u] = true
						}
						break
					}
				}
			}
			select {
			case <-stop:
				done <- seen
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var out map[int]bool
	return func() map[int]bool {
		once.Do(func() { close(stop); out = <-done })
		return out
	}
}

// uidLockHeld tells whether the lock file of host uid uid is locked now
// (/proc/locks names its inode): a jail holds that id. Read from
// /proc/locks rather than by trying the lock, which would make a jail
// starting at that moment pass over the id.
func uidLockHeld(uid int) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/run/rljail/uid/%d", uid), &st); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	suffix := fmt.Sprintf(":%d", st.Ino)
	for _, l := range strings.Split(string(b), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasSuffix(f, suffix) && strings.Count(f, ":") == 2 {
				return true
			}
		}
	}
	return false
}

// checkNoJailUIDs fails for a process that has one of uids and for a file
// below dirs owned by one. The ids are given back when a jail ends and
// taken again by the next, so a process of one is another jail's (another
// test's, on a shared host), and only logged, when the id's lock is held
// again or the process runs below a live rljail other than this test's
// binary; and one that is gone, or a zombie, half a second later was a
// jail's that was ending. Any other outlived the jail that ran it.
func checkNoJailUIDs(t *testing.T, uids map[int]bool, dirs ...string) {
	t.Helper()
	if len(uids) == 0 {
		return
	}
	suspects := jailUIDProcs(t, uids)
	if len(suspects) > 0 {
		time.Sleep(500 * time.Millisecond)
		again := jailUIDProcs(t, uids)
		for k, p := range suspects {
			if q, ok := again[k]; ok {
				t.Errorf("a process of a host uid this test's jails ran as outlived them: %v", q)
			} else {
				t.Logf("a process of a host uid of this test's jails was ending: %v", p)
			}
		}
	}
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) == nil && uids[int(st.Uid)] {
				t.Errorf("a file of a host uid (%d) this test's jails ran as was left: %s", st.Uid, p)
			}
			return nil
		})
	}
}

// jailUIDProcs lists the live processes that have one of uids, but for
// those that are another jail's (see checkNoJailUIDs), by proc key.
func jailUIDProcs(t *testing.T, uids map[int]bool) map[string]proc {
	t.Helper()
	out := map[string]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		ids, ok := procUIDs(pid)
		if !ok {
			continue
		}
		for _, u := range ids {
			if !uids[u] {
				continue
			}
			p, ok := readProc(pid)
			if !ok || p.zombie() {
				break
			}
			if uidLockHeld(u) {
				t.Logf("host uid %d is a jail's again (its lock is held): %v", u, p)
				break
			}
			if r, ok := foreignRljail(pid); ok {
				t.Logf("host uid %d is another rljail's jail's (%v): %v", u, r, p)
				break
			}
			out[p.key()] = p
			break
		}
	}
	return out
}

// foreignRljail finds a live rljail above pid that is not this test's
// binary (another test's jail, on a shared host).
func foreignRljail(pid int) (proc, bool) {
	for p, depth := procPPID(pid), 0; p > 1 && depth < 16; p, depth = procPPID(p), depth+1 {
		if q, ok := readProc(p); ok && filepath.Base(q.exe) == "rljail" && q.exe != testBin {
			return q, true
		}
	}
	return proc{}, false
}

// post sends one request with the server's token and ctx, without failing
// the test: the status, the body, and the error of a request that got no
// answer.
func (s *server) post(ctx context.Context, path, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", s.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// answer is one request of a load and what came of it.
type answer struct {
	i          int
	sleeper    bool
	sent, done time.Time
	code       int
	body       []byte
	err        error
}

func (a answer) status() string {
	var r struct {
		Result struct{ Status string } `json:"result"`
	}
	_ = json.Unmarshal(a.body, &r)
	return r.Result.Status
}

// TestServeLoadSIGTERM: 16 clients post /v1/run in a loop (every third
// run sleeps 1 s), and the server gets SIGTERM while they do. From
// outside: every request answered got 200 with a report (ok, or, answered
// after the grace, killed: signaled, or canceled in its setup) or the
// drain's 503 naming it (docs/api.md: no new
// run starts once draining; it sends Retry-After); one that got no
// answer failed only after SIGTERM, at the closed socket, never by
// hanging; the run seen under way at SIGTERM was answered; the server
// exits 0 within its grace and a margin; nothing is left.
func TestServeLoadSIGTERM(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveLoadSIGTERM(t, m) })
	}
}

func serveLoadSIGTERM(t *testing.T, m mode) {
	const clients, before, most = 16, 160, 600
	grace := 2 * time.Second
	s, e := startLoadServer(t, m, serveOpts{maxConc: 2, config: "queue = 32", extraArgs: []string{"--drain-grace", grace.String()}})
	var (
		mu       sync.Mutex
		answers  []answer
		next     atomic.Int64
		answered atomic.Int64
		wg       sync.WaitGroup
	)
	sleeperRe := regexp.MustCompile(e.marker + `s([0-9]+)`)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= most {
					return
				}
				a := answer{i: i, sleeper: i%3 == 0, sent: time.Now()}
				body := fmt.Sprintf(`{"command":["python3","-c","print(%d)","%s"]}`, i, e.marker)
				if a.sleeper {
					body = fmt.Sprintf(`{"command":["python3","-c","import time; time.sleep(1); print(%d)","%ss%d"]}`, i, e.marker, i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), requestBound)
				a.code, a.body, a.err = s.post(ctx, "/v1/run", body)
				cancel()
				a.done = time.Now()
				answered.Add(1)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				if a.err != nil || a.code == 503 {
					return // the server is going
				}
			}
		}()
	}
	// SIGTERM once the load is under way and a sleeping run is running.
	for answered.Load() < before {
		time.Sleep(20 * time.Millisecond)
	}
	p, ok := findPayload(e.marker+"s", s.cmd.Process.Pid, 30*time.Second)
	if !ok {
		t.Fatal("no sleeping run was seen running")
	}
	running := -1
	if sm := sleeperRe.FindStringSubmatch(p.cmdline); sm != nil {
		running, _ = strconv.Atoi(sm[1])
	}
	termAt := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(grace + 30*time.Second):
		t.Errorf("the server did not end within %v of SIGTERM (grace %v)", grace+30*time.Second, grace)
	}
	exited := time.Since(termAt)
	wg.Wait()
	if st := s.cmd.ProcessState; st == nil || !st.Success() {
		t.Errorf("the server after its drain: %v\n%s", st, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), `"msg":"drained"`) {
		t.Errorf("no drained line:\n%s", s.stderr.String())
	}
	counts, examples := map[string]int{}, map[string]string{}
	sawRunning := false
	for _, a := range answers {
		switch {
		case a.err != nil && errors.Is(a.err, context.DeadlineExceeded):
			t.Errorf("request %d hung: no answer within %v", a.i, requestBound)
		case a.err != nil:
			counts["no answer (the socket closed)"]++
			if a.done.Before(termAt) {
				t.Errorf("request %d failed before SIGTERM: %v", a.i, a.err)
			}
		case a.code == 503:
			counts["503 draining"]++
			if !bytes.Contains(a.body, []byte("draining")) || a.done.Before(termAt) {
				t.Errorf("request %d: 503 %s, answered %v after SIGTERM: want one naming the drain, after SIGTERM", a.i, a.body, a.done.Sub(termAt))
			}
		case a.code == 200:
			st := a.status()
			counts["200 "+st]++
			if st != "ok" && examples[st] == "" {
				examples[st] = fmt.Sprintf("request %d (sleeper %v) answered %v after SIGTERM: %.300s", a.i, a.sleeper, a.done.Sub(termAt).Round(time.Millisecond), a.body)
			}
			// ok, or killed at the grace's end (a run still starting or
			// running then): signaled, or canceled in its setup.
			killed := st == "signaled" || (st == "setup_error" && bytes.Contains(a.body, []byte("run canceled")))
			if st != "ok" && (a.done.Before(termAt.Add(grace)) || !killed) {
				t.Errorf("request %d: 200 with status %q %.200s", a.i, st, a.body)
			}
			if st == "ok" && !bytes.Contains(a.body, []byte(fmt.Sprintf(`"text":"%d\n"`, a.i))) {
				t.Errorf("request %d: ok but not its output: %.200s", a.i, a.body)
			}
			if a.i == running {
				sawRunning = true
			}
		default:
			t.Errorf("request %d: %d %.200s", a.i, a.code, a.body)
		}
	}
	t.Logf("%d requests from %d clients, SIGTERM after %d answered; the server exited %v after it (grace %v): %v", len(answers), clients, before, exited.Round(time.Millisecond), grace, counts)
	for _, ex := range examples {
		t.Logf("a run ended by the drain's end: %s", ex)
	}
	if running < 0 || !sawRunning {
		t.Errorf("the run seen under way at SIGTERM (request %d, %v) got no 200", running, p)
	}
	e.checkLeftovers(t, s)
}

// TestServeLoadDisconnect: 12 clients post short runs while 4 others post
// runs that sleep 30 s and go away once each is seen running. Each of
// those jails is killed (its marked process gone, its cgroups removed)
// within a bound far below its sleep, every other request is 200 and ok,
// the server then still answers /healthz, drains cleanly, and leaves
// nothing.
func TestServeLoadDisconnect(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveLoadDisconnect(t, m) })
	}
}

func serveLoadDisconnect(t *testing.T, m mode) {
	const stayers, leavers, n, leaves = 12, 4, 240, 3
	const goneBound = 15 * time.Second
	s, e := startLoadServer(t, m, serveOpts{maxConc: 2, config: "queue = 32"})
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[string]int{}
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	start := time.Now()
	for c := 0; c < stayers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body := fmt.Sprintf(`{"command":["python3","-c","print(%d)","%s"]}`, i, e.marker)
				ctx, cancel := context.WithTimeout(context.Background(), requestBound)
				code, resp, err := s.post(ctx, "/v1/run", body)
				cancel()
				if err != nil || code != 200 || !bytes.Contains(resp, []byte(`"status":"ok"`)) || !bytes.Contains(resp, []byte(fmt.Sprintf(`"text":"%d\n"`, i))) {
					mu.Lock()
					bad[fmt.Sprintf("%d %v %.200s", code, err, resp)]++
					mu.Unlock()
				}
			}
		}()
	}
	killed := 0
	for c := 0; c < leavers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < leaves; k++ {
				mk := fmt.Sprintf("%sgone%d-%d", e.marker, c, k)
				if leaveMidRun(t, s, e, mk, goneBound) {
					mu.Lock()
					killed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d runs from %d clients and %d runs whose %d clients went away, in %v", n, stayers, leavers*leaves, leavers, time.Since(start).Round(time.Millisecond))
	for k, c := range bad {
		t.Errorf("%d× %s", c, k)
	}
	if killed != leavers*leaves {
		t.Errorf("%d of %d runs whose client went away were killed and their cgroups removed", killed, leavers*leaves)
	}
	if code, _, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("/healthz after the load: %d", code)
	}
	waitNoDescendants(t, s.cmd.Process.Pid, 10*time.Second)
	s.stop(t)
	if !s.cmd.ProcessState.Success() {
		t.Errorf("the server after its drain: %v", s.cmd.ProcessState)
	}
	e.checkLeftovers(t, s)
}

// leaveMidRun posts a run that sleeps 30 s with marker mk, waits until its
// process runs, notes its cgroups below the server's --cgroup-parent,
// goes away, and tells whether the process and those cgroups were gone
// within bound (each failure stated).
func leaveMidRun(t *testing.T, s *server, e *loadEnv, mk string, bound time.Duration) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := fmt.Sprintf(`{"command":["python3","-c","import time; time.sleep(30)","%s"],"limits":{"timeout_seconds":60}}`, mk)
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.post(ctx, "/v1/run", body)
		errc <- err
	}()
	p, ok := findPayload(mk, s.cmd.Process.Pid, requestBound)
	if !ok {
		t.Errorf("the run %s never ran:\n%s", mk, s.stderr.String())
		return false
	}
	var cgs []string
	if e.parent != "" {
		own, err := procCgroup(p.pid)
		if err != nil {
			t.Errorf("the cgroups of %v: %v", p, err)
			return false
		}
		seen := map[string]bool{}
		for ctl, path := range own {
			if !strings.HasPrefix(path, e.parent+"/") {
				continue
			}
			if d := cgroupDir(t, ctl, path); !seen[d] {
				seen[d] = true
				cgs = append(cgs, d)
			}
		}
		if len(cgs) == 0 {
			t.Errorf("the run %v is in no cgroup below the --cgroup-parent %s: %v", p, e.parent, own)
			return false
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("the run %s was answered although its client went away", mk)
	}
	deadline := time.Now().Add(bound)
	for {
		_, alive := readProc(p.pid)
		left := 0
		for _, d := range cgs {
			if exists(d) {
				left++
			}
		}
		if !alive && left == 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after its client went away: alive %v, %d of its cgroups %v still there after %v", p, alive, left, cgs, bound)
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeDrainQueued: with one slot held by a long run and two requests
// queued for it, SIGTERM answers the queued two at once with the drain's
// 503 and Retry-After (before the long run's answer, which comes only
// when its sleep ends: no queued request is started in the slot it then
// frees), the long run finishes within the grace and is answered ok, the
// server exits 0 and nothing is left.
func TestServeDrainQueued(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveDrainQueued(t, m) })
	}
}

func serveDrainQueued(t *testing.T, m mode) {
	s, e := startLoadServer(t, m, serveOpts{maxConc: 1, config: "queue = 8\nqueue_wait = \"5m\"", extraArgs: []string{"--drain-grace", "90s"}})
	type got struct {
		name string
		code int
		body []byte
		hdr  http.Header
		err  error
	}
	answers := make(chan got, 3)
	send := func(name, body string) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), requestBound)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/run", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := s.client.Do(req)
			if err != nil {
				answers <- got{name: name, err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers <- got{name, resp.StatusCode, b, resp.Header, err}
		}()
	}
	send("long", fmt.Sprintf(`{"command":["python3","-c","import time; time.sleep(15); print('long done')","%slong"],"limits":{"timeout_seconds":60}}`, e.marker))
	if _, ok := findPayload(e.marker+"long", s.cmd.Process.Pid, 30*time.Second); !ok {
		t.Fatal("the long run was not seen running")
	}
	for i := range 2 {
		send(fmt.Sprintf("queued%d", i), fmt.Sprintf(`{"command":["python3","-c","print('must not run')","%sq%d"]}`, e.marker, i))
	}
	waitFor(t, "two requests in the queue", func() bool {
		_, b, _ := s.do(t, "GET", "/metrics", "", nil)
		return strings.Contains(string(b), "\nrljail_queue_depth 2\n")
	})
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 3 {
		var a got
		select {
		case a = <-answers:
		case <-time.After(requestBound + 10*time.Second):
			t.Fatalf("a request hung after SIGTERM; answered so far: %v", order)
		}
		order = append(order, a.name)
		switch {
		case a.err != nil:
			t.Errorf("%s: no answer: %v", a.name, a.err)
		case a.name == "long":
			if a.code != 200 || !bytes.Contains(a.body, []byte(`"status":"ok"`)) || !bytes.Contains(a.body, []byte("long done")) {
				t.Errorf("the long run: %d %.300s, want 200 ok (it ends within the grace)", a.code, a.body)
			}
		default:
			if a.code != 503 || a.hdr.Get("Retry-After") == "" || !bytes.Contains(a.body, []byte("the server is draining")) {
				t.Errorf("%s: %d %s (Retry-After %q), want 503 naming the drain, with Retry-After", a.name, a.code, a.body, a.hdr.Get("Retry-After"))
			}
		}
	}
	if len(order) == 3 && order[2] != "long" {
		t.Errorf("answers in the order %v: the queued requests must be answered at SIGTERM, before the long run ends", order)
	}
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the server did not end after its drain")
	}
	if st := s.cmd.ProcessState; !st.Success() {
		t.Errorf("the server after its drain: %v\n%s", st, s.stderr.String())
	}
	for _, p := range allProcs() {
		if strings.Contains(p.cmdline, "must not run") {
			t.Errorf("a queued request was started: %v", p)
		}
	}
	e.checkLeftovers(t, s)
}

// TestServeMaxConnections: with max_connections = 8, eight connections
// each holding a finished keep-alive request are the server's; ten more
// opened then are closed at their accept (a request sent on one gets no
// answer, only the connection's end, within a hang bound far below the
// server's idle timeout); /metrics counts them; once the test closes
// three of its eight, a normal request succeeds, and the server drains
// cleanly. Over the Unix socket (both modes) and loopback TCP.
func TestServeMaxConnections(t *testing.T) {
	for _, c := range []struct {
		name string
		m    mode
		tcp  bool
	}{{"root", asRoot, false}, {"rootless", asRootless, false}, {"root_tcp", asRoot, true}} {
		t.Run(c.name, func(t *testing.T) { serveMaxConnections(t, c.m, c.tcp) })
	}
}

func serveMaxConnections(t *testing.T, m mode, tcp bool) {
	const most, extra = 8, 10
	s := startServer(t, m, serveOpts{tcp: tcp, token: tcp, config: fmt.Sprintf("max_connections = %d", most)})
	dial := func() net.Conn {
		var c net.Conn
		var err error
		if tcp {
			c, err = net.Dial("tcp", s.tcp)
		} else {
			c, err = net.Dial("unix", s.sock)
		}
		if err != nil {
			t.Fatalf("dial the server: %v", err)
		}
		_ = c.SetDeadline(time.Now().Add(45 * time.Second)) // a hang bound, below the server's idle timeout
		return c
	}
	// healthz sends GET /healthz on c and reads the answer: its status, or
	// an error when the connection ended without one.
	healthz := func(c net.Conn, br *bufio.Reader) (int, error) {
		req := "GET /healthz HTTP/1.1\r\nHost: rljail\r\n\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var held []net.Conn
	for i := range most {
		c := dial()
		defer c.Close()
		if code, err := healthz(c, bufio.NewReader(c)); code != 200 || err != nil {
			t.Fatalf("held connection %d: %d %v", i, code, err)
		}
		held = append(held, c)
	}
	for i := range extra {
		c := dial()
		code, err := healthz(c, bufio.NewReader(c))
		c.Close()
		switch {
		case err == nil:
			t.Errorf("connection %d beyond max_connections %d was served: %d", i, most, code)
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("connection %d beyond max_connections %d was neither served nor closed", i, most)
		}
	}
	for _, c := range held[:3] {
		c.Close()
	}
	// A normal request: the server's place for it comes back once the
	// three are closed on its side too (a close it sees at once).
	var code int
	var body []byte
	waitFor(t, "a normal request to be served", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), requestBound)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/metrics", nil)
		if s.token != "" {
			req.Header.Set("Authorization", "Bearer "+s.token)
		}
		resp, err := (&http.Client{Transport: &http.Transport{DialContext: s.client.Transport.(*http.Transport).DialContext, DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		code = resp.StatusCode
		return true
	})
	// At least the ten (an attempt of waitFor's made before the server
	// saw the three close is one more).
	refused := -1
	if sm := regexp.MustCompile(`rljail_rejected_total\{reason="connections"\} ([0-9]+)`).FindStringSubmatch(string(body)); sm != nil {
		refused, _ = strconv.Atoi(sm[1])
	}
	if code != 200 || refused < extra {
		t.Errorf("/metrics after the refused connections: %d\n%s", code, grepLines(string(body), "connections"))
	}
	if code, _, _ := s.do(t, "POST", "/v1/run", `{"command":["python3","-c","print(7)"]}`, nil); code != 200 {
		t.Errorf("a run after the refused connections: %d", code)
	}
	for _, c := range held[3:] {
		c.Close()
	}
	s.stop(t)
	if !s.cmd.ProcessState.Success() {
		t.Errorf("the server after its drain: %v\n%s", s.cmd.ProcessState, s.stderr.String())
	}
}
