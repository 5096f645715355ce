package jail

import (
	"syscall"
	"testing"
	"time"

	"github.com/rljail/rljail/cgroup"
)

// TestCollectSIGXCPU: a SIGXCPU is the CPU-time limit only when the CPU
// time measured (the cgroup's, or the rusage of what init reaped) reached
// it; one the payload sent itself is its own death by a signal.
func TestCollectSIGXCPU(t *testing.T) {
	sec := func(s float64) syscall.Timeval {
		return syscall.NsecToTimeval(int64(s * float64(time.Second)))
	}
	for _, c := range []struct {
		name      string
		limit     time.Duration
		stats     cgroup.Stats // from the cgroup; zero without one
		usage     *syscall.Rusage
		cpuKilled bool
		status    string
		exit      int
	}{
		{"self-sent, rootless", 20 * time.Second, cgroup.Stats{}, &syscall.Rusage{Utime: sec(0.04), Stime: sec(0.01)}, false, StatusSignaled, 152},
		{"self-sent, cgroup", 20 * time.Second, cgroup.Stats{CPUUserMS: 40, CPUSystemMS: 20}, nil, false, StatusSignaled, 152},
		{"RLIMIT_CPU, rootless (ticks ahead of the rusage)", time.Second, cgroup.Stats{}, &syscall.Rusage{Utime: sec(0.977)}, false, StatusCPULimit, 152},
		{"RLIMIT_CPU, cgroup", time.Second, cgroup.Stats{CPUUserMS: 1990, CPUSystemMS: 12}, nil, false, StatusCPULimit, 152},
		{"half the limit", 2 * time.Second, cgroup.Stats{}, &syscall.Rusage{Utime: sec(1)}, false, StatusSignaled, 152},
		{"the supervisor's watcher", time.Second, cgroup.Stats{CPUUserMS: 1010}, nil, true, StatusCPULimit, 137},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &jailLimits{res: Resources{CPUTime: c.limit}}
			l.cpuKilled.Store(c.cpuKilled)
			var res Result
			if c.cpuKilled {
				res.setExit(0, int(syscall.SIGKILL))
			} else {
				res.setExit(0, int(syscall.SIGXCPU))
			}
			l.collect(&res, c.usage, false, &jailStats{st: c.stats})
			if res.Status != c.status || res.ExitCode != c.exit {
				t.Errorf("status %s, exit %d; want %s, %d", res.Status, res.ExitCode, c.status, c.exit)
			}
		})
	}
}
