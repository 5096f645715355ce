package integration

import (
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkStartup measures `rljail -- python3 -c pass` against bare
// `python3 -c pass` of the same interpreter, interleaved in one run so
// that both see the same machine, and reports the medians, the overhead
// and the ratio (issue 2's target: overhead at most 10 ms).
func BenchmarkStartup(b *testing.B) {
	bin, rootfsDir := os.Getenv("RLJAIL_BIN"), os.Getenv("RLJAIL_ROOTFS")
	if bin == "" || rootfsDir == "" {
		b.Fatal("RLJAIL_BIN and RLJAIL_ROOTFS must be set (make bench sets them)")
	}
	python := "/usr/bin/python3"
	work := b.TempDir()
	timeRun := func(name string, args ...string) time.Duration {
		cmd := exec.Command(name, args...)
		cmd.Dir = work
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return time.Since(start)
	}
	// Warm the page cache and the rootfs's bytecode.
	timeRun(python, "-c", "pass")
	timeRun(bin, "--rootfs", rootfsDir, "--", "python3", "-c", "pass")

	bare := make([]time.Duration, 0, b.N)
	jailed := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bare = append(bare, timeRun(python, "-c", "pass"))
		jailed = append(jailed, timeRun(bin, "--rootfs", rootfsDir, "--", "python3", "-c", "pass"))
	}
	b.StopTimer()
	mb, mj := median(bare), median(jailed)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(mb), "bare-ms")
	b.ReportMetric(ms(mj), "rljail-ms")
	b.ReportMetric(ms(mj-mb), "overhead-ms")
	b.ReportMetric(float64(mj)/float64(mb), "ratio")
	b.ReportMetric(0, "ns/op")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, k int) bool { return s[i] < s[k] })
	return s[len(s)/2]
}
