package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The test process's own cgroups. Other programs of a shared machine run
// jails too (another test run, a service), below their own cgroups; on
// cgroup v1 those are often the hierarchies' roots, where this process's
// were too, so that a check of what rljail left below "the test's own
// cgroup" saw their jails as well. testMain moves this process (and so
// every rljail it starts: a jail's cgroup goes below its supervisor's)
// into a cgroup of its own in each v1 hierarchy a jail uses, and the
// checks judge only below it (ownCgroupDirs).

// ownCgroupControllers are the v1 controllers whose hierarchies rljail
// makes a jail's cgroups in.
var ownCgroupControllers = []string{"memory", "pids", "cpu", "cpuacct"}

// movedCgroups are the directories testMain made (the levels above the
// tests' own, too, made where a hierarchy lacked them) and where the
// process was before, to go back at the end.
type movedCgroups struct {
	dirs, before []string
	made         []string // in the order made
}

// enterOwnCgroups moves this process into a cgroup of its own, at one
// path in each v1 hierarchy of ownCgroupControllers: the deepest of its
// cgroups' paths there, plus integration-PID, so that the cgroups stay
// nested as the tests that make a --cgroup-parent for every hierarchy
// need (newV1Parent). A level missing above it is made (below the
// process's cgroup in that hierarchy, which is a prefix of that path) and
// removed at the end once empty. Where the paths are not nested, or on a
// host without these v1 hierarchies (cgroup v2 only, as in the test VMs,
// where the tests run alone), nothing is moved.
func enterOwnCgroups() (*movedCgroups, error) {
	own, err := procCgroup(os.Getpid())
	if err != nil {
		return nil, err
	}
	m := &movedCgroups{}
	type hier struct{ mnt, path string }
	var hs []hier
	seen := map[string]bool{}
	base := "/"
	for _, ctl := range ownCgroupControllers {
		mnt := v1Mount(ctl)
		path, ok := own[ctl]
		if mnt == "" || !ok || seen[mnt] {
			continue
		}
		seen[mnt] = true
		hs = append(hs, hier{mnt, path})
		if len(path) > len(base) {
			base = path
		}
	}
	for _, h := range hs {
		if h.path != "/" && h.path != base && !strings.HasPrefix(base, h.path+"/") {
			return m, nil // not nested: the tests that need it say so
		}
	}
	target := filepath.Join(base, fmt.Sprintf("integration-%d", os.Getpid()))
	for _, h := range hs {
		dir := h.mnt
		for _, elem := range strings.Split(strings.TrimPrefix(target, "/"), "/") {
			dir = filepath.Join(dir, elem)
			if err := os.Mkdir(dir, 0o755); err == nil {
				m.made = append(m.made, dir)
			} else if !os.IsExist(err) {
				return m, fmt.Errorf("make the tests' cgroup %s: %w", dir, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return m, fmt.Errorf("move the tests into their cgroup %s: %w", dir, err)
		}
		m.dirs = append(m.dirs, dir)
		m.before = append(m.before, filepath.Join(h.mnt, h.path))
	}
	return m, nil
}

// leave moves this process back and removes the cgroups it made, once
// empty (a jail's left below them is a test's failure already; a level
// above them may hold another test process's by then).
func (m *movedCgroups) leave() {
	for i := range m.dirs {
		_ = os.WriteFile(filepath.Join(m.before[i], "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	for i := len(m.made) - 1; i >= 0; i-- {
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := syscall.Rmdir(m.made[i])
			if err == nil || os.IsNotExist(err) || !strings.HasPrefix(filepath.Base(m.made[i]), "integration-") || time.Now().After(deadline) {
				break
			}
		}
	}
}

// v1Mount is where ctl's v1 hierarchy is mounted ("" if none).
func v1Mount(ctl string) string {
	mounts, _ := readCgroupMounts()
	for _, m := range mounts {
		if !m.v2 && slices.Contains(m.controllers, ctl) {
			return m.point
		}
	}
	return ""
}

// ownCgroupDirs are this process's cgroup directories in every mounted
// hierarchy: where the jails it starts make their cgroups.
func ownCgroupDirs() []string {
	own, err := procCgroup(os.Getpid())
	if err != nil {
		return nil
	}
	mounts, _ := readCgroupMounts()
	var out []string
	for _, m := range mounts {
		dir := m.point
		if m.v2 {
			dir = filepath.Join(m.point, own[""])
		}
		for _, o := range m.options {
			if p, ok := own[o]; ok {
				dir = filepath.Join(m.point, p)
				break
			}
		}
		out = append(out, dir)
	}
	return out
}

// inOwnCgroups tells whether pid lives at or below this process's pids
// cgroup (on a host without a v1 pids hierarchy, or where it could not be
// entered: yes). Every process a test starts does, its jails' included,
// and no jail can leave its cgroup; a marker shared by every run of a
// kind (a session worker's source) is so told apart from another
// program's.
func inOwnCgroups(pid int) bool {
	own, err := procCgroup(os.Getpid())
	if err != nil || own["pids"] == "" || own["pids"] == "/" {
		return true
	}
	their, err := procCgroup(pid)
	if err != nil {
		return true // gone, or unreadable: judged as the caller judges it
	}
	return their["pids"] == own["pids"] || strings.HasPrefix(their["pids"], own["pids"]+"/")
}

// flockHolder is the pid /proc/locks names as holding a flock of the file
// at path (0: none found).
func flockHolder(path string) int {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	// 1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF
	want := ":" + strconv.FormatUint(st.Ino, 10)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "FLOCK" && strings.HasSuffix(f[5], want) {
			pid, _ := strconv.Atoi(f[4])
			return pid
		}
	}
	return 0
}
