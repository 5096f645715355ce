package integration

// The resource-limit tests of issue 4: a memory bomb, a fork bomb, a busy
// loop under --cpus and under --cpu-time, a /tmp filler, a 1 GiB output
// flood, the file-size and descriptor limits, and no cgroup left behind.
// Each case runs in every environment where it means something and decides
// from outside the jail wherever it can: the result report, the exit
// status, the wall clock, the host's disk and processes, the supervisor's
// peak RSS, the cgroup directories.
//
// The environments are this development host's cgroup v1 (root: cgroup1;
// rootless: no cgroup, the rlimit fallback) and, in the test VM
// (integration/vm, build tag rljailvm), cgroup v2 (root from a shell-like
// cgroup: cgroup2-toplevel; the unprivileged test user in a cgroup delegated
// to it: cgroup2-own). The placement tests are in limits_host_test.go (v1)
// and limits_vm_test.go (v2).

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rljail/rljail/integration/bombs"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	// cgroupFS is where the host's cgroup filesystems are mounted.
	cgroupFS = "/sys/fs/cgroup"
)

// limitEnv is one environment the limit tests run in: who runs rljail,
// from which cgroup, and what the report must then say.
type limitEnv struct {
	name      string
	mode      mode
	placement string // limits.cgroup_placement
	// mech is the mechanism of memory_bytes, pids, cpus and cpu_time_ms.
	mech map[string]string
	// cgroup: the memory, pids and cpus limits are held by a cgroup;
	// otherwise they fall back (and one warning line says so).
	cgroup bool
	// delegated: each run starts in a fresh cgroup v2 delegated to the
	// test user (VM only).
	delegated bool
}

func mechanisms(memory, pids, cpus, cpuTime string) map[string]string {
	return map[string]string{"memory_bytes": memory, "pids": pids, "cpus": cpus, "cpu_time_ms": cpuTime}
}

// limitEnvs are the environments of this build: the host's, or the VM's.
func limitEnvs() []limitEnv {
	if vmBuild {
		return []limitEnv{
			// The test binary's cgroup (/init.scope) also holds the VM's
			// init: shell-like, so root goes to the top-level cgroup.
			{name: "root-cgroup2-toplevel", mode: asRoot, placement: "cgroup2-toplevel",
				mech: mechanisms("cgroup2", "cgroup2", "cgroup2", "cgroup2"), cgroup: true},
			{name: "delegated-cgroup2-own", mode: asRootless, placement: "cgroup2-own",
				mech: mechanisms("cgroup2", "cgroup2", "cgroup2", "cgroup2"), cgroup: true, delegated: true},
		}
	}
	return []limitEnv{
		{name: "root-cgroup1", mode: asRoot, placement: "cgroup1",
			mech: mechanisms("cgroup1", "cgroup1", "cgroup1", "cgroup1"), cgroup: true},
		{name: "rootless-none", mode: asRootless, placement: "none",
			mech: mechanisms("rlimit", "rlimit", "none", "rlimit")},
	}
}

// requireLimitHost fails the test unless the machine is the one this build
// is for: a cgroup v1 (hybrid) host, or the cgroup v2 test VM.
func requireLimitHost(t *testing.T) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(cgroupFS, &st); err != nil {
		t.Fatalf("statfs %s: %v", cgroupFS, err)
	}
	const cgroup2Magic = 0x63677270
	unified := st.Type == cgroup2Magic
	switch {
	case vmBuild && (os.Getenv("RLJAIL_IN_VM") != "1" || !unified):
		t.Fatalf("this binary (build tag rljailvm) tests the cgroup v2 VM and runs only inside it (RLJAIL_IN_VM=1, cgroup2 at %s): run `make test-vm`", cgroupFS)
	case !vmBuild && unified:
		t.Fatalf("%s is cgroup2: these host tests expect the development host's cgroup v1 hierarchies; cgroup v2 is tested in the VM (`make test-vm`)", cgroupFS)
	}
}

// limitRun is one finished rljail run of a limit test.
type limitRun struct {
	p      *jailProc
	stdout string
	stderr string
	exit   int
	res    map[string]any
	// hwmKiB is the supervisor's peak RSS (VmHWM of /proc/<pid>/status),
	// sampled while it ran.
	hwmKiB int64
}

func (r limitRun) String() string {
	return fmt.Sprintf("%s: exit %d (signal %v) after %v\nstderr: %q\nreport: %v",
		r.p, r.exit, r.p.signaled, r.p.wall.Round(time.Millisecond), r.stderr, r.res)
}

// run runs rljail --no-workspace args in the environment and waits for it.
func (e limitEnv) run(t *testing.T, o runOpts, args ...string) limitRun {
	t.Helper()
	if e.delegated {
		o.moveInto = newV2Cgroup(t, "rljail-it-deleg", testUID)
	}
	p := startJail(t, e.mode, o, append([]string{"--no-workspace"}, args...)...)
	hwm := watchHWM(p.cmd.Process.Pid, 10*time.Millisecond)
	p.wait()
	r := limitRun{p: p, stdout: p.stdout.String(), stderr: p.stderr.String(), exit: p.exit, hwmKiB: hwm()}
	res, err := p.result()
	if err != nil {
		t.Errorf("%s: %v", p, err)
	}
	r.res = res
	if res == nil {
		t.Fatalf("no --result report: %s", r)
	}
	return r
}

// checkEnv checks what every run's report must say in its environment:
// the placement, each limit's mechanism, the exit status, and the fallback
// warning (one stderr line and the report's warnings) exactly where limits
// fall back.
func checkEnv(t *testing.T, e limitEnv, r limitRun) {
	t.Helper()
	lim := reportMap(r.res, "limits")
	if got, _ := lim["cgroup_placement"].(string); got != e.placement {
		t.Errorf("limits.cgroup_placement = %q, want %q\n%s", got, e.placement, r)
	}
	for _, k := range []string{"memory_bytes", "pids", "cpus", "cpu_time_ms"} {
		if got, _ := reportMap(lim, k)["mechanism"].(string); got != e.mech[k] {
			t.Errorf("limits.%s.mechanism = %q, want %q", k, got, e.mech[k])
		}
	}
	if got, ok := jsonInt(r.res, "exit_code"); !ok || int(got) != r.exit {
		t.Errorf("report exit_code %v, but rljail exited %d", r.res["exit_code"], r.exit)
	}
	warnLines := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, fallbackWarning) {
			warnLines++
		}
	}
	warnings, _ := r.res["warnings"].([]any)
	if e.cgroup {
		if warnLines != 0 || len(warnings) != 0 {
			t.Errorf("every limit has its cgroup, yet rljail warns: stderr %q, report warnings %q", r.stderr, warnings)
		}
		return
	}
	if warnLines != 1 {
		t.Errorf("%d stderr lines start %q, want exactly 1: %q", warnLines, fallbackWarning, r.stderr)
	}
	all := fmt.Sprint(warnings...)
	for _, limit := range []string{"memory", "pids", "cpus", "cpu-time"} {
		// pids by the jail's own RLIMIT_NPROC count is no fallback.
		weaker := limit != "pids" || e.mech["pids"] == "none"
		if strings.Contains(all, limit+" limit") != weaker {
			t.Errorf("the report's warnings name the %s limit: %v, want %v (mechanism %s): %q", limit, !weaker, weaker, e.mech[limit], warnings)
		}
	}
}

// checkLimit checks limits.<key>: its value and mechanism.
func checkLimit(t *testing.T, r limitRun, key string, value float64, mechanism string) {
	t.Helper()
	l := reportMap(reportMap(r.res, "limits"), key)
	if v, _ := l["value"].(float64); v != value {
		t.Errorf("limits.%s.value = %v, want %v", key, l["value"], value)
	}
	if m, _ := l["mechanism"].(string); mechanism != "" && m != mechanism {
		t.Errorf("limits.%s.mechanism = %q, want %q", key, m, mechanism)
	}
}

// checkStatus checks the exit status and the report's status.
func checkStatus(t *testing.T, r limitRun, status string, exit int) {
	t.Helper()
	if got, _ := r.res["status"].(string); got != status || r.exit != exit {
		t.Errorf("exit %d, status %q; want exit %d, status %q\n%s", r.exit, got, exit, status, r)
	}
}

// reportMap returns m[key] as an object (nil when it is not one).
func reportMap(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func reportBool(m map[string]any, key string) bool {
	v, _ := m[key].(bool)
	return v
}

// limitCase is one attack on a limit.
type limitCase struct {
	name string
	// cgroupOnly: the limit exists only with a cgroup (pids, cpus); rootless
	// on a v1 host it is not enforced, so the case does not run there.
	cgroupOnly bool
	// noCgroupOnly: the case is about what holds a limit without a cgroup
	// (rootless on a v1 host).
	noCgroupOnly bool
	// delegatedToo: also run as the delegated test user in the VM (the
	// cgroup-dependent cases; the others are the same there as root).
	delegatedToo bool
	run          func(t *testing.T, e limitEnv)
}

var limitCases = []limitCase{
	{name: "memory-bomb", delegatedToo: true, run: testMemoryBomb},
	{name: "fork-bomb", cgroupOnly: true, delegatedToo: true, run: testForkBomb},
	{name: "fork-bomb-without-cgroup", noCgroupOnly: true, run: testForkBombNproc},
	{name: "cpus-half", cgroupOnly: true, delegatedToo: true, run: testCPUsHalf},
	{name: "cpu-time", delegatedToo: true, run: testCPUTime},
	{name: "tmp-filler", run: testTmpFiller},
	{name: "stdout-flood", run: testStdoutFlood},
	{name: "file-size-nofile", run: testFileSizeNoFile},
}

// TestLimits runs every limit case in every environment of this build. Not
// parallel: the CPU cases measure CPU shares, and the others must not
// disturb them (parallel tests of the package run after it).
func TestLimits(t *testing.T) {
	requireLimitHost(t)
	for _, e := range limitEnvs() {
		t.Run(e.name, func(t *testing.T) {
			for _, c := range limitCases {
				if (c.cgroupOnly && !e.cgroup) || (c.noCgroupOnly && e.cgroup) || (e.delegated && !c.delegatedToo) {
					continue
				}
				t.Run(c.name, func(t *testing.T) { c.run(t, e) })
			}
		})
	}
}

// testMemoryBomb: at --memory 64m a payload that allocates without end is
// OOM-killed in its cgroup (exit 137, status memory_limit, a peak near the
// limit, an OOM kill counted), or rootless stopped by RLIMIT_AS; a canary
// process on the host lives on.
func testMemoryBomb(t *testing.T, e limitEnv) {
	const limit = 64 * mib
	canary := startHostCanary(t, exec.Command("sleep", "600"))
	r := e.run(t, runOpts{}, append([]string{"--memory", "64m", "--timeout", "60s"}, python(bombs.Memory)...)...)
	checkEnv(t, e, r)
	checkLimit(t, r, "memory_bytes", limit, e.mech["memory_bytes"])
	peak, _ := jsonInt(r.res, "memory_peak_bytes")
	if e.cgroup {
		checkStatus(t, r, "memory_limit", 137)
		if n, _ := jsonInt(r.res, "oom_kills"); n < 1 {
			t.Errorf("oom_kills = %v, want >= 1", r.res["oom_kills"])
		}
		if peak < limit*8/10 || peak > limit*102/100 {
			t.Errorf("memory_peak_bytes = %d (%.1f MiB), want near the limit of 64 MiB (51.2 to 65.3 MiB)", peak, float64(peak)/mib)
		}
	} else {
		// RLIMIT_AS: Python's allocation fails instead.
		checkStatus(t, r, "exit_nonzero", 3)
		var n int
		if _, err := fmt.Sscanf(r.stdout, "MemoryError after %d MiB", &n); err != nil || n >= 64 {
			t.Errorf("stdout %q: want MemoryError after fewer than 64 MiB", r.stdout)
		}
		if peak > limit {
			t.Errorf("memory_peak_bytes = %d, above the limit of %d", peak, limit)
		}
	}
	canary.alive(t)
	t.Logf("memory peak %.1f MiB, oom_kills %v, wall %v", float64(peak)/mib, r.res["oom_kills"], r.p.wall.Round(time.Millisecond))
}

// testForkBomb: every process forks for 2 s. At --pids-limit 16 the jail
// holds at most 16 tasks, forks are refused (status pids_limit), and the
// host can fork meanwhile and afterwards.
func testForkBomb(t *testing.T, e limitEnv) {
	hostForks := startHostForkProbe()
	r := e.run(t, runOpts{}, append([]string{"--pids-limit", "16", "--timeout", "30s"}, python(bombs.Fork)...)...)
	hostForks.finish()
	checkEnv(t, e, r)
	checkLimit(t, r, "pids", 16, e.mech["pids"])
	checkStatus(t, r, "pids_limit", 0)
	if peak, _ := jsonInt(r.res, "pids_peak"); peak != 16 {
		t.Errorf("pids_peak = %v, want 16: the bomb must be stopped at pids.max and no higher", r.res["pids_peak"])
	}
	var refused int
	if _, err := fmt.Sscanf(r.stdout, "refused %d", &refused); err != nil || refused == 0 {
		t.Errorf("stdout %q: want the bomb to report refused forks (EAGAIN)", r.stdout)
	}
	hostForks.check(t)
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Errorf("the host cannot fork after the bomb: %v %s", err, out)
	}
	t.Logf("pids_peak %v, %d forks refused in the jail, %d host forks during it", r.res["pids_peak"], refused, hostForks.forks)
}

// testForkBombNproc: the fork bomb where no cgroup can be written
// (rootless on this v1 host): RLIMIT_NPROC in the jail's own user
// namespace holds --pids-limit 16. Decided from the host: the most tasks
// ever seen at once in the jail's PID namespace.
func testForkBombNproc(t *testing.T, e limitEnv) {
	hostForks := startHostForkProbe()
	p := startJail(t, e.mode, runOpts{}, append([]string{"--no-workspace", "--pids-limit", "16", "--timeout", "30s"}, python(bombs.Fork)...)...)
	peak := watchJailTasks(p.cmd.Process.Pid, 5*time.Millisecond)
	p.wait()
	seen := peak()
	hostForks.finish()
	res, err := p.result()
	if err != nil || res == nil {
		t.Fatalf("%s: no report: %v", p, err)
	}
	checkLimit(t, limitRun{p: p, res: res}, "pids", 16, e.mech["pids"])
	if seen > 16 || seen < 2 {
		t.Errorf("the host saw %d tasks at once in the jail's PID namespace; --pids-limit 16 must hold them at 16 (and the bomb must have run)", seen)
	}
	var refused int
	if _, err := fmt.Sscanf(p.stdout.String(), "refused %d", &refused); err != nil || refused == 0 {
		t.Errorf("stdout %q: want the bomb to report refused forks (EAGAIN)", p.stdout.String())
	}
	if strings.Contains(p.stderr.String(), "pids not enforced") {
		t.Errorf("stderr still says the pids limit is not enforced: %q", p.stderr.String())
	}
	hostForks.check(t)
	t.Logf("at most %d tasks seen in the jail, %d forks refused in it, %d host forks during it", seen, refused, hostForks.forks)
}

// watchJailTasks samples, every interval, the tasks (threads included)
// of the processes below pid that live in a PID namespace other than the
// test's, and returns a func that stops and gives the most seen at once.
func watchJailTasks(pid int, every time.Duration) func() int {
	stop := make(chan struct{})
	done := make(chan int)
	own, _ := os.Readlink("/proc/self/ns/pid")
	go func() {
		peak := 0
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if n := jailTasks(pid, own); n > peak {
				peak = n
			}
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(stop)
		return <-done
	}
}

// jailTasks counts the tasks of pid's descendants outside the PID
// namespace own.
func jailTasks(pid int, own string) int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	threads := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				parent[p], _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads[p], _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	n := 0
	for p, th := range threads {
		below := false
		for q, hops := parent[p], 0; q > 1 && hops < 64; q, hops = parent[q], hops+1 {
			if q == pid {
				below = true
				break
			}
		}
		if !below {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); err == nil && ns != own {
			n += th
		}
	}
	return n
}

// testCPUsHalf: a busy loop at --cpus 0.5, ended by --timeout 2s, uses
// about half of its wall time in CPU.
func testCPUsHalf(t *testing.T, e limitEnv) {
	r := e.run(t, runOpts{}, append([]string{"--cpus", "0.5", "--timeout", "2s"}, python("while True: pass")...)...)
	checkEnv(t, e, r)
	checkLimit(t, r, "cpus", 0.5, e.mech["cpus"])
	checkStatus(t, r, "timeout", 124)
	wall, _ := jsonInt(r.res, "wall_ms")
	user, _ := jsonInt(r.res, "cpu_user_ms")
	sys, _ := jsonInt(r.res, "cpu_system_ms")
	if wall < 1900 || wall > 4000 {
		t.Errorf("wall_ms = %d, want about 2000 (--timeout 2s)", wall)
	}
	ratio := float64(user+sys) / float64(max(wall, 1))
	if ratio < 0.3 || ratio > 0.7 {
		t.Errorf("CPU %d ms (user %d + system %d) in %d ms wall: %.2f of the wall time, want 0.3 to 0.7 (--cpus 0.5)", user+sys, user, sys, wall, ratio)
	}
	t.Logf("CPU %d ms in %d ms wall: %.2f", user+sys, wall, ratio)
}

// testCPUTime: --cpu-time 1s stops a busy loop after about 1 s of CPU, well
// before the 20 s timeout.
func testCPUTime(t *testing.T, e limitEnv) {
	r := e.run(t, runOpts{}, append([]string{"--cpu-time", "1s", "--timeout", "20s"}, python("while True: pass")...)...)
	checkEnv(t, e, r)
	checkLimit(t, r, "cpu_time_ms", 1000, e.mech["cpu_time_ms"])
	status, _ := r.res["status"].(string)
	wall, _ := jsonInt(r.res, "wall_ms")
	user, _ := jsonInt(r.res, "cpu_user_ms")
	sys, _ := jsonInt(r.res, "cpu_system_ms")
	cpu := user + sys
	if status != "cpu_limit" {
		t.Errorf("status %q, want cpu_limit\n%s", status, r)
	}
	if wall > 10000 || r.p.wall > 10*time.Second {
		t.Errorf("the busy loop ran %d ms (measured %v): want it stopped after about 1 s of CPU, well below the 20 s timeout", wall, r.p.wall)
	}
	hi := int64(1600) // the supervisor polls every 50 ms
	if !e.cgroup {
		hi = 2100 // RLIMIT_CPU: SIGXCPU at 1 s of the process, SIGKILL at 2 s
	}
	if cpu < 900 || cpu > hi {
		t.Errorf("CPU %d ms (user %d + system %d), want about 1000 (900 to %d)", cpu, user, sys, hi)
	}
	sig, _ := jsonInt(r.res, "signal")
	switch {
	case e.cgroup && r.exit != 137:
		t.Errorf("exit %d (report signal %d %v), want 137: with a cgroup measuring the jail's CPU time the supervisor kills the jail at the limit (SIGKILL; --cpu-time's help says exit 137), RLIMIT_CPU is only the backstop",
			r.exit, sig, r.res["signal_name"])
	case !e.cgroup && (r.exit != 128+int(sig) || (syscall.Signal(sig) != syscall.SIGXCPU && syscall.Signal(sig) != syscall.SIGKILL)):
		t.Errorf("exit %d, signal %d: want death by SIGXCPU (RLIMIT_CPU) or SIGKILL, exit 128+signal", r.exit, sig)
	}
	t.Logf("exit %d, CPU %d ms, wall %d ms", r.exit, cpu, wall)
}

// testTmpFiller: files written to /tmp and /dev/shm until an error stop at
// --tmp-size 8m with ENOSPC, and the host's disk and /dev/shm do not fill.
// Unbounded, the filler would write 256 MiB to each.
func testTmpFiller(t *testing.T, e limitEnv) {
	rootBefore, shmBefore := freeBytes(t, "/"), freeBytes(t, "/dev/shm")
	r := e.run(t, runOpts{}, append([]string{"--tmp-size", "8m"}, python(bombs.TmpFill, "/tmp", "/dev/shm")...)...)
	rootAfter, shmAfter := freeBytes(t, "/"), freeBytes(t, "/dev/shm")
	checkEnv(t, e, r)
	checkStatus(t, r, "ok", 0)
	if v, _ := jsonInt(reportMap(r.res, "limits"), "tmp_size_bytes"); v != 8*mib {
		t.Errorf("limits.tmp_size_bytes = %d, want %d", v, 8*mib)
	}
	for _, d := range []string{"/tmp", "/dev/shm"} {
		v, ok := lineValue(r.stdout, "FILL "+d+" ")
		var errName string
		var total int64
		if ok {
			_, err := fmt.Sscanf(v, "%s %d", &errName, &total)
			ok = err == nil
		}
		switch {
		case !ok:
			t.Errorf("no FILL line for %s in stdout %q", d, r.stdout)
		case errName != "ENOSPC" || total > 8*mib || total < 7*mib:
			t.Errorf("filling %s stopped with %s after %d bytes; want ENOSPC after 7 to 8 MiB (--tmp-size 8m)", d, errName, total)
		}
	}
	const margin = 64 * mib
	if rootBefore-rootAfter > margin {
		t.Errorf("the host's / lost %d MiB of free space during the run (%d -> %d)", (rootBefore-rootAfter)/mib, rootBefore, rootAfter)
	}
	if shmBefore-shmAfter > margin {
		t.Errorf("the host's /dev/shm lost %d MiB of free space during the run (%d -> %d)", (shmBefore-shmAfter)/mib, shmBefore, shmAfter)
	}
	t.Logf("%s; host free space: / %+d KiB, /dev/shm %+d KiB", strings.TrimSpace(r.stdout), (rootAfter-rootBefore)/kib, (shmAfter-shmBefore)/kib)
}

const floodCode = `
import sys
b = b"x" * (1 << 20)
w = sys.stdout.buffer
for _ in range(1024):
    w.write(b)
w.flush()
`

// testStdoutFlood: 1 GiB on stdout. At --output-limit 1m exactly 1 MiB
// reaches rljail's caller, the report counts the whole GiB and says
// truncated, and the supervisor's peak RSS stays flat (under 30 MiB).
func testStdoutFlood(t *testing.T, e limitEnv) {
	const limit = 1 * mib
	r := e.run(t, runOpts{deadline: 5 * time.Minute}, append([]string{"--output-limit", "1m", "--timeout", "180s"}, python(floodCode)...)...)
	checkEnv(t, e, r)
	checkLimit(t, r, "output_bytes", limit, "pump")
	checkStatus(t, r, "output_truncated", 0)
	if n := len(r.stdout); n > limit {
		t.Errorf("%d bytes of stdout reached the caller, more than --output-limit %d", n, limit)
	} else if n != limit || strings.Trim(r.stdout, "x") != "" {
		t.Errorf("%d bytes of stdout reached the caller (only x: %v), want the first %d bytes the payload wrote", n, strings.Trim(r.stdout, "x") == "", limit)
	}
	if !reportBool(r.res, "stdout_truncated") || reportBool(r.res, "stderr_truncated") {
		t.Errorf("stdout_truncated %v, stderr_truncated %v; want true, false", r.res["stdout_truncated"], r.res["stderr_truncated"])
	}
	if n, _ := jsonInt(r.res, "stdout_bytes"); n != gib {
		t.Errorf("stdout_bytes = %v, want %d (1 GiB)", r.res["stdout_bytes"], gib)
	}
	if r.hwmKiB == 0 || r.hwmKiB > 30*kib {
		t.Errorf("the supervisor's peak RSS (VmHWM) was %d KiB, want under 30 MiB (and measured)", r.hwmKiB)
	}
	t.Logf("1 GiB flood in %v; supervisor VmHWM %d KiB", r.p.wall.Round(time.Millisecond), r.hwmKiB)
}

const rlimitsCode = `
import errno, os
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
fd = os.open("/tmp/big", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
total, err = 0, "none"
chunk = b"y" * (256 << 10)
while total < (2 << 20):
    try:
        total += os.write(fd, chunk)
    except OSError as e:
        err = name(e)
        break
os.close(fd)
print("FSIZE", err, total, os.stat("/tmp/big").st_size, flush=True)
fds, err = [], "none"
for _ in range(64):
    try:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        err = name(e)
        break
print("NOFILE", err, len(fds), max(fds) if fds else -1, flush=True)
`

// testFileSizeNoFile: at --file-size 1m writing 2 MiB stops at 1 MiB with
// EFBIG (Python ignores SIGXFSZ); at --nofile 32 opening 64 files stops
// with EMFILE at descriptor 31.
func testFileSizeNoFile(t *testing.T, e limitEnv) {
	r := e.run(t, runOpts{}, append([]string{"--file-size", "1m", "--nofile", "32"}, python(rlimitsCode)...)...)
	checkEnv(t, e, r)
	checkStatus(t, r, "ok", 0)
	checkLimit(t, r, "file_size_bytes", mib, "rlimit")
	checkLimit(t, r, "nofile", 32, "rlimit")
	var errName string
	var written, size, opened, highest int64
	if v, ok := lineValue(r.stdout, "FSIZE "); !ok {
		t.Errorf("no FSIZE line in stdout %q", r.stdout)
	} else if _, err := fmt.Sscanf(v, "%s %d %d", &errName, &written, &size); err != nil || errName != "EFBIG" || written != mib || size != mib {
		t.Errorf("writing 2 MiB at --file-size 1m: %q; want EFBIG after 1048576 bytes, a file of 1048576", v)
	}
	if v, ok := lineValue(r.stdout, "NOFILE "); !ok {
		t.Errorf("no NOFILE line in stdout %q", r.stdout)
	} else if _, err := fmt.Sscanf(v, "%s %d %d", &errName, &opened, &highest); err != nil || errName != "EMFILE" || highest != 31 {
		t.Errorf("opening 64 files at --nofile 32: %q; want EMFILE with descriptor 31 the highest opened", v)
	}
}

// ---- cgroups seen from the host ----

// cgroupMount is one cgroup filesystem of the host.
type cgroupMount struct {
	point, root string
	v2          bool
	controllers []string
	options     []string // its super options: the controllers, name=, and the rest
}

// cgroupMounts lists the host's cgroup filesystems (this process's view).
func cgroupMounts(t *testing.T) []cgroupMount {
	t.Helper()
	out, err := readCgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readCgroupMounts is cgroupMounts for a caller without a test (testMain).
func readCgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 || (qf[0] != "cgroup" && qf[0] != "cgroup2") {
			continue
		}
		m := cgroupMount{point: pf[4], root: pf[3], v2: qf[0] == "cgroup2"}
		if !m.v2 {
			m.options = strings.Split(qf[2], ",")
			for _, o := range m.options {
				switch o {
				case "memory", "pids", "cpu", "cpuacct", "cpuset", "blkio", "devices", "freezer",
					"net_cls", "net_prio", "perf_event", "hugetlb", "rdma", "misc":
					m.controllers = append(m.controllers, o)
				}
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// cgroupDir is the host directory of cgroup path in the hierarchy of ctl
// ("" for cgroup2).
func cgroupDir(t *testing.T, ctl, cgPath string) string {
	t.Helper()
	for _, m := range cgroupMounts(t) {
		if (ctl == "" && m.v2 && m.point == cgroupFS) || (ctl != "" && slices.Contains(m.controllers, ctl)) {
			rel := cgPath
			if m.root != "/" {
				rel = strings.TrimPrefix(cgPath, m.root)
			}
			return filepath.Join(m.point, rel)
		}
	}
	t.Fatalf("no cgroup hierarchy of %q is mounted", ctl)
	return ""
}

// newV2Cgroup creates a fresh cgroup below the cgroup2 root, named
// prefix-<random>, owned (as systemd's Delegate=yes hands it over: the
// directory, cgroup.procs, cgroup.subtree_control, cgroup.threads) by uid
// when uid is not 0. It is removed when the test ends, with the
// rljail-supervisor leaf rljail leaves in it; any other cgroup left in it
// is an error of rljail.
func newV2Cgroup(t *testing.T, prefix string, uid int) string {
	t.Helper()
	dir := filepath.Join(cgroupFS, randomToken(prefix+"-"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create the cgroup %s: %v", dir, err)
	}
	if uid != 0 {
		for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatalf("delegate %s to uid %d: %v", p, uid, err)
			}
		}
	}
	t.Cleanup(func() { removeCgroupTree(t, dir, "rljail-supervisor") })
	return dir
}

// removeCgroupTree removes a cgroup the test made and what is below it.
// Children other than the expected ones are reported: rljail left them.
func removeCgroupTree(t *testing.T, dir string, expected ...string) {
	t.Helper()
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for _, d := range dirs[1:] {
		if rel, _ := filepath.Rel(dir, d); !slices.Contains(expected, rel) {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			t.Errorf("rljail left the cgroup %s behind (processes: %q)", d, strings.Fields(string(procs)))
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := rmdirCgroup(dirs[i]); err != nil {
			t.Errorf("remove the test's cgroup %s: %v", dirs[i], err)
		}
	}
}

// rmdirCgroup removes an empty cgroup, retrying EBUSY for a moment (the
// kernel may refuse right after the last process left).
func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// observedRun is a run whose cgroups the test read from the host while the
// payload was alive.
type observedRun struct {
	limitRun
	payload    map[string]string // the payload's /proc/<pid>/cgroup (nil: it never ran)
	supervisor map[string]string // rljail's
	files      map[string]string // limit files of the payload's cgroup, trimmed
	owner      int               // owner uid of the payload's (v2) cgroup directory
}

// observe runs rljail --no-workspace --memory 96m --pids-limit 20 --cpus
// 0.5 flags with a payload that prints "up" and sleeps 1.5 s; meanwhile it
// reads from the host which cgroups the payload and rljail are in, and the
// limit files of the payload's cgroup.
func observe(t *testing.T, m mode, o runOpts, flags ...string) observedRun {
	t.Helper()
	marker := randomToken("placement")
	args := append([]string{"--no-workspace", "--memory", "96m", "--pids-limit", "20", "--cpus", "0.5", "--timeout", "60s"}, flags...)
	args = append(args, python("import time; print('up', flush=True); time.sleep(1.5)", marker)...)
	p := startJail(t, m, o, args...)
	ended := make(chan struct{})
	go func() {
		p.wait()
		close(ended)
	}()
	var ob observedRun
	ob.owner = -1
	if waitOutput(p, "up", ended, 30*time.Second) {
		if pl, ok := findPayload(marker, p.cmd.Process.Pid, 5*time.Second); ok {
			ob.payload, _ = procCgroup(pl.pid)
			ob.supervisor, _ = procCgroup(p.cmd.Process.Pid)
			ob.files = limitFiles(t, ob.payload)
			if v2, ok := ob.payload[""]; ok && len(ob.payload) == 1 {
				if st, err := os.Stat(cgroupDir(t, "", v2)); err == nil {
					ob.owner = int(st.Sys().(*syscall.Stat_t).Uid)
				}
			}
		}
	}
	<-ended
	ob.limitRun = limitRun{p: p, stdout: p.stdout.String(), stderr: p.stderr.String(), exit: p.exit}
	res, err := p.result()
	if err != nil {
		t.Errorf("%s: %v", p, err)
	}
	ob.res = res
	if res == nil {
		t.Fatalf("no --result report: %s", ob.limitRun)
	}
	return ob
}

// waitOutput waits until rljail's stdout holds s; false when rljail ended
// (ended is closed) or timeout passed first.
func waitOutput(p *jailProc, s string, ended <-chan struct{}, timeout time.Duration) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.stdout.String(), s) {
			return true
		}
		select {
		case <-ended:
			return strings.Contains(p.stdout.String(), s)
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}

// limitFiles reads the limit files of the cgroups in pc (a process's
// /proc/<pid>/cgroup): cgroup2 files when it is only in cgroup2, else the v1
// files of the memory, pids and cpu hierarchies.
func limitFiles(t *testing.T, pc map[string]string) map[string]string {
	t.Helper()
	files := map[string]string{}
	read := func(ctl, name string) {
		p, ok := pc[ctl]
		if !ok {
			return
		}
		if b, err := os.ReadFile(filepath.Join(cgroupDir(t, ctl, p), name)); err == nil {
			files[name] = strings.TrimSpace(string(b))
		}
	}
	if _, ok := pc[""]; ok && len(pc) == 1 {
		for _, f := range []string{"memory.max", "memory.swap.max", "memory.oom.group", "pids.max", "cpu.max"} {
			read("", f)
		}
		return files
	}
	read("memory", "memory.limit_in_bytes")
	read("pids", "pids.max")
	read("cpu", "cpu.cfs_quota_us")
	read("cpu", "cpu.cfs_period_us")
	return files
}

// wantFiles compares limit files with what --memory 96m --pids-limit 20
// --cpus 0.5 must have written.
func wantFiles(t *testing.T, got map[string]string, v2 bool) {
	t.Helper()
	want := map[string]string{"memory.limit_in_bytes": "100663296", "pids.max": "20", "cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}
	if v2 {
		want = map[string]string{"memory.max": "100663296", "pids.max": "20", "cpu.max": "50000 100000", "memory.oom.group": "1"}
		if _, ok := got["memory.swap.max"]; ok {
			want["memory.swap.max"] = "0"
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("the jail's cgroup has %s = %q, want %q (all read: %v)", k, got[k], v, got)
		}
	}
}

// runID is the report's run_id.
func runID(t *testing.T, res map[string]any) string {
	t.Helper()
	id, _ := res["run_id"].(string)
	if id == "" {
		t.Fatalf("the report has no run_id: %v", res)
	}
	return id
}

// ---- no cgroup left ----

var jailCgroupName = regexp.MustCompile(`^rljail-[0-9a-f]{16}$`)

// TestLimitsNoCgroupLeft runs 200 jails as root (20 in the VM): most end
// normally, some are ended by --timeout 0.2s in a busy loop, some have
// rljail itself SIGKILLed while the payload sleeps. Afterwards none of
// their cgroup directories may be left in any hierarchy (issue 4:
// "teardown always"). The directories are known by name: from the report's
// run_id, or, for a killed rljail, read from the payload's
// /proc/<pid>/cgroup while it ran. If some are left, the test also checks
// that a run 31 s later sweeps them (rljail's remedy for a killed
// supervisor), and then removes what is still there.
func TestLimitsNoCgroupLeft(t *testing.T) {
	requireLimitHost(t)
	n := 200
	if vmBuild {
		n = 20
	}
	env := limitEnvs()[0]
	kinds := map[string]string{} // cgroup name -> kind of run
	counts := map[string]int{}
	failures := 0
	start := time.Now()
	for i := 0; i < n && failures < 5; i++ {
		kind := "normal"
		switch i % 10 {
		case 3:
			kind = "timeout"
		case 7:
			kind = "rljail SIGKILLed"
		}
		counts[kind]++
		var name string
		switch kind {
		case "normal", "timeout":
			args, want := python("pass"), 0
			if kind == "timeout" {
				args, want = append([]string{"--timeout", "0.2s"}, python("while True: pass")...), 124
			}
			p := startJail(t, env.mode, runOpts{}, append([]string{"--no-workspace"}, args...)...)
			p.wait()
			res, _ := p.result()
			if p.exit != want || res == nil {
				failures++
				t.Errorf("run %d (%s): exit %d, want %d; report %v; stderr %q", i, kind, p.exit, want, res, p.stderr.String())
				continue
			}
			name = "rljail-" + runID(t, res)
		default:
			marker := randomToken("cgleak")
			p := startJail(t, env.mode, runOpts{noResult: true}, append([]string{"--no-workspace", "--timeout", "60s"},
				python("import time; print('up', flush=True); time.sleep(30)", marker)...)...)
			ended := make(chan struct{})
			go func() {
				p.wait()
				close(ended)
			}()
			pl, ok := proc{}, waitOutput(p, "up", ended, 30*time.Second)
			if ok {
				pl, ok = findPayload(marker, p.cmd.Process.Pid, 5*time.Second)
			}
			var pc map[string]string
			if ok {
				pc, _ = procCgroup(pl.pid)
			}
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-ended
			for _, cp := range pc {
				if b := path.Base(cp); jailCgroupName.MatchString(b) {
					name = b
				}
			}
			if name == "" {
				failures++
				t.Errorf("run %d (%s): could not see the jail's cgroup (payload found: %v, its cgroups %v); stderr %q", i, kind, ok, pc, p.stderr.String())
				continue
			}
			// The killed supervisor's init dies of PR_SET_PDEATHSIG and
			// takes the payload with it: wait for that, so that only the
			// directories can be left.
			deadline := time.Now().Add(5 * time.Second)
			for {
				q, alive := readProc(pl.pid)
				if !alive || q.start != pl.start || q.zombie() {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("run %d: the payload %s outlived its SIGKILLed rljail by 5 s", i, pl)
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		kinds[name] = kind
	}
	t.Logf("%d runs (%v) in %v", len(kinds), counts, time.Since(start).Round(time.Millisecond))

	// Every cgroup directory of these runs still on the host, by kind.
	left := map[string][]string{}
	var all []string
	for _, m := range cgroupMounts(t) {
		_ = filepath.WalkDir(m.point, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if kind, ok := kinds[d.Name()]; ok {
				left[kind] = append(left[kind], p)
				all = append(all, p)
				return fs.SkipDir
			}
			return nil
		})
	}
	kindNames := make([]string, 0, len(left))
	for k := range left {
		kindNames = append(kindNames, k)
	}
	sort.Strings(kindNames)
	for _, kind := range kindNames {
		dirs := left[kind]
		runs := map[string]bool{}
		populated := 0
		for _, d := range dirs {
			runs[filepath.Base(d)] = true
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				populated++
			}
		}
		show := dirs
		if len(show) > 8 {
			show = show[:8]
		}
		t.Errorf("cgroup directories left behind by %d of %d runs of kind %q (%d directories, %d of them holding processes); e.g.:\n\t%s",
			len(runs), counts[kind], kind, len(dirs), populated, strings.Join(show, "\n\t"))
	}
	// rljail's answer to a SIGKILLed supervisor is a sweep: the next run
	// below the same parent removes rljail-* cgroups that have been empty
	// for 30 s. Check that it does, once the leftovers are that old.
	if len(all) > 0 {
		oldest := time.Time{}
		for _, d := range all {
			if st, err := os.Stat(d); err == nil && st.ModTime().After(oldest) {
				oldest = st.ModTime()
			}
		}
		wait := time.Until(oldest.Add(31 * time.Second))
		t.Logf("waiting %v until the leftovers are 31 s old, then one more run must sweep them", wait.Round(time.Second))
		time.Sleep(wait)
		p := startJail(t, env.mode, runOpts{}, "--no-workspace", "--", "python3", "-c", "pass")
		p.wait()
		if p.exit != 0 {
			t.Errorf("the sweeping run: exit %d, stderr %q", p.exit, p.stderr.String())
		}
		var swept, kept []string
		for _, d := range all {
			if exists(d) {
				kept = append(kept, d)
			} else {
				swept = append(swept, d)
			}
		}
		if len(kept) > 0 {
			t.Errorf("a run 31 s later did not sweep %d of the %d left-behind cgroup directories, e.g. %s", len(kept), len(all), kept[0])
		}
		t.Logf("a run 31 s later swept %d of the %d left-behind cgroup directories", len(swept), len(all))
	}
	// Leave the host clean: remove what the runs left (deepest first).
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
	for _, d := range all {
		if err := rmdirCgroup(d); err != nil {
			t.Errorf("remove the left-behind %s: %v", d, err)
		}
	}
}

// ---- placement ----

// placementCase is one way rljail can be started, and where its jail's
// cgroup must go then.
type placementCase struct {
	name  string
	mode  mode
	opts  runOpts
	flags []string
	// setupError, when set, is a substring of the one stderr line of the
	// exit 125 that is expected (and the payload must not run).
	setupError string
	env        limitEnv // the expected placement and mechanisms
	// parents: controller ("" for cgroup2) -> cgroup path the jail's
	// cgroup must be created in, "rljail-<run_id>".
	parents map[string]string
	// supervisor, when set, is the cgroup2 path rljail itself must be in
	// while the jail runs.
	supervisor string
	owner      int                                // uid owning the jail's cgroup2 directory; -1: not checked
	check      func(t *testing.T, ob observedRun) // more checks, if any
}

// runPlacementCases runs each case with observe. With a cgroup placement
// the payload must be in rljail-<run_id> below each expected parent, with
// the limits written there, and that cgroup must be gone after the run;
// without one, the payload must be in rljail's own cgroups.
func runPlacementCases(t *testing.T, cases []placementCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ob := observe(t, c.mode, c.opts, c.flags...)
			if c.setupError != "" {
				checkSetupError(t, c.name, ob.stderr, ob.exit)
				if !strings.Contains(ob.stderr, c.setupError) {
					t.Errorf("the error line %q does not mention %q", ob.stderr, c.setupError)
				}
				if got, _ := ob.res["status"].(string); got != "setup_error" {
					t.Errorf("report status %q, want setup_error", got)
				}
				if ob.payload != nil || strings.Contains(ob.stdout, "up") {
					t.Errorf("the payload ran (stdout %q)", ob.stdout)
				}
				return
			}
			checkStatus(t, ob.limitRun, "ok", 0)
			checkEnv(t, c.env, ob.limitRun)
			if ob.payload == nil {
				t.Fatalf("the payload was not seen running: %s", ob.limitRun)
			}
			if !c.env.cgroup {
				if fmt.Sprint(ob.payload) != fmt.Sprint(ob.supervisor) {
					t.Errorf("without a cgroup placement the payload is in cgroups %v, rljail in %v: want the same", ob.payload, ob.supervisor)
				}
				return
			}
			name := "rljail-" + runID(t, ob.res)
			v2 := false
			for ctl, parent := range c.parents {
				v2 = v2 || ctl == ""
				want := path.Join(parent, name)
				if got := ob.payload[ctl]; got != want {
					t.Errorf("the payload's %q cgroup is %q, want %q", ctl, got, want)
				}
				if dir := cgroupDir(t, ctl, want); exists(dir) {
					t.Errorf("the jail's cgroup %s is left after the run", dir)
				}
			}
			wantFiles(t, ob.files, v2)
			if c.supervisor != "" && ob.supervisor[""] != c.supervisor {
				t.Errorf("rljail ran in the cgroup %q, want %q", ob.supervisor[""], c.supervisor)
			}
			if c.owner >= 0 && ob.owner != c.owner {
				t.Errorf("the jail's cgroup was owned by uid %d, want %d", ob.owner, c.owner)
			}
			if c.check != nil {
				c.check(t, ob)
			}
			t.Logf("payload in %v, rljail in %v", ob.payload, ob.supervisor)
		})
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
