package hostcheck

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// checkPidfd opens a pidfd for this process. rljail signals and waits for
// the jail's init through a pidfd, never by PID number: a PID can be
// recycled and then name someone else's process.
func checkPidfd() Item {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err == nil {
		unix.Close(fd)
	} else {
		err = fmt.Errorf("pidfd_open(getpid()): %w", err)
	}
	return pidfdItem(err)
}

// pidfdItem judges the result of pidfd_open.
func pidfdItem(err error) Item {
	it := Item{Name: "pidfd", Fatal: true}
	switch {
	case err == nil:
		it.OK = true
		it.Detail = "pidfd_open works"
	case errors.Is(err, unix.ENOSYS):
		it.Detail = err.Error() + " (kernel older than 5.3)"
		it.Fix = "run a kernel 5.12 or newer"
	default:
		it.Detail = err.Error() + " (blocked, likely by a container's seccomp profile)"
		it.Fix = "allow pidfd_open, pidfd_send_signal and clone3 in the container's seccomp profile, or run rljail outside the container"
	}
	return it
}
