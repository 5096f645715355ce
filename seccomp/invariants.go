package seccomp

import "sort"

// The argument checks of rljail's embedded profiles are invariants, not
// defaults to be tuned: a chmod with set-user-ID bits, a clone with a
// CLONE_NEW* flag, a netlink socket, a personality with
// ADDR_NO_RANDOMIZE, a prctl or an ioctl outside the short lists each
// undo a layer of the jail or reach kernel code the jail keeps out of
// reach. Learn mode reports such calls, but its profile snippet never
// turns them into a rule (a hostile payload chooses which calls learn
// mode sees: it could make it print a rule for any value); it prints a
// comment that they stay denied, as it does for the always-denied calls.

// checkedCall is one call whose arguments every embedded profile checks.
type checkedCall struct {
	args []uint // the arguments the checks look at
	why  string // what the checks keep out, for learn mode's comment
}

// checkedCalls are the calls the embedded profiles allow only with
// checked arguments (profiles' tests hold this table to the profiles).
var checkedCalls = map[string]checkedCall{
	"clone":              {[]uint{0}, "no CLONE_NEW* flag: no new namespaces"},
	"socket":             {[]uint{0, 1, 2}, "AF_UNIX, AF_INET and AF_INET6 stream and datagram sockets of the default protocols only"},
	"socketpair":         {[]uint{0, 1, 2}, "AF_UNIX stream, datagram and seqpacket pairs only"},
	"chmod":              {[]uint{1}, "no set-user-ID or set-group-ID bits"},
	"fchmod":             {[]uint{1}, "no set-user-ID or set-group-ID bits"},
	"fchmodat":           {[]uint{2}, "no set-user-ID or set-group-ID bits"},
	"open":               {[]uint{2}, "no set-user-ID or set-group-ID bits on a created file"},
	"openat":             {[]uint{3}, "no set-user-ID or set-group-ID bits on a created file"},
	"creat":              {[]uint{1}, "no set-user-ID or set-group-ID bits"},
	"mknod":              {[]uint{1}, "FIFOs only, without set-user-ID or set-group-ID bits"},
	"mknodat":            {[]uint{2}, "FIFOs only, without set-user-ID or set-group-ID bits"},
	"personality":        {[]uint{0}, "the query and PER_LINUX only"},
	"prlimit64":          {[]uint{0, 2}, "the caller's own limits (pid 0), or a read of any process's: never setting the jail's init's"},
	"prctl":              {[]uint{0}, "only options that cannot weaken the jail or forge the host's kernel log"},
	"ioctl":              {[]uint{1}, "only the terminal and descriptor commands CPython uses"},
	"setsockopt":         {[]uint{1, 2}, "only the socket, TCP and IP options CPython and common clients use"},
	"fcntl":              {[]uint{1, 2}, "no leases, directory notifications, signal-driven I/O or pipes above 1 MiB"},
	"setuid":             {[]uint{0}, "no-op forms only: the jail's own id 1000"},
	"setgid":             {[]uint{0}, "no-op forms only: the jail's own id 1000"},
	"setreuid":           {[]uint{0, 1}, "no-op forms only: -1 or the jail's own id 1000"},
	"setregid":           {[]uint{0, 1}, "no-op forms only: -1 or the jail's own id 1000"},
	"setresuid":          {[]uint{0, 1, 2}, "no-op forms only: -1 or the jail's own id 1000"},
	"setresgid":          {[]uint{0, 1, 2}, "no-op forms only: -1 or the jail's own id 1000"},
	"sched_setscheduler": {[]uint{1}, "the normal policies only, no real-time one"},
}

// CheckedCalls returns the calls whose arguments every embedded profile
// checks, sorted.
func CheckedCalls() []string {
	out := make([]string, 0, len(checkedCalls))
	for n := range checkedCalls {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
