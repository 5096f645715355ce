package seccomp_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// The compiler is rljail's own (it used libseccomp). These tests compile
// each policy both ways and run both programs, in a BPF interpreter, on
// every call number and on argument values at and around every value the
// rules compare with. Our program must decide as the policy says
// (decide); for the embedded profiles libseccomp's program must too, so
// that the change of compiler changed nothing a jail sees.

// libseccompProgram compiles p with libseccomp behind the same prologue.
func libseccompProgram(t testing.TB, p *seccomp.Policy, prologue []byte) ([]byte, error) {
	ops := map[seccomp.Op]libseccomp.ScmpCompareOp{
		seccomp.OpEq: libseccomp.CompareEqual, seccomp.OpNe: libseccomp.CompareNotEqual,
		seccomp.OpLt: libseccomp.CompareLess, seccomp.OpLe: libseccomp.CompareLessOrEqual,
		seccomp.OpGt: libseccomp.CompareGreater, seccomp.OpGe: libseccomp.CompareGreaterEqual,
		seccomp.OpMaskedEq: libseccomp.CompareMaskedEqual,
	}
	deflt := libseccomp.ActNotify
	if p.Violation == seccomp.ViolationErrno {
		deflt = libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	}
	f, err := libseccomp.NewFilter(deflt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		t.Fatal(err)
	}
	if err := f.SetOptimize(2); err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Rules {
		nr, err := seccomp.SyscallNumber(r.Syscall)
		if err != nil {
			t.Fatal(err)
		}
		var conds []libseccomp.ScmpCondition
		for _, a := range r.Args {
			var c libseccomp.ScmpCondition
			if a.Op == seccomp.OpMaskedEq {
				c, err = libseccomp.MakeCondition(a.Index, ops[a.Op], a.Mask, a.Value)
			} else {
				c, err = libseccomp.MakeCondition(a.Index, ops[a.Op], a.Value)
			}
			if err != nil {
				return nil, err
			}
			conds = append(conds, c)
		}
		if len(conds) == 0 {
			err = f.AddRule(libseccomp.ScmpSyscall(nr), libseccomp.ActAllow)
		} else {
			err = f.AddRuleConditional(libseccomp.ScmpSyscall(nr), libseccomp.ActAllow, conds)
		}
		if err != nil {
			return nil, fmt.Errorf("rule %+v: %w", r, err)
		}
	}
	for _, n := range p.NoSys {
		nr, _ := seccomp.SyscallNumber(n)
		if err := f.AddRule(libseccomp.ScmpSyscall(nr), libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))); err != nil {
			return nil, fmt.Errorf("ENOSYS rule %s: %w", n, err)
		}
	}
	for _, n := range seccomp.AnsweredZero() {
		nr, _ := seccomp.SyscallNumber(n)
		if err := f.AddRule(libseccomp.ScmpSyscall(nr), libseccomp.ActErrno.SetReturnCode(0)); err != nil {
			return nil, fmt.Errorf("answered-zero rule %s: %w", n, err)
		}
	}
	mf, err := os.CreateTemp(t.TempDir(), "bpf")
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if err := f.ExportBPF(mf); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(mf)
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte(nil), prologue...), body...), nil
}

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

func (d *seccompData) word(off uint32) (uint32, error) {
	switch {
	case off == 0:
		return d.nr, nil
	case off == 4:
		return d.arch, nil
	case off == 8 || off == 12:
		return 0, nil // instruction pointer
	case off >= 16 && off < 64 && off%4 == 0:
		a := d.args[(off-16)/8]
		if (off-16)%8 == 4 {
			return uint32(a >> 32), nil
		}
		return uint32(a), nil
	}
	return 0, fmt.Errorf("load at offset %d", off)
}

// runBPF runs a classic BPF program of the instructions seccomp programs
// use, as the kernel would.
func runBPF(prog []byte, d *seccompData) (uint32, error) {
	var a, x uint32
	var mem [16]uint32
	n := len(prog) / 8
	for pc := 0; pc < n; pc++ {
		in := prog[pc*8:]
		code := binary.NativeEndian.Uint16(in[0:])
		jt, jf := int(in[2]), int(in[3])
		k := binary.NativeEndian.Uint32(in[4:])
		var err error
		switch code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a, err = d.word(k)
		case unix.BPF_LD | unix.BPF_MEM:
			a = mem[k%16]
		case unix.BPF_LDX | unix.BPF_MEM:
			x = mem[k%16]
		case unix.BPF_LD | unix.BPF_IMM:
			a = k
		case unix.BPF_ST:
			mem[k%16] = a
		case unix.BPF_STX:
			mem[k%16] = x
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= k
		case unix.BPF_ALU | unix.BPF_OR | unix.BPF_K:
			a |= k
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(k)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			pc += pick(a == k, jt, jf)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			pc += pick(a > k, jt, jf)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			pc += pick(a >= k, jt, jf)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			pc += pick(a&k != 0, jt, jf)
		case unix.BPF_RET | unix.BPF_K:
			return k, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, nil
		default:
			return 0, fmt.Errorf("instruction %d: opcode %#x", pc, code)
		}
		if err != nil {
			return 0, fmt.Errorf("instruction %d: %w", pc, err)
		}
	}
	return 0, fmt.Errorf("ran off the end of the program")
}

func pick(c bool, t, f int) int {
	if c {
		return t
	}
	return f
}

// probeValues are argument values at and around v, and at its halves'
// edges.
func probeValues(a seccomp.Arg) []uint64 {
	v := a.Value
	out := []uint64{v, v + 1, v - 1, v ^ 1<<32, v | 0xffffffff00000000, v & 0xffffffff,
		v + 1<<32, v - 1<<32, 0, ^uint64(0), 1 << 63}
	if a.Op == seccomp.OpMaskedEq {
		out = append(out, v|^a.Mask, v^(a.Mask&-a.Mask), v^(a.Mask&0xffffffff00000000))
	}
	return out
}

// compareOnAllCalls fails t wherever ours and libseccomp's programs
// decide differently.
//
// The policy's meaning (decide) is the reference; libSeccompDiffers counts
// the cases where libseccomp's program departs from it.
func compareOnAllCalls(t *testing.T, p *seccomp.Policy, rng *rand.Rand) (cases, libDiffers int) {
	t.Helper()
	prog, err := seccomp.Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	oracle, err := libseccompProgram(t, p, prog.BPF[:seccomp.PrologueLen*8])
	if err != nil {
		t.Fatalf("libseccomp: %v", err)
	}
	probes := map[int]map[uint][]uint64{} // call number -> argument -> values
	for _, r := range p.Rules {
		nr, _ := seccomp.SyscallNumber(r.Syscall)
		for _, a := range r.Args {
			if probes[nr] == nil {
				probes[nr] = map[uint][]uint64{}
			}
			probes[nr][a.Index] = append(probes[nr][a.Index], probeValues(a)...)
		}
	}
	failures := 0
	check := func(d *seccompData) {
		cases++
		want := decide(p, d)
		got, err1 := runBPF(prog.BPF, d)
		lib, err2 := runBPF(oracle, d)
		if err1 != nil || err2 != nil {
			t.Fatalf("%+v: our program: %v; libseccomp's: %v", d, err1, err2)
		}
		if lib != want {
			libDiffers++
		}
		if got != want && failures < 10 {
			failures++
			var rules []seccomp.Rule
			for _, r := range p.Rules {
				if r.Syscall == seccomp.SyscallName(int(d.nr)) {
					rules = append(rules, r)
				}
			}
			t.Errorf("call %s (%d) args %#x: our program returns %#x, want %#x (libseccomp's %#x); rules %+v",
				seccomp.SyscallName(int(d.nr)), d.nr, d.args, got, want, lib, rules)
		}
	}
	const archX86_64 = 0xc000003e
	for nr := uint32(0); nr <= seccomp.MaxKnown()+2; nr++ {
		check(&seccompData{nr: nr, arch: archX86_64})
		check(&seccompData{nr: nr, arch: archX86_64, args: [6]uint64{^uint64(0), 1 << 32, 7, 1 << 63, 0xffffffff, 2}})
		idx := probes[int(nr)]
		if idx == nil {
			continue
		}
		// Every combination when there are few, else a random sample
		// that still takes every value of every argument.
		var args []uint
		total := 1
		for i := range idx {
			args = append(args, i)
			total *= len(idx[i])
		}
		if total <= 20000 {
			var rec func(i int, d seccompData)
			rec = func(i int, d seccompData) {
				if i == len(args) {
					check(&d)
					return
				}
				for _, v := range idx[args[i]] {
					d.args[args[i]] = v
					rec(i+1, d)
				}
			}
			rec(0, seccompData{nr: nr, arch: archX86_64})
			continue
		}
		for n := 0; n < 20000; n++ {
			d := seccompData{nr: nr, arch: archX86_64}
			for _, i := range args {
				vs := idx[i]
				d.args[i] = vs[rng.IntN(len(vs))]
			}
			check(&d)
		}
	}
	// Other architectures and x32: the shared prologue, a sanity check.
	check(&seccompData{nr: 1, arch: 0x40000003})
	check(&seccompData{nr: 0x40000001, arch: archX86_64})
	check(&seccompData{nr: 0xffffffff, arch: archX86_64})
	return cases, libDiffers
}

// decide is what a policy means for one call: the reference both programs
// are checked against.
func decide(p *seccomp.Policy, d *seccompData) uint32 {
	const archX86_64 = 0xc000003e
	deny := uint32(unix.SECCOMP_RET_USER_NOTIF)
	if p.Violation == seccomp.ViolationErrno {
		deny = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	}
	switch {
	case d.arch != archX86_64, d.nr >= 0x40000000:
		return unix.SECCOMP_RET_KILL_PROCESS
	case d.nr > seccomp.MaxKnown():
		return unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	case d.nr == unix.SYS_IOCTL && (uint32(d.args[1]) == unix.TIOCSTI || uint32(d.args[1]) == unix.TIOCLINUX):
		return deny
	}
	name := seccomp.SyscallName(int(d.nr))
	if slices.Contains(seccomp.AnsweredZero(), name) {
		return unix.SECCOMP_RET_ERRNO // errno 0: success, the call skipped
	}
	if slices.Contains(p.NoSys, name) {
		return unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	}
	for _, r := range p.Rules {
		if r.Syscall == name && holds(r.Args, d) {
			return unix.SECCOMP_RET_ALLOW
		}
	}
	return deny
}

func holds(args []seccomp.Arg, d *seccompData) bool {
	for _, a := range args {
		v := d.args[a.Index]
		ok := map[seccomp.Op]bool{
			seccomp.OpEq: v == a.Value, seccomp.OpNe: v != a.Value,
			seccomp.OpLt: v < a.Value, seccomp.OpLe: v <= a.Value,
			seccomp.OpGt: v > a.Value, seccomp.OpGe: v >= a.Value,
			seccomp.OpMaskedEq: v&a.Mask == a.Value,
		}[a.Op]
		if !ok {
			return false
		}
	}
	return true
}

func TestCompileMatchesLibseccompOnProfiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range profiles.Names() {
		t.Run(name, func(t *testing.T) {
			p, err := profiles.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []seccomp.Violation{seccomp.ViolationErrno, seccomp.ViolationKill} {
				pol := p.Policy
				pol.Violation = v
				n, libDiffers := compareOnAllCalls(t, &pol, rng)
				t.Logf("%s, %s: %d cases", name, v, n)
				// The shipped profiles decide every call as they did when
				// libseccomp compiled them.
				if libDiffers != 0 {
					t.Errorf("%s, %s: libseccomp's program departs from the policy in %d of %d cases", name, v, libDiffers, n)
				}
			}
		})
	}
}

// TestCompileMatchesLibseccompOnRandomPolicies draws policies with many
// conditional rules, values in both halves and every operator.
func TestCompileMatchesLibseccompOnRandomPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	denied := map[string]bool{}
	for _, n := range append(seccomp.AlwaysDenied(), seccomp.AnsweredZero()...) {
		denied[n] = true
	}
	var names []string
	for nr := 0; nr <= int(seccomp.MaxKnown()); nr++ {
		if n := seccomp.SyscallName(nr); n != fmt.Sprintf("syscall_%d", nr) && !denied[n] {
			names = append(names, n)
		}
	}
	ops := []seccomp.Op{seccomp.OpEq, seccomp.OpNe, seccomp.OpLt, seccomp.OpLe, seccomp.OpGt, seccomp.OpGe, seccomp.OpMaskedEq}
	values := []uint64{0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 1 << 32, 1<<32 | 5, 0xfffffffe00000000, ^uint64(0), 1 << 63}
	value := func() uint64 {
		if rng.IntN(3) == 0 {
			return rng.Uint64() >> rng.UintN(64)
		}
		return values[rng.IntN(len(values))]
	}
	for round := 0; round < 40; round++ {
		p := &seccomp.Policy{Name: "random", Violation: seccomp.ViolationErrno}
		if round%2 == 1 {
			p.Violation = seccomp.ViolationLearn
		}
		used := map[string]bool{}
		for i := 0; i < 10+rng.IntN(300); i++ {
			n := names[rng.IntN(len(names))]
			if rng.IntN(12) == 0 && !used[n] {
				p.NoSys = append(p.NoSys, n)
				used[n] = true
				continue
			}
			if slices.Contains(p.NoSys, n) {
				continue
			}
			used[n] = true
			r := seccomp.Rule{Syscall: n}
			for _, idx := range rng.Perm(6)[:rng.IntN(4)] {
				a := seccomp.Arg{Index: uint(idx), Op: ops[rng.IntN(len(ops))], Value: value()}
				if a.Op == seccomp.OpMaskedEq {
					a.Mask = value() | 1
					a.Value &= a.Mask
				}
				r.Args = append(r.Args, a)
			}
			p.Rules = append(p.Rules, r)
		}
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			n, libDiffers := compareOnAllCalls(t, p, rng)
			if libDiffers != 0 {
				// libseccomp 2.5.4 merges some rules wrongly (it denies
				// calls the policy allows); the policy is the reference.
				t.Logf("libseccomp's program departs from the policy in %d of %d cases", libDiffers, n)
			}
		})
	}
}

// TestTableMatchesLibseccomp checks the committed table of call names
// (syscalls_table.go, make syscall-table) against libseccomp's.
func TestTableMatchesLibseccomp(t *testing.T) {
	for nr := 0; nr < 1024; nr++ {
		want, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
		if err != nil {
			want = fmt.Sprintf("syscall_%d", nr)
		}
		if got := seccomp.SyscallName(nr); got != want {
			t.Errorf("call %d: the table says %q, libseccomp %q", nr, got, want)
		}
		if err == nil {
			if got, err := seccomp.SyscallNumber(want); err != nil || got != nr {
				t.Errorf("SyscallNumber(%q) = %d, %v; want %d", want, got, err, nr)
			}
		}
	}
}
