//go:build rljailsystemd

package systemd

// `make install` (packaging/install.sh) on a running systemd: the units in
// /usr/local/lib/systemd/system are found after its daemon-reload, its
// tmpfiles.d entry applied, the runner template runs a job with the
// installed binary, a missing job fails the start; `make uninstall` takes
// it all away. Runs after TestDebPackage (file order), which purged the
// package: both ship the same unit names.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMakeInstall(t *testing.T) {
	if v := installedVersion(); v != "" {
		t.Fatalf("the package rljail %s is installed: its units would hide nothing, but this case wants /usr/local's alone", v)
	}
	script := filepath.Join(os.Getenv("RLJAIL_VM_SRC"), "packaging", "install.sh")
	os.RemoveAll("/run/rljail")
	run(t, "sh", script, "--bin", rljailBin())
	t.Cleanup(func() { output("sh", script, "--uninstall") })

	if st, err := os.Stat("/run/rljail"); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("/run/rljail after install: %v %v, want mode 0700 (tmpfiles.d)", st, err)
	}
	if p, _ := output("systemctl", "show", "-p", "FragmentPath", "--value", "rljail-runner@x.service"); p != "/usr/local/lib/systemd/system/rljail-runner@.service" {
		t.Errorf("rljail-runner@x.service comes from %q, want /usr/local/lib/systemd/system/rljail-runner@.service", p)
	}
	if st := unitState(t, "rljail.slice"); !strings.HasPrefix(st, "loaded ") {
		t.Errorf("rljail.slice: %s, want loaded", st)
	}

	writeJob(t, "vminst", "print('installed')\n", "--memory 64m")
	os.Remove("/var/lib/rljail-runner/vminst.json")
	run(t, "systemctl", "start", "rljail-runner@vminst.service")
	if !waitFor(90*time.Second, func() bool { return unitState(t, "rljail-runner@vminst.service") != "loaded active" }) {
		t.Fatalf("the job did not end\n%s", unitDiag("rljail-runner@vminst.service"))
	}
	rep := readReport(t, "/var/lib/rljail-runner/vminst.json")
	rep.wantStatus(t, "ok")
	rep.wantPlacement(t, "cgroup2-own")
	if mp, _ := output("systemctl", "show", "-p", "ExecMainPID", "-p", "ExecStart", "--value", "rljail-runner@vminst.service"); !strings.Contains(mp, "/usr/local/bin/rljail") {
		t.Errorf("the job's ExecStart does not run /usr/local/bin/rljail: %q", mp)
	}

	// A job that does not exist fails the start rather than being skipped.
	if out, err := output("systemctl", "start", "rljail-runner@vmmissing.service"); err == nil {
		t.Errorf("systemctl start of a job without /etc/rljail/runner/vmmissing.py succeeded: %q", out)
	}
	noLeftovers(t, "/job/main.py")

	run(t, "sh", script, "--uninstall")
	for _, p := range []string{"/usr/local/bin/rljail", "/usr/local/lib/systemd/system/rljail.slice", "/usr/local/lib/systemd/system/rljail-runner@.service", "/usr/local/lib/tmpfiles.d/rljail.conf", "/usr/local/share/rljail"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after uninstall", p)
		}
	}
	if st := unitState(t, "rljail-runner@x.service"); !strings.HasPrefix(st, "not-found ") {
		t.Errorf("rljail-runner@x.service after uninstall: %s, want not-found (install.sh reloads systemd)", st)
	}
}
