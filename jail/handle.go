package jail

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
)

// Handle is a running jail as Spec.Started hands it to its caller: what a
// caller driving one long-lived payload (a session's worker) measures from
// outside, piece by piece. It is valid while Run has not returned. To end
// the jail, cancel Run's context.
type Handle struct {
	lim     *jailLimits
	limits  Limits
	initPid int // the jail's init in the host's PID namespace, 0 if unknown
}

// Limits are the limits in force and their mechanisms, as the report
// gives them.
func (h *Handle) Limits() Limits { return h.limits }

// CPUTime is the CPU time the jail's processes have used so far: from the
// jail's cgroup, or, without CPU accounting (rootless on cgroup v1), from
// /proc on the host for the jail's init and its descendants, with what
// they reaped (10 ms ticks). It is the kernel's count, not the payload's
// word.
func (h *Handle) CPUTime() (time.Duration, error) {
	d, err := h.lim.cg.CPUUsage()
	if !errors.Is(err, cgroup.ErrNoAccounting) {
		return d, err
	}
	if h.initPid <= 0 {
		return 0, err
	}
	return treeCPUTime(h.initPid)
}

// clockTick is the kernel's USER_HZ, which /proc/PID/stat counts in (100
// on every Linux architecture rljail runs on).
const clockTick = 10 * time.Millisecond

// treeCPUTime sums utime, stime, cutime and cstime of pid and of every
// descendant, following /proc/PID/task/TID/children. A session reads it
// twice a cell, so it reads /proc with plain open, read and close into one
// buffer (os.ReadFile adds six system calls a file for Go's poller), and
// lists a process's threads only when it has more than one.
func treeCPUTime(pid int) (time.Duration, error) {
	var total time.Duration
	buf := make([]byte, 4096)
	todo := []int{pid}
	for n := 0; len(todo) > 0 && n < 1<<16; n++ {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		dir := "/proc/" + strconv.Itoa(p)
		b, err := readProcFile(dir+"/stat", buf)
		if err != nil {
			if p == pid {
				return 0, fmt.Errorf("read the jail's CPU time: %w", err)
			}
			continue // gone meanwhile
		}
		// The fields after the command's closing parenthesis: state is
		// field 3; utime, stime, cutime, cstime are 14 to 17;
		// num_threads is 20.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 18 {
			continue
		}
		for _, s := range f[11:15] {
			v, _ := strconv.ParseInt(s, 10, 64)
			total += time.Duration(v) * clockTick
		}
		tids := []string{strconv.Itoa(p)}
		if threads, _ := strconv.Atoi(f[17]); threads != 1 {
			tids = tids[:0]
			tasks, _ := os.ReadDir(dir + "/task")
			for _, t := range tasks {
				tids = append(tids, t.Name())
			}
		}
		for _, t := range tids {
			c, _ := readProcFile(dir+"/task/"+t+"/children", buf)
			for _, s := range strings.Fields(string(c)) {
				if k, err := strconv.Atoi(s); err == nil {
					todo = append(todo, k)
				}
			}
		}
	}
	return total, nil
}

// readProcFile reads a /proc file into buf (growing it when the file is
// longer) and returns its contents, valid until buf's next use.
func readProcFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		k, err := unix.Read(fd, buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		case k == 0:
			return buf[:n], nil
		}
		n += k
	}
}

// pidOfPidfd reads the pid of a pidfd's process from /proc/self/fdinfo; 0
// when it cannot.
func pidOfPidfd(pidfd int) int {
	if pidfd < 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// dupChannel copies Spec.Channel for the config's descriptors, which are
// closed once sent; the caller's own stays open.
func dupChannel(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("pass the payload's channel: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("pass the payload's channel: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("pass the payload's channel: %w", derr)
	}
	return os.NewFile(uintptr(fd), "channel"), nil
}
