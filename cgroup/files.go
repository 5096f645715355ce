package cgroup

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// writeFile writes value to a cgroup control file in one write(2), as the
// kernel parses each write on its own.
func writeFile(path, value string) error {
	if err := hook("write " + path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// readKV reads a flat keyed file ("key value" lines: cpu.stat,
// memory.events, cgroup.events, memory.oom_control, pids.events).
func readKV(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
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
	b, err := os.ReadFile(path)
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
	b, err := os.ReadFile(path)
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
	b, err := os.ReadFile("/proc/swaps")
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
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
