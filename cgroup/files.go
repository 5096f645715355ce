package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The files of cgroupfs and procfs are read and written with plain system
// calls: os.Open would register each descriptor with Go's poller (these
// files support poll), make it non-blocking and, for ReadFile, stat it,
// which is five more system calls per file and a poller event that wakes
// another thread; a run reads and writes some twenty of them.

// openFile opens a kernel file (cgroupfs, procfs); errors are *os.PathError
// as os.OpenFile's.
func openFile(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// openWriter opens a kernel file for writing as an *os.File that Go's
// poller leaves alone (it is passed on, not written here).
func openWriter(path string) (*os.File, error) {
	fd, err := openFile(path, unix.O_WRONLY)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readFile reads a whole kernel file (cgroupfs, procfs), as os.ReadFile.
func readFile(path string) ([]byte, error) {
	fd, err := openFile(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		default:
			b = b[:len(b)+n]
		}
	}
}

// writeFile writes value to a cgroup control file in one write(2), as the
// kernel parses each write on its own.
func writeFile(path, value string) error {
	if err := hook("write " + path); err != nil {
		return err
	}
	fd, err := openFile(path, unix.O_WRONLY)
	if err != nil {
		return err
	}
	var n int
	for {
		n, err = unix.Write(fd, []byte(value))
		if err != unix.EINTR {
			break
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && n != len(value) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// readKV reads a flat keyed file ("key value" lines: cpu.stat,
// memory.events, cgroup.events, memory.oom_control, pids.events).
func readKV(path string) (map[string]int64, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parseKV(string(b), path)
}

func parseKV(text, name string) (map[string]int64, error) {
	kv := make(map[string]int64)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s: line %q is not \"key value\"", name, line)
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: line %q: %w", name, line, err)
		}
		kv[f[0]] = v
	}
	return kv, nil
}

// readInt reads a file holding one integer.
func readInt(path string) (int64, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readPids reads cgroup.procs: one pid a line.
func readPids(path string) ([]int, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parsePids(string(b), path)
}

func parsePids(text, name string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(text) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a pid", name, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mkdirCgroup creates one cgroup directory. An existing directory is an
// error unless shared: the jail's cgroup must be ours alone.
func mkdirCgroup(dir string, shared bool) error {
	if err := hook("mkdir " + dir); err != nil {
		return err
	}
	err := os.Mkdir(dir, 0o755)
	if err == nil || (shared && errors.Is(err, os.ErrExist)) {
		return nil
	}
	return err
}

// hostHasSwap reports whether any swap is active, which decides whether a
// missing swap limit is worth announcing.
func hostHasSwap() bool {
	b, err := readFile("/proc/swaps")
	if err != nil {
		return true // cannot tell: announce rather than hide
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

// testHook, when set by a test, runs before each mkdir and write of a setup
// so that a test can make any step fail.
var testHook func(step string) error

func hook(step string) error {
	if testHook == nil {
		return nil
	}
	return testHook(step)
}

// killPid sends SIGKILL to pid if it is still in the cgroup at path of a
// hierarchy (v1 controller name, or "" for cgroup2). The pid was read from
// cgroup.procs; it is opened as a pidfd first and its membership checked
// again, so that a pid recycled in between is never signalled.
func killPid(pid int, controller, path string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone already
	}
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.3: only the membership check guards the pid.
		if !inCgroup(pid, controller, path) {
			return nil
		}
		return ignoreESRCH(unix.Kill(pid, unix.SIGKILL))
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !inCgroup(pid, controller, path) {
		return nil
	}
	return ignoreESRCH(unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0))
}

func ignoreESRCH(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// inCgroup reports whether pid is in the cgroup at path (or below it) of
// the hierarchy of controller ("" for cgroup2).
func inCgroup(pid int, controller, path string) bool {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	pc, err := parseProcCgroup(string(b))
	if err != nil {
		return false
	}
	got, ok := pc.unified, pc.hasUnified
	if controller != "" {
		got, ok = pc.v1[controller]
	}
	return ok && (got == path || strings.HasPrefix(got, path+"/"))
}
