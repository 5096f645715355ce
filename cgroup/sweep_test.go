//go:build !cgroupv2vm

package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSweepStale runs on this host's v1 pids hierarchy, below our own
// cgroup: an abandoned jail cgroup goes, a young one, a busy one, rljail's
// supervisor leaf and a foreign name stay.
func TestSweepStale(t *testing.T) {
	parent := filepath.Join("/sys/fs/cgroup/pids", ownV1(t)["pids"])
	mk := func(name string) string {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		return dir
	}
	abandoned := mk("rljail-sweeptest-abandoned")
	busy := mk("rljail-sweeptest-busy")
	foreign := mk("sweeptest-foreign")
	sup := filepath.Join(parent, supervisorLeaf)
	if _, err := os.Stat(sup); os.IsNotExist(err) {
		mk(supervisorLeaf)
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0)

	// Young: nothing is removed.
	sweepStale(parent, time.Now(), nil)
	if _, err := os.Stat(abandoned); err != nil {
		t.Fatalf("a young empty jail cgroup was removed: %v", err)
	}
	// As if a minute had passed.
	sweepStale(parent, time.Now().Add(time.Minute), nil)
	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("the abandoned jail cgroup is still there (%v)", err)
	}
	for _, keep := range []string{busy, foreign, sup} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}

// TestSweepStaleBusyAcrossHierarchies: a jail cgroup that holds processes
// in the pids hierarchy marks its name busy, and the sweep of the cpu
// hierarchy then keeps that name's directory there, empty and old as it
// is; another name's empty old directory in cpu still goes.
func TestSweepStaleBusyAcrossHierarchies(t *testing.T) {
	own := ownV1(t)
	pidsParent := filepath.Join("/sys/fs/cgroup/pids", own["pids"])
	cpuParent := filepath.Join("/sys/fs/cgroup/cpu", own["cpu"])
	mk := func(parent, name string) string {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		return dir
	}
	const live = "rljail-sweeptest-live"
	busyPids := mk(pidsParent, live)
	keptCPU := mk(cpuParent, live)
	goneCPU := mk(cpuParent, "rljail-sweeptest-gone")
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	if err := os.WriteFile(filepath.Join(busyPids, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(filepath.Join(pidsParent, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0)

	busy := make(map[string]bool)
	later := time.Now().Add(time.Minute)
	sweepStale(pidsParent, later, busy)
	if !busy[live] {
		t.Fatalf("the pids sweep did not mark %s busy: %v", live, busy)
	}
	sweepStale(cpuParent, later, busy)
	if _, err := os.Stat(keptCPU); err != nil {
		t.Errorf("the cpu cgroup of a jail busy in pids was removed: %v", err)
	}
	if _, err := os.Stat(goneCPU); !os.IsNotExist(err) {
		t.Errorf("the abandoned cpu cgroup of another name is still there (%v)", err)
	}
}
