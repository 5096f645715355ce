package jail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
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
	// handover: the request for a payload started ahead (PrepareStarted).
	handover *Handover
	// proc keeps the /proc files treeCPUTime reads open between readings;
	// Run closes them as it returns (release).
	proc procFiles
}

// release closes what the handle keeps open; CPUTime then reads /proc
// afresh, as long as the jail's init is there.
func (h *Handle) release() { h.proc.close() }

// Handover is the request a payload started ahead (PrepareStarted) is to
// apply; nil for a one-shot run's jail.
func (h *Handle) Handover() *Handover { return h.handover }

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
	return h.proc.treeCPUTime(h.initPid)
}

// CPUTimeOfKnown is CPUTime without a look for processes started since
// the last reading, where CPUTime reads /proc (rootless on cgroup v1): the
// stat files of the processes that reading found, one pread each, where
// the walk of the tree reads each thread's children and each process's
// tasks too. A session's reading at a cell's start takes it (the cell's
// end reads the whole tree): a process started between cells then counts
// whole in the next cell. From the cgroup it is CPUTime.
func (h *Handle) CPUTimeOfKnown() (time.Duration, error) {
	d, err := h.lim.cg.CPUUsage()
	if !errors.Is(err, cgroup.ErrNoAccounting) {
		return d, err
	}
	if h.initPid <= 0 {
		return 0, err
	}
	return h.proc.knownCPUTime(h.initPid)
}

// clockTick is the kernel's USER_HZ, which /proc/PID/stat counts in (100
// on every Linux architecture rljail runs on).
const clockTick = 10 * time.Millisecond

// treeCPUTime sums utime, stime, cutime and cstime of pid and of every
// descendant, following /proc/PID/task/TID/children, with /proc files
// opened for this reading only.
func treeCPUTime(pid int) (time.Duration, error) {
	var p procFiles
	defer p.close()
	return p.treeCPUTime(pid)
}

// procFiles are the /proc files of a process tree that treeCPUTime read,
// kept open for the next reading, which a session makes twice a cell: a
// read at offset 0 of an open /proc file is one system call where a fresh
// open, read and close (os.ReadFile adds six for Go's poller) were ten.
// An open /proc/PID file belongs to its process: once that is gone, reads
// fail (ESRCH) even when its PID is reused, and the path is opened again.
// The zero value is ready; after close every reading opens its files
// afresh and closes them.
type procFiles struct {
	mu     sync.Mutex
	closed bool
	fds    map[string]int  // path to open descriptor
	used   map[string]bool // the paths this reading used
	buf    []byte
	known  []int // the processes the last treeCPUTime read, its pid first
}

// treeCPUTime is the package's treeCPUTime through p's open files; the
// files of processes no longer in the tree are closed.
func (p *procFiles) treeCPUTime(pid int) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fds == nil {
		p.fds, p.used = map[string]int{}, map[string]bool{}
	}
	if p.buf == nil {
		p.buf = make([]byte, 4096)
	}
	defer p.sweep()
	var total time.Duration
	p.known = p.known[:0]
	todo := []int{pid}
	for n := 0; len(todo) > 0 && n < 1<<16; n++ {
		pp := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		dir := "/proc/" + strconv.Itoa(pp)
		b, err := p.read(dir+"/stat", true)
		if err != nil {
			if pp == pid {
				return 0, fmt.Errorf("read the jail's CPU time: %w", err)
			}
			continue // gone meanwhile
		}
		used, threads, ok := statCPU(b)
		if !ok {
			continue
		}
		total += used
		p.known = append(p.known, pp)
		tids := []string{strconv.Itoa(pp)}
		if threads != 1 {
			tids = p.list(dir + "/task")
		}
		for _, t := range tids {
			c, _ := p.read(dir+"/task/"+t+"/children", false)
			for _, s := range strings.Fields(string(c)) {
				if k, err := strconv.Atoi(s); err == nil {
					todo = append(todo, k)
				}
			}
		}
	}
	return total, nil
}

// statCPU reads a /proc/PID/stat: the CPU time of the process with what
// it reaped (utime, stime, cutime, cstime) and its count of threads.
func statCPU(b []byte) (used time.Duration, threads int, ok bool) {
	// The fields after the command's closing parenthesis: state is field
	// 3; utime, stime, cutime, cstime are 14 to 17; num_threads is 20.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 18 {
		return 0, 0, false
	}
	for _, s := range f[11:15] {
		v, _ := strconv.ParseInt(s, 10, 64)
		used += time.Duration(v) * clockTick
	}
	threads, _ = strconv.Atoi(f[17])
	return used, threads, true
}

// knownCPUTime is treeCPUTime over the processes the last one found,
// through the stat files it keeps open only: a file that no longer reads
// is a process gone, whose time its parent's cutime and cstime hold once
// it is reaped (a path is not opened again, where a reused PID would be
// another process's). With no such reading, or the tree's own process
// not read so, it is treeCPUTime.
func (p *procFiles) knownCPUTime(pid int) (time.Duration, error) {
	p.mu.Lock()
	if len(p.known) == 0 || p.known[0] != pid || p.closed {
		p.mu.Unlock()
		return p.treeCPUTime(pid)
	}
	var total time.Duration
	for i, pp := range p.known {
		path := "/proc/" + strconv.Itoa(pp) + "/stat"
		var used time.Duration
		ok := false
		if fd, kept := p.fds[path]; kept {
			if b, err := p.pread(fd, true); err == nil {
				used, _, ok = statCPU(b)
			}
		}
		if !ok && i == 0 {
			p.mu.Unlock()
			return p.treeCPUTime(pid)
		}
		total += used
	}
	p.mu.Unlock()
	return total, nil
}

// read returns the contents of a /proc file, valid until the next read.
// whole says the file is made in one piece (a stat file), so that a short
// read is all of it; other files are read up to their end.
func (p *procFiles) read(path string, whole bool) ([]byte, error) {
	if fd, ok := p.fds[path]; ok {
		b, err := p.pread(fd, whole)
		if err == nil {
			p.used[path] = true
			return b, nil
		}
		unix.Close(fd)
		delete(p.fds, path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	b, err := p.pread(fd, whole)
	if err != nil || p.closed {
		unix.Close(fd)
		return b, err
	}
	p.fds[path], p.used[path] = fd, true
	return b, nil
}

// pread reads fd from offset 0 into p.buf, growing it as needed.
func (p *procFiles) pread(fd int, whole bool) ([]byte, error) {
	n := 0
	for {
		if n == len(p.buf) {
			p.buf = append(p.buf, make([]byte, len(p.buf))...)
		}
		k, err := unix.Pread(fd, p.buf[n:], int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		}
		n += k
		if k == 0 || (whole && n < len(p.buf)) {
			return p.buf[:n], nil
		}
	}
}

// list returns the names in a /proc directory (a process's tasks), nil if
// it cannot be read.
func (p *procFiles) list(path string) []string {
	fd, ok := p.fds[path]
	if !ok {
		var err error
		if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil
		}
		if p.closed {
			defer unix.Close(fd)
		} else {
			p.fds[path] = fd
		}
	} else if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		unix.Close(fd)
		delete(p.fds, path)
		return nil
	}
	p.used[path] = true
	var names []string
	for {
		n, err := unix.Getdents(fd, p.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return names
		}
		_, _, names = unix.ParseDirent(p.buf[:n], -1, names)
	}
}

// sweep closes the files the last reading did not use.
func (p *procFiles) sweep() {
	for path, fd := range p.fds {
		if !p.used[path] {
			unix.Close(fd)
			delete(p.fds, path)
		}
	}
	clear(p.used)
}

// close closes every file kept open; later readings keep none.
func (p *procFiles) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for path, fd := range p.fds {
		unix.Close(fd)
		delete(p.fds, path)
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
