package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestRecordBounded: a payload that makes one denied call with ever new
// argument values must not grow the report without end: past MaxDenied
// entries, the rest count in one entry per call, without arguments.
func TestRecordBounded(t *testing.T) {
	s := NewSupervisor(&Program{Name: "test", Violation: ViolationLearn}, nil)
	const calls = 5 * MaxDenied
	for i := 0; i < calls; i++ {
		// ioctl's command (arg1) is always recorded.
		s.record(&seccompNotif{Data: seccompData{Nr: int32(unix.SYS_IOCTL), Args: [6]uint64{0, uint64(i)}}})
	}
	s.record(&seccompNotif{Data: seccompData{Nr: int32(unix.SYS_PTRACE)}})
	r := s.Report()
	if len(r.Denied) > MaxDenied+2 {
		t.Fatalf("%d entries for %d calls, want at most %d", len(r.Denied), calls+1, MaxDenied+2)
	}
	total := 0
	overflow := false
	for _, d := range r.Denied {
		total += d.Count
		if d.Syscall == "ioctl" && d.Args == nil {
			overflow = true
			if d.Count != calls-MaxDenied {
				t.Errorf("the ioctl entry without arguments counts %d, want %d", d.Count, calls-MaxDenied)
			}
		}
	}
	if total != calls+1 || !overflow {
		t.Errorf("counted %d calls (want %d), an overflow entry: %v", total, calls+1, overflow)
	}
}
