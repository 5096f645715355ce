//go:build rljailsystemd

package systemd

// The .deb of packaging/deb in a systemd host: install, the packaged
// rljail-runner@.service with its jail's limits below the service's cgroup,
// `systemctl stop` of a running job leaving nothing, upgrade to a second
// version with a job running, remove (which stops it) and purge.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debs are the package's two versions the harness put in, oldest first.
func debs(t *testing.T) (v1, v2 string) {
	t.Helper()
	ds, _ := filepath.Glob(filepath.Join(os.Getenv("RLJAIL_VM_DEBS"), "rljail_*.deb"))
	if len(ds) != 2 {
		t.Fatalf("want two packages in RLJAIL_VM_DEBS=%s, found %q", os.Getenv("RLJAIL_VM_DEBS"), ds)
	}
	return ds[0], ds[1] // 0.0~vmtest1 sorts before 0.0~vmtest2
}

// installedVersion is dpkg's version of rljail, "" when not installed.
func installedVersion() string {
	out, err := output("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", "rljail")
	if err != nil || !strings.HasPrefix(out, "ii ") {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(out, "ii "))
}

// unitState is a unit's LoadState and ActiveState ("loaded active").
func unitState(t *testing.T, unit string) string {
	t.Helper()
	out := run(t, "systemctl", "show", "-p", "LoadState", "-p", "ActiveState", "--value", unit)
	return strings.Join(strings.Fields(out), " ")
}

// writeJob puts a runner job in /etc/rljail/runner.
func writeJob(t *testing.T, name, code, flags string) {
	t.Helper()
	if err := os.MkdirAll("/etc/rljail/runner", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/rljail/runner/"+name+".py", []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/rljail/runner/"+name+".conf", []byte("RLJAIL_FLAGS="+flags+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// runnerJail finds the jail cgroup below the runner instance's cgroup.
func runnerJail(unit string) string {
	dir := cgroupFS + "/rljail.slice/" + unit
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && jailCgroupRE.MatchString(e.Name()) {
			return dir + "/" + e.Name()
		}
	}
	return ""
}

func TestDebPackage(t *testing.T) {
	v1, v2 := debs(t)
	if v := installedVersion(); v != "" {
		t.Fatalf("rljail %s is installed before the test", v)
	}
	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"install", func(t *testing.T) {
			// Earlier root-run jails made /run/rljail themselves.
			os.RemoveAll("/run/rljail")
			run(t, "dpkg", "-i", v1)
			if v := installedVersion(); v != "0.0~vmtest1" {
				t.Fatalf("installed version %q, want 0.0~vmtest1", v)
			}
			if out, err := output("/usr/bin/rljail", "version"); err != nil {
				t.Errorf("/usr/bin/rljail version: %v %s", err, out)
			}
			if st := unitState(t, "rljail.slice"); !strings.HasPrefix(st, "loaded ") {
				t.Errorf("rljail.slice: %s, want loaded (postinst reloads systemd)", st)
			}
			if st := unitState(t, "rljail-runner@x.service"); !strings.HasPrefix(st, "loaded ") {
				t.Errorf("rljail-runner@x.service: %s, want loaded", st)
			}
			if st, err := os.Stat("/run/rljail"); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("/run/rljail: %v %v, want a directory of mode 0700 (tmpfiles.d, created by postinst)", st, err)
			}
			// Debian 12 has no AppArmor 4: the profile stays in /usr/share.
			if _, err := os.Stat("/etc/apparmor.d/rljail"); err == nil {
				t.Errorf("/etc/apparmor.d/rljail installed where AppArmor 4 is absent")
			}
			if b, err := os.ReadFile("/usr/share/rljail/apparmor/rljail"); err != nil || !strings.Contains(string(b), "profile rljail /usr/bin/rljail ") {
				t.Errorf("/usr/share/rljail/apparmor/rljail: %v: want the profile for /usr/bin/rljail", err)
			}
		}},
		{"runner-limits", func(t *testing.T) {
			// A job that holds still long enough to look at its cgroup
			// from here, then ends by itself.
			writeJob(t, "vmshort", "import time\ntime.sleep(3)\nprint('done')\n", "--memory 64m --pids-limit 16 --timeout 30s")
			os.Remove("/var/lib/rljail-runner/vmshort.json")
			run(t, "systemctl", "start", "rljail-runner@vmshort.service")
			var jail string
			if !waitFor(60*time.Second, func() bool { jail = runnerJail("rljail-runner@vmshort.service"); return jail != "" }) {
				t.Fatalf("no jail cgroup appeared below %s/rljail.slice/rljail-runner@vmshort.service\n%s", cgroupFS, unitDiag("rljail-runner@vmshort.service"))
			}
			// Once the payload runs in the jail's cgroup, its limits are set.
			if !waitFor(60*time.Second, func() bool { return cgroupHolds(jail, "/job/main.py") }) {
				t.Fatalf("the job never ran in %s\n%s", jail, unitDiag("rljail-runner@vmshort.service"))
			}
			for f, want := range map[string]string{"memory.max": "67108864", "pids.max": "16"} {
				if b, _ := os.ReadFile(jail + "/" + f); strings.TrimSpace(string(b)) != want {
					t.Errorf("%s/%s = %q, want %s", jail, f, strings.TrimSpace(string(b)), want)
				}
			}
			// The unit's own cgroup holds no process (cgroup v2's rule for a
			// parent of controlled children); rljail moved into its leaf.
			svc := cgroupFS + "/rljail.slice/rljail-runner@vmshort.service"
			if b, _ := os.ReadFile(svc + "/cgroup.procs"); len(strings.TrimSpace(string(b))) > 0 {
				t.Errorf("%s/cgroup.procs holds %q, want none", svc, b)
			}
			sup, _ := os.ReadFile(svc + "/rljail-supervisor/cgroup.procs")
			if len(strings.Fields(string(sup))) == 0 {
				t.Errorf("%s/rljail-supervisor holds no process, want rljail", svc)
			}
			for _, pid := range strings.Fields(string(sup)) {
				if exe, _ := os.Readlink("/proc/" + pid + "/exe"); exe != "/usr/bin/rljail" {
					t.Errorf("process %s in %s/rljail-supervisor runs %q, want only the packaged /usr/bin/rljail", pid, svc, exe)
				}
			}
			if !waitFor(90*time.Second, func() bool {
				st := unitState(t, "rljail-runner@vmshort.service")
				return st == "loaded inactive" || st == "loaded failed"
			}) {
				t.Fatalf("rljail-runner@vmshort.service did not end: %s", unitState(t, "rljail-runner@vmshort.service"))
			}
			if st := unitState(t, "rljail-runner@vmshort.service"); st != "loaded inactive" {
				t.Errorf("rljail-runner@vmshort.service ended %s, want inactive (the job exits 0)", st)
			}
			rep := readReport(t, "/var/lib/rljail-runner/vmshort.json")
			rep.wantStatus(t, "ok")
			rep.wantPlacement(t, "cgroup2-own")
			rep.wantMechanism(t, "memory_bytes", "cgroup2")
			rep.wantMechanism(t, "pids", "cgroup2")
			noLeftovers(t, "/job/main.py")
		}},
		{"runner-stop", func(t *testing.T) {
			writeJob(t, "vmlong", "import time\ntime.sleep(600)\n", "--memory 64m --timeout 700s")
			run(t, "systemctl", "start", "rljail-runner@vmlong.service")
			if !waitFor(60*time.Second, func() bool { return runnerJail("rljail-runner@vmlong.service") != "" }) {
				t.Fatalf("no jail cgroup below rljail-runner@vmlong.service\n%s", unitDiag("rljail-runner@vmlong.service"))
			}
			start := time.Now()
			run(t, "systemctl", "stop", "rljail-runner@vmlong.service")
			t.Logf("systemctl stop took %v", time.Since(start).Round(time.Millisecond))
			if _, err := os.Stat(cgroupFS + "/rljail.slice/rljail-runner@vmlong.service"); err == nil {
				t.Errorf("the stopped service's cgroup is still there")
			}
			noLeftovers(t, "/job/main.py")
		}},
		{"upgrade", func(t *testing.T) {
			// A job running across the upgrade keeps running: prerm
			// stops jobs only on removal.
			run(t, "systemctl", "start", "rljail-runner@vmlong.service")
			if !waitFor(60*time.Second, func() bool { return runnerJail("rljail-runner@vmlong.service") != "" }) {
				t.Fatalf("no jail cgroup below rljail-runner@vmlong.service\n%s", unitDiag("rljail-runner@vmlong.service"))
			}
			run(t, "dpkg", "-i", v2)
			if v := installedVersion(); v != "0.0~vmtest2" {
				t.Fatalf("installed version %q after the upgrade, want 0.0~vmtest2", v)
			}
			if st := unitState(t, "rljail-runner@vmlong.service"); st != "loaded active" {
				t.Errorf("the running job is %s after the upgrade, want loaded active", st)
			}
			if out, err := output("/usr/bin/rljail", "version"); err != nil {
				t.Errorf("/usr/bin/rljail version after the upgrade: %v %s", err, out)
			}
		}},
		{"remove", func(t *testing.T) {
			run(t, "dpkg", "-r", "rljail")
			if v := installedVersion(); v != "" {
				t.Fatalf("rljail %s still installed after dpkg -r", v)
			}
			for _, p := range []string{"/usr/bin/rljail", "/usr/lib/systemd/system/rljail.slice", "/usr/lib/systemd/system/rljail-runner@.service", "/usr/lib/tmpfiles.d/rljail.conf"} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s is still there after dpkg -r", p)
				}
			}
			if st := unitState(t, "rljail-runner@vmlong.service"); !strings.HasSuffix(st, " inactive") && !strings.HasSuffix(st, " failed") {
				t.Errorf("the job is %s after dpkg -r, want stopped (prerm)", st)
			}
			noLeftovers(t, "/job/main.py")
			if _, err := os.Stat("/var/lib/rljail-runner"); err != nil {
				t.Errorf("the runner's results are gone after remove (only purge removes them): %v", err)
			}
		}},
		{"purge", func(t *testing.T) {
			run(t, "dpkg", "-P", "rljail")
			if out, _ := output("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "rljail"); strings.TrimSpace(out) != "" && !strings.HasPrefix(out, "un") && !strings.Contains(out, "no packages found") {
				t.Errorf("dpkg status after purge: %q", out)
			}
			for _, p := range []string{"/var/lib/rljail-runner", "/usr/share/rljail", "/usr/share/doc/rljail"} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s is still there after dpkg -P", p)
				}
			}
			if _, err := os.Stat("/etc/rljail/runner/vmlong.py"); err != nil {
				t.Errorf("the administrator's job was removed by purge: %v", err)
			}
			noLeftovers(t, "")
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			t.Fatalf("step %s failed; the later steps depend on it", s.name)
		}
	}
}

// cgroupHolds reports whether a process of the cgroup dir has marker in
// its command line.
func cgroupHolds(dir, marker string) bool {
	b, _ := os.ReadFile(dir + "/cgroup.procs")
	for _, pid := range strings.Fields(string(b)) {
		if c, _ := os.ReadFile("/proc/" + pid + "/cmdline"); strings.Contains(string(c), marker) {
			return true
		}
	}
	return false
}

// unitDiag is a unit's status and journal, for a failure message.
func unitDiag(unit string) string {
	st, _ := output("systemctl", "status", "--no-pager", "-l", unit)
	j, _ := output("journalctl", "--no-pager", "-o", "cat", "-n", "40", "-u", unit)
	return "systemctl status " + unit + ":\n" + st + "\njournal:\n" + j
}

// readReport reads a result report a unit wrote.
func readReport(t *testing.T, path string) runResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the runner's report: %v", err)
	}
	r := runResult{args: []string{"(report " + path + ")"}}
	if err := json.Unmarshal(b, &r.report); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return r
}
