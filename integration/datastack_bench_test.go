package integration

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkImportNumpy is `make bench`'s start-up of `python3 -c "import
// numpy"` in the jail against bare (issue 23), next to the `python3 -c
// pass` pair, all four interleaved in one run on the data rootfs
// ($RLJAIL_DATA_ROOTFS): bare is the rootfs's own interpreter run on the
// host, as in BenchmarkStartup. The target: the jail's added time for the
// numpy import stays within its added time for `pass` plus 20%.
func BenchmarkImportNumpy(b *testing.B) {
	bin, data := os.Getenv("RLJAIL_BIN"), os.Getenv("RLJAIL_DATA_ROOTFS")
	if bin == "" || data == "" {
		b.Fatal("RLJAIL_BIN and RLJAIL_DATA_ROOTFS must be set (make bench sets them; make data-rootfs builds the data rootfs)")
	}
	work := b.TempDir()
	cmds := map[string][]string{
		"bare-pass":    {data + "/usr/bin/python3", "-c", "pass"},
		"rljail-pass":  {bin, "-q", "--rootfs", data, "--", "python3", "-c", "pass"},
		"bare-numpy":   {data + "/usr/bin/python3", "-c", "import numpy"},
		"rljail-numpy": {bin, "-q", "--rootfs", data, "--", "python3", "-c", "import numpy"},
		// The same with one OpenBLAS thread on both sides: OpenBLAS's
		// workers spin in sched_yield while they wait (some 800 calls and
		// 40 ms of CPU per import on 2 cores), which a loaded machine and
		// a CPU quota stretch; without them the rows show what the jail
		// itself adds to the import (its file lookups through the overlay,
		// the loader, seccomp). The jail's default --cpus 1 gives
		// rljail-numpy one OpenBLAS thread too (jail.threadHints), as bare
		// numpy gets a thread per CPU: the -1t pair is then the jail
		// against a bare run as lean.
		"bare-numpy-1t":   {"/usr/bin/env", "OPENBLAS_NUM_THREADS=1", data + "/usr/bin/python3", "-c", "import numpy"},
		"rljail-numpy-1t": {bin, "-q", "-e", "OPENBLAS_NUM_THREADS=1", "--rootfs", data, "--", "python3", "-c", "import numpy"},
	}
	order := []string{"bare-pass", "rljail-pass", "bare-numpy", "rljail-numpy", "bare-numpy-1t", "rljail-numpy-1t"}
	// Each run's wall time, and its CPU time (user and system, the jail's
	// processes included: rljail reaps its init, which reaped the payload),
	// which a loaded machine inflates less.
	run := func(argv []string) (time.Duration, time.Duration) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = work
		// The bare runs must not see the host's site-packages or settings.
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	for _, k := range order {
		run(cmds[k]) // warm the page cache
	}
	wall, cpu := map[string][]time.Duration{}, map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range order {
			w, c := run(cmds[k])
			wall[k] = append(wall[k], w)
			cpu[k] = append(cpu[k], c)
		}
	}
	b.StopTimer()
	median := func(s []time.Duration) float64 {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	med, medCPU := map[string]float64{}, map[string]float64{}
	for _, k := range order {
		med[k], medCPU[k] = median(wall[k]), median(cpu[k])
	}
	cpuPass := medCPU["rljail-pass"] - medCPU["bare-pass"]
	cpuNumpy := medCPU["rljail-numpy"] - medCPU["bare-numpy"]
	over1t := med["rljail-numpy-1t"] - med["bare-numpy-1t"]
	overPass := med["rljail-pass"] - med["bare-pass"]
	overNumpy := med["rljail-numpy"] - med["bare-numpy"]
	for _, k := range order {
		b.ReportMetric(med[k], k+"-ms")
	}
	b.ReportMetric(overNumpy/overPass, "numpy-overhead/pass-overhead")
	b.ReportMetric(cpuNumpy/cpuPass, "cpu:numpy-overhead/pass-overhead")
	b.ReportMetric(over1t/overPass, "1thread:numpy-overhead/pass-overhead")
	verdict := "within"
	if overNumpy > 1.2*overPass {
		verdict = "MISSES"
	}
	fmt.Printf("\nimport numpy: bare %.1f ms, jail %.1f ms (+%.1f ms); pass: bare %.1f ms, jail %.1f ms (+%.1f ms); numpy's overhead / pass's = %.2f: %s the target (<= 1.20)\n",
		med["bare-numpy"], med["rljail-numpy"], overNumpy, med["bare-pass"], med["rljail-pass"], overPass, overNumpy/overPass, verdict)
	fmt.Printf("CPU time (user+sys): import numpy bare %.1f ms, jail %.1f ms (+%.1f ms); pass bare %.1f ms, jail %.1f ms (+%.1f ms); ratio %.2f\n",
		medCPU["bare-numpy"], medCPU["rljail-numpy"], cpuNumpy, medCPU["bare-pass"], medCPU["rljail-pass"], cpuPass, cpuNumpy/cpuPass)
	fmt.Printf("one OpenBLAS thread: import numpy bare %.1f ms, jail %.1f ms (+%.1f ms); overhead / pass's = %.2f\n",
		med["bare-numpy-1t"], med["rljail-numpy-1t"], over1t, over1t/overPass)
}
