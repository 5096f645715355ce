//go:build rljailvm

package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	// cgroup2SuperMagic is CGROUP2_SUPER_MAGIC of <linux/magic.h>.
	cgroup2SuperMagic = 0x63677270
	// The unprivileged user the VM's init creates.
	testUID  = 1001
	testHome = "/home/rljailtest"
)

var rljailBin, rootfsDir string

func TestMain(m *testing.M) {
	if os.Getenv("RLJAIL_IN_VM") != "1" {
		fmt.Fprintln(os.Stderr, "guest: these tests check the rljail test VM and run only inside it; run `go test ./integration/vm/`")
		os.Exit(1)
	}
	rljailBin = os.Getenv("RLJAIL_BIN")
	rootfsDir = os.Getenv("RLJAIL_ROOTFS")
	if rljailBin == "" || rootfsDir == "" {
		fmt.Fprintln(os.Stderr, "guest: RLJAIL_BIN and RLJAIL_ROOTFS must be set (the VM's init sets them)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestCgroup2MountedAtSysFsCgroup(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(cgroupRoot, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != cgroup2SuperMagic {
		t.Fatalf("%s has filesystem magic %#x, want cgroup2 (%#x)", cgroupRoot, st.Type, cgroup2SuperMagic)
	}
}

func TestNoCgroupV1(t *testing.T) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup" {
			t.Errorf("a cgroup v1 hierarchy is mounted: %s", l)
		}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(self)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "0::/") {
		t.Errorf("/proc/self/cgroup = %q, want the single v2 line 0::/...", self)
	}
	t.Logf("own cgroup: %s", strings.TrimSpace(string(self)))
}

func TestRootControllers(t *testing.T) {
	for _, file := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		b, err := os.ReadFile(cgroupRoot + "/" + file)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, c := range strings.Fields(string(b)) {
			have[c] = true
		}
		t.Logf("root %s: %s", file, strings.TrimSpace(string(b)))
		for _, want := range []string{"memory", "pids", "cpu"} {
			if !have[want] {
				t.Errorf("root %s = %q: %s missing", file, strings.TrimSpace(string(b)), want)
			}
		}
	}
}

// rljail runs rljail with args, as root or (uid != 0) as that user.
func rljail(t *testing.T, uid int, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rljailBin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RLJAIL_ROOTFS=" + rootfsDir, "HOME=/root", "USER=root"}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RLJAIL_ROOTFS=" + rootfsDir, "HOME=" + testHome, "USER=rljailtest"}
		cmd.Dir = testHome
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err = cmd.Run()
	t.Logf("uid %d: rljail %s: %v in %v; stderr: %q", uid, strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), errOut.String())
	return out.String(), errOut.String(), err
}

// TestWorkspaceOnTmpfsWithoutIdmap: the test's working directory is on
// tmpfs (the VM's root), and Debian 12's kernel (6.1) cannot idmap tmpfs
// (that came with 6.3). As root, rljail must then grant the workspace
// without the idmapping, say so in a warning, and run.
func TestWorkspaceOnTmpfsWithoutIdmap(t *testing.T) {
	stdout, stderr, err := rljail(t, 0, "--", "python3", "-c", "import os; print(sorted(os.listdir('/workspace')) is not None)")
	if err != nil {
		t.Fatalf("rljail with a tmpfs workspace: %v\n%s", err, stderr)
	}
	if stdout != "True\n" {
		t.Errorf("printed %q, want True", stdout)
	}
	if !strings.Contains(stderr, "without mapping its owner") {
		t.Logf("no idmap warning (this kernel may idmap tmpfs): %q", stderr)
	}
}

// TestRljailRunsPython runs Python in a jail as root and rootless.
func TestRljailRunsPython(t *testing.T) {
	for _, who := range []struct {
		name string
		uid  int
	}{{"root", 0}, {"rootless", testUID}} {
		t.Run(who.name, func(t *testing.T) {
			stdout, _, err := rljail(t, who.uid, "--no-workspace", "--", "python3", "-c", "print(6*7)")
			if err != nil {
				t.Fatalf("rljail as uid %d: %v", who.uid, err)
			}
			if stdout != "42\n" {
				t.Errorf("rljail as uid %d printed %q, want \"42\\n\"", who.uid, stdout)
			}
		})
	}
}

func TestRljailCheckSeesCgroupV2(t *testing.T) {
	stdout, stderr, err := rljail(t, 0, "check")
	t.Logf("rljail check:\n%s", stdout)
	if err != nil {
		t.Fatalf("rljail check: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout+stderr, "v2") {
		t.Errorf("rljail check does not mention cgroup v2")
	}
	// Debian's 6.1, with the overlay module the harness loads, presents
	// read-only directories through overlayfs.
	if !strings.Contains(stdout, "\nok    overlayfs ") {
		t.Errorf("rljail check does not report overlayfs as working")
	}
}
