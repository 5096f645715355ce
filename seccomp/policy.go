// Package seccomp holds rljail's system call policy model and compiles it
// to the classic BPF program the payload installs last before execve.
//
// A policy is an allowlist: the calls it names are allowed (some only with
// the argument values it gives); every other call the policy knows fails
// with EPERM (or, in the strict and learn modes, is reported to the
// supervisor); calls newer than the policy knows fail with ENOSYS, so that
// libc falls back to an older call as it does on an older kernel; sync
// and syncfs succeed without running. Only the native x86_64 ABI is
// allowed: i386 and x32 calls kill the process.
package seccomp

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Op is an argument comparison.
type Op string

// The comparisons a rule may use. MaskedEq compares (arg & Mask) == Value.
const (
	OpEq       Op = "eq"
	OpNe       Op = "ne"
	OpLt       Op = "lt"
	OpLe       Op = "le"
	OpGt       Op = "gt"
	OpGe       Op = "ge"
	OpMaskedEq Op = "masked_eq"
)

// Arg is one condition on a system call argument.
type Arg struct {
	Index uint   // 0..5
	Op    Op     // comparison
	Value uint64 // compared value
	Mask  uint64 // for OpMaskedEq
}

// Rule allows one system call when all its Args hold (always, without
// Args). Several rules for one call are alternatives.
type Rule struct {
	Syscall string
	Args    []Arg
	// Comment says why the rule exists; `rljail profiles show` prints it.
	Comment string
}

// Violation is what a call outside the policy meets.
type Violation string

const (
	// ViolationErrno fails the call with EPERM; the payload goes on.
	ViolationErrno Violation = "errno"
	// ViolationKill ends the jail and reports the call by name (status
	// seccomp_violation): for pure computation, where a denied call is a
	// sign of an attack rather than a feature probe.
	ViolationKill Violation = "kill"
	// ViolationLearn fails the call with EPERM and reports it to the
	// supervisor, which lists what a profile would have to allow.
	ViolationLearn Violation = "learn"
)

// Policy is a complete system call policy.
type Policy struct {
	Name      string
	Violation Violation
	// Rules are the allowed calls.
	Rules []Rule
	// NoSys are calls that fail with ENOSYS although the policy knows them:
	// clone3, whose flags a filter cannot inspect (they are in memory), so
	// that libc falls back to clone, whose flags it can.
	NoSys []string
}

// alwaysDenied are the calls no profile may allow: they reach the kernel's
// most sensitive and least exercised code, or undo the jail.
var alwaysDenied = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
	"chroot", "unshare", "setns", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount",
	"open_tree", "mount_setattr", "keyctl", "add_key", "request_key", "bpf",
	"perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
	"open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie",
	"pidfd_getfd", "kcmp", "iopl", "ioperm", "modify_ldt", "clock_settime", "clock_adjtime",
	"settimeofday", "adjtimex", "sethostname", "setdomainname", "vhangup", "uselib",
	"ustat", "sysfs", "_sysctl", "nfsservctl", "seccomp",
}

// answeredZero are the calls every profile answers with success without
// running them (SECCOMP_RET_ERRNO with errno 0: the kernel skips the call
// and returns 0). sync writes back every filesystem of the host, and
// syncfs the whole filesystem that holds any descriptor the payload has (a
// granted file, the rootfs): a payload that repeats them stalls the host's
// disks and every host process that waits on them. Nothing the jail writes
// needs them for its own data: its writes go to a tmpfs or a writable
// volume, where fsync and fdatasync of the file itself still run.
// CPython's os.sync() expects success and gets it.
var answeredZero = []string{"sync", "syncfs"}

// AnsweredZero returns the calls every profile answers with success
// without running them, sorted.
func AnsweredZero() []string {
	out := append([]string(nil), answeredZero...)
	sort.Strings(out)
	return out
}

// AlwaysDenied returns the calls no profile may allow, sorted.
func AlwaysDenied() []string {
	out := append([]string(nil), alwaysDenied...)
	sort.Strings(out)
	return out
}

// RuleError is a problem with the rules of one syscall.
type RuleError struct {
	Syscall string
	Err     error
}

func (e *RuleError) Error() string { return "syscall " + e.Syscall + ": " + e.Err.Error() }
func (e *RuleError) Unwrap() error { return e.Err }

// Validate checks names, argument indexes and operators, and that no rule
// allows an always-denied call. Errors name the rule.
func (p *Policy) Validate() error {
	switch p.Violation {
	case ViolationErrno, ViolationKill, ViolationLearn:
	default:
		return fmt.Errorf("unknown violation action %q (want errno, kill or learn)", p.Violation)
	}
	// Compared by number, so that no spelling of a name can slip through.
	denied := map[int]bool{}
	for _, n := range alwaysDenied {
		if nr, err := SyscallNumber(n); err == nil {
			denied[nr] = true
		}
	}
	zero := map[int]bool{}
	for _, n := range answeredZero {
		if nr, err := SyscallNumber(n); err == nil {
			zero[nr] = true
		}
	}
	for _, r := range p.Rules {
		nr, err := SyscallNumber(r.Syscall)
		if err != nil {
			return &RuleError{r.Syscall, err}
		}
		if denied[nr] {
			return &RuleError{r.Syscall, errors.New("may not be allowed: rljail denies it in every profile")}
		}
		if zero[nr] {
			return &RuleError{r.Syscall, errors.New("may not be allowed: rljail answers it with success, without running it, in every profile")}
		}
		seen := map[uint]bool{}
		for _, a := range r.Args {
			if a.Index > 5 {
				return &RuleError{r.Syscall, fmt.Errorf("argument index %d is out of range 0..5", a.Index)}
			}
			if seen[a.Index] {
				return &RuleError{r.Syscall, fmt.Errorf("two conditions on argument %d in one rule (write two rules: rules are alternatives)", a.Index)}
			}
			seen[a.Index] = true
			switch a.Op {
			case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe, OpMaskedEq:
			default:
				return &RuleError{r.Syscall, fmt.Errorf("unknown comparison %q (want eq, ne, lt, le, gt, ge or masked_eq)", a.Op)}
			}
			if a.Op == OpMaskedEq && a.Value&^a.Mask != 0 {
				return &RuleError{r.Syscall, fmt.Errorf("masked_eq value %#x has bits outside mask %#x and can never match", a.Value, a.Mask)}
			}
		}
	}
	for _, n := range p.NoSys {
		nr, err := SyscallNumber(n)
		if err != nil {
			return &RuleError{n, err}
		}
		if zero[nr] {
			return &RuleError{n, errors.New("may not fail with ENOSYS: rljail answers it with success, without running it, in every profile")}
		}
	}
	return nil
}

// Allow adds unconditional rules for names (--seccomp-add): any argument
// rules the policy had for them are replaced.
func (p *Policy) Allow(names ...string) error {
	for _, n := range names {
		if _, err := SyscallNumber(n); err != nil {
			return err
		}
	}
	p.Remove(names...)
	for _, n := range names {
		p.Rules = append(p.Rules, Rule{Syscall: n, Comment: "added"})
	}
	return nil
}

// Remove drops every rule for names (--seccomp-remove): the calls become
// denied.
func (p *Policy) Remove(names ...string) {
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	kept := p.Rules[:0:0]
	for _, r := range p.Rules {
		if !drop[r.Syscall] {
			kept = append(kept, r)
		}
	}
	p.Rules = kept
	noSys := p.NoSys[:0:0]
	for _, n := range p.NoSys {
		if !drop[n] {
			noSys = append(noSys, n)
		}
	}
	p.NoSys = noSys
}

// Allowed reports whether the policy has any rule for name.
func (p *Policy) Allowed(name string) bool {
	for _, r := range p.Rules {
		if r.Syscall == name {
			return true
		}
	}
	return false
}

// String prints the effective policy: every call and argument rule.
func (p *Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s: violations: %s\n", p.Name, p.Violation)
	byName := map[string][]Rule{}
	var names []string
	for _, r := range p.Rules {
		if _, ok := byName[r.Syscall]; !ok {
			names = append(names, r.Syscall)
		}
		byName[r.Syscall] = append(byName[r.Syscall], r)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "allowed (%d):\n", len(names))
	for _, n := range names {
		for _, r := range byName[n] {
			fmt.Fprintf(&b, "  %s", n)
			if len(r.Args) > 0 {
				var conds []string
				for _, a := range r.Args {
					conds = append(conds, a.String())
				}
				fmt.Fprintf(&b, " if %s", strings.Join(conds, " and "))
			}
			if r.Comment != "" {
				fmt.Fprintf(&b, "  # %s", r.Comment)
			}
			b.WriteByte('\n')
		}
	}
	if len(p.NoSys) > 0 {
		fmt.Fprintf(&b, "ENOSYS: %s\n", strings.Join(p.NoSys, " "))
	}
	fmt.Fprintf(&b, "always denied: %s\n", strings.Join(AlwaysDenied(), " "))
	fmt.Fprintf(&b, "every other known call: %s; calls newer than the policy (above #%d): ENOSYS; i386 and x32 calls: kill\n",
		map[Violation]string{ViolationErrno: "EPERM", ViolationKill: "jail killed, reported", ViolationLearn: "EPERM, reported"}[p.Violation], MaxKnown())
	fmt.Fprintf(&b, "answered with success without running: %s (they write back whole host filesystems)\n", strings.Join(AnsweredZero(), " "))
	b.WriteString("always denied as well: ioctl TIOCSTI and TIOCLINUX (terminal input injection), whatever the rules say\n")
	return b.String()
}

func (a Arg) String() string {
	if a.Op == OpMaskedEq {
		return fmt.Sprintf("arg%d & %#x == %#x", a.Index, a.Mask, a.Value)
	}
	sym := map[Op]string{OpEq: "==", OpNe: "!=", OpLt: "<", OpLe: "<=", OpGt: ">", OpGe: ">="}[a.Op]
	return fmt.Sprintf("arg%d %s %#x", a.Index, sym, a.Value)
}
