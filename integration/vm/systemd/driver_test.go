//go:build rljailsystemd

package systemd

// The systemd cgroup driver (--cgroup-manager, cgroup/scope.go) under a
// real systemd: root's jails in a transient scope of the system manager in
// rljail.slice, a login user's in one of the user manager, every limit held
// in the jail's cgroup below the scope, the fallback when the user manager
// is gone, and nothing left: no cgroup, no process, no unit. Decided from
// outside the jail: the report rljail writes, the cgroup tree, systemctl,
// and the tasks of the jail's PID namespace as /proc shows them.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sd "github.com/rljail/rljail/cgroup/systemd"
	"github.com/rljail/rljail/integration/bombs"
)

// cpuLoop spins for 3 s of wall-clock time.
const cpuLoop = `
import time
end = time.monotonic() + 3
while time.monotonic() < end:
    pass
`

// slowVM lets the exchange with systemd take longer than a real machine's
// 2 s: under the VM's software emulation the exchange alone took 1.1 to
// 2.7 s, more while systemd was busy with the previous run's end.
func slowVM(t *testing.T) { t.Setenv("RLJAIL_SYSTEMD_TIMEOUT", "30s") }

var scopeUnitRE = regexp.MustCompile(`^rljail-[A-Za-z0-9]+\.scope$`)

// rljailUnits lists the rljail units systemd knows of (loaded, in any
// state) in the manager systemctl args name (nil: the system manager).
func rljailUnits(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := output("systemctl", append(args, "list-units", "--all", "--no-legend", "--plain", "rljail-*.scope")...)
	if err != nil {
		t.Fatalf("systemctl %v list-units: %v: %s", args, err, out)
	}
	var units []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			units = append(units, f[0])
		}
	}
	return units
}

// noUnits fails unless, within a few seconds, no rljail unit is left in
// that manager: a scope goes when its cgroup empties.
func noUnits(t *testing.T, args ...string) {
	t.Helper()
	var units []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if units = rljailUnits(t, args...); len(units) == 0 {
			return
		}
	}
	t.Errorf("rljail units left in systemctl %v: %v", args, units)
}

// wantScope checks that a run's cgroup was a scope's, below sliceDir.
func wantScope(t *testing.T, r runResult, sliceDir string) {
	t.Helper()
	r.wantPlacement(t, "systemd-scope")
	unit, path := r.str("limits.systemd_scope"), r.str("limits.cgroup_path")
	if !scopeUnitRE.MatchString(unit) {
		t.Errorf("limits.systemd_scope %q is not rljail-<id>.scope:\n%s", unit, r)
	}
	if want := sliceDir + "/" + unit + "/"; !strings.HasPrefix(path, want) || !strings.HasPrefix(filepath.Base(path), "rljail-") {
		t.Errorf("limits.cgroup_path %q, want the jail's cgroup in %s:\n%s", path, want, r)
	}
}

// limitRuns holds memory, pids and CPU limits in the jail's cgroup in a
// scope of the manager in use (sliceDir: where its scopes go).
func limitRuns(t *testing.T, sliceDir string, cpuHeld bool) {
	limitChecks(t, nil, "systemd-scope", true)

	r := rljail(t, nil, "--cpus", "0.5", "--timeout", "30s", "--", "python3", "-c", cpuLoop, marker(t)+"-cpu")
	r.wantStatus(t, "ok")
	wantScope(t, r, sliceDir)
	r.wantMechanism(t, "memory_bytes", "cgroup2")
	r.wantMechanism(t, "pids", "cgroup2")
	if !cpuHeld {
		r.wantMechanism(t, "cpus", "none")
		return
	}
	r.wantMechanism(t, "cpus", "cgroup2")
	// Held at half a CPU over the jail's whole life (Python's start under
	// TCG is seconds of CPU too): an unlimited loop would use about all
	// of its wall time.
	cpu, wall := r.num("cpu_user_ms")+r.num("cpu_system_ms"), r.num("wall_ms")
	if cpu > 0.55*wall+100 || cpu < 0.3*3000 {
		t.Errorf("cpu loop at --cpus 0.5: %v ms of CPU in %v ms, want at most half of it:\n%s", cpu, wall, r)
	}
	t.Logf("cpu loop at --cpus 0.5: %v ms CPU in %v ms", cpu, wall)
}

// TestDriverRoot: root's jails from a service that holds other processes
// (this test's) get a transient scope of the system manager in
// rljail.slice with every limit held, and nothing of it is left.
func TestDriverRoot(t *testing.T) {
	slowVM(t)
	check := run(t, rljailBin(), "check")
	if !strings.Contains(check, "cgroup manager: systemd (--cgroup-manager auto") || !strings.Contains(check, "rljail.slice of the system manager") {
		t.Errorf("rljail check does not say that auto picks the system manager:\n%s", check)
	}
	limitRuns(t, "/rljail.slice", true)

	// While a jail runs, its scope is a unit of rljail.slice, delegated,
	// with the jail's cgroup and the guard's leaf in it.
	mark := marker(t)
	cmd := exec.Command(rljailBin(), "run", "--no-workspace", "--memory", "96m", "--pids-limit", "20", "--cpus", "0.5", "--", "python3", "-c", "import time; time.sleep(30)", mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	scope := waitScope(t, "/sys/fs/cgroup/rljail.slice")
	unit := filepath.Base(scope)
	if got, _ := output("systemctl", "show", "-p", "Slice", "--value", unit); got != "rljail.slice" {
		t.Errorf("%s: Slice=%q, want rljail.slice", unit, got)
	}
	if got, _ := output("systemctl", "show", "-p", "Delegate", "--value", unit); got != "yes" {
		t.Errorf("%s: Delegate=%q, want yes", unit, got)
	}
	if got, _ := output("systemctl", "show", "-p", "CollectMode", "--value", unit); got != "inactive-or-failed" {
		t.Errorf("%s: CollectMode=%q, want inactive-or-failed", unit, got)
	}
	jail := waitJailCgroup(t, scope)
	if b, _ := os.ReadFile(filepath.Join(jail, "memory.max")); strings.TrimSpace(string(b)) != strconv.Itoa(96<<20) {
		t.Errorf("%s/memory.max = %q, want %d", jail, b, 96<<20)
	}
	if b, _ := os.ReadFile(filepath.Join(jail, "pids.max")); strings.TrimSpace(string(b)) != "20" {
		t.Errorf("%s/pids.max = %q, want 20", jail, b)
	}
	if b, _ := os.ReadFile(filepath.Join(jail, "cpu.max")); strings.TrimSpace(string(b)) != "50000 100000" {
		t.Errorf("%s/cpu.max = %q, want 50000 100000", jail, b)
	}
	if b, _ := os.ReadFile(filepath.Join(scope, "rljail-guard", "cgroup.procs")); len(strings.Fields(string(b))) != 1 {
		t.Errorf("%s/rljail-guard holds %q, want the run's guard alone", scope, b)
	}
	// The supervisor stays where it was started: this test's service.
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup"); !strings.Contains(string(b), "/system.slice/rljail-vm-tests.service") {
		t.Errorf("the supervisor's cgroup is %q, want this test's service", b)
	}

	// A SIGKILLed supervisor: the guard kills the jail and removes its
	// cgroup, the scope empties, systemd collects it.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	noUnits(t)
	noLeftovers(t, mark)
}

// TestDriverRootChoices: the placements that must not ask systemd, and
// the explicit manager's errors.
func TestDriverRootChoices(t *testing.T) {
	slowVM(t)
	r := rljail(t, nil, "--cgroup-manager", "cgroupfs", "--", "python3", "-c", "pass")
	r.wantStatus(t, "ok")
	r.wantPlacement(t, "cgroup2-toplevel")

	// A scope of its own with Delegate=yes: rljail uses it ("own"), no D-Bus.
	r = rljail(t, []string{"systemd-run", "--quiet", "--scope", "-p", "Delegate=yes"}, "--", "python3", "-c", "pass")
	r.wantStatus(t, "ok")
	r.wantPlacement(t, "cgroup2-own")

	// systemd-run --scope -p MemoryMax wrapping rljail: the jail within it.
	r = rljail(t, []string{"systemd-run", "--quiet", "--scope", "-p", "Delegate=yes", "-p", "MemoryMax=200M"}, "--memory", "64m", "--", "python3", "-c", bombs.Memory)
	r.wantStatus(t, "memory_limit")
	r.wantPlacement(t, "cgroup2-own")

	// --cgroup-parent names the scope's slice with the systemd manager.
	// (A dash nests: rljail-x.slice would be in rljail.slice.)
	r = rljail(t, nil, "--cgroup-manager", "systemd", "--cgroup-parent", "jailtest.slice", "--", "python3", "-c", "pass")
	r.wantStatus(t, "ok")
	wantScope(t, r, "/jailtest.slice")
	r = rljail(t, nil, "--cgroup-manager", "systemd", "--cgroup-parent", "/system.slice/jailtest.slice", "--", "python3", "-c", "pass")
	if r.code != 125 || !strings.Contains(r.stderr, "names the scope's slice unit") {
		t.Errorf("--cgroup-manager systemd with a parent that is no slice name: want exit 125 and why:\n%s", r)
	}
	noUnits(t)
	noLeftovers(t, "")
}

// TestDriverStartCost: what the scope adds to a run's start, from the
// wall time of the same run with cgroupfs (the top-level cgroup) and with
// systemd (medians of 5). Logged, not judged: timing is a benchmark's.
func TestDriverStartCost(t *testing.T) {
	slowVM(t)
	median := func(manager string) time.Duration {
		var walls []time.Duration
		for i := 0; i < 5; i++ {
			r := rljail(t, nil, "--cgroup-manager", manager, "--", "true")
			r.wantStatus(t, "ok")
			walls = append(walls, r.wall)
		}
		sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
		return walls[len(walls)/2]
	}
	fs, sd := median("cgroupfs"), median("systemd")
	t.Logf("start to end of `rljail run -- true` under TCG, medians of 5: cgroupfs %v, systemd scope %v (+%v)",
		fs.Round(time.Millisecond), sd.Round(time.Millisecond), (sd - fs).Round(time.Millisecond))
	noUnits(t)
}

// TestDriverLoginUser: a user at a login shell (session-N.scope, not
// delegated) gets a transient scope of the user manager, with the limits
// held. (With the user manager gone: TestLoginUserFallback.)
func TestDriverLoginUser(t *testing.T) {
	slowVM(t)
	userSlice := "/user.slice/user-1001.slice/user@1001.service/rljail.slice"
	if !asLoginUser(t, func(t *testing.T) {
		check := run(t, rljailBin(), "check")
		if !strings.Contains(check, "rljail.slice of the user manager") {
			t.Errorf("rljail check does not say that auto picks the user manager:\n%s", check)
		}
		ctl, _ := os.ReadFile("/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/cgroup.controllers")
		limitRuns(t, userSlice, slices.Contains(strings.Fields(string(ctl)), "cpu"))
		noUnits(t, "--user")

		// A SIGKILLed supervisor leaves nothing here either: the guard
		// removes the jail's cgroup, the user manager collects the scope.
		mark := marker(t)
		cmd := exec.Command(rljailBin(), "run", "--no-workspace", "--pids-limit", "20", "--", "python3", "-c", "import time; time.sleep(30)", mark)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		scope := waitScope(t, "/sys/fs/cgroup"+userSlice)
		if b, _ := os.ReadFile(filepath.Join(waitJailCgroup(t, scope), "pids.max")); strings.TrimSpace(string(b)) != "20" {
			t.Errorf("the jail's pids.max in %s = %q, want 20", scope, b)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		noUnits(t, "--user")
		if _, err := os.Stat(scope); err == nil {
			t.Errorf("%s is still there after its run's supervisor was killed", scope)
		}
	}) {
		return
	}
	noLeftovers(t, "")
}

// stopUserManager ends the calling user's systemd manager (systemctl
// --user exit) and waits until user@UID.service is no longer active;
// logind starts it again at the user's next login session.
func stopUserManager(t *testing.T) {
	t.Helper()
	if out, err := output("systemctl", "--user", "exit"); err != nil {
		t.Fatalf("systemctl --user exit: %v: %s", err, out)
	}
	unit := fmt.Sprintf("user@%d.service", os.Getuid())
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, _ := output("systemctl", "is-active", unit)
		if st != "active" && st != "deactivating" {
			t.Logf("%s is %s", unit, st)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still %s 20 s after systemctl --user exit", unit, st)
		}
	}
}

// wantUserManagerWarning fails unless the run's report says that the user
// manager could not be asked.
func wantUserManagerWarning(t *testing.T, r runResult) {
	t.Helper()
	ws, _ := r.field("warnings").([]any)
	for _, w := range ws {
		if s, _ := w.(string); strings.Contains(s, "systemd: cannot reach the user manager") {
			return
		}
	}
	t.Errorf("the report's warnings do not say the user manager could not be reached:\n%s", r)
}

// waitScope waits for a jail's scope to appear in the slice directory.
func waitScope(t *testing.T, sliceDir string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		entries, _ := os.ReadDir(sliceDir)
		for _, e := range entries {
			if e.IsDir() && scopeUnitRE.MatchString(e.Name()) {
				return filepath.Join(sliceDir, e.Name())
			}
		}
	}
	t.Fatalf("no rljail-*.scope appeared in %s", sliceDir)
	return ""
}

// waitJailCgroup waits for the jail's cgroup in the scope at dir.
func waitJailCgroup(t *testing.T, dir string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "rljail-") && e.Name() != "rljail-guard" {
				if _, err := os.Stat(filepath.Join(dir, e.Name(), "pids.max")); err == nil {
					return filepath.Join(dir, e.Name())
				}
			}
		}
	}
	t.Fatalf("no jail cgroup appeared in %s", dir)
	return ""
}

// TestDriverScopeExchange: what the D-Bus exchange itself costs, phase by
// phase (go-systemd's two connections, the StartTransientUnit reply, the
// wait for its job), for ten scopes of the system manager asked the way a
// run asks (cgroup/systemd.StartScope) for a sleeping process. Logged, not
// judged.
func TestDriverScopeExchange(t *testing.T) {
	var took, conn, call []time.Duration
	for i := 0; i < 10; i++ {
		child := exec.Command("sleep", "60")
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		sc, err := sd.StartScope(sd.Request{Unit: fmt.Sprintf("rljail-exchange%d.scope", i), Slice: "rljail.slice", PIDs: []int{child.Process.Pid}}, 30*time.Second)
		_ = child.Process.Kill()
		_ = child.Wait()
		if err != nil {
			t.Fatalf("StartScope: %v", err)
		}
		took, conn, call = append(took, sc.Took), append(conn, sc.Connect), append(call, sc.Call)
	}
	med := func(d []time.Duration) string {
		s := slices.Clone(d)
		slices.Sort(s)
		return fmt.Sprintf("median %v, max %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	t.Logf("StartScope under TCG, 10 scopes: whole %s; connect %s; call %s", med(took), med(conn), med(call))
	noUnits(t)
}
