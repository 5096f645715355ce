package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"

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
	// retSkipSuccess is SECCOMP_RET_ERRNO with errno 0: the kernel skips
	// the call and returns 0 (seccomp(2): the data is the return value,
	// negated), the answer to the calls of answeredZero.
	retSkipSuccess = unix.SECCOMP_RET_ERRNO
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
	bpfJA     = unix.BPF_JMP | unix.BPF_JA
	bpfAndK   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
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

// prologue runs before the search on the call number (it was written to
// cover what libseccomp's programs could not express):
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
		// 13: the body starts here and loads what it needs.
	}
}

// MaxKnown is the highest x86_64 call number the policy's table
// (syscalls_table.go, libseccomp's) knows; calls above it are "newer than
// the policy".
func MaxKnown() uint32 { return uint32(len(syscallNames) - 1) }

// syscallNumbers is syscallNames inverted, built on first use.
var syscallNumbers = sync.OnceValue(func() map[string]int {
	m := make(map[string]int, len(syscallNames))
	for nr, name := range syscallNames {
		if name != "" {
			m[name] = nr
		}
	}
	return m
})

// SyscallNumber resolves an x86_64 call name, with an error that says the
// name is unknown. The name must be exactly the table's name for its
// number ("ptrace\x00x" is unknown).
func SyscallNumber(name string) (int, error) {
	if nr, ok := syscallNumbers()[name]; ok {
		return nr, nil
	}
	return 0, fmt.Errorf("unknown syscall %q (not in the x86_64 table)", name)
}

// SyscallName names an x86_64 call number, or "syscall_N".
func SyscallName(nr int) string {
	if nr >= 0 && nr < len(syscallNames) && syscallNames[nr] != "" {
		return syscallNames[nr]
	}
	return fmt.Sprintf("syscall_%d", nr)
}

// Compile turns a validated policy into a BPF program: the prologue, then
// a binary search on the call number over the ranges of calls that share
// an outcome, then each conditionally allowed call's argument checks.
//
// rljail compiles its own programs (it used libseccomp before) so that
// the binary needs no cgo, and so no C library start-up, on every run.
// The tests (equiv_test.go) run each program on every call number and on
// argument values around every compared value: it must decide as the
// policy says, on the embedded profiles and on random policies, and
// libseccomp's program for each embedded profile must decide the same.
func Compile(p *Policy) (Program, error) {
	if err := p.Validate(); err != nil {
		return Program{}, err
	}
	body, err := compileBody(p)
	if err != nil {
		return Program{}, err
	}
	var out []byte
	for _, i := range prologue(p.Violation, MaxKnown()) {
		out = i.append(out)
	}
	for _, i := range body {
		out = i.append(out)
	}
	if len(out)/8 > unix.BPF_MAXINSNS {
		return Program{}, fmt.Errorf("the filter has %d instructions, more than the kernel's %d", len(out)/8, unix.BPF_MAXINSNS)
	}
	return Program{
		BPF: out, Notify: p.Violation != ViolationErrno,
		Name: p.Name, Violation: p.Violation,
		Policy: func() (*Policy, error) { return p, nil },
	}, nil
}

// outcome is what the program does with one call number: a return value
// (allow, ENOSYS, the violation action) or, for a call allowed only with
// some arguments, its rules.
type outcome struct {
	ret   uint32
	rules [][]Arg // alternatives, each a conjunction; nil for ret
}

// hotCalls weigh the call numbers that CPython makes most often (strace
// -f -c of python3 -c pass and of five programs of the compatibility
// corpus: newfstatat, rt_sigaction, read, openat, close, lseek and mmap
// led; read, write and futex lead in programs that move data or run
// threads): the search on the call number reaches them in fewer steps.
// The weights shape the tree only; what each call gets is the policy's.
var hotCalls = map[int]int{
	unix.SYS_NEWFSTATAT: 64, unix.SYS_READ: 32, unix.SYS_WRITE: 32, unix.SYS_RT_SIGACTION: 32,
	unix.SYS_FUTEX: 16, unix.SYS_OPENAT: 16, unix.SYS_CLOSE: 16, unix.SYS_LSEEK: 16, unix.SYS_MMAP: 16,
	unix.SYS_IOCTL: 8, unix.SYS_GETDENTS64: 8, unix.SYS_FSTAT: 8,
	unix.SYS_BRK: 4, unix.SYS_FCNTL: 4, unix.SYS_RT_SIGPROCMASK: 4, unix.SYS_MPROTECT: 4,
	unix.SYS_MUNMAP: 4, unix.SYS_EPOLL_WAIT: 4,
	unix.SYS_GETTID: 2, unix.SYS_EPOLL_CTL: 2, unix.SYS_PREAD64: 2, unix.SYS_READLINK: 2,
	unix.SYS_GETRANDOM: 2, unix.SYS_GETPID: 2, unix.SYS_RECVFROM: 2, unix.SYS_SENDTO: 2,
	unix.SYS_MADVISE: 2, unix.SYS_POLL: 2, unix.SYS_WAIT4: 2, unix.SYS_CLOCK_NANOSLEEP: 2,
}

// compileBody returns the program that follows the prologue.
func compileBody(p *Policy) ([]insn, error) {
	deny := violationAction(p.Violation)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	byNr := map[int]*outcome{}
	for _, r := range p.Rules {
		nr, _ := SyscallNumber(r.Syscall) // validated
		o := byNr[nr]
		if o == nil {
			o = &outcome{}
			byNr[nr] = o
		}
		switch {
		case o.ret == allow:
			// Already allowed whatever the arguments.
		case len(r.Args) == 0:
			o.ret, o.rules = allow, nil
		default:
			o.rules = append(o.rules, r.Args)
		}
	}
	for _, n := range p.NoSys {
		nr, _ := SyscallNumber(n)
		if byNr[nr] != nil && byNr[nr].ret != enosys {
			return nil, &RuleError{n, errors.New("is both allowed and listed to fail with ENOSYS")}
		}
		byNr[nr] = &outcome{ret: enosys}
	}
	for _, n := range answeredZero {
		nr, _ := SyscallNumber(n) // Validate refused rules for them
		byNr[nr] = &outcome{ret: retSkipSuccess}
	}

	var e emitter
	// Program order: load the number, the search, then the argument checks
	// and the returns, which the backward emitter places first.
	retAt := map[uint32]int{}
	ret := func(v uint32) int {
		if l, ok := retAt[v]; ok {
			return l
		}
		retAt[v] = e.ret(v)
		return retAt[v]
	}
	denyL := ret(deny)
	allowL := ret(allow)
	nrs := make([]int, 0, len(byNr))
	for nr := range byNr {
		nrs = append(nrs, nr)
	}
	sort.Ints(nrs)
	target := map[int]int{}
	for i := len(nrs) - 1; i >= 0; i-- {
		o := byNr[nrs[i]]
		if o.rules == nil {
			target[nrs[i]] = ret(o.ret)
			continue
		}
		next := denyL
		for j := len(o.rules) - 1; j >= 0; j-- {
			next = e.conjunction(o.rules[j], allowL, next)
		}
		target[nrs[i]] = next
	}
	// Ranges [start, next start) of numbers that share a target; numbers
	// in no rule get the violation action. MaxKnown bounds them: the
	// prologue answered every number above it.
	type span struct {
		start uint32
		to    int
	}
	var spans []span
	add := func(start uint32, to int) {
		if len(spans) > 0 && spans[len(spans)-1].to == to {
			return
		}
		spans = append(spans, span{start, to})
	}
	for nr := 0; nr <= int(MaxKnown()); nr++ {
		if l, ok := target[nr]; ok {
			add(uint32(nr), l)
		} else {
			add(uint32(nr), denyL)
		}
	}
	// A search tree: each node sends numbers >= its span's start right.
	// The split balances the spans' weights, not their count, so that the
	// calls CPython makes most (hotCalls) sit near the root: every call
	// of the payload walks the tree, and the argument lists of ioctl,
	// fcntl, socket and setsockopt split spans that once were one.
	weight := make([]int, len(spans)+1) // weight[i]: spans before i
	for i, sp := range spans {
		end := MaxKnown() + 1
		if i+1 < len(spans) {
			end = spans[i+1].start
		}
		w := 1
		for nr := sp.start; nr < end; nr++ {
			w += hotCalls[int(nr)]
		}
		weight[i+1] = weight[i] + w
	}
	var search func(lo, hi int) int
	search = func(lo, hi int) int { // spans[lo:hi]
		if hi-lo == 1 {
			return spans[lo].to
		}
		mid, best := lo+1, -1
		for m := lo + 1; m < hi; m++ {
			d := (weight[m] - weight[lo]) - (weight[hi] - weight[m])
			if d < 0 {
				d = -d
			}
			if best < 0 || d < best {
				mid, best = m, d
			}
		}
		right := search(mid, hi)
		left := search(lo, mid)
		return e.jump(bpfJgeK, spans[mid].start, right, left)
	}
	root := search(0, len(spans))
	if root != len(e.rev)-1 {
		// One span: the load below must fall through to its target.
		e.add(insn{code: bpfJA, k: uint32(len(e.rev) - root - 1)})
	}
	e.load(offNr)
	return e.program(), nil
}

// emitter builds a program backward, from its last instruction to its
// first, so that every jump's target (always later in a BPF program) is
// already placed and its distance known. A label is an instruction's
// index counted from the program's end.
type emitter struct {
	rev []insn
}

func (e *emitter) add(i insn) int {
	e.rev = append(e.rev, i)
	return len(e.rev) - 1
}

func (e *emitter) ret(v uint32) int { return e.add(insn{code: bpfRetK, k: v}) }

// load loads the 32-bit word of struct seccomp_data at off.
func (e *emitter) load(off uint32) int { return e.add(insn{code: bpfLdWAbs, k: off}) }

// jump places a conditional jump to labels t (true) and f (false). A
// conditional jump reaches at most 255 instructions ahead; a target
// farther away is reached through an unconditional jump placed just after
// it.
func (e *emitter) jump(code uint16, k uint32, t, f int) int {
	dist := func(to int) int { return len(e.rev) - to - 1 }
	same := t == f
	for {
		// Each unconditional jump placed moves the other target one
		// further away: check both again until both fit.
		switch {
		case dist(f) > 255:
			f = e.add(insn{code: bpfJA, k: uint32(dist(f))})
			if same {
				t = f
			}
		case dist(t) > 255:
			t = e.add(insn{code: bpfJA, k: uint32(dist(t))})
		default:
			return e.add(insn{code: code, jt: uint8(dist(t)), jf: uint8(dist(f)), k: k})
		}
	}
}

// conjunction places the checks of one rule: pass when every condition
// holds, else fail.
func (e *emitter) conjunction(args []Arg, pass, fail int) int {
	for i := len(args) - 1; i >= 0; i-- {
		pass = e.condition(args[i], pass, fail)
	}
	return pass
}

// condition places one 64-bit comparison of an argument, unsigned, as
// libseccomp compares: first the high 32-bit half, then the low one (the
// comments show the program order).
func (e *emitter) condition(a Arg, pass, fail int) int {
	lo := uint32(16 + 8*a.Index) // little-endian: the low half first
	hi := lo + 4
	vlo, vhi := uint32(a.Value), uint32(a.Value>>32)
	switch a.Op {
	case OpEq:
		// hi == vhi && lo == vlo
		e.jump(bpfJeqK, vlo, e.past(pass, lo), e.past(fail, lo))
		l := e.load(lo)
		e.jump(bpfJeqK, vhi, l, e.past(fail, hi))
	case OpNe:
		// hi != vhi || lo != vlo
		e.jump(bpfJeqK, vlo, e.past(fail, lo), e.past(pass, lo))
		l := e.load(lo)
		e.jump(bpfJeqK, vhi, l, e.past(pass, hi))
	case OpMaskedEq:
		// hi & mhi == vhi && lo & mlo == vlo. A mask without high bits
		// is a comparison of a 32-bit argument (an int or unsigned int
		// that the kernel truncates, such as ioctl's command): the high
		// half, which a payload may fill as it likes, is not looked at
		// (Validate made vhi 0, so it always holds), and a full low mask
		// needs no AND.
		mlo, mhi := uint32(a.Mask), uint32(a.Mask>>32)
		if mlo == 0xffffffff {
			e.jump(bpfJeqK, vlo, e.past(pass, lo), e.past(fail, lo))
		} else {
			e.jump(bpfJeqK, vlo, pass, fail)
			e.add(insn{code: bpfAndK, k: mlo})
		}
		l := e.load(lo)
		if mhi == 0 {
			return l
		}
		if mhi == 0xffffffff {
			e.jump(bpfJeqK, vhi, l, e.past(fail, hi))
		} else {
			e.jump(bpfJeqK, vhi, l, fail)
			e.add(insn{code: bpfAndK, k: mhi})
		}
	default: // OpGt, OpGe, OpLt, OpLe
		// x > v is hi > vhi || hi == vhi && lo > vlo (lo >= vlo for
		// x >= v); x < v is !(x >= v) and x <= v is !(x > v), the same
		// test with its outcomes swapped.
		yes, no := pass, fail
		if a.Op == OpLt || a.Op == OpLe {
			yes, no = fail, pass
		}
		cmp := uint16(bpfJgtK)
		if a.Op == OpGe || a.Op == OpLt {
			cmp = bpfJgeK
		}
		e.jump(cmp, vlo, e.past(yes, lo), e.past(no, lo))
		l := e.load(lo)
		l = e.jump(bpfJeqK, vhi, l, e.past(no, hi))
		e.jump(bpfJgtK, vhi, e.past(yes, hi), l)
	}
	return e.load(hi)
}

// past is the label to jump to, instead of l, from a test whose
// accumulator still holds the word at off unchanged: when l loads that
// same word (the next alternative of a call, which checks the same
// argument: ioctl's list of commands), the jump lands on the instruction
// after the load, so that a list of alternatives costs one load and one
// comparison for each.
func (e *emitter) past(l int, off uint32) int {
	if l > 0 && e.rev[l] == (insn{code: bpfLdWAbs, k: off}) {
		return l - 1
	}
	return l
}

// program returns the instructions in program order.
func (e *emitter) program() []insn {
	out := make([]insn, len(e.rev))
	for i, in := range e.rev {
		out[len(e.rev)-1-i] = in
	}
	return out
}
