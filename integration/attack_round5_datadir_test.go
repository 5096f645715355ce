package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Issue 33: a run takes a rootfs in rljail's data directory after a look
// at its top directory only, on the claim that no jail can ever have
// written it: no run may grant a writable volume that covers the data
// directory or lies in it. These cases try to get such a grant, by the
// path, by a directory above it, and by another name of the same
// directory (a bind mount); each decides from the host: rljail's exit
// status, and whether the file the payload wrote is there.
func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "rw_volume_into_data_dir", group: groupFilesystem,
			mechanism: "grant a writable volume inside rljail's data directory of root filesystems (a rootfs's /usr/lib), or above it, or another name for such a directory (a bind mount), and write a sitecustomize.py there for the next run, which takes the rootfs after a look at its top directory only",
			layer:     "checkDataDirVolumes (cmd/rljail) refuses, by inode, every writable volume that covers the data directory or lies in it, before anything runs",
			run:       attackVolumeIntoDataDir},
	}...)
}

func attackVolumeIntoDataDir(t *testing.T, m mode) {
	// The data directory: the test's own, rootless (XDG_DATA_HOME), with
	// a rootfs copied in; as root rljail's own (/var/lib/rljail/rootfs),
	// where the test grants only a directory of its own making.
	var env []string
	var targets []string
	if m == asRootless {
		home := newDir(t)
		if err := os.Chown(home, testUID, testGID); err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(home, "rljail", "rootfs")
		named := filepath.Join(base, "py")
		if err := os.MkdirAll(base, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", builtRootfs(t), named).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v: %s", err, out)
		}
		if out, err := exec.Command("chown", "-R", "--", strconv.Itoa(testUID)+":"+strconv.Itoa(testGID), filepath.Join(home, "rljail")).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
		env = []string{"XDG_DATA_HOME=" + home}
		lib := filepath.Join(named, "usr", "lib")
		if err := os.Chmod(lib, 0o755); err != nil {
			t.Fatal(err)
		}
		targets = []string{lib, filepath.Join(home, "rljail"), home}
	} else {
		base := "/var/lib/rljail/rootfs"
		if _, err := os.Stat(base); err != nil {
			t.Fatalf("no data directory %s: %v", base, err)
		}
		own, err := os.MkdirTemp(base, ".rljail-it-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(own) })
		if err := os.Chmod(own, 0o1777); err != nil {
			t.Fatal(err)
		}
		targets = []string{own}
	}
	// Another name of the first target: a bind mount the test makes.
	alias := filepath.Join(newDir(t), "alias")
	if err := os.Mkdir(alias, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(targets[0], alias, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s on %s: %v", targets[0], alias, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(alias, syscall.MNT_DETACH) })
	targets = append(targets, alias)
	for i, target := range targets {
		planted := filepath.Join(targets[0], "sitecustomize-"+strconv.Itoa(i)+".py")
		inJail := "/w/sitecustomize-" + strconv.Itoa(i) + ".py"
		if target != targets[0] && target != alias {
			rel, _ := filepath.Rel(target, planted)
			inJail = "/w/" + rel
		}
		cmd := exec.Command(testBin, "-q", "--rootfs", rootfsDir, "--no-workspace", "-v", target+":/w:rw", "--", "python3", "-c",
			"import sys; open(sys.argv[1], 'w').write('print(\"PLANTED\")\\n')", inJail)
		cmd.Env = append(modeEnv(m), env...)
		cmd.Dir = baseDir
		_, stderr, exit := attackExec(t, m, cmd)
		if _, err := os.Lstat(planted); err == nil {
			t.Errorf("-v %s:/w:rw: the payload wrote %s in rljail's data directory (exit %d)", target, planted, exit)
			_ = os.Remove(planted)
		}
		if exit != 125 || !strings.Contains(stderr, "rljail's root filesystems") {
			t.Errorf("-v %s:/w:rw: exit %d, stderr %q; want 125 and the refusal", target, exit, stderr)
		}
	}
}

// Issue 33, the rootless side of the same claim: a rootless user's data
// directory comes from the environment (XDG_DATA_HOME, HOME), so a run
// with another environment once guarded another directory and could grant
// the usual one writable; the next run with the usual environment took the
// rootfs its jail had written after a look at its top directory only.
// Every run now guards the data directory below the passwd entry's home
// too (rootfs.StableDataDir), and only a rootfs there is taken so.
func init() {
	attackCases = append(attackCases, attackCase{
		name: "rw_volume_data_dir_other_env", group: groupFilesystem, modes: []mode{asRootless},
		mechanism: "with XDG_DATA_HOME or HOME pointing elsewhere, grant the user's ~/.local/share (or the home itself) writable and plant a sitecustomize.py in a rootfs of the usual data directory, for the next run with the usual environment",
		layer:     "checkDataDirVolumes guards rootfs.GuardedDataDirs: the environment's data directory and the passwd home's, whatever the run's environment; unwritableByJails trusts only the latter",
		run:       attackDataDirOtherEnv,
	})
}

func attackDataDirOtherEnv(t *testing.T, m mode) {
	share := filepath.Join(testHome, ".local", "share")
	base := filepath.Join(share, "rljail", "rootfs")
	// Make what is missing of the data directory as the user would have,
	// and take away afterwards only what this case made.
	var made []string
	for p := base; p != testHome && p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		made = append(made, p)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range made {
		if err := os.Chown(p, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	name := "atk-" + strings.ToLower(randomToken("dd")[:12])
	named := filepath.Join(base, name)
	t.Cleanup(func() {
		_ = os.RemoveAll(named)
		for _, p := range made { // innermost first
			_ = os.Remove(p)
		}
	})
	if out, err := exec.Command("cp", "-a", builtRootfs(t), named).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "--", strconv.Itoa(testUID)+":"+strconv.Itoa(testGID), named).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	libs, _ := filepath.Glob(filepath.Join(named, "usr", "lib", "python3*"))
	if len(libs) != 1 {
		t.Fatalf("no one usr/lib/python3* in %s: %v", named, libs)
	}
	lib, _ := filepath.Rel(testHome, libs[0])
	elsewhere := newDir(t)
	if err := os.Chown(elsewhere, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(libs[0], "sitecustomize.py")
	for _, c := range []struct {
		what  string
		env   []string
		grant string
	}{
		{"XDG_DATA_HOME elsewhere, ~/.local/share granted", []string{"XDG_DATA_HOME=" + elsewhere}, share},
		{"HOME elsewhere, ~/.local/share granted", []string{"HOME=" + elsewhere}, share},
		{"XDG_DATA_HOME elsewhere, the home granted", []string{"XDG_DATA_HOME=" + elsewhere}, testHome},
	} {
		rel, _ := filepath.Rel(c.grant, filepath.Join(testHome, lib, "sitecustomize.py"))
		cmd := exec.Command(testBin, "-q", "--rootfs", rootfsDir, "--no-workspace", "-v", c.grant+":/w:rw", "--", "python3", "-c",
			"import sys; open(sys.argv[1], 'w').write('print(\"PLANTED\")\\n')", "/w/"+rel)
		cmd.Env = append(modeEnv(m), c.env...)
		cmd.Dir = baseDir
		_, stderr, exit := attackExec(t, m, cmd)
		if _, err := os.Lstat(planted); err == nil {
			t.Errorf("%s: the payload wrote %s (exit %d)", c.what, planted, exit)
		}
		if exit != 125 || !strings.Contains(stderr, "rljail's root filesystems") {
			t.Errorf("%s: exit %d, stderr %q; want 125 and the refusal", c.what, exit, stderr)
		}
		// The next run, with the usual environment, must not run what a
		// jail planted: the file absent, or the rootfs refused.
		next := exec.Command(testBin, "-q", "--rootfs", name, "--no-workspace", "--", "python3", "-c", "print('CLEAN')")
		next.Env = modeEnv(m)
		next.Dir = baseDir
		stdout, stderr, exit := attackExec(t, m, next)
		if strings.Contains(stdout, "PLANTED") {
			t.Errorf("%s: the next run with the usual environment ran the planted sitecustomize.py (exit %d)", c.what, exit)
		}
		if exit == 0 && !strings.Contains(stdout, "CLEAN") {
			t.Errorf("%s: the next run exited 0 without its output: %q %q", c.what, stdout, stderr)
		}
		_ = os.Remove(planted)
	}
}
