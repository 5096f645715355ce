//go:build rljailsystemd

package systemd

import (
	"os"
	"strings"
	"testing"

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
