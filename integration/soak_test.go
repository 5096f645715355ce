package integration

// Soak test of issue 5: 2,000 runs one after another and 500 runs eight at
// a time, as root, mixing normal exits, non-zero exits, timeouts, memory
// kills, signal deaths and output floods. Afterwards nothing may have
// leaked: descriptors and goroutines of the test process (the caller), jail
// cgroups, mounts, processes, temp entries; and the supervisor's peak RSS
// must be as small late in the soak as early.

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakKind is one kind of run in the mix.
type soakKind struct {
	name   string
	args   []string // rljail flags and command, before the marker
	exit   int
	status string
}

// soakKinds is the mix, by run index modulo 20.
func soakKinds() []soakKind {
	normal := soakKind{"normal", python("print('ok')"), 0, "ok"}
	kinds := make([]soakKind, 20)
	for i := range kinds {
		kinds[i] = normal
	}
	kinds[3] = soakKind{"exit3", python("import sys; sys.exit(3)"), 3, "exit_nonzero"}
	kinds[7] = soakKind{"timeout", append([]string{"--timeout", "200ms"}, python("while True: pass")...), 124, "timeout"}
	kinds[11] = soakKind{"memory_kill", append([]string{"--memory", "32m"}, python("x = [b'm' * (1 << 20) for _ in range(200)]")...), 137, "memory_limit"}
	kinds[15] = soakKind{"output_flood", append([]string{"--output-limit", "64k"}, python("import os\nb = b'f' * (1 << 20)\nfor _ in range(8): os.write(1, b)")...), 0, "output_truncated"}
	kinds[18] = soakKind{"signal_kill", python("import os; os.kill(os.getpid(), 9)"), 137, "signaled"}
	return kinds
}

// soakRun is the outcome of one run.
type soakRun struct {
	kind   string
	err    string // "" when the run was as expected
	hwmKiB int64
	wall   time.Duration
}

// soakOne runs one jail of kind k and checks its exit status and status.
func soakOne(k soakKind, ws, resultDir, privTmp, marker string, sampleHWM bool) soakRun {
	args := append([]string{"--no-workspace", "--quiet"}, k.args...)
	args = append(args, marker)
	p, err := launch(asRoot, runOpts{dir: ws, env: []string{"TMPDIR=" + privTmp}}, resultDir, args...)
	if err != nil {
		return soakRun{kind: k.name, err: err.Error()}
	}
	var stop func() int64
	if sampleHWM {
		stop = watchHWM(p.cmd.Process.Pid, 2*time.Millisecond)
	}
	p.wait()
	r := soakRun{kind: k.name, wall: p.wall}
	if stop != nil {
		r.hwmKiB = stop()
	}
	res, rerr := p.result()
	status, _ := res["status"].(string)
	if p.exit != k.exit || status != k.status || rerr != nil {
		r.err = fmt.Sprintf("%s: exit %d status %q (report error %v), want exit %d status %q; stderr %q",
			k.name, p.exit, status, rerr, k.exit, k.status, attackClip(p.stderr.String()))
	}
	return r
}

// soakFDs counts the test process's open descriptors.
func soakFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func soakMean(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int64
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

// TestSoak runs the sequential and the concurrent soak as root and checks
// for leaks after each. Not parallel: it wants the machine to itself.
func TestSoak(t *testing.T) {
	const sequential, concurrent, workers, sample = 2000, 500, 8, 100
	marker := randomToken("soak")
	ws := newDir(t)
	privTmp := newOpenDir(t)
	kinds := soakKinds()

	// Warm up (the harness and the runtime open what they keep), then
	// take the baseline.
	if r := soakOne(kinds[0], ws, newOpenDir(t), privTmp, marker, false); r.err != "" {
		t.Fatalf("warm-up run: %s", r.err)
	}
	time.Sleep(100 * time.Millisecond)
	fdsBefore, goroutinesBefore := soakFDs(), runtime.NumGoroutine()
	before := faultSnapshot(t)

	var report []string
	logf := func(format string, a ...any) {
		s := fmt.Sprintf(format, a...)
		report = append(report, s)
		t.Log(s)
	}
	check := func(phase string) {
		t.Helper()
		time.Sleep(200 * time.Millisecond)
		left := faultLeftovers(t, before, privTmp, marker)
		for _, q := range allProcs() {
			if q.exe == testBin && !q.zombie() {
				left = append(left, "rljail process "+q.String())
			}
		}
		for _, q := range orphanedInits() {
			left = append(left, "orphaned init "+q.String())
		}
		if len(left) > 0 {
			t.Errorf("after the %s soak, left on the host:\n\t%s", phase, strings.Join(left, "\n\t"))
		}
		runtime.GC()
		fds, gs := soakFDs(), runtime.NumGoroutine()
		logf("after the %s soak: test process fds %d (before %d), goroutines %d (before %d); jail cgroups, mounts, temp entries, processes: %d left",
			phase, fds, fdsBefore, gs, goroutinesBefore, len(left))
		if fds > fdsBefore {
			t.Errorf("descriptors of the test process leaked: %d before, %d after the %s soak", fdsBefore, fds, phase)
		}
		if gs > goroutinesBefore+2 {
			t.Errorf("goroutines of the test process leaked: %d before, %d after the %s soak", goroutinesBefore, gs, phase)
		}
	}

	// Sequential.
	counts := map[string]int{}
	var early, late []int64
	failures := 0
	resultDir := newOpenDir(t)
	start := time.Now()
	var runTotal time.Duration
	n := 0
	for i := 0; i < sequential && failures < 10; i++ {
		k := kinds[i%len(kinds)]
		sampleHWM := k.name == "normal" && (i < sample*2 || i >= sequential-sample*2)
		r := soakOne(k, ws, resultDir, privTmp, marker, sampleHWM)
		n++
		counts[k.name]++
		runTotal += r.wall
		if r.err != "" {
			failures++
			t.Errorf("sequential run %d: %s", i, r.err)
		}
		if sampleHWM && r.hwmKiB > 0 {
			if i < sample*2 {
				early = append(early, r.hwmKiB)
			} else {
				late = append(late, r.hwmKiB)
			}
		}
	}
	seqTime := time.Since(start)
	logf("sequential soak: %d runs in %v (%v per run on average, rljail's own wall %v): %s",
		n, seqTime.Round(time.Millisecond), (seqTime / time.Duration(max(n, 1))).Round(100*time.Microsecond),
		(runTotal / time.Duration(max(n, 1))).Round(100*time.Microsecond), soakCounts(counts))
	em, lm := soakMean(early), soakMean(late)
	logf("supervisor VmHWM of normal runs: early %d runs mean %.0f KiB, late %d runs mean %.0f KiB (%+.1f%%)",
		len(early), em, len(late), lm, 100*(lm-em)/max(em, 1))
	if len(early) < sample/2 || len(late) < sample/2 {
		t.Errorf("too few VmHWM samples (early %d, late %d)", len(early), len(late))
	} else if lm > em*1.2 {
		t.Errorf("the supervisor's peak RSS grew: early mean %.0f KiB, late %.0f KiB (more than 20%%)", em, lm)
	}
	check("sequential")

	// Concurrent.
	counts = map[string]int{}
	jobs := make(chan int)
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	start = time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		dir := newOpenDir(t)
		go func() {
			defer wg.Done()
			for i := range jobs {
				k := kinds[i%len(kinds)]
				r := soakOne(k, ws, dir, privTmp, marker, false)
				mu.Lock()
				counts[k.name]++
				if r.err != "" {
					errs = append(errs, fmt.Sprintf("concurrent run %d: %s", i, r.err))
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < concurrent; i++ {
		mu.Lock()
		stop := len(errs) >= 10
		mu.Unlock()
		if stop {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	conTime := time.Since(start)
	sort.Strings(errs)
	for _, e := range errs {
		t.Error(e)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	logf("concurrent soak: %d runs, %d at a time, in %v: %s", total, workers, conTime.Round(time.Millisecond), soakCounts(counts))
	check("concurrent")
	if os.Getenv("RLJAIL_ATTACK_SUMMARY") != "" {
		fmt.Println(strings.Join(report, "\n"))
	}
}

func soakCounts(c map[string]int) string {
	var parts []string
	for k, v := range c {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
