package jail

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWithTimerSlack forks a child in withTimerSlack and reads the child's
// timer slack from the child itself (cat of its own /proc entry): it must
// be the slack asked for, or the thread's own for 0; the thread's own must
// be back afterwards.
func TestWithTimerSlack(t *testing.T) {
	const own = 234567
	for _, tc := range []struct {
		name  string
		slack int64
		want  int64
	}{
		{"the caller's", 123457, 123457},
		{"none recorded", 0, own},
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
			var out []byte
			err = withTimerSlack(tc.slack, func() error {
				var ferr error
				out, ferr = exec.Command("/bin/cat", "/proc/self/timerslack_ns").Output()
				return ferr
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != strconv.FormatInt(tc.want, 10) {
				t.Errorf("the child's timer slack is %s ns, want %d", got, tc.want)
			}
			if got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || got != own {
				t.Errorf("the thread's timer slack is %d ns afterwards (%v), want its own %d", got, err, own)
			}
		})
	}
}

// TestCallerTimerSlackUnset: a binary that did not start from rljail's
// entry (this test binary) never raised its slack, so there is nothing to
// give back.
func TestCallerTimerSlackUnset(t *testing.T) {
	if s := callerTimerSlack(); s != 0 {
		t.Errorf("callerTimerSlack() = %d in a test binary, want 0", s)
	}
}
