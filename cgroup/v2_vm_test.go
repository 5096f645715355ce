//go:build cgroupv2vm

package cgroup

// cgroup v2 tests for a real cgroup v2 kernel: the integration/vm harness
// builds them with
//
//	CGO_ENABLED=0 go test -c -tags cgroupv2vm -o cgroup.test ./cgroup/
//
// and runs ./cgroup.test -test.v in the VM, as root, with cgroup2 mounted at
// /sys/fs/cgroup and memory, pids and cpu in its cgroup.controllers. The
// tests enable those three in the root's cgroup.subtree_control, make their
// cgroups below the root (rljail-test-*), and run helpers as uid 65534 for
// the rootless case (the binary is copied to a world-readable directory
// under $TMPDIR first). The fork test needs sh (busybox sh will do) on PATH.
// The shared test bodies are in v2common_test.go; the v1 tests of the
// development host are left out of this build.

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var vmV2 = v2Env{mount: "/sys/fs/cgroup", controllers: true}

func TestVMOwn(t *testing.T)          { testV2Own(t, vmV2) }
func TestVMShared(t *testing.T)       { testV2Shared(t, vmV2) }
func TestVMRootless(t *testing.T)     { testV2Rootless(t, vmV2) }
func TestVMParent(t *testing.T)       { testV2Parent(t, vmV2) }
func TestVMSetupFailure(t *testing.T) { testV2SetupFailure(t, vmV2) }

// TestVMHostLayout: without a test layout, a unified host is driven through
// cgroup2, and the real Create places below --cgroup-parent with every
// limit in cgroup2.
func TestVMHostLayout(t *testing.T) {
	h, err := probe("", ManagerAuto, layout{})
	if err != nil {
		t.Fatal(err)
	}
	if !h.unified || h.v2Mount.point != "/sys/fs/cgroup" {
		t.Fatalf("the unified host was not recognised: %+v", h)
	}
	sc := vmV2.scaffold(t, "rljail-test-layout")
	c, err := Create(Options{Parent: vmV2.cgroupPath(sc), Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if c.Placement() != PlacementParentV2 || len(c.Fallbacks()) > 0 {
		t.Errorf("placement %s, fallbacks %q", c.Placement(), c.Fallbacks())
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// createIn makes a jail cgroup below a fresh scaffold, with limits.
func createIn(t *testing.T, base string, l Limits) (*Cgroup, string, int) {
	t.Helper()
	sc := vmV2.scaffold(t, base)
	name := testName(t)
	c, err := create(Options{Parent: vmV2.cgroupPath(sc), Name: name, Limits: l}, vmV2.layout())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() })
	fd, ok := c.CloneFD()
	if !ok {
		t.Fatal("no clone fd")
	}
	return c, filepath.Join(sc, name), fd
}

// TestVMMemoryLimit: a memory hog is OOM-killed at memory.max, and
// memory.oom.group takes the rest of the jail with it.
func TestVMMemoryLimit(t *testing.T) {
	const limit = 48 << 20
	c, leaf, fd := createIn(t, "rljail-test-mem", Limits{MemoryBytes: limit, PidsMax: 64})
	bystander := helperCommand("sleep", "60")
	bornIn(t, leaf, bystander, fd)
	defer bystander.Process.Kill()

	hog := helperCommand("hog", strconv.Itoa(256<<20))
	stdin, err := hog.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	bornIn(t, leaf, hog, fd)
	defer hog.Process.Kill()
	io.WriteString(stdin, "go\n")
	if sig := waitExit(t, hog, 60*time.Second); sig != syscall.SIGKILL {
		t.Fatalf("the 256 MiB hog under a 48 MiB limit ended with %v, want SIGKILL", hog.ProcessState)
	}
	if sig := waitExit(t, bystander, 10*time.Second); sig != syscall.SIGKILL {
		t.Errorf("memory.oom.group: the other process ended with %v, want SIGKILL", bystander.ProcessState)
	}
	checkOOMStats(t, c, limit)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestVMPidsLimit: forks beyond pids.max fail and are counted.
func TestVMPidsLimit(t *testing.T) {
	c, _, fd := createIn(t, "rljail-test-pids", Limits{PidsMax: 8})
	sh, err := exec.LookPath("sh")
	args := []string{"-c"}
	if err != nil {
		if sh, err = exec.LookPath("busybox"); err != nil {
			t.Fatal("neither sh nor busybox on PATH")
		}
		args = []string{"sh", "-c"}
	}
	// Busy subshells: no command but the shell's own. They must not hold
	// stdout: busybox sh gives up at the first refused fork, and the read
	// below waits for its "forked" or its end.
	script := `i=0; while [ $i -lt 16 ]; do (while :; do :; done) >/dev/null 2>&1 & i=$((i+1)); done 2>/dev/null; echo forked; wait`
	cmd := exec.Command(sh, append(args, script)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	readWithin(t, stdout, 30*time.Second) // "forked", or EOF if the shell gave up
	checkForkStats(t, c)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, 5*time.Second)
}

// TestVMCPULimit: a busy loop under --cpus 0.25 gets about a quarter of a
// CPU (wide bounds: the VM is emulated).
func TestVMCPULimit(t *testing.T) {
	c, leaf, fd := createIn(t, "rljail-test-cpu", Limits{CPUs: 0.25})
	spinner := helperCommand("spin", "500")
	start := time.Now()
	bornIn(t, leaf, spinner, fd)
	if sig := waitExit(t, spinner, 60*time.Second); sig != 0 {
		t.Fatalf("spinner: %v", spinner.ProcessState)
	}
	wall := time.Since(start)
	usage, err := c.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wall %v, usage %v", wall, usage)
	// 500 ms of CPU at 25 ms per 100 ms period: at least 1.9 s of wall.
	if wall < 1500*time.Millisecond {
		t.Errorf("500 ms of CPU in %v of wall time under a 0.25 CPU limit", wall)
	}
	if ratio := float64(usage) / float64(wall); ratio > 0.4 {
		t.Errorf("CPU share %.2f under a 0.25 CPU limit", ratio)
	}
}

// TestVMNoLeftovers runs last: nothing of this process is left below the
// root, nor below the test top-level cgroup.
func TestVMNoLeftovers(t *testing.T) {
	testV2NoLeftovers(t, vmV2)
	if entries, err := os.ReadDir(filepath.Join(vmV2.mount, testTop)); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("left below %s: %s", testTop, e.Name())
			}
		}
	}
}

// TestVMDestroyEvictsPageCache: on v2 too, the page cache a process of the
// jail's cgroup left charged to it is reclaimed (memory.reclaim) before
// the cgroup is removed, which it would otherwise keep alive.
func TestVMDestroyEvictsPageCache(t *testing.T) {
	c, err := Create(Options{Name: "rljail-test-evict", Limits: Limits{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	fd, ok := c.CloneFD()
	if !ok {
		t.Fatalf("no v2 cgroup (placement %s)", c.Placement())
	}
	path := filepath.Join(t.TempDir(), "cached")
	w := helperCommand("write", path)
	w.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	w.Stdin = strings.NewReader("go\n")
	if err := w.Run(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	kv, err := readKV(filepath.Join(c.v2Leaf, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if kv["file"] < 4<<20 {
		t.Fatalf("memory.stat file %d after writing 4 MiB: the test cannot tell", kv["file"])
	}
	// The VM's files are in its initramfs, a tmpfs, whose pages no
	// reclaim can evict without swap: that memory.reclaim is written is
	// what shows here, and the eviction only on a disk's filesystem.
	var reclaimed bool
	testHook = func(step string) error {
		reclaimed = reclaimed || step == "write "+filepath.Join(c.v2Leaf, "memory.reclaim")
		return nil
	}
	defer func() { testHook = nil }()
	if err := c.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if !reclaimed {
		t.Errorf("Destroy did not write memory.reclaim of a cgroup with %d bytes of page cache", kv["file"])
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	if st.Type == tmpfsMagic || st.Type == ramfsMagic {
		t.Logf("%s is on a tmpfs: its pages stay in memory, whatever reclaim does", path)
		return
	}
	if n := residentPages(t, path); n > 0 {
		t.Errorf("%d pages of the file the cgroup's process wrote are still in the page cache after Destroy", n)
	}
}
