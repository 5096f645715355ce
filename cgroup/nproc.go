package cgroup

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NprocPerUserNS reports whether this kernel counts RLIMIT_NPROC per user
// namespace (Linux 5.14, the series "Count rlimits in each user
// namespace" by Alexey Gladkov), so that in the
// jail's fresh user namespace it counts the jail's tasks alone.
func NprocPerUserNS() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	return ok && (major > 5 || (major == 5 && minor >= 14))
}

// kernelVersion parses the major and minor numbers of a kernel release
// such as "6.1.0-18-amd64".
func kernelVersion(release string) (major, minor int, ok bool) {
	maj, rest, found := strings.Cut(release, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(rest[:end])
	return a, b, err1 == nil && err2 == nil
}
