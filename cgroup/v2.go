package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setupV2 carries out a v2 plan: the supervisor's move into its leaf (own
// placement), the controllers in the parents, the jail's leaf cgroup, its
// limits and its clone fd. It returns extra fallback lines, and updates
// p.use and p.why when a controller cannot be had after all.
func (c *Cgroup) setupV2(h host, p *plan, name string, l Limits) ([]string, error) {
	if p.moveSelf {
		// The no-internal-process rule: the delegated cgroup may enable
		// controllers for its children only once it holds no process, so
		// the supervisor moves into a leaf child of its own.
		sup := filepath.Join(p.v2Parent, supervisorLeaf)
		if err := mkdirCgroup(sup, true); err != nil {
			return nil, fmt.Errorf("cgroup: create %s: %w", sup, err)
		}
		if err := writeFile(filepath.Join(sup, "cgroup.procs"), strconv.Itoa(h.pid)); err != nil {
			return nil, fmt.Errorf("cgroup: move rljail into its leaf cgroup: %w", err)
		}
		for _, pid := range h.helpers {
			// A helper that has ended already is no obstacle.
			if err := writeFile(filepath.Join(sup, "cgroup.procs"), strconv.Itoa(pid)); err != nil && !errors.Is(err, unix.ESRCH) {
				return nil, fmt.Errorf("cgroup: move rljail's helper %d into its leaf cgroup: %w", pid, err)
			}
		}
	}
	for _, dir := range p.enableIn {
		if p.makeParent && dir == p.v2Parent {
			if err := mkdirCgroup(dir, true); err != nil {
				return nil, fmt.Errorf("cgroup: create %s: %w", dir, err)
			}
		}
		enableControllers(dir, p)
	}

	if p.scope == nil { // a scope is new: nothing to sweep
		c.sweep(func(now time.Time) { sweepStale(p.v2Parent, now, nil) }) // as in setupV1
	}
	leaf := filepath.Join(p.v2Parent, name)
	if err := c.mkdirJail(leaf); err != nil {
		return nil, err
	}
	c.v2Leaf = leaf
	rel, err := filepath.Rel(h.v2Mount.point, leaf)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c.v2Path = h.v2Mount.cgroupPath(rel)

	// What the leaf really got is what its cgroup.controllers says.
	b, err := readFile(filepath.Join(leaf, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	got := strings.Fields(string(b))
	for _, ctl := range slices.Clone(p.use) {
		if !slices.Contains(got, ctl) {
			p.drop(ctl, fmt.Sprintf("the %s controller is not enabled in %s (cgroup.controllers: %s)", ctl, leaf, listOrNone(got)))
		}
	}

	extra, err := limitV2(leaf, p.use, l)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(leaf, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", leaf, err)
	}
	c.cloneFD = fd
	return extra, nil
}

// drop takes ctl out of the controllers to use, saying why.
func (p *plan) drop(ctl, why string) {
	p.use = slices.DeleteFunc(p.use, func(s string) bool { return s == ctl })
	p.why[ctl] = why
}

// enableControllers enables the plan's controllers for the children of dir,
// one at a time so that a refusal is pinned on its controller, and writes
// nothing for a controller that is enabled already.
func enableControllers(dir string, p *plan) {
	path := filepath.Join(dir, "cgroup.subtree_control")
	b, err := readFile(path)
	if err != nil {
		for _, ctl := range slices.Clone(p.use) {
			p.drop(ctl, fmt.Sprintf("cannot read %s: %v", path, err))
		}
		return
	}
	on := strings.Fields(string(b))
	for _, ctl := range slices.Clone(p.use) {
		if slices.Contains(on, ctl) {
			continue
		}
		if err := writeFile(path, "+"+ctl); err != nil {
			why := fmt.Sprintf("cannot enable the %s controller: %v", ctl, err)
			if errors.Is(err, unix.EBUSY) {
				why += " (the cgroup holds processes, which cgroup v2's no-internal-process rule forbids)"
			}
			p.drop(ctl, why)
		}
	}
}

// cpuQuotaUS is the CFS quota per 100 ms period for a CPU limit.
func cpuQuotaUS(cpus float64) int64 {
	return int64(math.Round(cpus * cpuPeriodUS))
}

// limitV2 writes the limits of the controllers in use into the jail's v2
// cgroup. It returns extra fallback lines.
func limitV2(dir string, use []string, l Limits) ([]string, error) {
	var extra []string
	write := func(file, value, what string) error {
		if err := writeFile(filepath.Join(dir, file), value); err != nil {
			return fmt.Errorf("cgroup: set %s: %w", what, err)
		}
		return nil
	}
	if slices.Contains(use, "memory") {
		if l.MemoryBytes > 0 {
			if err := write("memory.max", strconv.FormatInt(l.MemoryBytes, 10), "the memory limit"); err != nil {
				return nil, err
			}
			switch {
			case exists(filepath.Join(dir, "memory.swap.max")):
				if err := write("memory.swap.max", "0", "no swap for the jail"); err != nil {
					return nil, err
				}
			case hostHasSwap():
				extra = append(extra, "memory limit does not cover swap: the kernel has no memory.swap.max (swap accounting off); the jail may swap beyond --memory")
			}
		}
		// One OOM kill takes the whole jail, not one arbitrary process of it.
		if exists(filepath.Join(dir, "memory.oom.group")) {
			if err := write("memory.oom.group", "1", "memory.oom.group"); err != nil {
				return nil, err
			}
		}
	}
	if slices.Contains(use, "pids") && l.PidsMax > 0 {
		if err := write("pids.max", strconv.FormatInt(l.PidsMax, 10), "the pids limit"); err != nil {
			return nil, err
		}
	}
	if slices.Contains(use, "cpu") && l.CPUs > 0 {
		v := fmt.Sprintf("%d %d", cpuQuotaUS(l.CPUs), cpuPeriodUS)
		if err := write("cpu.max", v, fmt.Sprintf("the cpus limit %g", l.CPUs)); err != nil {
			return nil, err
		}
	}
	return extra, nil
}

// killV2 kills every process in the cgroup at dir (path as /proc shows it).
func killV2(dir, path string) error {
	err := writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	switch {
	case err == nil:
		return nil
	case !exists(dir):
		return nil // removed already: nothing to kill
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cgroup: kill: %w", err)
	}
	// No cgroup.kill before Linux 5.14: signal each process.
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup: kill: %w", err)
	}
	for _, pid := range pids {
		if err := killPid(pid, "", path); err != nil {
			return fmt.Errorf("cgroup: kill: %w", err)
		}
	}
	return nil
}

// waitEmptyV2 waits until the cgroup at dir holds no process: cgroup.events
// says "populated 0". It sleeps on an inotify watch of that file, which the
// kernel touches when the value changes, rather than retrying with sleeps.
// Without cgroup.kill it signals the stragglers again on each wake-up.
func waitEmptyV2(dir, path string, deadline time.Time) error {
	events := filepath.Join(dir, "cgroup.events")
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroup: inotify: %w", err)
	}
	defer unix.Close(ifd)
	// Watch first, then read, so that no change falls in between.
	if _, err := unix.InotifyAddWatch(ifd, events, unix.IN_MODIFY); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed already
		}
		return fmt.Errorf("cgroup: watch %s: %w", events, err)
	}
	hasKill := exists(filepath.Join(dir, "cgroup.kill"))
	buf := make([]byte, 4096)
	for {
		kv, err := readKV(events)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if kv["populated"] == 0 {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			pids, _ := readPids(filepath.Join(dir, "cgroup.procs"))
			return fmt.Errorf("cgroup: %s still holds processes %v after SIGKILL and %v", dir, pids, destroyTimeout)
		}
		if !hasKill {
			if err := killV2(dir, path); err != nil {
				return err
			}
		}
		// Wake up at least every 100 ms: a missed event costs no more.
		ms := int(min(left, 100*time.Millisecond) / time.Millisecond)
		_, err = unix.Poll([]unix.PollFd{{Fd: int32(ifd), Events: unix.POLLIN}}, max(ms, 1))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("cgroup: poll: %w", err)
		}
		for {
			if _, err := unix.Read(ifd, buf); err != nil {
				break // EAGAIN: drained
			}
		}
	}
}

// statsV2 reads the jail's usage from its v2 cgroup.
func statsV2(dir string) (Stats, error) {
	var s Stats
	cpu, err := readKV(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, fmt.Errorf("cgroup: %w", err)
	}
	s.CPUUserMS = cpu["user_usec"] / 1000
	s.CPUSystemMS = cpu["system_usec"] / 1000

	switch v, err := readInt(filepath.Join(dir, "memory.peak")); {
	case err == nil:
		s.MemoryPeakBytes = v
	case !exists(filepath.Join(dir, "memory.current")):
		s.Missing = append(s.Missing, "memory_peak_bytes: no memory controller")
	case errors.Is(err, os.ErrNotExist):
		s.Missing = append(s.Missing, "memory_peak_bytes: no memory.peak (Linux < 5.19)")
	default:
		return s, fmt.Errorf("cgroup: %w", err)
	}
	switch kv, err := readKV(filepath.Join(dir, "memory.events")); {
	case err == nil:
		s.OOMKills = kv["oom_kill"]
	case errors.Is(err, os.ErrNotExist):
		s.Missing = append(s.Missing, "oom_kills: no memory controller")
	default:
		return s, fmt.Errorf("cgroup: %w", err)
	}

	switch v, err := readInt(filepath.Join(dir, "pids.peak")); {
	case err == nil:
		s.PidsPeak = v
	case !exists(filepath.Join(dir, "pids.current")):
		s.Missing = append(s.Missing, "pids_peak: no pids controller")
	case errors.Is(err, os.ErrNotExist):
		s.Missing = append(s.Missing, "pids_peak: no pids.peak (Linux < 6.1)")
	default:
		return s, fmt.Errorf("cgroup: %w", err)
	}
	switch kv, err := readKV(filepath.Join(dir, "pids.events")); {
	case err == nil:
		s.PidsMaxHits = kv["max"]
	case errors.Is(err, os.ErrNotExist):
		s.Missing = append(s.Missing, "pids_max_hits: no pids controller")
	default:
		return s, fmt.Errorf("cgroup: %w", err)
	}
	return s, nil
}
