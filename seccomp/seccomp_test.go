package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func basePolicy() Policy {
	return Policy{Name: "t", Violation: ViolationErrno, Rules: []Rule{
		{Syscall: "read"}, {Syscall: "write"},
		{Syscall: "socket", Args: []Arg{{Index: 0, Op: OpEq, Value: 1}}},
	}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Policy)
		wantErr string
	}{
		{"ok", func(*Policy) {}, ""},
		{"unknown syscall", func(p *Policy) { p.Rules = append(p.Rules, Rule{Syscall: "nosuchcall"}) }, `unknown syscall "nosuchcall"`},
		{"always denied", func(p *Policy) { p.Rules = append(p.Rules, Rule{Syscall: "ptrace"}) }, "denies it in every profile"},
		{"always denied behind a NUL", func(p *Policy) { p.Rules = append(p.Rules, Rule{Syscall: "ptrace\x00x"}) }, "unknown syscall"},
		{"empty name", func(p *Policy) { p.Rules = append(p.Rules, Rule{Syscall: ""}) }, "unknown syscall"},
		{"mount denied", func(p *Policy) { p.Rules = append(p.Rules, Rule{Syscall: "mount"}) }, "denies it in every profile"},
		{"index out of range", func(p *Policy) {
			p.Rules = append(p.Rules, Rule{Syscall: "ioctl", Args: []Arg{{Index: 6, Op: OpEq}}})
		}, "out of range"},
		{"two conditions on one argument", func(p *Policy) {
			p.Rules = append(p.Rules, Rule{Syscall: "ioctl", Args: []Arg{{Index: 1, Op: OpNe, Value: 1}, {Index: 1, Op: OpNe, Value: 2}}})
		}, "two conditions on argument 1"},
		{"bad op", func(p *Policy) {
			p.Rules = append(p.Rules, Rule{Syscall: "ioctl", Args: []Arg{{Index: 1, Op: "like"}}})
		}, "unknown comparison"},
		{"masked value outside mask", func(p *Policy) {
			p.Rules = append(p.Rules, Rule{Syscall: "ioctl", Args: []Arg{{Index: 1, Op: OpMaskedEq, Mask: 0xf0, Value: 0x0f}}})
		}, "can never match"},
		{"bad violation", func(p *Policy) { p.Violation = "ignore" }, "unknown violation"},
		{"bad enosys", func(p *Policy) { p.NoSys = []string{"nosuchcall"} }, "unknown syscall"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePolicy()
			tt.mutate(&p)
			err := p.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestAllowRemove(t *testing.T) {
	p := basePolicy()
	if err := p.Allow("socket", "getpid"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range p.Rules {
		if r.Syscall == "socket" {
			n++
			if len(r.Args) != 0 {
				t.Errorf("after Allow(socket) a conditional socket rule is left: %+v", r)
			}
		}
	}
	if n != 1 || !p.Allowed("getpid") {
		t.Errorf("Allow: socket rules %d, getpid allowed %v", n, p.Allowed("getpid"))
	}
	p.Remove("read", "socket")
	if p.Allowed("read") || p.Allowed("socket") || !p.Allowed("write") {
		t.Errorf("Remove left %+v", p.Rules)
	}
	if err := p.Allow("nosuchcall"); err == nil {
		t.Error("Allow of an unknown name succeeded")
	}
}

func TestCompileShape(t *testing.T) {
	for _, v := range []Violation{ViolationErrno, ViolationKill, ViolationLearn} {
		p := basePolicy()
		p.Violation = v
		prog, err := Compile(&p)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if prog.Notify != (v != ViolationErrno) {
			t.Errorf("%s: Notify = %v", v, prog.Notify)
		}
		if len(prog.BPF)%8 != 0 || prog.Instructions() < len(prologue(v, MaxKnown())) {
			t.Fatalf("%s: program of %d bytes", v, len(prog.BPF))
		}
		// The program starts with the prologue: load the architecture.
		if code := binary.NativeEndian.Uint16(prog.BPF[0:2]); code != bpfLdWAbs {
			t.Errorf("%s: first instruction %#x, want a load of the architecture", v, code)
		}
	}
	if MaxKnown() < 435 { // clone3 is 435: libseccomp knows it
		t.Errorf("MaxKnown = %d, implausibly low", MaxKnown())
	}
}

func TestSnippet(t *testing.T) {
	r := Report{Profile: "python", Denied: []Denied{
		{Syscall: "getpid", Count: 2},
		{Syscall: "socket", Args: map[string]uint64{"arg0": 16}, Count: 1, Filtered: true},
		{Syscall: "ptrace", Count: 1},
		{Syscall: "ioctl", Args: map[string]uint64{"arg1": 0x5412}, Count: 1, Filtered: true},
		{Syscall: "kill", Args: map[string]uint64{"arg1": 9}, Count: 1, Filtered: true},
		{Syscall: "tgkill", Count: 1, Filtered: true},
	}}
	s := r.Snippet()
	for _, want := range []string{`base = "python"`, `allow = ["getpid"]`, "# socket arg0=0x10 stays denied", "# ptrace is denied in every profile",
		"TIOCSTI", `syscall = "kill"`, "value = 0x9", "# tgkill (more argument values than learn mode lists) stays denied"} {
		if !strings.Contains(s, want) {
			t.Errorf("snippet lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range []string{`"ptrace"]`, `syscall = "socket"`, `syscall = "ioctl"`, `"tgkill"`} {
		if strings.Contains(s, bad) {
			t.Errorf("snippet has %s:\n%s", bad, s)
		}
	}
}

// The tests below load a compiled filter into a child process (this test
// binary re-executed) and decide from what the kernel then does: errno
// values the child reports, or the signal that killed it.

const childEnv = "RLJAIL_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(filterChild(spec))
	}
	os.Exit(m.Run())
}

// filterChild installs the policy's program on this thread and makes one
// raw system call: "nr a0 a1 a2"; it prints the errno (0 on success).
func filterChild(spec string) int {
	runtime.LockOSThread()
	f := strings.Fields(spec)
	var v [4]uint64
	for i := range f {
		v[i], _ = strconv.ParseUint(f[i], 0, 64)
	}
	p := Policy{Name: "child", Violation: ViolationErrno, Rules: []Rule{
		{Syscall: "write"}, {Syscall: "exit_group"}, {Syscall: "exit"}, {Syscall: "futex"},
		{Syscall: "rt_sigreturn"}, {Syscall: "rt_sigprocmask"}, {Syscall: "sched_yield"},
		{Syscall: "nanosleep"}, {Syscall: "mmap"}, {Syscall: "munmap"}, {Syscall: "madvise"},
		{Syscall: "getpid"}, {Syscall: "tgkill"}, {Syscall: "gettid"}, {Syscall: "ioctl"},
		{Syscall: "socket", Args: []Arg{{Index: 0, Op: OpEq, Value: unix.AF_UNIX}}},
		{Syscall: "fchmod", Args: []Arg{{Index: 1, Op: OpMaskedEq, Mask: 0o6000, Value: 0}}},
	}, NoSys: []string{"clone3"}}
	prog, err := Compile(&p)
	if err != nil {
		fmt.Println("compile:", err)
		return 3
	}
	fprog := unix.SockFprog{Len: uint16(prog.Instructions()), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog.BPF[0]))}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("no_new_privs:", err)
		return 3
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Println("seccomp:", e)
		return 3
	}
	_, _, e := unix.RawSyscall(uintptr(v[0]), uintptr(v[1]), uintptr(v[2]), uintptr(v[3]))
	fmt.Printf("errno=%d\n", int(e))
	return 0
}

func TestFilterInKernel(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	tmp, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	// The child inherits these as fd 3 and 4 through ExtraFiles.
	const nullFD, fileFD = 3, 4
	tests := []struct {
		name       string
		call       string
		wantErrno  unix.Errno
		wantSignal unix.Signal
	}{
		{"allowed call", fmt.Sprint(unix.SYS_GETPID), 0, 0},
		{"denied call: EPERM", fmt.Sprint(unix.SYS_GETPPID), unix.EPERM, 0},
		{"call newer than the table: ENOSYS", fmt.Sprint(MaxKnown() + 1), unix.ENOSYS, 0},
		{"clone3: ENOSYS", fmt.Sprint(unix.SYS_CLONE3), unix.ENOSYS, 0},
		{"socket AF_UNIX allowed", fmt.Sprintf("%d %d %d", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), 0, 0},
		{"socket AF_NETLINK denied", fmt.Sprintf("%d %d %d", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), unix.EPERM, 0},
		{"socket AF_UNIX with high bits denied", fmt.Sprintf("%d %d %d", unix.SYS_SOCKET, uint64(1)<<32|unix.AF_UNIX, unix.SOCK_STREAM), unix.EPERM, 0},
		{"ioctl allowed: the kernel answers ENOTTY", fmt.Sprintf("%d %d %d", unix.SYS_IOCTL, nullFD, unix.TCGETS), unix.ENOTTY, 0},
		{"ioctl TIOCSTI denied", fmt.Sprintf("%d %d %d", unix.SYS_IOCTL, nullFD, unix.TIOCSTI), unix.EPERM, 0},
		{"ioctl TIOCSTI with high bits denied", fmt.Sprintf("%d %d %d", unix.SYS_IOCTL, nullFD, uint64(1)<<32|unix.TIOCSTI), unix.EPERM, 0},
		{"ioctl TIOCLINUX denied", fmt.Sprintf("%d %d %d", unix.SYS_IOCTL, nullFD, unix.TIOCLINUX), unix.EPERM, 0},
		{"fchmod 0644 allowed", fmt.Sprintf("%d %d %d", unix.SYS_FCHMOD, fileFD, 0o644), 0, 0},
		{"fchmod setuid denied", fmt.Sprintf("%d %d %d", unix.SYS_FCHMOD, fileFD, 0o4755), unix.EPERM, 0},
		{"fchmod setgid denied", fmt.Sprintf("%d %d %d", unix.SYS_FCHMOD, fileFD, 0o2755), unix.EPERM, 0},
		{"x32 call killed", fmt.Sprint(0x40000000 | unix.SYS_GETPID), 0, unix.SIGSYS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+tt.call)
			cmd.ExtraFiles = []*os.File{devnull, tmp}
			out, err := cmd.CombinedOutput()
			if tt.wantSignal != 0 {
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.Signal(tt.wantSignal) {
					t.Fatalf("child: %v, output %q; want death by %v", err, out, tt.wantSignal)
				}
				return
			}
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			want := fmt.Sprintf("errno=%d", int(tt.wantErrno))
			if !strings.Contains(string(out), want) {
				t.Fatalf("child printed %q, want %s (%v)", strings.TrimSpace(string(out)), want, tt.wantErrno)
			}
		})
	}
	// From outside: the denied fchmod left the file's mode alone.
	st, err := tmp.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the file became %v despite the filter", st.Mode())
	}
}
