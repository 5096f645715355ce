//go:build rljailsystemd

package systemd

// rljail's AppArmor profiles (contrib/apparmor/rljail) loaded into the VM's
// kernel (Debian's 6.1, AppArmor on by default) with AppArmor 4.1's parser
// (packaging/apparmor-check.sh's, under its own loader): the kernel neither
// restricts user namespaces nor knows the userns rule, so this case is
// about the transitions, not about userns itself. The profile rljail
// attaches to the binary under test; a jail run keeps it (the supervisor
// and the payload: rljail's own execs); the program `rljail rootfs build
// --python` starts runs as rljail-host (hostexec); with rljail-host
// unloaded, the build refuses to start it at all.
//
// The "interpreter" is this test binary copied to a file named
// labelProbeName: TestMain sees the name and runs labelProbe, which writes
// the label the kernel gave it beside itself.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const labelProbeName = "aa-label-probe"

// labelProbe is the probe's body: its own AppArmor label into the file
// "label" beside it, then exit status 3 (rljail rootfs build then fails:
// the probe is no Python).
func labelProbe() {
	b, err := os.ReadFile("/proc/self/attr/current")
	if err != nil {
		b = []byte("read /proc/self/attr/current: " + err.Error())
	}
	os.WriteFile(filepath.Join(filepath.Dir(os.Args[0]), "label"), b, 0o644)
	os.Exit(3)
}

const aa4 = "/rljail-vm/apparmor4"

// apparmorParser runs AppArmor 4.1's parser with args, under its own C
// library's loader, reading includes from its own abi and tunables.
func apparmorParser(args ...string) (string, error) {
	lib := aa4 + "/usr/lib/x86_64-linux-gnu"
	argv := append([]string{"--library-path", lib, aa4 + "/usr/sbin/apparmor_parser",
		"--config-file", "/dev/null", "-K", "--base", aa4 + "/etc/apparmor.d", "-I", aa4 + "/etc/apparmor.d"}, args...)
	return output(lib+"/ld-linux-x86-64.so.2", argv...)
}

// label reads a process's AppArmor label as this (root) process sees it.
func label(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/attr/current")
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return strings.TrimRight(string(b), "\x00\n")
}

func TestAppArmorProfiles(t *testing.T) {
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err != nil || strings.TrimSpace(string(b)) != "Y" {
		t.Fatalf("AppArmor is not enabled in the VM's kernel (%q, %v): boot it with apparmor=1 security=apparmor", b, err)
	}
	if _, err := os.Stat("/sys/kernel/security/apparmor/profiles"); err != nil {
		t.Fatalf("no AppArmor securityfs: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(os.Getenv("RLJAIL_VM_SRC"), "contrib", "apparmor", "rljail"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	profile := filepath.Join(dir, "rljail")
	if err := os.WriteFile(profile, bytes.ReplaceAll(src, []byte("@BINDIR@"), []byte(filepath.Dir(rljailBin()))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := apparmorParser("-r", profile); err != nil {
		t.Fatalf("apparmor_parser -r %s: %v\n%s", profile, err, out)
	} else if out != "" {
		t.Logf("apparmor_parser -r: %s", out)
	}
	t.Cleanup(func() {
		apparmorParser("-R", profile)
		b, _ := os.ReadFile("/sys/kernel/security/apparmor/profiles")
		if strings.Contains(string(b), "rljail") {
			t.Errorf("profiles left loaded: %s", b)
		}
	})
	loaded, _ := os.ReadFile("/sys/kernel/security/apparmor/profiles")
	for _, want := range []string{"rljail (unconfined)", "rljail-host (unconfined)"} {
		if !strings.Contains(string(loaded), want+"\n") {
			t.Fatalf("the kernel's profiles lack %q:\n%s", want, loaded)
		}
	}

	t.Run("jail", func(t *testing.T) {
		// The supervisor and the payload, read from /proc while the run
		// sleeps: both rljail, and the run ends ok.
		marker := "aa-jail-" + strconv.Itoa(os.Getpid())
		report := filepath.Join(t.TempDir(), "result.json")
		cmd := exec.Command(rljailBin(), "run", "--no-workspace", "--result", report, "--",
			"python3", "-c", "import time; time.sleep(4) # "+marker)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{} // "rljail" (the supervisor), "payload"
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && len(labels) < 2; time.Sleep(100 * time.Millisecond) {
			labels["rljail"] = label(cmd.Process.Pid)
			for _, p := range procsWith(marker) {
				pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
				if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); strings.HasPrefix(filepath.Base(exe), "python3") {
					labels["payload"] = label(pid)
				}
			}
		}
		err := cmd.Wait()
		for _, who := range []string{"rljail", "payload"} {
			if labels[who] != "rljail (unconfined)" {
				t.Errorf("the jail's %s ran as %q, want \"rljail (unconfined)\"", who, labels[who])
			}
		}
		if err != nil {
			t.Fatalf("rljail run under the profile: %v\n%s", err, stderr.String())
		}
		rep := readReport(t, report)
		rep.wantStatus(t, "ok")
	})

	// The probe, as `rljail rootfs build --python` would start a host Python.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The probe's directory is the unprivileged user's too: the attack is a
	// local user's, and the probe writes its label there. t.TempDir's
	// parents are root's 0700, so under /tmp.
	probeDir, err := os.MkdirTemp("/tmp", "aa-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(probeDir) })
	os.Chmod(probeDir, 0o777)
	probe := filepath.Join(probeDir, labelProbeName)
	run(t, "cp", self, probe)
	// build runs rljail rootfs build with the probe as its Python, as root
	// or as the unprivileged user (runuser, no login session needed), and
	// returns the probe's label ("" when it did not run) and rljail's output.
	build := func(t *testing.T, asUser bool) (string, string) {
		os.Remove(filepath.Join(probeDir, "label"))
		// Each user's own: the build's lock beside it is its builder's.
		out := filepath.Join(probeDir, map[bool]string{false: "root-rootfs", true: "user-rootfs"}[asUser])
		argv := []string{rljailBin(), "rootfs", "build", "-q", "--python", probe, "--rootfs", out}
		if asUser {
			argv = append([]string{"runuser", "-u", testUser, "--"}, argv...)
		}
		b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 125 {
			t.Errorf("%s: %v, want exit status 125\n%s", strings.Join(argv, " "), err, b)
		}
		if _, err := os.Lstat(out); err == nil {
			t.Errorf("the failed build left %s", out)
		}
		msg := strings.TrimSpace(string(b))
		if strings.Count(msg, "\n") > 0 {
			t.Errorf("more than one line on stderr:\n%s", msg)
		}
		l, _ := os.ReadFile(filepath.Join(probeDir, "label"))
		return strings.TrimRight(string(l), "\x00\n"), msg
	}

	for _, asUser := range []bool{false, true} {
		who := map[bool]string{false: "root", true: testUser}[asUser]
		t.Run("rootfs build's Python runs as rljail-host, "+who, func(t *testing.T) {
			got, out := build(t, asUser)
			if got != "rljail-host (unconfined)" {
				t.Errorf("the program rljail rootfs build --python started ran as %q, want \"rljail-host (unconfined)\" (\"rljail (unconfined)\": it kept rljail's userns)\nrljail: %s", got, out)
			}
		})
	}

	t.Run("refused without rljail-host", func(t *testing.T) {
		hostOnly := filepath.Join(dir, "rljail-host")
		os.WriteFile(hostOnly, []byte("abi <abi/4.0>,\nprofile rljail-host flags=(unconfined) {\n}\n"), 0o644)
		if out, err := apparmorParser("-R", hostOnly); err != nil {
			t.Fatalf("apparmor_parser -R rljail-host: %v\n%s", err, out)
		}
		got, out := build(t, true)
		if got != "" {
			t.Errorf("with rljail-host unloaded the probe still ran, as %q", got)
		}
		if !strings.Contains(out, `the kernel did not take the request to run it as rljail-host ("exec rljail-host": write /proc/thread-self/attr/`) {
			t.Errorf("rljail rootfs build's error is not the refused request for rljail-host: %s", out)
		}
		t.Logf("refused: %s", strings.TrimSpace(out))
	})
	noLeftovers(t, "aa-jail-")
}
