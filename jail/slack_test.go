package jail

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWithCallerThread forks a child in withCallerThread and reads the
// child's timer slack and CPU set from the child itself (its own /proc
// entries): they must be the ones asked for, or the thread's own for 0 and
// nil; the thread's own must be back afterwards.
func TestWithCallerThread(t *testing.T) {
	const own = 234567
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Fatalf("this process may use %d CPU; the test needs two", all.Count())
	}
	first := -1
	for i := 0; first < 0; i++ {
		if all.IsSet(i) {
			first = i
		}
	}
	var one unix.CPUSet
	one.Set(first)
	for _, tc := range []struct {
		name     string
		slack    int64
		cpus     *unix.CPUSet // the child's; nil: the thread's own (one)
		want     int64
		wantCPUs unix.CPUSet
	}{
		{"the caller's", 123457, &all, 123457, all},
		{"none recorded", 0, nil, own, one},
		{"slack only", 123457, nil, 123457, one},
		{"CPUs only", 0, &all, own, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			prev, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Prctl(unix.PR_SET_TIMERSLACK, own, 0, 0, 0); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(prev), 0, 0, 0) }()
			// The thread is pinned, as the supervisor's are.
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = unix.SchedSetaffinity(0, &all) }()
			var out []byte
			err = withCallerThread(tc.slack, tc.cpus, func() error {
				var ferr error
				out, ferr = exec.Command("/bin/sh", "-c", "cat /proc/self/timerslack_ns; grep Cpus_allowed_list /proc/self/status").Output()
				return ferr
			})
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 {
				t.Fatalf("the child said %q", out)
			}
			if got := lines[0]; got != strconv.FormatInt(tc.want, 10) {
				t.Errorf("the child's timer slack is %s ns, want %d", got, tc.want)
			}
			if got, want := strings.TrimSpace(strings.TrimPrefix(lines[1], "Cpus_allowed_list:")), cpuList(tc.wantCPUs); got != want {
				t.Errorf("the child's CPUs are %s, want %s", got, want)
			}
			if got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || got != own {
				t.Errorf("the thread's timer slack is %d ns afterwards (%v), want its own %d", got, err, own)
			}
			var now unix.CPUSet
			if err := unix.SchedGetaffinity(0, &now); err != nil || now != one {
				t.Errorf("the thread's CPUs are %s afterwards (%v), want its own %s", cpuList(now), err, cpuList(one))
			}
		})
	}
}

// cpuList words a CPU set as /proc's Cpus_allowed_list does for single
// CPUs and runs ("0", "0-1", "0,2").
func cpuList(set unix.CPUSet) string {
	var parts []string
	for i := 0; i < len(set)*64; i++ {
		if !set.IsSet(i) {
			continue
		}
		j := i
		for j+1 < len(set)*64 && set.IsSet(j+1) {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(i)+"-"+strconv.Itoa(j))
		} else {
			parts = append(parts, strconv.Itoa(i))
		}
		i = j
	}
	return strings.Join(parts, ",")
}

// TestCallerTimerSlackUnset: a binary that did not start from rljail's
// entry (this test binary) never raised its slack, so there is nothing to
// give back.
func TestCallerTimerSlackUnset(t *testing.T) {
	if s := callerTimerSlack(); s != 0 {
		t.Errorf("callerTimerSlack() = %d in a test binary, want 0", s)
	}
}
