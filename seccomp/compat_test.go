package seccomp_test

import (
	"testing"

	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
	"golang.org/x/sys/unix"
)

// TestPythonProfileCompatDecisions holds what issue 23 opened in the python
// profile to its bounds, on the compiled program: the no-op identity calls
// pass and every other id is denied (high bits of an id ignored, as the
// kernel reads a uid_t); setgroups stays denied; only the normal
// scheduling policies; the pty ioctls pass, TIOCSTI, TIOCLINUX, TIOCCONS
// and TIOCSETD do not.
func TestPythonProfileCompatDecisions(t *testing.T) {
	const keep = 0xffffffff // (uid_t)-1
	allow, deny := uint32(unix.SECCOMP_RET_ALLOW), uint32(unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	tests := []struct {
		name string
		nr   int
		args [6]uint64
		want uint32
	}{
		{"setuid(1000)", unix.SYS_SETUID, [6]uint64{1000}, allow},
		{"setuid(1000) with high bits", unix.SYS_SETUID, [6]uint64{1<<32 | 1000}, allow},
		{"setuid(0)", unix.SYS_SETUID, [6]uint64{0}, deny},
		{"setuid(-1)", unix.SYS_SETUID, [6]uint64{keep}, deny},
		{"setuid(65534)", unix.SYS_SETUID, [6]uint64{65534}, deny},
		{"setgid(1000)", unix.SYS_SETGID, [6]uint64{1000}, allow},
		{"setgid(0)", unix.SYS_SETGID, [6]uint64{0}, deny},
		{"setreuid(-1, -1)", unix.SYS_SETREUID, [6]uint64{keep, keep}, allow},
		{"setreuid(1000, -1)", unix.SYS_SETREUID, [6]uint64{1000, keep}, allow},
		{"setreuid(-1, 0)", unix.SYS_SETREUID, [6]uint64{keep, 0}, deny},
		{"setreuid(0, 1000)", unix.SYS_SETREUID, [6]uint64{0, 1000}, deny},
		{"setregid(-1, 1000)", unix.SYS_SETREGID, [6]uint64{keep, 1000}, allow},
		{"setregid(65534, -1)", unix.SYS_SETREGID, [6]uint64{65534, keep}, deny},
		{"setresuid(-1, -1, -1)", unix.SYS_SETRESUID, [6]uint64{keep, keep, keep}, allow},
		{"setresuid(1000, 1000, 1000)", unix.SYS_SETRESUID, [6]uint64{1000, 1000, 1000}, allow},
		{"setresuid(-1, -1, 0)", unix.SYS_SETRESUID, [6]uint64{keep, keep, 0}, deny},
		{"setresuid(0, -1, -1)", unix.SYS_SETRESUID, [6]uint64{0, keep, keep}, deny},
		{"setresgid(-1, 1000, -1)", unix.SYS_SETRESGID, [6]uint64{keep, 1000, keep}, allow},
		{"setresgid(-1, 0, -1)", unix.SYS_SETRESGID, [6]uint64{keep, 0, keep}, deny},
		{"setgroups(0, NULL)", unix.SYS_SETGROUPS, [6]uint64{0, 0}, deny},
		{"setgroups(1, [0])", unix.SYS_SETGROUPS, [6]uint64{1, 0x1000}, deny},
		{"setfsuid(0)", unix.SYS_SETFSUID, [6]uint64{0}, deny},
		{"sched_setscheduler SCHED_OTHER", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 0, 0x1000}, allow},
		{"sched_setscheduler SCHED_BATCH|SCHED_RESET_ON_FORK", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 3 | 0x40000000, 0x1000}, allow},
		{"sched_setscheduler SCHED_IDLE", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 5, 0x1000}, allow},
		{"sched_setscheduler SCHED_FIFO", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 1, 0x1000}, deny},
		{"sched_setscheduler SCHED_RR", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 2, 0x1000}, deny},
		{"sched_setscheduler SCHED_DEADLINE", unix.SYS_SCHED_SETSCHEDULER, [6]uint64{0, 6, 0x1000}, deny},
		{"ioctl TIOCGPTN", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCGPTN}, allow},
		{"ioctl TIOCSPTLCK", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCSPTLCK}, allow},
		{"ioctl TIOCGPTPEER", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCGPTPEER}, allow},
		{"ioctl TIOCSCTTY", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSCTTY}, allow},
		{"ioctl TIOCSWINSZ", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCSWINSZ}, allow},
		{"ioctl TIOCSTI", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCSTI}, deny},
		{"ioctl TIOCLINUX", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCLINUX}, deny},
		{"ioctl TIOCCONS", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCCONS}, deny},
		{"ioctl TIOCSETD", unix.SYS_IOCTL, [6]uint64{3, unix.TIOCSETD}, deny},
	}
	for _, name := range []string{"python", "python-strict"} {
		p, err := profiles.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		pol := p.Policy
		pol.Violation = seccomp.ViolationErrno
		prog, err := seccomp.Compile(&pol)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			got, err := runBPF(prog.BPF, &seccompData{nr: uint32(tt.nr), arch: unix.AUDIT_ARCH_X86_64, args: tt.args})
			if err != nil {
				t.Fatalf("%s: %s: %v", name, tt.name, err)
			}
			if got != tt.want {
				t.Errorf("%s: %s: the program returns %#x, want %#x", name, tt.name, got, tt.want)
			}
		}
	}
}
