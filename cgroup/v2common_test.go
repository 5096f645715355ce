package cgroup

// cgroup v2 tests, shared by two real cgroup2 trees:
//
//   - on the hybrid development host, /sys/fs/cgroup/unified: a real cgroup2
//     hierarchy without limit controllers (they are bound to v1), which
//     exercises placement, the supervisor's move into its leaf,
//     CLONE_INTO_CGROUP, cgroup.kill, "populated 0", removal and the
//     fallback reports (unified_test.go);
//   - in the VM, /sys/fs/cgroup with every controller, which adds the
//     limits themselves (v2_vm_test.go, build tag cgroupv2vm).
//
// Every cgroup these tests make is below the mount and named rljail-test-*;
// they remove what they made, and kill only processes they started.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testTop replaces the top-level "rljail" cgroup in these tests.
const testTop = "rljail-test-top"

// v2Env is one cgroup2 tree to test in.
type v2Env struct {
	mount string
	// controllers: memory, pids and cpu can be enabled in it (the VM). The
	// hybrid host's tree has none: every limit must then be reported as a
	// fallback, and CPU time still measured.
	controllers bool
}

func (e v2Env) layout() layout { return layout{v2Mount: e.mount, topName: testTop} }

func (e v2Env) request(opts Options, runs int) helperRequest {
	return helperRequest{Options: opts, V2Mount: e.mount, TopName: testTop, Runs: runs}
}

// cgroupPath is dir as /proc/<pid>/cgroup shows it.
func (e v2Env) cgroupPath(dir string) string {
	return "/" + strings.TrimPrefix(strings.TrimPrefix(dir, e.mount), "/")
}

// scaffold makes a test cgroup directly below the mount, with the limit
// controllers available in it when the tree has them, and removes it with
// everything below it at the end of the test.
func (e v2Env) scaffold(t *testing.T, base string) string {
	t.Helper()
	if e.controllers {
		enableForChildren(t, e.mount)
	}
	dir := filepath.Join(e.mount, fmt.Sprintf("%s-%d", base, os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, dir) })
	return dir
}

// enableForChildren enables memory, pids and cpu in dir's subtree_control.
func enableForChildren(t *testing.T, dir string) {
	t.Helper()
	for _, ctl := range limitControllers {
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctl); err != nil {
			t.Fatalf("enable %s in %s: %v", ctl, dir, err)
		}
	}
}

// removeTree kills the processes in a test cgroup tree and removes it,
// deepest first.
func removeTree(t *testing.T, dir string) {
	t.Helper()
	if !exists(dir) {
		return
	}
	writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	if err := waitEmptyV2(dir, "", time.Now().Add(5*time.Second)); err != nil {
		t.Errorf("clean up %s: %v", dir, err)
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := rmdirCgroup(d, time.Now().Add(2*time.Second)); err != nil {
			t.Errorf("clean up: %v", err)
		}
	}
}

// bornIn starts cmd inside the cgroup2 directory dir, open as fd.
func bornIn(t *testing.T, dir string, cmd *exec.Cmd, fd int) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a process in %s: %v", dir, err)
	}
}

// openDir opens a cgroup directory as an O_PATH fd for CLONE_INTO_CGROUP.
func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// checkRun checks what a Create in env did: its placement, its single
// directory leaf, the clone fd (the child was born in leaf), and either the
// limits in the files (controllers) or the fallbacks naming candDir.
func checkRun(t *testing.T, e v2Env, r, child helperReport, placement Placement, candDir, leaf string, l Limits) {
	t.Helper()
	if r.Placement != placement {
		t.Errorf("placement %s, want %s", r.Placement, placement)
	}
	if !slices.Equal(r.Dirs, []string{leaf}) {
		t.Errorf("Dirs %q, want %q", r.Dirs, leaf)
	}
	if !r.CloneFD {
		t.Error("no clone fd on cgroup v2")
	}
	if want := e.cgroupPath(leaf); child.ChildCgroup != want {
		t.Errorf("child born in %q, want %q", child.ChildCgroup, want)
	}
	if !e.controllers {
		want := map[string]Mechanism{LimitMemory: MechanismRlimit, LimitPids: MechanismNone, LimitCPU: MechanismNone, LimitCPUTime: MechanismCgroup2}
		for k, m := range want {
			if r.Mechanisms[k] != m {
				t.Errorf("mechanism of %s: %s, want %s", k, r.Mechanisms[k], m)
			}
		}
		if len(r.Fallbacks) != 3 {
			t.Errorf("fallbacks %q, want one each for memory, pids and cpu", r.Fallbacks)
		}
		for _, l := range r.Fallbacks {
			if !strings.Contains(l, "controller is not available in "+candDir+" ") {
				t.Errorf("fallback %q does not name %s", l, candDir)
			}
		}
		return
	}
	for k, m := range r.Mechanisms {
		if m != MechanismCgroup2 {
			t.Errorf("mechanism of %s: %s, want cgroup2", k, m)
		}
	}
	if len(r.Fallbacks) > 0 {
		t.Errorf("fallbacks with every controller: %q", r.Fallbacks)
	}
	on := strings.Fields(readTrim(t, filepath.Join(filepath.Dir(leaf), "cgroup.subtree_control")))
	for _, ctl := range limitControllers {
		if !slices.Contains(on, ctl) {
			t.Errorf("%s not enabled in %s (subtree_control: %q)", ctl, filepath.Dir(leaf), on)
		}
	}
	files := map[string]string{
		"memory.max":       fmt.Sprint(l.MemoryBytes),
		"memory.oom.group": "1",
		"pids.max":         fmt.Sprint(l.PidsMax),
		"cpu.max":          fmt.Sprintf("%d 100000", cpuQuotaUS(l.CPUs)),
	}
	if exists(filepath.Join(leaf, "memory.swap.max")) {
		files["memory.swap.max"] = "0"
	}
	for f, want := range files {
		if got := readTrim(t, filepath.Join(leaf, f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
}

var testLimits = Limits{MemoryBytes: 64 << 20, PidsMax: 32, CPUs: 0.5}

// testV2Own: the supervisor alone in a delegated cgroup moves into
// rljail-supervisor, enables the controllers and puts the jail beside
// itself; a later run in the same process finds itself in the leaf.
func testV2Own(t *testing.T, e v2Env) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sc := e.scaffold(t, "rljail-test-own")
	name := testName(t)
	h := startCreateHelper(t, exe, sc, 0, e.request(Options{Name: name, Limits: testLimits}, 2))
	for run := 0; run < 2; run++ {
		leaf := filepath.Join(sc, fmt.Sprintf("%s-%d", name, run))
		checkRun(t, e, h.report, h.child, PlacementOwn, sc, leaf, testLimits)
		if want := e.cgroupPath(sc) + "/" + supervisorLeaf; h.report.SelfCgroup != want {
			t.Errorf("run %d: the supervisor is in %q, want %q", run, h.report.SelfCgroup, want)
		}
		if procs := readTrim(t, filepath.Join(sc, "cgroup.procs")); procs != "" {
			t.Errorf("run %d: processes left in the delegated cgroup itself: %q", run, procs)
		}
		h.destroy(t)
		if exists(leaf) {
			t.Errorf("run %d: %s left after Destroy", run, leaf)
		}
		if run == 0 {
			h.next(t)
		}
	}
	h.wait(t)
}

// testV2Shared: as root, a cgroup shared with another process is left
// alone; the jail goes below the top-level cgroup.
func testV2Shared(t *testing.T, e v2Env) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sc := e.scaffold(t, "rljail-test-shared")
	other := helperCommand("sleep", "30")
	bornIn(t, sc, other, openDir(t, sc))
	defer func() { other.Process.Kill(); other.Wait() }()

	top := filepath.Join(e.mount, testTop)
	t.Cleanup(func() { removeTree(t, top) })
	name := testName(t)
	h := startCreateHelper(t, exe, sc, 0, e.request(Options{Name: name, Limits: testLimits}, 1))
	leaf := filepath.Join(top, name+"-0")
	checkRun(t, e, h.report, h.child, PlacementTopLevel, e.mount, leaf, testLimits)
	if want := e.cgroupPath(sc); h.report.SelfCgroup != want {
		t.Errorf("the supervisor moved to %q, want it left in %q", h.report.SelfCgroup, want)
	}
	h.destroy(t)
	h.wait(t)
	if exists(leaf) {
		t.Errorf("%s left after Destroy", leaf)
	}
}

// delegate hands a cgroup to uid as systemd's Delegate=yes does: the
// directory and its cgroup.procs, cgroup.subtree_control and
// cgroup.threads.
func delegate(t *testing.T, dir string, uid int) {
	t.Helper()
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

// testV2Rootless: an unprivileged user alone in a cgroup delegated to it
// gets the own placement; in a shared one, no cgroup, and says why.
func testV2Rootless(t *testing.T, e v2Env) {
	const nobody = 65534
	exe := publicCopy(t)
	t.Run("delegated", func(t *testing.T) {
		sc := e.scaffold(t, "rljail-test-deleg")
		delegate(t, sc, nobody)
		name := testName(t)
		h := startCreateHelper(t, exe, sc, nobody, e.request(Options{Name: name, Limits: testLimits}, 1))
		leaf := filepath.Join(sc, name+"-0")
		checkRun(t, e, h.report, h.child, PlacementOwn, sc, leaf, testLimits)
		if want := e.cgroupPath(sc) + "/" + supervisorLeaf; h.report.SelfCgroup != want {
			t.Errorf("the supervisor is in %q, want %q", h.report.SelfCgroup, want)
		}
		h.destroy(t)
		h.wait(t)
		if exists(leaf) {
			t.Errorf("%s left after Destroy", leaf)
		}
	})
	t.Run("shared", func(t *testing.T) {
		sc := e.scaffold(t, "rljail-test-deleg-shared")
		delegate(t, sc, nobody)
		other := helperCommand("sleep", "30")
		bornIn(t, sc, other, openDir(t, sc))
		defer func() { other.Process.Kill(); other.Wait() }()
		h := startCreateHelper(t, exe, sc, nobody, e.request(Options{Name: testName(t), Limits: testLimits}, 1))
		r := h.report
		if r.Placement != PlacementNone || len(r.Dirs) > 0 || r.CloneFD {
			t.Errorf("placement %s, dirs %q, clone fd %v; want none", r.Placement, r.Dirs, r.CloneFD)
		}
		if len(r.Fallbacks) != 4 {
			t.Errorf("fallbacks %q, want 4", r.Fallbacks)
		}
		for _, l := range r.Fallbacks {
			if !strings.Contains(l, "holds other processes than rljail") {
				t.Errorf("fallback %q does not say why", l)
			}
		}
		if r.Mechanisms[LimitMemory] != MechanismRlimit || r.Mechanisms[LimitCPUTime] != MechanismRlimit {
			t.Errorf("mechanisms %v", r.Mechanisms)
		}
		h.destroy(t)
		h.wait(t)
	})
}

// testV2Parent: --cgroup-parent, in this process: born inside through the
// clone fd, CPU time measured, Kill, and Destroy with the killed child not
// reaped yet.
func testV2Parent(t *testing.T, e v2Env) {
	sc := e.scaffold(t, "rljail-test-parent")
	parent := e.cgroupPath(sc)
	t.Run("missing", func(t *testing.T) {
		c, err := create(Options{Parent: parent + "-missing"}, e.layout())
		if err == nil || !strings.Contains(err.Error(), "is not a cgroup2 directory") {
			t.Fatalf("Create below a missing parent = %v, %v", c, err)
		}
	})

	name := testName(t)
	c, err := create(Options{Parent: parent, Name: name, Limits: testLimits}, e.layout())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	leaf := filepath.Join(sc, name)
	fd, ok := c.CloneFD()
	r := helperReport{Placement: c.Placement(), Mechanisms: c.Mechanisms(), Fallbacks: c.Fallbacks(), Dirs: c.Dirs(), CloneFD: ok}

	// Read once before: the file is kept open between readings, and the
	// later one must see what was used since.
	if before, err := c.CPUUsage(); err != nil || before > 100*time.Millisecond {
		t.Fatalf("CPUUsage before anything ran: %v, %v", before, err)
	}
	spinner := helperCommand("spin", "300")
	start := time.Now()
	bornIn(t, leaf, spinner, fd)
	if sig := waitExit(t, spinner, 30*time.Second); sig != 0 || !spinner.ProcessState.Success() {
		t.Fatalf("spinner: %v", spinner.ProcessState)
	}
	wall := time.Since(start)

	sleeper := helperCommand("sleep", "30")
	bornIn(t, leaf, sleeper, fd)
	defer sleeper.Process.Kill()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid))
	pc, _ := parseProcCgroup(string(b))
	checkRun(t, e, r, helperReport{ChildCgroup: pc.unified}, PlacementParentV2, sc, leaf, testLimits)

	usage, err := c.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spin: wall %v, CPUUsage %v, stats %+v", wall, usage, s)
	// The spinner burned 300 ms of its own CPU time inside the cgroup (plus
	// its start-up).
	if usage < 300*time.Millisecond || usage > 3*time.Second {
		t.Errorf("CPUUsage %v after a child burned 300 ms", usage)
	}
	if cpu := s.CPUUserMS + s.CPUSystemMS; cpu < 250 || cpu > 3000 {
		t.Errorf("cpu user+system %d ms after a child burned 300 ms", cpu)
	}
	if e.controllers {
		if wall < 500*time.Millisecond {
			t.Errorf("300 ms of CPU in %v of wall time under a 0.5 CPU limit", wall)
		}
		if s.MemoryPeakBytes <= 0 || s.PidsPeak < 1 || len(s.Missing) > 0 {
			t.Errorf("stats with every controller: %+v", s)
		}
	} else if len(s.Missing) != 4 {
		t.Errorf("missing stats without controllers: %q, want memory peak, oom kills, pids peak and pids.max hits", s.Missing)
	}

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if sig := waitExit(t, sleeper, 5*time.Second); sig != syscall.SIGKILL {
		t.Errorf("after Kill the child ended with %v", sleeper.ProcessState)
	}

	// Destroy in the background with a killed child not reaped yet.
	unreaped := helperCommand("sleep", "30")
	bornIn(t, leaf, unreaped, fd)
	defer unreaped.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- c.Destroy() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy did not return")
	}
	if exists(leaf) {
		t.Errorf("%s left after Destroy", leaf)
	}
	if sig := waitExit(t, unreaped, 5*time.Second); sig != syscall.SIGKILL {
		t.Errorf("after Destroy the child ended with %v", unreaped.ProcessState)
	}
	if _, ok := c.CloneFD(); ok {
		t.Error("clone fd still there after Destroy")
	}
	if err := c.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

// testV2SetupFailure makes every setup step fail in turn (and, with
// controllers, the kernel refuse bad limits): nothing is left.
func testV2SetupFailure(t *testing.T, e v2Env) {
	sc := e.scaffold(t, "rljail-test-fail")
	parent := e.cgroupPath(sc)
	var steps []string
	// The first Create enables the controllers in the parent, which later
	// ones find done; count the steps of the second.
	for run := 0; run < 2; run++ {
		steps = nil
		testHook = func(step string) error { steps = append(steps, step); return nil }
		c, err := create(Options{Parent: parent, Name: testName(t), Limits: testLimits}, e.layout())
		testHook = nil
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if e.controllers && len(steps) < 6 { // mkdir, memory.max, swap, oom.group, pids.max, cpu.max
		t.Fatalf("only %d setup steps seen: %q", len(steps), steps)
	}
	errInjected := errors.New("injected failure")
	for i, step := range steps {
		if strings.HasSuffix(step, "/cgroup.subtree_control") {
			continue // a refused controller is a fallback, not an error
		}
		t.Run(fmt.Sprintf("fail at %d %s", i, step), func(t *testing.T) {
			name := testName(t)
			n := 0
			testHook = func(string) error {
				n++
				if n == i+1 {
					return errInjected
				}
				return nil
			}
			defer func() { testHook = nil }()
			c, err := create(Options{Parent: parent, Name: name, Limits: testLimits}, e.layout())
			if !errors.Is(err, errInjected) || c != nil {
				t.Fatalf("Create = %v, %v; want the injected error", c, err)
			}
			if exists(filepath.Join(sc, name)) {
				t.Errorf("%s left behind", name)
			}
		})
	}
	if !e.controllers {
		return
	}
	for _, tt := range []struct {
		name    string
		limits  Limits
		wantErr string
	}{
		{"cpu quota below the kernel's 1 ms", Limits{MemoryBytes: 64 << 20, PidsMax: 32, CPUs: 0.001}, "set the cpus limit 0.001"},
		{"pids.max beyond PID_MAX_LIMIT", Limits{MemoryBytes: 64 << 20, PidsMax: 1 << 40}, "set the pids limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := testName(t)
			c, err := create(Options{Parent: parent, Name: name, Limits: tt.limits}, e.layout())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || c != nil {
				t.Fatalf("Create = %v, %v; want an error containing %q", c, err, tt.wantErr)
			}
			if exists(filepath.Join(sc, name)) {
				t.Errorf("%s left behind", name)
			}
		})
	}
}

// testV2NoLeftovers checks that no test cgroup of this process is left
// below the mount.
func testV2NoLeftovers(t *testing.T, e v2Env) {
	prefix := fmt.Sprintf("rljail-test-%d-", os.Getpid())
	filepath.WalkDir(e.mount, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (strings.HasPrefix(d.Name(), prefix) || strings.HasSuffix(d.Name(), fmt.Sprintf("-%d", os.Getpid()))) {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}
