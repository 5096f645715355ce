package seccomp

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// In the strict and learn modes, calls outside the policy are not answered
// by the filter but by the supervisor, through the filter's
// user-notification listener (SECCOMP_RET_USER_NOTIF): it learns the call's
// name and arguments, records them, and answers EPERM. The call never runs.

// seccompData mirrors struct seccomp_data.
type seccompData struct {
	Nr                 int32
	Arch               uint32
	InstructionPointer uint64
	Args               [6]uint64
}

// seccompNotif mirrors struct seccomp_notif.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

// seccompNotifResp mirrors struct seccomp_notif_resp.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// Report is what the supervisor saw of the policy during a run. It is part
// of the result report.
type Report struct {
	Profile string   `json:"profile"`
	Mode    string   `json:"mode"`              // errno, kill or learn
	Added   []string `json:"added,omitempty"`   // --seccomp-add
	Removed []string `json:"removed,omitempty"` // --seccomp-remove
	// Violation is, in kill mode, the call that ended the jail.
	Violation string `json:"violation,omitempty"`
	// Denied lists, in learn and kill modes, every call the policy denied.
	Denied []Denied `json:"denied,omitempty"`
}

// Denied is one denied call (with the values of the arguments its rules
// look at, for argument-filtered calls) and how often it was made.
type Denied struct {
	Syscall string            `json:"syscall"`
	Args    map[string]uint64 `json:"args,omitempty"` // "arg0": value
	Count   int               `json:"count"`
	// Filtered says that the profile allows the call only with some
	// arguments (or that rljail's profiles do): learn mode never suggests
	// allowing it whatever its arguments.
	Filtered bool `json:"filtered,omitempty"`
}

// MaxDenied bounds the distinct entries (a call with the values of the
// arguments its rules look at) that a report lists; beyond it, each call
// gets one more entry without arguments that counts every other value.
const MaxDenied = 256

// Supervisor answers a filter's notifications for one run.
type Supervisor struct {
	prog *Program
	// onViolation runs once, at the first denied call, in kill mode.
	onViolation func()

	mu     sync.Mutex
	policy *Policy // loaded at the first denied call
	report Report
	index  map[string]int
}

// NewSupervisor prepares to answer for prog; onViolation ends the jail in
// kill mode.
func NewSupervisor(prog *Program, onViolation func()) *Supervisor {
	return &Supervisor{
		prog:        prog,
		onViolation: onViolation,
		report:      prog.EmptyReport(),
		index:       map[string]int{},
	}
}

// EmptyReport is the report of a run in which nothing was denied (or, in
// errno mode, nothing was watched).
func (p *Program) EmptyReport() Report {
	return Report{Profile: p.Name, Mode: string(p.Violation)}
}

// Serve answers notifications on listener until no process uses the filter
// any more or done is closed. It closes listener.
func (s *Supervisor) Serve(listener *os.File, done <-chan struct{}) {
	defer listener.Close()
	fd := int(listener.Fd())
	for {
		select {
		case <-done:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && fds[0].Revents&unix.POLLIN == 0 {
			return
		}
		var req seccompNotif
		if err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // the caller was killed before we read it
			}
			return
		}
		s.record(&req)
		if s.prog.Violation == ViolationKill {
			// No answer: the caller stays blocked in its call until the
			// jail's SIGKILL arrives, so it never sees a failure it could
			// act on.
			continue
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		// ENOENT: the caller died meanwhile; nothing to answer.
		_ = ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// record counts the call, with the arguments that the policy's rules for
// it examine (or the ioctl command, which rljail itself filters).
func (s *Supervisor) record(req *seccompNotif) {
	name := SyscallName(int(req.Data.Nr))
	args := map[string]uint64{}
	s.mu.Lock()
	if s.policy == nil && s.prog.Policy != nil {
		s.policy, _ = s.prog.Policy()
	}
	s.mu.Unlock()
	indexes := s.argIndexes(name)
	for _, idx := range indexes {
		args[fmt.Sprintf("arg%d", idx)] = req.Data.Args[idx]
	}
	key := name
	var keys []string
	for k, v := range args {
		keys = append(keys, fmt.Sprintf("%s=%#x", k, v))
	}
	sort.Strings(keys)
	key += " " + strings.Join(keys, " ")

	s.mu.Lock()
	first := s.report.Violation == ""
	if first {
		s.report.Violation = name
	}
	if _, ok := s.index[key]; !ok && len(s.report.Denied) >= MaxDenied {
		// A payload that varies an argument without end must not grow the
		// supervisor (nor the report, nor learn's output) without end:
		// further values count in one entry per call, without arguments.
		key, args = name, nil
	}
	if i, ok := s.index[key]; ok {
		s.report.Denied[i].Count++
	} else {
		d := Denied{Syscall: name, Count: 1, Filtered: len(indexes) > 0}
		if len(args) > 0 {
			d.Args = args
		}
		s.index[key] = len(s.report.Denied)
		s.report.Denied = append(s.report.Denied, d)
	}
	s.mu.Unlock()
	if first && s.prog.Violation == ViolationKill && s.onViolation != nil {
		s.onViolation()
	}
}

// argIndexes are the arguments the policy's rules for name look at, and
// those that rljail's profiles check for it (a call whose rules a
// --seccomp-remove dropped, or a policy that could not be loaded, still
// shows the values that matter).
func (s *Supervisor) argIndexes(name string) []uint {
	seen := map[uint]bool{}
	var out []uint
	add := func(idx uint) {
		if !seen[idx] {
			seen[idx] = true
			out = append(out, idx)
		}
	}
	if name == "ioctl" {
		add(1) // TIOCSTI and TIOCLINUX: rljail's own check
	}
	for _, idx := range checkedCalls[name].args {
		add(idx)
	}
	if s.policy != nil {
		for _, r := range s.policy.Rules {
			if r.Syscall != name {
				continue
			}
			for _, a := range r.Args {
				add(a.Index)
			}
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i] < out[k] })
	return out
}

// Report returns what was seen; in errno mode it only names the profile.
func (s *Supervisor) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Denied = append([]Denied(nil), s.report.Denied...)
	if s.prog.Violation != ViolationKill {
		r.Violation = ""
	}
	return r
}

// Snippet is a profile fragment that would allow the denied calls (learn
// mode's advice): calls that no rule filters by argument go into allow;
// calls that the profile filters by argument get rules on the values seen,
// unless rljail's profiles check that call (checkedCalls): those values,
// like the always-denied calls, get a comment that they stay denied. A
// filtered call seen without its arguments (past MaxDenied entries) is
// never turned into an unconditional allow. A hostile payload chooses the
// calls learn mode sees, so nothing it does may make the snippet weaken an
// invariant of the profile.
func (r Report) Snippet() string {
	var plain []string
	seen := map[string]bool{}
	var rules strings.Builder
	always := map[string]bool{}
	for _, n := range alwaysDenied {
		always[n] = true
	}
	for _, d := range r.Denied {
		args := formatArgs(d.Args)
		checked, isChecked := checkedCalls[d.Syscall]
		switch {
		case always[d.Syscall]:
			fmt.Fprintf(&rules, "\n# %s is denied in every profile\n", d.Syscall)
		case d.Syscall == "ioctl" && (uint32(d.Args["arg1"]) == tiocsti || uint32(d.Args["arg1"]) == tioclinux):
			fmt.Fprintf(&rules, "\n# ioctl%s stays denied: TIOCSTI and TIOCLINUX are denied in every profile\n", args)
		case isChecked:
			fmt.Fprintf(&rules, "\n# %s%s stays denied: rljail's profiles allow %s only with checked arguments (%s)\n",
				d.Syscall, args, d.Syscall, checked.why)
		case d.Filtered && len(d.Args) == 0:
			fmt.Fprintf(&rules, "\n# %s (more argument values than learn mode lists) stays denied: the profile allows it only with some arguments\n", d.Syscall)
		case len(d.Args) == 0:
			if !seen[d.Syscall] {
				seen[d.Syscall] = true
				plain = append(plain, fmt.Sprintf("%q", d.Syscall))
			}
		default:
			var conds []string
			for _, k := range sortedKeys(d.Args) {
				conds = append(conds, fmt.Sprintf("{ index = %s, op = \"eq\", value = %#x }", strings.TrimPrefix(k, "arg"), d.Args[k]))
			}
			fmt.Fprintf(&rules, "\n[[seccomp.rule]]\nsyscall = %q\nargs = [%s]\n", d.Syscall, strings.Join(conds, ", "))
		}
	}
	var b strings.Builder
	b.WriteString("base = \"" + r.Profile + "\"\n\n[seccomp]\n")
	if len(plain) > 0 {
		sort.Strings(plain)
		fmt.Fprintf(&b, "allow = [%s]\n", strings.Join(plain, ", "))
	}
	b.WriteString(rules.String())
	return b.String()
}

// formatArgs prints argument values as " arg0=0x1 arg2=0x5", in index
// order.
func formatArgs(args map[string]uint64) string {
	var b strings.Builder
	for _, k := range sortedKeys(args) {
		fmt.Fprintf(&b, " %s=%#x", k, args[k])
	}
	return b.String()
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
