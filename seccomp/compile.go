package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Program is a compiled filter: classic BPF instructions (struct
// sock_filter, 8 bytes each, native byte order), ready for
// seccomp(SECCOMP_SET_MODE_FILTER).
type Program struct {
	BPF []byte
	// Notify is true when violations go to a user-notification listener
	// (strict and learn modes): the payload installs the filter with
	// SECCOMP_FILTER_FLAG_NEW_LISTENER and hands the listener to the
	// supervisor.
	Notify bool
	// Name and Violation come from the policy, for the result report.
	Name      string
	Violation Violation
	// Policy returns what the program was compiled from; the supervisor
	// reads it (only when a call was denied) to tell which arguments
	// matter. A precompiled program loads it lazily.
	Policy func() (*Policy, error)
}

// Instructions is the program's length in BPF instructions.
func (p Program) Instructions() int { return len(p.BPF) / 8 }

const (
	auditArchX86_64 = 0xc000003e // AUDIT_ARCH_X86_64
	x32SyscallBit   = 0x40000000
	tiocsti         = 0x5412 // push a byte into a terminal's input queue
	tioclinux       = 0x541c // the same through the Linux console
	// offsets in struct seccomp_data
	offNr   = 0
	offArch = 4
	offArg1 = 16 + 8 // args[1], low 32 bits on little-endian
)

// BPF opcodes (linux/bpf_common.h).
const (
	bpfLdWAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgtK   = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
	bpfJgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfRetK   = unix.BPF_RET | unix.BPF_K
)

type insn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

func (i insn) append(b []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, i.code)
	b = append(b, i.jt, i.jf)
	return binary.NativeEndian.AppendUint32(b, i.k)
}

// violationAction is the seccomp return value for a call outside policy p.
func violationAction(v Violation) uint32 {
	if v == ViolationErrno {
		return unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	}
	return unix.SECCOMP_RET_USER_NOTIF
}

// prologue runs before libseccomp's program and covers what libseccomp
// cannot express:
//   - any architecture but x86_64, and x32 calls on x86_64: kill (a filter
//     for one ABI says nothing of another's numbers);
//   - a call number above the policy's table: ENOSYS (a newer kernel's call
//     that libc probes, such as fchmodat2, then falls back);
//   - ioctl TIOCSTI and TIOCLINUX, compared on the low 32 bits the kernel
//     uses (a 64-bit comparison could be bypassed with high bits set): the
//     violation action. libseccomp allows only one comparison per argument
//     in a rule, so "ioctl unless cmd is one of these" needs this.
//
// Technique after runc's libcontainer/seccomp/patchbpf, which prepends an
// ENOSYS stub to libseccomp's output for the same reason.
func prologue(v Violation, maxKnown uint32) []insn {
	deny := violationAction(v)
	// Instruction indexes below; jumps are relative to the next one.
	return []insn{
		/* 0 */ {bpfLdWAbs, 0, 0, offArch},
		/* 1 */ {bpfJeqK, 1, 0, auditArchX86_64}, // x86_64: skip the kill
		/* 2 */ {bpfRetK, 0, 0, unix.SECCOMP_RET_KILL_PROCESS},
		/* 3 */ {bpfLdWAbs, 0, 0, offNr},
		/* 4 */ {bpfJgeK, 0, 1, x32SyscallBit}, // x32 → 5, else 6
		/* 5 */ {bpfRetK, 0, 0, unix.SECCOMP_RET_KILL_PROCESS},
		/* 6 */ {bpfJgtK, 0, 1, maxKnown}, // newer → 7, else 8
		/* 7 */ {bpfRetK, 0, 0, unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		/* 8 */ {bpfJeqK, 0, 4, unix.SYS_IOCTL}, // not ioctl → 13 (body)
		/* 9 */ {bpfLdWAbs, 0, 0, offArg1},
		/* 10 */ {bpfJeqK, 1, 0, tiocsti}, // → 12
		/* 11 */ {bpfJeqK, 0, 1, tioclinux}, // → 12, else 13
		/* 12 */ {bpfRetK, 0, 0, deny},
		// 13: libseccomp's program starts here and loads what it needs.
	}
}

var (
	maxKnownOnce sync.Once
	maxKnownNr   uint32
)

// MaxKnown is the highest x86_64 call number the policy (libseccomp's
// table) knows; calls above it are "newer than the policy".
func MaxKnown() uint32 {
	maxKnownOnce.Do(func() {
		for nr := 0; nr < 1024; nr++ {
			if _, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64); err == nil {
				maxKnownNr = uint32(nr)
			}
		}
	})
	return maxKnownNr
}

// SyscallNumber resolves an x86_64 call name, with an error that says the
// name is unknown.
//
// The name must be exactly the table's name for its number: libseccomp
// reads names as C strings, so "ptrace\x00x" would otherwise resolve to
// ptrace while every check on the Go string saw another name.
func SyscallNumber(name string) (int, error) {
	unknown := fmt.Errorf("unknown syscall %q (not in the x86_64 table)", name)
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return 0, unknown
	}
	sc, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
	if err != nil || sc < 0 {
		return 0, unknown
	}
	if canonical, err := sc.GetNameByArch(libseccomp.ArchAMD64); err != nil || canonical != name {
		return 0, unknown
	}
	return int(sc), nil
}

// SyscallName names an x86_64 call number, or "syscall_N".
func SyscallName(nr int) string {
	name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
	if err != nil {
		return fmt.Sprintf("syscall_%d", nr)
	}
	return name
}

var libseccompOps = map[Op]libseccomp.ScmpCompareOp{
	OpEq: libseccomp.CompareEqual, OpNe: libseccomp.CompareNotEqual,
	OpLt: libseccomp.CompareLess, OpLe: libseccomp.CompareLessOrEqual,
	OpGt: libseccomp.CompareGreater, OpGe: libseccomp.CompareGreaterEqual,
	OpMaskedEq: libseccomp.CompareMaskedEqual,
}

// Compile turns a validated policy into a BPF program.
func Compile(p *Policy) (Program, error) {
	if err := p.Validate(); err != nil {
		return Program{}, err
	}
	var deflt libseccomp.ScmpAction
	switch p.Violation {
	case ViolationErrno:
		deflt = libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	default:
		deflt = libseccomp.ActNotify
	}
	f, err := libseccomp.NewFilter(deflt)
	if err != nil {
		return Program{}, fmt.Errorf("create a seccomp filter: %w", err)
	}
	defer f.Release()
	// The prologue already killed foreign ABIs; this is the backstop.
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return Program{}, fmt.Errorf("set the bad-architecture action: %w", err)
	}
	// A binary tree of call numbers rather than a linear scan.
	if err := f.SetOptimize(2); err != nil {
		return Program{}, fmt.Errorf("set the filter optimization: %w", err)
	}
	for _, r := range p.Rules {
		nr, _ := SyscallNumber(r.Syscall) // validated above
		if len(r.Args) == 0 {
			err = f.AddRule(libseccomp.ScmpSyscall(nr), libseccomp.ActAllow)
		} else {
			conds := make([]libseccomp.ScmpCondition, 0, len(r.Args))
			for _, a := range r.Args {
				var c libseccomp.ScmpCondition
				if a.Op == OpMaskedEq {
					c, err = libseccomp.MakeCondition(a.Index, libseccompOps[a.Op], a.Mask, a.Value)
				} else {
					c, err = libseccomp.MakeCondition(a.Index, libseccompOps[a.Op], a.Value)
				}
				if err != nil {
					return Program{}, fmt.Errorf("syscall %s: %w", r.Syscall, err)
				}
				conds = append(conds, c)
			}
			err = f.AddRuleConditional(libseccomp.ScmpSyscall(nr), libseccomp.ActAllow, conds)
		}
		if err != nil {
			return Program{}, fmt.Errorf("add the rule for %s: %w", r.Syscall, err)
		}
	}
	for _, n := range p.NoSys {
		nr, _ := SyscallNumber(n)
		if err := f.AddRule(libseccomp.ScmpSyscall(nr), libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))); err != nil {
			return Program{}, fmt.Errorf("add the ENOSYS rule for %s: %w", n, err)
		}
	}
	body, err := exportBPF(f)
	if err != nil {
		return Program{}, err
	}
	var out []byte
	for _, i := range prologue(p.Violation, MaxKnown()) {
		out = i.append(out)
	}
	out = append(out, body...)
	if len(out)/8 > unix.BPF_MAXINSNS {
		return Program{}, fmt.Errorf("the filter has %d instructions, more than the kernel's %d", len(out)/8, unix.BPF_MAXINSNS)
	}
	return Program{
		BPF: out, Notify: p.Violation != ViolationErrno,
		Name: p.Name, Violation: p.Violation,
		Policy: func() (*Policy, error) { return p, nil },
	}, nil
}

// exportBPF writes the filter's program into a memfd and reads it back
// (libseccomp 2.5 has no in-memory export).
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("rljail-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create a memfd for the filter: %w", err)
	}
	file := os.NewFile(uintptr(fd), "rljail-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("export the filter: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read the filter back: %w", err)
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("read the filter back: %w", err)
	}
	if len(b) == 0 || len(b)%8 != 0 {
		return nil, errors.New("libseccomp exported an empty or truncated filter")
	}
	return b, nil
}
