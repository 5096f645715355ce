package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// userHZ is the unit of cpuacct.stat: the kernel reports clock_t in USER_HZ,
// 100 on every architecture Go supports.
const userHZ = 100

// setupV1 carries out a v1 plan: one cgroup in each usable hierarchy of
// memory, pids, cpu and cpuacct (one for controllers mounted together), and
// the limits. It creates nothing in any other hierarchy. It returns extra
// fallback lines.
func (c *Cgroup) setupV1(p *plan, name string, l Limits) ([]string, error) {
	dirs, paths, mk := v1Layout(p, name)
	// Leftovers of earlier runs (sweepStale) are removed while the jail
	// runs: nothing here needs them gone; Destroy waits for the sweep.
	c.sweep(func(now time.Time) {
		busy := make(map[string]bool)
		for _, dir := range mk {
			sweepStale(filepath.Dir(dir), now, busy)
		}
	})
	if err := c.mkdirJail(mk...); err != nil {
		return nil, err
	}
	c.v1Dirs, c.v1Paths = dirs, paths
	return limitV1(dirs, l)
}

// v1Layout names the jail's v1 cgroups: the directory and the cgroup path
// for each controller, and the directories to make, in order (controllers
// mounted together share one).
func v1Layout(p *plan, name string) (dirs, paths map[string]string, mk []string) {
	dirs, paths = make(map[string]string), make(map[string]string)
	byMount := make(map[string]string)
	for _, ctl := range append(slices.Clone(limitControllers), accountingController) {
		hy, ok := p.v1[ctl]
		if !ok {
			continue
		}
		dir, made := byMount[hy.point]
		if !made {
			dir = filepath.Join(hy.base, name)
			byMount[hy.point] = dir
			mk = append(mk, dir)
		}
		dirs[ctl] = dir
		paths[ctl] = path.Join(hy.basePath, name)
	}
	return dirs, paths, mk
}

// limitV1 writes the limits into the v1 cgroups.
func limitV1(dirs map[string]string, l Limits) ([]string, error) {
	var extra []string
	write := func(dir, file, value, what string) error {
		if err := writeFile(filepath.Join(dir, file), value); err != nil {
			return fmt.Errorf("cgroup: set %s: %w", what, err)
		}
		return nil
	}
	if dir, ok := dirs["memory"]; ok && l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := write(dir, "memory.limit_in_bytes", v, "the memory limit"); err != nil {
			return nil, err
		}
		// memsw limits memory plus swap; equal to the memory limit it leaves
		// no room for swap. It must not be lower than limit_in_bytes, hence
		// the order.
		switch {
		case exists(filepath.Join(dir, "memory.memsw.limit_in_bytes")):
			if err := write(dir, "memory.memsw.limit_in_bytes", v, "no swap for the jail"); err != nil {
				return nil, err
			}
		case hostHasSwap():
			extra = append(extra, "memory limit does not cover swap: the kernel has no memory.memsw.limit_in_bytes (swap accounting off); the jail may swap beyond --memory")
		}
	}
	if dir, ok := dirs["memory"]; ok && exists(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes")) {
		if err := write(dir, "memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(socketMemory(l.MemoryBytes), 10), "the jail's socket buffer limit"); err != nil {
			return nil, err
		}
	}
	if dir, ok := dirs["pids"]; ok && l.PidsMax > 0 {
		if err := write(dir, "pids.max", strconv.FormatInt(l.PidsMax, 10), "the pids limit"); err != nil {
			return nil, err
		}
	}
	if dir, ok := dirs["cpu"]; ok && l.CPUs > 0 {
		if err := write(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriodUS), "the CFS period"); err != nil {
			return nil, err
		}
		what := fmt.Sprintf("the cpus limit %g", l.CPUs)
		if err := write(dir, "cpu.cfs_quota_us", strconv.FormatInt(cpuQuotaUS(l.CPUs), 10), what); err != nil {
			return nil, err
		}
	}
	return extra, nil
}

// socketMemoryMax bounds the TCP and UDP buffers of a jail on cgroup v1.
// v1 charges socket buffers to no memory cgroup by default, only to the
// host-wide net.ipv4.tcp_mem and udp_mem: a payload under -m 64m held some
// 300 MB of the host's TCP memory in loopback connections it never read,
// and a few such jails would reach tcp_mem, where every TCP socket of the
// host stalls. Writing memory.kmem.tcp.limit_in_bytes makes the kernel
// charge the sockets the cgroup's processes create to a counter of the
// cgroup's own, TCP and UDP alike (memcg1_charge_skmem; measured on Linux
// 6.18: 50 UDP sockets filled with datagrams charged 9 MB to it), and a
// socket that would pass it is refused more buffer, as under tcp_mem's
// pressure (it overshoots by what the kernel must not fail, some 40 %
// under a flood). The counter is apart from memory.limit_in_bytes. A jail
// has only lo, whose buffers need little: 16 MiB lets a local server and
// its clients move data at full speed. v2 charges socket buffers to
// memory.max, with the rest of the jail's memory.
const socketMemoryMax = 16 << 20

// socketMemory is the v1 limit of the jail's socket buffers: the memory
// limit when it is smaller than socketMemoryMax.
func socketMemory(memory int64) int64 {
	if memory > 0 && memory < socketMemoryMax {
		return memory
	}
	return socketMemoryMax
}

// killV1 sends SIGKILL to every process in the v1 cgroups until they are
// empty or the deadline passes. Without a freezer, a process may fork while
// the others die; the passes repeat until none is left (the pids limit
// bounds a fork bomb, and the jail's init dying takes its PID namespace).
func killV1(dirs, paths map[string]string, deadline time.Time) error {
	delay := time.Millisecond
	for {
		left := 0
		for ctl, dir := range dirs {
			pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("cgroup: kill: %w", err)
			}
			left += len(pids)
			for _, pid := range pids {
				if err := killPid(pid, ctl, paths[ctl]); err != nil {
					return fmt.Errorf("cgroup: kill: %w", err)
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %d processes still in the jail's cgroups %v after SIGKILL and %v", left, uniqueDirs(dirs), destroyTimeout)
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// uniqueDirs lists the distinct directories of a controller map.
func uniqueDirs(dirs map[string]string) []string {
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// statsV1 reads the jail's usage from its v1 cgroups.
func statsV1(dirs map[string]string) (Stats, error) {
	var s Stats
	if dir, ok := dirs[accountingController]; ok {
		user, uerr := readInt(filepath.Join(dir, "cpuacct.usage_user"))
		sys, serr := readInt(filepath.Join(dir, "cpuacct.usage_sys"))
		if uerr == nil && serr == nil {
			s.CPUUserMS, s.CPUSystemMS = user/1e6, sys/1e6
		} else {
			// Before Linux 4.7: cpuacct.stat, in USER_HZ ticks.
			kv, err := readKV(filepath.Join(dir, "cpuacct.stat"))
			if err != nil {
				return s, fmt.Errorf("cgroup: %w", err)
			}
			s.CPUUserMS, s.CPUSystemMS = kv["user"]*1000/userHZ, kv["system"]*1000/userHZ
		}
	} else {
		s.Missing = append(s.Missing, "cpu_user_ms, cpu_system_ms: no cpuacct cgroup")
	}

	if dir, ok := dirs["memory"]; ok {
		v, err := readInt(filepath.Join(dir, "memory.max_usage_in_bytes"))
		if err != nil {
			return s, fmt.Errorf("cgroup: %w", err)
		}
		s.MemoryPeakBytes = v
		kv, err := readKV(filepath.Join(dir, "memory.oom_control"))
		if err != nil {
			return s, fmt.Errorf("cgroup: %w", err)
		}
		if n, ok := kv["oom_kill"]; ok {
			s.OOMKills = n
		} else {
			s.Missing = append(s.Missing, "oom_kills: no oom_kill in memory.oom_control (Linux < 4.13)")
		}
	} else {
		s.Missing = append(s.Missing, "memory_peak_bytes, oom_kills: no memory cgroup")
	}

	if dir, ok := dirs["pids"]; ok {
		switch v, err := readInt(filepath.Join(dir, "pids.peak")); {
		case err == nil:
			s.PidsPeak = v
		case errors.Is(err, os.ErrNotExist):
			s.Missing = append(s.Missing, "pids_peak: no pids.peak (Linux < 6.1)")
		default:
			return s, fmt.Errorf("cgroup: %w", err)
		}
		kv, err := readKV(filepath.Join(dir, "pids.events"))
		if err != nil {
			return s, fmt.Errorf("cgroup: %w", err)
		}
		s.PidsMaxHits = kv["max"]
	} else {
		s.Missing = append(s.Missing, "pids_peak, pids_max_hits: no pids cgroup")
	}
	return s, nil
}
