package integration

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkServeWarm is the warm pool's part of `make bench` (issue 31):
// `POST /v1/run` of `python3 -c pass` to a server with `--warm 4`,
// against the same to a server without a pool, a one-shot `rljail` run,
// bubblewrap's one-shot run (BenchmarkStartup's argv) and bare Python
// (the rootfs's own interpreter), interleaved in one run so that all see
// the same machine. Both servers start before the timer and take up to 8
// jails at once. SandboxFusion-style cost, in the same rounds:
// SandboxFusion's `POST /run_code {"code": "pass", "language": "python"}`
// to a minimal unisolated server that takes SandboxFusion's steps per
// request (sfStyleServer: a temp dir, the code in a file, `python FILE`
// through bash under a timeout; the rootfs's interpreter, as bare's), and
// the same request to the warm server's /run_code (serve/sandboxfusion.go).
// It reports each overhead over bare, the warm overhead against
// bubblewrap's (target <= 0.5), the warm /run_code overhead against the
// SandboxFusion-style one, and throughput at 8 concurrent requests to the
// warm server against bubblewrap's 8 concurrent one-shot runs (target >=
// 1.5) and against the SandboxFusion-style server's at 8 (/run_code both).
// No assertion on speed: the numbers go to docs/performance.md.
func BenchmarkServeWarm(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal("bwrap is missing: make deps installs bubblewrap")
	}
	work := b.TempDir()
	bwrapArgv := []string{bwrap, "--ro-bind", rootfsDir + "/usr", "/usr", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent",
		"/usr/bin/python3", "-c", "pass"}
	argvs := map[string][]string{
		"bare":   {rootfsDir + "/usr/bin/python3", "-c", "pass"},
		"bwrap":  bwrapArgv,
		"rljail": {testBin, "-q", "--rootfs", rootfsDir, "--", "python3", "-c", "pass"},
	}
	exe := func(argv []string) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}

	warm := startServer(b, asRoot, serveOpts{maxConc: 8, extraArgs: []string{"--warm", "4"}})
	cold := startServer(b, asRoot, serveOpts{maxConc: 8})
	sf := startSFStyle(b, work, rootfsDir+"/usr/bin")
	waitReady(b, warm)
	var mu sync.Mutex
	pools := map[string]int{} // the warm server's answers by pool
	post := func(s *server, countPool bool) {
		var r warmResponse
		if code := s.postJSON(b, "/v1/run", map[string]any{"command": []string{"python3", "-c", "pass"}}, &r); code != 200 {
			b.Fatalf("POST /v1/run: %d\nserver stderr:\n%s", code, s.stderr.String())
		}
		if countPool {
			mu.Lock()
			pools[r.Pool]++
			mu.Unlock()
		}
	}
	runs := map[string]func(){
		"bare":   func() { exe(argvs["bare"]) },
		"bwrap":  func() { exe(argvs["bwrap"]) },
		"rljail": func() { exe(argvs["rljail"]) },
		"warm":   func() { post(warm, true) },
		"cold":   func() { post(cold, false) },
		// SandboxFusion's request, to the SandboxFusion-style server and
		// to the warm server's /run_code.
		"sf":      func() { postRunCode(b, sf.client, sf.base) },
		"warm-rc": func() { postRunCode(b, warm.client, warm.base) },
	}
	order := []string{"bare", "bwrap", "rljail", "warm", "cold", "sf", "warm-rc"}
	for _, k := range order { // the page cache, the servers' first requests
		runs[k]()
	}
	waitReady(b, warm)
	pools = map[string]int{}
	before := poolRuns(b, warm)

	samples := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range order {
			start := time.Now()
			runs[k]()
			samples[k] = append(samples[k], time.Since(start))
		}
	}
	b.StopTimer()
	seqPools := pools
	// The warm server's runs by pool, less its /v1/run answers': its
	// /run_code runs (whose answers, SandboxFusion's shape, do not say).
	seqRC := poolRuns(b, warm)
	for k := range seqRC {
		seqRC[k] -= before[k] + seqPools[k]
	}
	pools = map[string]int{}

	// Throughput at 8: 32 runs by 8 workers, three rounds of bubblewrap,
	// the warm server, the SandboxFusion-style server and the warm
	// server's /run_code in turn (the pool refilled before each of the
	// warm server's).
	throughput := func(f func()) (int, time.Duration) {
		const n, total = 8, 32
		return total, concurrently(n, total, f)
	}
	count, took := map[string]int{}, map[string]time.Duration{}
	for r := 0; r < 3; r++ {
		for _, k := range []string{"bwrap", "warm", "sf", "warm-rc"} {
			if strings.HasPrefix(k, "warm") {
				waitReady(b, warm)
			}
			c, d := throughput(runs[k])
			count[k] += c
			took[k] += d
		}
	}
	tput := map[string]float64{}
	for k, c := range count {
		tput[k] = float64(c) / took[k].Seconds()
	}
	if left, _ := os.ReadDir(sf.tmp); len(left) > 0 {
		b.Errorf("the SandboxFusion-style server left %d directories in its TMPDIR (%s): its runs did not take the steps asked", len(left), left[0].Name())
	}
	warm.stop(b)
	cold.stop(b)

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50 := map[string]float64{}
	for _, k := range order {
		s := append([]time.Duration(nil), samples[k]...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		p50[k] = ms(s[len(s)/2])
	}
	over := func(k string) float64 { return p50[k] - p50["bare"] }
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-7s %8s %12s\n", "", "p50 ms", "overhead ms")
	for _, k := range order {
		fmt.Fprintf(&t, "%-7s %8.2f %12.2f\n", k, p50[k], over(k))
	}
	fmt.Fprintf(&t, "warm overhead / bwrap overhead %.2f (target <= 0.5); sequential warm answers by pool %v\n", over("warm")/over("bwrap"), seqPools)
	fmt.Fprintf(&t, "/run_code: warm-rc overhead / sf overhead %.2f; sequential warm-rc runs by pool %v\n", over("warm-rc")/over("sf"), seqRC)
	fmt.Fprintf(&t, "throughput at 8: warm %.1f/s, bwrap %.1f/s, x%.2f (target >= 1.5); warm answers by pool %v\n",
		tput["warm"], tput["bwrap"], tput["warm"]/tput["bwrap"], pools)
	fmt.Fprintf(&t, "throughput at 8, /run_code: warm-rc %.1f/s, sf %.1f/s, x%.2f\n",
		tput["warm-rc"], tput["sf"], tput["warm-rc"]/tput["sf"])
	b.Log(t.String())
	if b.N > 1 { // the runner's first, one-run round is only a probe
		fmt.Print(t.String())
	}
	b.ReportMetric(over("bwrap"), "bwrap-overhead-ms")
	b.ReportMetric(over("rljail"), "rljail-overhead-ms")
	b.ReportMetric(over("warm"), "warm-overhead-ms")
	b.ReportMetric(over("cold"), "cold-overhead-ms")
	b.ReportMetric(over("sf"), "sf-overhead-ms")
	b.ReportMetric(over("warm-rc"), "warm-rc-overhead-ms")
	b.ReportMetric(over("warm-rc")/over("sf"), "warm-rc-x-sf-overhead")
	b.ReportMetric(tput["warm-rc"]/tput["sf"], "warm-rc8-x-sf8")
	b.ReportMetric(over("warm")/over("bwrap"), "warm-x-bwrap-overhead")
	b.ReportMetric(tput["warm"]/tput["bwrap"], "warm8-x-bwrap8")
	b.ReportMetric(0, "ns/op")
}

// waitReady waits until s's /readyz is 200 (its pool is filled).
func waitReady(t testing.TB, s *server) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _, _ := s.do(t, "GET", "/readyz", "", nil); code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 60 s:\n%s", s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
