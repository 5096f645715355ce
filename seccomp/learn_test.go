package seccomp_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
	"golang.org/x/sys/unix"
)

// hostileCall is a call that learn mode must never talk a profile into
// allowing: each breaks an invariant of the embedded profiles.
type hostileCall struct {
	name string
	nr   int
	args [6]uint64
}

var hostileCalls = []hostileCall{
	{"chmod setuid", unix.SYS_CHMOD, [6]uint64{0, 0o4755}},
	{"fchmodat setgid", unix.SYS_FCHMODAT, [6]uint64{0, 0, 0o2755}},
	{"openat creating setuid", unix.SYS_OPENAT, [6]uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}},
	{"mknod block device", unix.SYS_MKNOD, [6]uint64{0, unix.S_IFBLK | 0o666, 0x801}},
	{"clone CLONE_NEWUSER", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}},
	{"clone CLONE_NEWNET threads", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWNET | unix.CLONE_THREAD | unix.CLONE_VM}},
	{"socket AF_NETLINK", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, 0}},
	{"socket AF_PACKET", unix.SYS_SOCKET, [6]uint64{unix.AF_PACKET, unix.SOCK_RAW, 0x300}},
	{"socket MPTCP", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_STREAM, 262}},
	{"socket UDP-Lite", unix.SYS_SOCKET, [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, 136}},
	{"socket SCTP", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_SEQPACKET, 132}},
	{"socket raw", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_RAW, 1}},
	{"socketpair AF_INET", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_INET, unix.SOCK_STREAM, 0}},
	{"personality ADDR_NO_RANDOMIZE", unix.SYS_PERSONALITY, [6]uint64{0x0040000}},
	{"personality READ_IMPLIES_EXEC", unix.SYS_PERSONALITY, [6]uint64{0x0400000}},
	{"prctl PR_SET_NAME", unix.SYS_PRCTL, [6]uint64{unix.PR_SET_NAME}},
	{"prctl PR_SET_DUMPABLE", unix.SYS_PRCTL, [6]uint64{unix.PR_SET_DUMPABLE, 1}},
	{"prctl PR_SET_MM", unix.SYS_PRCTL, [6]uint64{unix.PR_SET_MM}},
	{"ioctl FS_IOC_ADD_ENCRYPTION_KEY", unix.SYS_IOCTL, [6]uint64{3, unix.FS_IOC_ADD_ENCRYPTION_KEY}},
	{"ioctl FS_IOC_ADD_ENCRYPTION_KEY, high bits", unix.SYS_IOCTL, [6]uint64{3, 0xffffffff00000000 | unix.FS_IOC_ADD_ENCRYPTION_KEY}},
	{"ioctl FS_IOC_SETFLAGS", unix.SYS_IOCTL, [6]uint64{3, unix.FS_IOC_SETFLAGS}},
	{"ioctl TIOCSTI", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}},
	{"setsockopt SO_ATTACH_FILTER", unix.SYS_SETSOCKOPT, [6]uint64{3, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER}},
	{"setsockopt SO_BINDTODEVICE", unix.SYS_SETSOCKOPT, [6]uint64{3, unix.SOL_SOCKET, unix.SO_BINDTODEVICE}},
	{"setsockopt TCP_ULP", unix.SYS_SETSOCKOPT, [6]uint64{3, unix.IPPROTO_TCP, unix.TCP_ULP}},
	{"setsockopt IP_ADD_MEMBERSHIP", unix.SYS_SETSOCKOPT, [6]uint64{3, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP}},
	{"fcntl F_SETLEASE", unix.SYS_FCNTL, [6]uint64{3, unix.F_SETLEASE, unix.F_RDLCK}},
	{"fcntl F_NOTIFY", unix.SYS_FCNTL, [6]uint64{3, unix.F_NOTIFY, 0x80000000}},
	{"fcntl F_SETPIPE_SZ 256 MiB", unix.SYS_FCNTL, [6]uint64{3, unix.F_SETPIPE_SZ, 256 << 20}},
	{"ptrace", unix.SYS_PTRACE, [6]uint64{}},
}

// TestLearnNeverWeakensInvariants: a payload in learn mode makes every
// hostile call, then floods the report with distinct values past
// MaxDenied; the printed snippet, used as a profile, must still deny
// every hostile call. With --seccomp-remove of the checked calls too
// (their rules gone, so that learn mode sees the calls without rules).
func TestLearnNeverWeakensInvariants(t *testing.T) {
	for _, removed := range [][]string{nil, seccomp.CheckedCalls()} {
		t.Run(fmt.Sprintf("removed=%d", len(removed)), func(t *testing.T) {
			base, err := profiles.Load("python")
			if err != nil {
				t.Fatal(err)
			}
			pol := base.Policy
			pol.Rules = append([]seccomp.Rule(nil), base.Policy.Rules...)
			pol.Remove(removed...)
			pol.Violation = seccomp.ViolationLearn
			prog, err := seccomp.Compile(&pol)
			if err != nil {
				t.Fatal(err)
			}
			sup := seccomp.NewSupervisor(&prog, nil)
			for _, c := range hostileCalls {
				seccomp.RecordCall(sup, c.nr, c.args)
			}
			// The flood: distinct values of every checked call, past
			// the report's bound, then every hostile call once more
			// (now recorded without arguments).
			for i := 0; i < 2*seccomp.MaxDenied; i++ {
				for _, n := range seccomp.CheckedCalls() {
					nr, _ := seccomp.SyscallNumber(n)
					seccomp.RecordCall(sup, nr, [6]uint64{uint64(i) << 40, uint64(i) << 40, uint64(i) << 40, uint64(i) << 40})
				}
			}
			for _, c := range hostileCalls {
				seccomp.RecordCall(sup, c.nr, c.args)
			}
			// A call that no profile filters: learn mode's purpose.
			seccomp.RecordCall(sup, unix.SYS_INOTIFY_INIT1, [6]uint64{})
			snippet := sup.Report().Snippet()
			p, err := profiles.Parse("learned.toml", []byte(snippet))
			if err != nil {
				t.Fatalf("the snippet is not a profile: %v\n%s", err, snippet)
			}
			learned, err := seccomp.Compile(&p.Policy)
			if err != nil {
				t.Fatal(err)
			}
			const archX86_64 = 0xc000003e
			for _, c := range hostileCalls {
				got, err := runBPF(learned.BPF, &seccompData{nr: uint32(c.nr), arch: archX86_64, args: c.args})
				if err != nil {
					t.Fatal(err)
				}
				if got == unix.SECCOMP_RET_ALLOW {
					t.Errorf("%s: the learned profile allows it:\n%s", c.name, clipSnippet(snippet))
				}
			}
			if got, _ := runBPF(learned.BPF, &seccompData{nr: unix.SYS_INOTIFY_INIT1, arch: archX86_64}); got != unix.SECCOMP_RET_ALLOW {
				t.Errorf("the learned profile does not allow inotify_init1 (%#x):\n%s", got, clipSnippet(snippet))
			}
			for _, n := range seccomp.CheckedCalls() {
				if strings.Contains(snippet, fmt.Sprintf("%q", n)) {
					t.Errorf("the snippet names %s as a rule or an allow:\n%s", n, clipSnippet(snippet))
				}
			}
		})
	}
}

func clipSnippet(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "..."
	}
	return s
}
