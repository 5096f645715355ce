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
	sweepStale(parent, time.Now())
	if _, err := os.Stat(abandoned); err != nil {
		t.Fatalf("a young empty jail cgroup was removed: %v", err)
	}
	// As if a minute had passed.
	sweepStale(parent, time.Now().Add(time.Minute))
	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("the abandoned jail cgroup is still there (%v)", err)
	}
	for _, keep := range []string{busy, foreign, sup} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}
