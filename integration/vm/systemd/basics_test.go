//go:build rljailsystemd

package systemd

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSystemdHost checks the VM is what the cases assume: systemd is PID
// 1, cgroup v2 alone is mounted at /sys/fs/cgroup with memory, pids and
// cpu, the system bus and logind run, and this test runs as root in the
// runner's service cgroup.
func TestSystemdHost(t *testing.T) {
	if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Errorf("PID 1 is %q, want systemd", strings.TrimSpace(string(comm)))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupFS, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Errorf("%s is not cgroup2 (statfs type %#x, %v)", cgroupFS, st.Type, err)
	}
	ctl, _ := os.ReadFile(cgroupFS + "/cgroup.controllers")
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " "+c+" ") {
			t.Errorf("controller %s missing from %s/cgroup.controllers (%q)", c, cgroupFS, ctl)
		}
	}
	for _, u := range []string{"dbus.service", "systemd-logind.service", "systemd-journald.service"} {
		if st, _ := output("systemctl", "is-active", u); st != "active" {
			t.Errorf("%s is %q, want active", u, st)
		}
	}
	if os.Getuid() != 0 {
		t.Errorf("running as uid %d, want root", os.Getuid())
	}
	if cg := ownCgroup(t); cg != "/system.slice/rljail-vm-tests.service" {
		t.Errorf("own cgroup %s, want /system.slice/rljail-vm-tests.service", cg)
	}
	t.Logf("systemd %s", strings.SplitN(run(t, "systemctl", "--version"), "\n", 2)[0])
}

// TestLoginUserRuns runs a jail as root from the runner's service and as
// rljailtest in a login session (asLoginUser checks the session itself),
// and then checks from root that nothing of either is left.
func TestLoginUserRuns(t *testing.T) {
	mark := marker(t)
	r := rljail(t, nil, "--", "python3", "-c", "print('hello')", mark)
	r.wantStatus(t, "ok")
	if strings.TrimSpace(r.stdout) != "hello" {
		t.Errorf("stdout %q, want hello:\n%s", r.stdout, r)
	}
	if !asLoginUser(t, func(t *testing.T) {
		if st, err := output("systemctl", "--user", "is-system-running"); st != "running" && st != "degraded" {
			t.Errorf("systemctl --user is-system-running: %q %v: the user manager is not reachable", st, err)
		}
		r := rljail(t, nil, "--", "python3", "-c", "import os; print(os.getuid())", mark)
		r.wantStatus(t, "ok")
		t.Logf("as %s: stdout %q, placement %s, stderr %q", testUser, strings.TrimSpace(r.stdout), r.str("limits.cgroup_placement"), r.stderr)
	}) {
		return
	}
	noLeftovers(t, mark)
}

// TestLeftoverCheck proves that noLeftovers can fail: with a jail running
// it sees the jail's cgroup and processes, and after rljail is stopped
// (SIGTERM) nothing.
func TestLeftoverCheck(t *testing.T) {
	mark := marker(t)
	cmd := exec.Command(rljailBin(), "run", "--no-workspace", "--timeout", "120s", "--", "python3", "-c", "import time; time.sleep(100)", mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var cgs, procs []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cgs, procs = jailCgroups(), procsWith(mark); len(cgs) > 0 && len(procs) > 1 {
			break
		}
	}
	if len(cgs) == 0 || len(procs) < 2 {
		t.Fatalf("with a jail running, jailCgroups found %q and procsWith %q: the leftover check would see nothing", cgs, procs)
	}
	t.Logf("while running: cgroups %q, %d processes", cgs, len(procs))
	cmd.Process.Signal(unix.SIGTERM)
	cmd.Wait()
	noLeftovers(t, mark)
}
