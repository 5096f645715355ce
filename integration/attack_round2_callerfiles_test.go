package integration

// Issue 18's high finding: a file rljail reads for its caller (the
// profile above all) planted or rewritten by an earlier jail, and the
// volumes a profile grants left out of the "inside a writable volume"
// rule. Every case decides from outside: a host secret that must never
// appear, a log file's content, the wall clock.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "planted_profile", group: groupFilesystem,
			mechanism: "a payload given a volume rw rewrites the profile file kept there, so that the next run with the same command line grants a host secret's directory; a FIFO as --profile with a writer that never writes",
			layer:     "hostfile.Guard: a profile inside a volume the run grants rw is refused, as one a jail's host id owns or anybody may write; every read of a caller's file has a deadline",
			run:       attackPlantedProfile},
		{name: "profile_volume_reports", group: groupFilesystem,
			mechanism: "a profile's [defaults] volumes grant a directory rw that holds --result, --audit-log or --env-file, so the payload forges the audit log; a trusted link (root's directory) to a file in the volume; --result-fd onto a file in the volume",
			layer:     "hostfile.Guard: the writable-volume rule runs on the merged volume list, and on where the opened file really lies",
			run:       attackProfileVolumeReports},
		{name: "planted_rootfs", group: groupFilesystem,
			mechanism: "the rootfs a run uses lies where a jail could write: a FIFO planted under its manifest's name, the rootfs granted rw to the same run (a payload plants sitecustomize.py for every later run), a rootfs anybody may write",
			layer:     "rootfs.Check reads the manifest without following a link or blocking; checkRootfsPlace refuses a rootfs inside a volume the run grants rw, or one anybody may write or a jail's host id owns",
			run:       attackPlantedRootfs},
	}...)
}

// attackCallerRun runs rljail with args as m, bounded by limit, and
// returns its output, exit status and wall time.
func attackCallerRun(t *testing.T, m mode, limit time.Duration, args ...string) (stdout, stderr string, exit int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, testBin, append([]string{"--rootfs", rootfsDir}, args...)...)
	cmd.Dir = newDir(t)
	cmd.Env = modeEnv(m)
	start := time.Now()
	stdout, stderr, exit = attackExec(t, m, cmd)
	return stdout, stderr, exit, time.Since(start)
}

// attackCallerOwned makes path the test user's when m is rootless (rljail
// runs as that user and must read it).
func attackCallerOwned(t *testing.T, m mode, path string) {
	t.Helper()
	if m == asRootless {
		if err := os.Chown(path, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
}

func attackPlantedProfile(t *testing.T, m mode) {
	// The host secret: a private file of the user rljail runs as, outside
	// every grant.
	secretDir := newDir(t)
	attackCallerOwned(t, m, secretDir)
	secret := randomToken("profsecret")
	secretFile := filepath.Join(secretDir, "secret.txt")
	writeFile(t, secretFile, secret+"\n", 0o600)
	attackCallerOwned(t, m, secretFile)

	// A runner keeps its profile in the directory it grants rw, and runs
	// the same command line twice. The first payload rewrites the profile
	// so that the second run grants the secret's directory and passes a
	// variable of the caller's.
	rw := newOpenDir(t)
	prof := filepath.Join(rw, "p.toml")
	writeFile(t, prof, "base = \"python\"\n", 0o644)
	attackCallerOwned(t, m, prof)
	code := `
import os, sys
p = "/out/p.toml"
evil = 'base = "python"\n[defaults]\nvolumes = ["%s:/stolen"]\nenv = ["RLJAIL_TEST_SECRET"]\n' % sys.argv[1]
try:
    os.unlink(p)
except OSError as e:
    print("UNLINK", e)
with open(p, "w") as f:
    f.write(evil)
for name in ("/stolen/secret.txt",):
    try:
        print("READ", open(name).read())
    except OSError as e:
        print("NOREAD", e)
print("ENV", os.environ.get("RLJAIL_TEST_SECRET"))
`
	envSecret := randomToken("envsecret")
	for i := 1; i <= 2; i++ {
		args := []string{"--timeout", "10s", "-v", rw + ":/out:rw", "--profile", prof, "-e", "X=1", "--", "python3", "-c", code, secretDir}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, testBin, append([]string{"--rootfs", rootfsDir}, args...)...)
		cmd.Dir = newDir(t)
		cmd.Env = append(modeEnv(m), "RLJAIL_TEST_SECRET="+envSecret)
		stdout, stderr, exit := attackExec(t, m, cmd)
		cancel()
		t.Logf("run %d: exit %d, stdout %q, stderr %q", i, exit, attackClip(stdout), attackClip(stderr))
		if strings.Contains(stdout+stderr, secret) || strings.Contains(stdout+stderr, envSecret) {
			t.Errorf("LEAK: run %d of the same command line read the host secret through a profile the first run's payload rewrote", i)
		}
		if exit != 125 || !strings.Contains(stderr, "inside the volume") {
			t.Errorf("run %d: --profile inside the volume granted rw: exit %d, stderr %q; want 125 and the reason", i, exit, stderr)
		}
	}

	// A FIFO as the profile, with a writer (held here) that never writes:
	// rljail must give up within its read deadline, not hang.
	fifoDir := newDir(t)
	fifo := filepath.Join(fifoDir, "p.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	attackCallerOwned(t, m, fifo)
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stdout, stderr, exit, took := attackCallerRun(t, m, 30*time.Second, "--timeout", "3s", "--profile", fifo, "--", "python3", "-c", "print('RAN')")
	t.Logf("FIFO profile: exit %d after %v, stderr %q", exit, took, stderr)
	if took > 10*time.Second || exit != 125 || strings.Contains(stdout, "RAN") {
		t.Errorf("--profile naming a FIFO whose writer never writes: exit %d after %v (stdout %q); want 125 within 10 s", exit, took, stdout)
	}

	// A profile that a jail could have written outside any volume of this
	// run: one anybody may write, and, as root, one owned by the host id
	// root-run jails are.
	loose := filepath.Join(newDir(t), "loose.toml")
	writeFile(t, loose, "base = \"python\"\n", 0o666)
	if err := os.Chmod(loose, 0o666); err != nil {
		t.Fatal(err)
	}
	attackCallerOwned(t, m, loose)
	cases := map[string]string{"world-writable": loose}
	if m == asRoot {
		// The host's nobody (root-run jails' id before they had their
		// own), and an id of the range they have now.
		for _, id := range []int{65534, 2130706432 + 7} {
			jailOwned := filepath.Join(newDir(t), "jail.toml")
			writeFile(t, jailOwned, "base = \"python\"\n", 0o644)
			if err := os.Chown(jailOwned, id, id); err != nil {
				t.Fatal(err)
			}
			cases[fmt.Sprintf("owned by uid %d, a jail's host id", id)] = jailOwned
		}
	}
	for what, p := range cases {
		stdout, stderr, exit, _ := attackCallerRun(t, m, 30*time.Second, "--profile", p, "--", "python3", "-c", "print('RAN')")
		if exit != 125 || strings.Contains(stdout, "RAN") {
			t.Errorf("--profile %s (%s): exit %d, stdout %q, stderr %q; want 125 before the payload runs", p, what, exit, stdout, stderr)
		}
	}
}

func attackProfileVolumeReports(t *testing.T, m mode) {
	rw := newOpenDir(t)
	profDir := newDir(t)
	prof := filepath.Join(profDir, "p.toml")
	writeFile(t, prof, "base = \"python\"\n[defaults]\nvolumes = [\""+rw+":/out:rw\"]\n", 0o644)
	attackCallerOwned(t, m, prof)
	forged := randomToken("forged")
	// The payload appends a forged record to the audit log and leaves a
	// forged report, both of which rljail would then take as its own.
	code := `
import sys
for name in ("audit.log", "r.json"):
    with open("/out/" + name, "a") as f:
        f.write('{"status":"ok","forged":"%s"}\n' % sys.argv[1])
print("RAN")
`
	envFile := filepath.Join(rw, "e.env")
	writeFile(t, envFile, "A=1\n", 0o644)
	attackCallerOwned(t, m, envFile)
	for _, c := range []struct{ flag, path string }{
		{"--audit-log", filepath.Join(rw, "audit.log")},
		{"--result", filepath.Join(rw, "r.json")},
		{"--env-file", envFile},
	} {
		stdout, stderr, exit, _ := attackCallerRun(t, m, 30*time.Second, "--profile", prof, c.flag, c.path, "--", "python3", "-c", code, forged)
		t.Logf("%s in the profile's rw volume: exit %d, stdout %q, stderr %q", c.flag, exit, attackClip(stdout), stderr)
		if exit != 125 || strings.Contains(stdout, "RAN") || !strings.Contains(stderr, "inside the volume") {
			t.Errorf("%s %s inside a volume the profile grants rw: exit %d, stdout %q, stderr %q; want 125 and the reason", c.flag, c.path, exit, stdout, stderr)
		}
		if b, _ := os.ReadFile(c.path); strings.Contains(string(b), forged) {
			t.Errorf("FORGED: %s %s holds the payload's record", c.flag, c.path)
		}
	}
	// --result-fd onto a file in the volume the run grants rw: the payload
	// would write into the report's file before rljail does.
	fdFile, err := os.OpenFile(filepath.Join(rw, "fd-report.json"), os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer fdFile.Close()
	cmd := exec.Command(testBin, "--rootfs", rootfsDir, "-v", rw+":/out:rw", "--result-fd", "3", "--", "python3", "-c", "print('RAN')")
	cmd.Dir = newDir(t)
	cmd.Env = modeEnv(m)
	cmd.ExtraFiles = []*os.File{fdFile}
	stdout, stderr, exit := attackExec(t, m, cmd)
	if exit != 125 || strings.Contains(stdout, "RAN") || !strings.Contains(stderr, "inside the volume") {
		t.Errorf("--result-fd onto a file in the rw volume: exit %d, stdout %q, stderr %q; want 125 and the reason", exit, stdout, stderr)
	}
	if m != asRoot {
		return
	}
	// A link in a directory only root may change (so rljail follows it)
	// that points into the volume the run grants rw.
	trusted := newDir(t)
	if err := os.Chmod(trusted, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(rw, "audit2.log")
	link := filepath.Join(trusted, "audit.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	code2 := strings.ReplaceAll(code, `("audit.log", "r.json")`, `("audit2.log",)`)
	stdout, stderr, exit, _ = attackCallerRun(t, m, 30*time.Second, "-v", rw+":/out:rw", "--audit-log", link, "--", "python3", "-c", code2, forged)
	t.Logf("--audit-log through a trusted link into the rw volume: exit %d, stdout %q, stderr %q", exit, attackClip(stdout), stderr)
	if exit != 125 || strings.Contains(stdout, "RAN") {
		t.Errorf("--audit-log %s -> %s (inside the rw volume): exit %d, stdout %q, stderr %q; want 125", link, target, exit, stdout, stderr)
	}
	if b, _ := os.ReadFile(target); strings.Contains(string(b), forged) {
		t.Errorf("FORGED: the audit log %s holds the payload's record", target)
	}
}

// attackRootfsCopy makes a copy of the rootfs for one case. A full copy,
// not hard links (cp -al): a link changes the ctime of the shared rootfs's
// files, which every later run would then refuse as changed since its build
// (rootfs/manifeststat.go). The cases here are refused before the copy's
// fingerprint matters.
func attackRootfsCopy(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(newDir(t), "python")
	if out, err := exec.Command("cp", "-a", rootfsDir, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the rootfs: %v %s", err, out)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func attackPlantedRootfs(t *testing.T, m mode) {
	// A FIFO under the manifest's name, with a writer that never writes.
	fifoRootfs := attackRootfsCopy(t)
	manifest := filepath.Join(fifoRootfs, ".rljail-rootfs.json")
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(manifest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testBin, "--rootfs", fifoRootfs, "--timeout", "3s", "--no-workspace", "--", "python3", "-c", "print('RAN')")
	cmd.Dir = newDir(t)
	cmd.Env = modeEnv(m)
	start := time.Now()
	stdout, stderr, exit := attackExec(t, m, cmd)
	took := time.Since(start)
	t.Logf("FIFO manifest: exit %d after %v, stderr %q", exit, took, stderr)
	if took > 10*time.Second || exit != 125 || strings.Contains(stdout, "RAN") {
		t.Errorf("a rootfs whose manifest is a FIFO: exit %d after %v (stdout %q); want 125 at once, not a hang", exit, took, stdout)
	}

	// The rootfs granted rw to the very run that uses it.
	rw := attackRootfsCopy(t)
	site := filepath.Join(rw, "usr/lib/python3.11/sitecustomize.py")
	plant := "import os\ntry:\n    open('/x/usr/lib/python3.11/sitecustomize.py', 'w').write('print(\"POISONED\")\\n')\nexcept OSError as e:\n    print('NOPLANT', e)\nprint('RAN')\n"
	for i := 1; i <= 2; i++ {
		stdout, stderr, exit, _ := attackCallerRun(t, m, 30*time.Second, "--rootfs", rw, "-v", rw+":/x:rw", "--no-workspace", "--", "python3", "-c", plant)
		// attackCallerRun passes the shared rootfs first; the later
		// --rootfs wins.
		t.Logf("run %d with the rootfs granted rw: exit %d, stdout %q, stderr %q", i, exit, attackClip(stdout), stderr)
		if strings.Contains(stdout, "POISONED") {
			t.Errorf("LEAK: run %d ran code a payload planted in the rootfs", i)
		}
		if exit != 125 || !strings.Contains(stderr, "inside the volume") {
			t.Errorf("run %d: --rootfs inside a volume granted rw: exit %d, stderr %q; want 125 and the reason", i, exit, stderr)
		}
	}
	if _, err := os.Lstat(site); err == nil {
		t.Errorf("the payload planted %s", site)
	}

	// A rootfs anybody may write.
	loose := attackRootfsCopy(t)
	if err := os.Chmod(loose, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, stderr, exit, _ := attackCallerRun(t, m, 30*time.Second, "--rootfs", loose, "--no-workspace", "--", "python3", "-c", "print('RAN')"); exit != 125 {
		t.Errorf("a rootfs of mode 0777: exit %d, stderr %q; want 125", exit, stderr)
	}
}
