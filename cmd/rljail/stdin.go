package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pollableStdin returns a second, non-blocking open of stdin when stdin is
// a pipe or a terminal, for the supervisor to copy into the jail. The copy
// then waits for input in Go's poller instead of holding a thread in read
// for the whole run (which keeps Go's sysmon waking and costs about 0.7 ms
// of CPU per run when a harness leaves stdin open). The caller's own open
// file stays as it was: O_NONBLOCK on it would change it for every process
// that shares it. Where the second open is refused (a pipe another user
// made, rootless under a harness running as root: the pipe's inode is
// theirs, mode 0600), stdin is read through an epoll descriptor of its own
// that waits in Go's poller (polledStdin). Anything else (a file, a
// socket, a reopen that finds another object) is returned as is; close
// releases the second open or the epoll descriptor.
func pollableStdin(in io.Reader) (r io.Reader, close func()) {
	return pollableStdinWith(in, reopenFD)
}

// reopenFD opens fd's object again through /proc/self/fd, non-blocking.
func reopenFD(fd int) (int, error) {
	return unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
}

// pollableStdinWith is pollableStdin with the second open made by reopen.
func pollableStdinWith(in io.Reader, reopen func(fd int) (int, error)) (r io.Reader, close func()) {
	noop := func() {}
	f, ok := in.(*os.File)
	if !ok {
		return in, noop
	}
	raw, err := f.SyscallConn() // not Fd(): that would make a non-blocking stdin blocking
	if err != nil {
		return in, noop
	}
	var st unix.Stat_t
	fd := -1
	if err := raw.Control(func(s uintptr) {
		if unix.Fstat(int(s), &st) == nil {
			fd = int(s)
		}
	}); err != nil || fd < 0 {
		return in, noop
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
	case unix.S_IFCHR:
		// Terminals only: opening some devices does something (a
		// watchdog starts counting), and the others do not block.
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			return in, noop
		}
	default:
		return in, noop
	}
	nfd, err := reopen(fd)
	if err != nil {
		if p, err := newPolledStdin(f, fd); err == nil {
			return p, func() { p.Close() }
		}
		return in, noop
	}
	var st2 unix.Stat_t
	if unix.Fstat(nfd, &st2) != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || st2.Rdev != st.Rdev {
		unix.Close(nfd)
		return in, noop
	}
	again := os.NewFile(uintptr(nfd), f.Name())
	return again, func() { again.Close() }
}

// polledStdin reads a blocking stdin only once an epoll descriptor of its
// own, which Go's poller waits on, says it is readable: the goroutine that
// waits for input then parks in the poller and holds no thread and no P in
// read. A thread blocked in read holds the supervisor's one P (GOMAXPROCS
// 1): a goroutine the reader readied just before it (the request's
// handler) then waits for sysmon to take the P back, about 1 ms at the
// supervisor's timer slack, per request (issue 33).
type polledStdin struct {
	in *os.File // read through its RawConn, which keeps its descriptor open
	ep *os.File // the epoll descriptor, registered with Go's poller
}

// newPolledStdin watches f (descriptor fd) for input through a new epoll
// descriptor.
func newPolledStdin(f *os.File, fd int) (*polledStdin, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("make an epoll descriptor for stdin: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("watch stdin for input: %w", err)
	}
	// Non-blocking, so that os.NewFile registers it with the poller (an
	// epoll descriptor is readable while its own has events).
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("make stdin's epoll descriptor non-blocking: %w", err)
	}
	return &polledStdin{in: f, ep: os.NewFile(uintptr(ep), "stdin-epoll")}, nil
}

// Read waits in the poller until stdin has input (or its end), then reads
// it. Should another reader of the same pipe take the input first, the
// read blocks as a plain read of stdin would.
func (p *polledStdin) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	epc, err := p.ep.SyscallConn()
	if err != nil {
		return 0, err
	}
	inc, err := p.in.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = epc.Read(func(ep uintptr) bool {
		var ev [1]unix.EpollEvent
		k, err := unix.EpollWait(int(ep), ev[:], 0)
		switch {
		case err == unix.EINTR || (err == nil && k == 0):
			return false // nothing yet: wait in the poller
		case err != nil:
			rerr = fmt.Errorf("wait for stdin: %w", err)
			return true
		}
		if cerr := inc.Control(func(fd uintptr) {
			for {
				n, rerr = unix.Read(int(fd), b)
				if rerr != unix.EINTR {
					return
				}
			}
		}); cerr != nil {
			rerr = cerr
		}
		// A stdin the caller made non-blocking may have nothing after all.
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Close releases the epoll descriptor; stdin stays open.
func (p *polledStdin) Close() error { return p.ep.Close() }
