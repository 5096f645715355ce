package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A supervisor killed with SIGKILL cannot remove its jail's cgroup: its
// jail dies with it (parent-death signal), but the empty directory stays.
// The next run below the same parent removes such leftovers. A jail's
// cgroup is empty only for moments (before its init is cloned into it, and
// between the end of the jail and Destroy), so one that has been empty for
// staleAfter was abandoned. Only directories named by rljail are touched.
const staleAfter = 30 * time.Second

// jailPrefix starts the name of every jail cgroup rljail makes.
const jailPrefix = "rljail-"

// sweepStale removes abandoned, empty jail cgroups directly below parent.
// It never fails a run: what it cannot remove stays for the next one.
// busy, when not nil, carries the names found holding processes from one
// parent to the next: on cgroup v1 a jail has a cgroup of the same name in
// each hierarchy, and one that holds processes in any of them is a live
// jail, so its other hierarchies need neither the stat nor the read of
// cgroup.procs (five system calls each; a run on a host with long-lived
// jails, sessions or a warm pool, paid fifteen for each of them).
func sweepStale(parent string, now time.Time, busy map[string]bool) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, jailPrefix) || name == supervisorLeaf || busy[name] {
			continue
		}
		dir := filepath.Join(parent, name)
		info, err := os.Stat(dir)
		if err != nil || now.Sub(info.ModTime()) < staleAfter {
			continue
		}
		procs, err := readFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || strings.TrimSpace(string(procs)) != "" {
			if err == nil && busy != nil {
				busy[name] = true
			}
			continue
		}
		// rmdir refuses a cgroup with processes or children: safe even if
		// something moved in since the read.
		_ = os.Remove(dir)
	}
}

// sweep runs f, a sweep of stale cgroups, in the background; Destroy waits
// for it to end.
func (c *Cgroup) sweep(f func(now time.Time)) {
	done := make(chan struct{})
	c.swept = done
	go func(now time.Time) {
		defer close(done)
		f(now)
	}(time.Now())
}
