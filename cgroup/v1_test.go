//go:build !cgroupv2vm

package cgroup

// Real cgroup v1 tests for the development host: hybrid, with the memory,
// pids, cpu and cpuacct hierarchies mounted at /sys/fs/cgroup/<controller>,
// run as root. The cgroup v2 tests of the VM are in v2_vm_test.go.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// ownV1 reads this process's v1 cgroup path of each controller.
func ownV1(t *testing.T) map[string]string {
	t.Helper()
	own := make(map[string]string)
	for _, line := range strings.Split(readTrim(t, "/proc/self/cgroup"), "\n") {
		parts := strings.SplitN(line, ":", 3)
		for _, ctl := range strings.Split(parts[1], ",") {
			own[ctl] = parts[2]
		}
	}
	return own
}

// expectedV1Dirs are where the jail's cgroups must be on this host: below
// our own cgroup in each of the four hierarchies, and nowhere else.
func expectedV1Dirs(t *testing.T, name string) []string {
	t.Helper()
	own := ownV1(t)
	var dirs []string
	for _, ctl := range v1Controllers {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ctl, own[ctl], name))
	}
	return dirs
}

// cgroupDirsNamed walks every cgroup hierarchy for directories called name.
func cgroupDirsNamed(t *testing.T, name string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == name {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func assertNoLeftovers(t *testing.T, name string) {
	t.Helper()
	if left := cgroupDirsNamed(t, name); len(left) > 0 {
		t.Errorf("cgroups left behind: %q", left)
	}
}

func readInt64(t *testing.T, path string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(readTrim(t, path), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestV1CreateLimitsDestroy(t *testing.T) {
	name := testName(t)
	limits := Limits{MemoryBytes: 64 << 20, PidsMax: 32, CPUs: 0.5}
	c, err := Create(Options{Name: name, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()

	if c.Placement() != PlacementV1 {
		t.Errorf("placement %s, want %s", c.Placement(), PlacementV1)
	}
	for _, k := range []string{LimitMemory, LimitPids, LimitCPU, LimitCPUTime} {
		if m := c.Mechanisms()[k]; m != MechanismCgroup1 {
			t.Errorf("mechanism of %s: %s, want cgroup1", k, m)
		}
	}
	if fb := c.Fallbacks(); len(fb) > 0 {
		t.Errorf("fallbacks on a host with every v1 controller: %q", fb)
	}
	if fd, ok := c.CloneFD(); ok {
		t.Errorf("a clone fd (%d) on cgroup v1", fd)
	}

	// Exactly memory, pids, cpu and cpuacct (separate hierarchies here),
	// below our own cgroups, and no directory in any other hierarchy.
	want := expectedV1Dirs(t, name)
	got := c.Dirs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Dirs %q, want %q", got, want)
	}
	found := cgroupDirsNamed(t, name)
	slices.Sort(found)
	if !slices.Equal(found, want) {
		t.Errorf("directories named %s in the cgroup trees: %q, want %q", name, found, want)
	}

	own := ownV1(t)
	dir := func(ctl string) string { return filepath.Join("/sys/fs/cgroup", ctl, own[ctl], name) }
	for _, f := range []struct {
		path string
		want int64
	}{
		{filepath.Join(dir("memory"), "memory.limit_in_bytes"), 64 << 20},
		{filepath.Join(dir("memory"), "memory.memsw.limit_in_bytes"), 64 << 20},
		{filepath.Join(dir("memory"), "memory.kmem.tcp.limit_in_bytes"), socketMemoryMax},
		{filepath.Join(dir("pids"), "pids.max"), 32},
		{filepath.Join(dir("cpu"), "cpu.cfs_period_us"), 100000},
		{filepath.Join(dir("cpu"), "cpu.cfs_quota_us"), 50000},
	} {
		if got := readInt64(t, f.path); got != f.want {
			t.Errorf("%s = %d, want %d", f.path, got, f.want)
		}
	}

	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	assertNoLeftovers(t, name)
	if err := c.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

func TestV1AddProcKill(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name, Limits: Limits{MemoryBytes: 128 << 20, PidsMax: 64, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	sleeper := helperCommand("sleep", "30")
	startInV1(t, c, sleeper)
	pc, err := parseProcCgroup(readTrim(t, fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid)))
	if err != nil {
		t.Fatal(err)
	}
	own := ownV1(t)
	for _, ctl := range v1Controllers {
		if want := filepath.Join(own[ctl], name); pc.v1[ctl] != want {
			t.Errorf("child's %s cgroup %q, want %q", ctl, pc.v1[ctl], want)
		}
	}
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if sig := waitExit(t, sleeper, 5*time.Second); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	assertNoLeftovers(t, name)
}

// TestV1DestroyUnreaped: Destroy kills and removes while the killed process
// is not reaped yet (the caller reaps after it has its result).
func TestV1DestroyUnreaped(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name, Limits: Limits{PidsMax: 16}})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := helperCommand("sleep", "30")
	startInV1(t, c, sleeper)
	done := make(chan error, 1)
	go func() { done <- c.Destroy() }() // as the supervisor would, after its result
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy did not return")
	}
	assertNoLeftovers(t, name)
	if sig := waitExit(t, sleeper, 5*time.Second); sig != syscall.SIGKILL {
		t.Errorf("child ended with signal %v, want SIGKILL", sig)
	}
}

func TestV1StatsAndCPULimit(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name, Limits: Limits{MemoryBytes: 256 << 20, PidsMax: 64, CPUs: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	// Read once before: the file is kept open between readings, and the
	// later one must see what was used since.
	if before, err := c.CPUUsage(); err != nil || before > 100*time.Millisecond {
		t.Fatalf("CPUUsage before anything ran: %v, %v", before, err)
	}
	// 400 ms of CPU at half a CPU take at least 800 ms minus one period.
	spinner := helperCommand("spin", "400")
	startInV1(t, c, spinner)
	start := time.Now()
	if sig := waitExit(t, spinner, 20*time.Second); sig != 0 || !spinner.ProcessState.Success() {
		t.Fatalf("spinner: %v", spinner.ProcessState)
	}
	wall := time.Since(start)
	usage, err := c.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wall %v, CPUUsage %v, stats %+v", wall, usage, s)
	if usage < 300*time.Millisecond || usage > 2*time.Second {
		t.Errorf("CPUUsage %v after a child burned 400 ms", usage)
	}
	if cpu := s.CPUUserMS + s.CPUSystemMS; cpu < 300 || cpu > 2000 {
		t.Errorf("cpu user+system %d ms after a child burned 400 ms", cpu)
	}
	if wall < 650*time.Millisecond {
		t.Errorf("400 ms of CPU in %v of wall time under a 0.5 CPU limit", wall)
	}
	// Memory charged before AddProc stays with the old cgroup (v1 does not
	// move charges), so the peak is whatever the spinner touched after.
	if s.MemoryPeakBytes <= 0 || s.MemoryPeakBytes > 256<<20 {
		t.Errorf("memory peak %d bytes", s.MemoryPeakBytes)
	}
	if s.PidsPeak < 1 || s.PidsPeak > 64 {
		t.Errorf("pids peak %d", s.PidsPeak)
	}
	if s.OOMKills != 0 || s.PidsMaxHits != 0 {
		t.Errorf("oom kills %d, pids.max hits %d, want 0", s.OOMKills, s.PidsMaxHits)
	}
	if len(s.Missing) > 0 {
		t.Errorf("missing stats on this host: %q", s.Missing)
	}
}

func TestV1MemoryLimit(t *testing.T) {
	name := testName(t)
	const limit = 48 << 20
	c, err := Create(Options{Name: name, Limits: Limits{MemoryBytes: limit}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	hog := helperCommand("hog", strconv.Itoa(256<<20))
	stdin, err := hog.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	startInV1(t, c, hog)
	io.WriteString(stdin, "go\n")
	if sig := waitExit(t, hog, 20*time.Second); sig != syscall.SIGKILL {
		t.Fatalf("the 256 MiB hog under a 48 MiB limit ended with %v, want SIGKILL", hog.ProcessState)
	}
	checkOOMStats(t, c, limit)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, name)
}

func TestV1PidsLimit(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name, Limits: Limits{PidsMax: 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	sh := exec.Command("sh", "-c", `read x; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do sleep 5 >/dev/null 2>&1 & done 2>/dev/null; echo forked; wait`)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startInV1(t, c, sh)
	io.WriteString(stdin, "go\n")
	readWithin(t, stdout, 30*time.Second) // "forked", or EOF if the shell gave up
	checkForkStats(t, c)
	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	waitExit(t, sh, 5*time.Second)
	assertNoLeftovers(t, name)
}

// TestV1SetupFailure makes every step of a setup fail in turn, and the
// kernel refuse bad limits: Create returns the error and leaves nothing.
func TestV1SetupFailure(t *testing.T) {
	limits := Limits{MemoryBytes: 64 << 20, PidsMax: 32, CPUs: 0.5}
	var steps []string
	testHook = func(step string) error { steps = append(steps, step); return nil }
	c, err := Create(Options{Name: testName(t), Limits: limits})
	testHook = nil
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	if len(steps) < 8 { // 4 mkdir, 5 writes
		t.Fatalf("only %d setup steps seen: %q", len(steps), steps)
	}
	errInjected := errors.New("injected failure")
	for i, step := range steps {
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
			c, err := Create(Options{Name: name, Limits: limits})
			if !errors.Is(err, errInjected) || c != nil {
				t.Fatalf("Create = %v, %v; want the injected error", c, err)
			}
			assertNoLeftovers(t, name)
		})
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
			c, err := Create(Options{Name: name, Limits: tt.limits})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || c != nil {
				t.Fatalf("Create = %v, %v; want an error containing %q", c, err, tt.wantErr)
			}
			assertNoLeftovers(t, name)
		})
	}
}

func TestV1NameTaken(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if c2, err := Create(Options{Name: name}); err == nil {
		c2.Destroy()
		t.Fatal("a second cgroup of the same name was created")
	}
	// The failed attempt must not have removed the first one's directories.
	for _, d := range c.Dirs() {
		if !exists(d) {
			t.Errorf("%s vanished", d)
		}
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, name)
}

func TestV1Parent(t *testing.T) {
	own := ownV1(t)
	t.Run("missing", func(t *testing.T) {
		name := testName(t)
		parent := fmt.Sprintf("/rljail-test-no-parent-%d", os.Getpid())
		c, err := Create(Options{Parent: parent, Name: name})
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("Create below a missing parent = %v, %v", c, err)
		}
		assertNoLeftovers(t, name)
	})
	t.Run("present", func(t *testing.T) {
		// A parent path must be the same in every hierarchy; here memory
		// has another own path than pids, cpu and cpuacct, so the test
		// leaves memory out rather than create cgroups beside our own.
		ctls := []string{"pids", "cpu", "cpuacct"}
		for _, ctl := range ctls[1:] {
			if own[ctl] != own["pids"] {
				t.Fatalf("own %s cgroup %s differs from the pids one %s", ctl, own[ctl], own["pids"])
			}
		}
		parent := filepath.Join(own["pids"], fmt.Sprintf("rljail-test-parent-%d", os.Getpid()))
		for _, ctl := range ctls {
			dir := filepath.Join("/sys/fs/cgroup", ctl, parent)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(dir)
		}
		name := testName(t)
		c, err := create(Options{Parent: parent, Name: name, Limits: Limits{MemoryBytes: 1 << 30, PidsMax: 10}}, layout{v1Only: ctls})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Destroy()
		if c.Placement() != PlacementParentV1 {
			t.Errorf("placement %s", c.Placement())
		}
		var want []string
		for _, ctl := range ctls {
			want = append(want, filepath.Join("/sys/fs/cgroup", ctl, parent, name))
		}
		if got := c.Dirs(); !slices.Equal(got, want) {
			t.Errorf("Dirs %q, want %q", got, want)
		}
		if m := c.Mechanisms(); m[LimitMemory] != MechanismRlimit || m[LimitPids] != MechanismCgroup1 || m[LimitCPUTime] != MechanismCgroup1 {
			t.Errorf("mechanisms %v", m)
		}
		if fb := c.Fallbacks(); len(fb) != 1 || !strings.HasPrefix(fb[0], "memory limit enforced by RLIMIT_AS") {
			t.Errorf("fallbacks %q", fb)
		}
		if got := readInt64(t, filepath.Join(want[0], "pids.max")); got != 10 {
			t.Errorf("pids.max %d", got)
		}
		if err := c.Destroy(); err != nil {
			t.Fatal(err)
		}
		assertNoLeftovers(t, name)
	})
}

// TestV1Rootless: an unprivileged user cannot write v1 cgroups; every limit
// falls back, and each fallback says so.
func TestV1Rootless(t *testing.T) {
	exe := publicCopy(t)
	h := startCreateHelper(t, exe, "", 65534, helperRequest{
		Options: Options{Name: testName(t), Limits: Limits{MemoryBytes: 64 << 20, PidsMax: 10, CPUs: 1}},
	})
	r := h.report
	if r.Placement != PlacementNone || len(r.Dirs) > 0 || r.CloneFD {
		t.Errorf("rootless on v1: placement %s, dirs %q, clone fd %v", r.Placement, r.Dirs, r.CloneFD)
	}
	want := map[string]Mechanism{LimitMemory: MechanismRlimit, LimitPids: MechanismNone, LimitCPU: MechanismNone, LimitCPUTime: MechanismRlimit}
	for k, m := range want {
		if r.Mechanisms[k] != m {
			t.Errorf("mechanism of %s: %s, want %s", k, r.Mechanisms[k], m)
		}
	}
	if len(r.Fallbacks) != 4 {
		t.Errorf("fallbacks %q, want 4", r.Fallbacks)
	}
	for _, l := range r.Fallbacks {
		if !strings.Contains(l, "not delegated to unprivileged users") {
			t.Errorf("fallback %q does not say why", l)
		}
	}
	h.destroy(t)
	h.wait(t)
}

func TestSocketMemory(t *testing.T) {
	for _, c := range []struct{ memory, want int64 }{
		{0, socketMemoryMax},
		{8 << 20, 8 << 20},
		{64 << 20, socketMemoryMax},
		{512 << 20, socketMemoryMax},
	} {
		if got := socketMemory(c.memory); got != c.want {
			t.Errorf("socketMemory(%d) = %d, want %d", c.memory, got, c.want)
		}
	}
}

// TestV1DestroyEvictsPageCache: the page cache a jail's process left
// charged to its memory cgroup is evicted before the cgroup is removed,
// which it would otherwise keep alive (a dying cgroup).
func TestV1DestroyEvictsPageCache(t *testing.T) {
	name := testName(t)
	c, err := Create(Options{Name: name, Limits: Limits{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if c.v1Dirs["memory"] == "" {
		t.Skip("no v1 memory cgroup")
	}
	path := filepath.Join(t.TempDir(), "cached")
	w := helperCommand("write", path)
	stdin, err := w.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	startInV1(t, c, w)
	stdin.Write([]byte("go\n"))
	if err := w.Wait(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	kv, err := readKV(filepath.Join(c.v1Dirs["memory"], "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if kv["cache"] < 4<<20 {
		t.Fatalf("memory.stat cache %d after writing 4 MiB: the test cannot tell", kv["cache"])
	}
	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if n := residentPages(t, path); n > 0 {
		t.Errorf("%d pages of the file the cgroup's process wrote are still in the page cache after Destroy", n)
	}
}

// startInV1 starts cmd and moves it into c with AddProc, as a jail's first process is
// on cgroup v1 (no clone into a cgroup there); it is killed at the test's end if it
// still runs.
func startInV1(t *testing.T, c *Cgroup, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := c.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
}
