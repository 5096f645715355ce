package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
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
		// The data directory itself and the one above it too, and with
		// HOME and XDG_DATA_HOME elsewhere: root's data directory is the
		// same whatever the environment (the payload writes only in own).
		targets = []string{own, base, filepath.Dir(base)}
		env = []string{"XDG_DATA_HOME=" + newDir(t), "HOME=" + newDir(t)}
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
		// The jail's rootfs lies outside every target (a rootfs inside a
		// writable volume is refused for that first).
		cmd := exec.Command(testBin, "-q", "--rootfs", builtRootfs(t), "--no-workspace", "-v", target+":/w:rw", "--", "python3", "-c",
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
	name, named := copyIntoUsersDataDir(t, "atk-dd")
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

// Issue 33, a root run over a user's data directory: a root-run jail
// writes a writable volume of another user's as that user (an idmapped
// mount), so through -v /home/USER:/w:rw, or a directory in USER's data
// directory, it could plant a sitecustomize.py in a rootfs there, which
// USER's own next run takes after a look at its top directory only. A
// root run refuses such a volume as that user's runs do (their stable
// data directory, by inode and through the mount table).
func init() {
	attackCases = append(attackCases, attackCase{
		name: "rw_volume_into_users_data_dir", group: groupFilesystem, modes: rootOnly,
		mechanism: "as root, grant a user's home, a directory in a rootfs of the user's data directory, or a bind mount of it writable (the jail writes as that user: an idmapped mount) and plant a sitecustomize.py there for the user's next run, which takes the rootfs after a look at its top only",
		layer:     "checkDataDirVolumes: a root run also guards, for each writable volume of a user's, that user's stable data directory (rootfs.StableDataDirOf)",
		run:       attackRootRunUsersDataDir,
	})
}

func attackRootRunUsersDataDir(t *testing.T, m mode) {
	name, named := copyIntoUsersDataDir(t, "atk-ud")
	// Taken back as the user would: the user's runs then take it after a
	// look at its top only.
	update := exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", name)
	update.Env = modeEnv(asRootless)
	update.Dir = baseDir
	if stdout, stderr, exit := attackExec(t, asRootless, update); exit != 0 {
		t.Fatalf("update the copy's fingerprint as the user: exit %d: %s %s", exit, stdout, stderr)
	}
	libs, _ := filepath.Glob(filepath.Join(named, "usr", "lib", "python3*"))
	if len(libs) != 1 {
		t.Fatalf("no one usr/lib/python3* in %s: %v", named, libs)
	}
	lib := libs[0]
	planted := filepath.Join(lib, "sitecustomize.py")
	alias := filepath.Join(newDir(t), "alias")
	if err := os.Mkdir(alias, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(lib, alias, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s on %s: %v", lib, alias, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(alias, syscall.MNT_DETACH) })
	for _, grant := range []string{lib, alias, named, testHome} {
		rel, _ := filepath.Rel(grant, planted)
		if grant == alias {
			rel = "sitecustomize.py"
		}
		cmd := exec.Command(testBin, "-q", "--rootfs", builtRootfs(t), "--no-workspace", "-v", grant+":/w:rw", "--", "python3", "-c",
			"import sys; open(sys.argv[1], 'w').write('print(\"PLANTED\")\\n')", "/w/"+rel)
		cmd.Env = modeEnv(m)
		cmd.Dir = baseDir
		_, stderr, exit := attackExec(t, m, cmd)
		if _, err := os.Lstat(planted); err == nil {
			t.Errorf("-v %s:/w:rw: the root run's payload wrote %s in the user's data directory (exit %d)", grant, planted, exit)
		}
		if exit != 125 || !strings.Contains(stderr, "rljail's root filesystems") {
			t.Errorf("-v %s:/w:rw: exit %d, stderr %q; want 125 and the refusal", grant, exit, stderr)
		}
		next := exec.Command(testBin, "-q", "--rootfs", name, "--no-workspace", "--", "python3", "-c", "print('CLEAN')")
		next.Env = modeEnv(asRootless)
		next.Dir = baseDir
		stdout, stderr, exit := attackExec(t, asRootless, next)
		if strings.Contains(stdout, "PLANTED") || exit != 0 || strings.TrimSpace(stdout) != "CLEAN" {
			t.Errorf("-v %s:/w:rw: the user's next run: exit %d, stdout %q, stderr %q; want CLEAN alone", grant, exit, stdout, attackClip(stderr))
		}
		_ = os.Remove(planted)
	}
}

// Issue 33, root's rootfs run rootless: a rootless run takes a rootfs in
// root's data directory (/var/lib/rljail/rootfs, root's and writable by
// root alone) after a look at its top directory only too, on the claim
// that no jail can have written it. A rootless run guards only its own
// user's data directories, so it may grant root's writable; its jail is
// the user, whose capabilities in its user namespace do not reach files
// of the unmapped host root. The case grants a throwaway copy of a rootfs
// in root's data directory (its top, a directory inside it, and the data
// directory itself) writable and tries every way to change it; it decides
// from the host: every entry's inode, times, mode, owner and size and the
// target file's hash as before, nothing added, the rootfs verified as
// built, and the next rootless run of it clean.
func init() {
	attackCases = append(attackCases, attackCase{
		name: "rootless_rw_volume_roots_rootfs", group: groupFilesystem, modes: []mode{asRootless},
		mechanism: "rootless, grant root's rootfs in /var/lib/rljail/rootfs (its top, a directory in it, the data directory) writable and write, append, truncate, create, mkdir, symlink, rename, unlink, chmod, chown, utime, setxattr and set an ACL there, for the next run that takes the rootfs after a look at its top only",
		layer:     "the kernel: the jail is the invoking user, and its user namespace's capabilities do not reach the unmapped host root's files, none of which a build leaves writable by others (unwritableByJails takes the top-only check only then)",
		run:       attackRootlessRootsRootfs,
	})
}

// attackRootsRootfsCode tries each change of the file argv[1], in the
// directory argv[2], and renames argv[3] (unless "-"); it prints one
// name=result for each ("OK" or the errno's name).
const attackRootsRootfsCode = `import errno, os, struct, sys
f, d, top, tok = sys.argv[1:5]
res = []
def attempt(name, fn):
    try:
        fn()
        res.append(name + "=OK")
    except OSError as e:
        res.append(name + "=" + errno.errorcode.get(e.errno, str(e.errno)))
def acl():
    u = 0xffffffff
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ((1, 7, u), (2, 7, os.getuid()), (4, 5, u), (0x10, 7, u), (0x20, 5, u)))
attempt("write", lambda: open(f, "r+b").write(b"#"))
attempt("append", lambda: open(f, "ab").write(b"\nprint('PLANTED')\n"))
attempt("truncate", lambda: os.truncate(f, 0))
attempt("create", lambda: open(os.path.join(d, "sitecustomize-" + tok + ".py"), "x").write("print('PLANTED')\n"))
attempt("mkdir", lambda: os.mkdir(os.path.join(d, "planted-" + tok)))
attempt("symlink", lambda: os.symlink("/tmp", os.path.join(d, "link-" + tok)))
attempt("rename", lambda: os.rename(f, f + "." + tok))
attempt("unlink", lambda: os.unlink(f))
attempt("chmod", lambda: os.chmod(f, 0o777))
attempt("chmod-dir", lambda: os.chmod(d, 0o777))
attempt("chown", lambda: os.chown(f, os.getuid(), os.getgid()))
attempt("utime-now", lambda: os.utime(f, None))
attempt("utime-set", lambda: os.utime(f, (0, 0)))
attempt("setxattr", lambda: os.setxattr(f, "user.rljail", b"x"))
attempt("acl-file", lambda: os.setxattr(f, "system.posix_acl_access", acl()))
attempt("acl-dir", lambda: os.setxattr(d, "system.posix_acl_access", acl()))
attempt("acl-default", lambda: os.setxattr(d, "system.posix_acl_default", acl()))
if top != "-":
    attempt("rename-top", lambda: os.rename(top, top + "." + tok))
print("ATTEMPTS " + " ".join(res))
`

func attackRootlessRootsRootfs(t *testing.T, m mode) {
	base := "/var/lib/rljail/rootfs"
	var st syscall.Stat_t
	if err := syscall.Stat(base, &st); err != nil || st.Uid != 0 || st.Mode&0o022 != 0 {
		t.Fatalf("root's data directory %s: %v, uid %d, mode %o; want root's, writable by root alone", base, err, st.Uid, st.Mode&0o7777)
	}
	// A copy of the test's own rootfs, under a dot name that rootfs list
	// skips, taken back by update-fingerprint: root's, as a build leaves it.
	named, err := os.MkdirTemp(base, ".rljail-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(named) })
	if out, err := exec.Command("cp", "-a", builtRootfs(t)+"/.", named).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	if err := os.Chmod(named, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", "--rootfs", named).CombinedOutput(); err != nil {
		t.Fatalf("update the copy's fingerprint: %v: %s", err, out)
	}
	libs, _ := filepath.Glob(filepath.Join(named, "usr", "lib", "python3*"))
	if len(libs) != 1 {
		t.Fatalf("no one usr/lib/python3* in %s: %v", named, libs)
	}
	lib := libs[0]
	file := filepath.Join(lib, "os.py")
	before := treeState(t, named)
	beforeSum := fileSum(t, file)
	tok := strings.ToLower(randomToken("r")[:13])
	libRel, _ := filepath.Rel(named, lib)
	for _, c := range []struct {
		grant          string
		file, dir, top string // as the jail sees them
	}{
		{named, "/w/" + libRel + "/os.py", "/w/" + libRel, "-"},
		{lib, "/w/os.py", "/w", "-"},
		{base, "/w/" + filepath.Base(named) + "/" + libRel + "/os.py", "/w", "/w/" + filepath.Base(named)},
	} {
		// The jail's own rootfs lies outside the grants (a rootfs inside a
		// writable volume is refused, and the data directory holds the
		// default one).
		cmd := exec.Command(testBin, "-q", "--rootfs", builtRootfs(t), "--no-workspace", "-v", c.grant+":/w:rw", "--",
			"python3", "-c", attackRootsRootfsCode, c.file, c.dir, c.top, tok)
		cmd.Env = modeEnv(m)
		cmd.Dir = baseDir
		stdout, stderr, exit := attackExec(t, m, cmd)
		line, _ := lineValue(stdout, "ATTEMPTS ")
		switch {
		case exit == 125 && line == "":
			t.Logf("-v %s:/w:rw: refused: %s", c.grant, strings.TrimSpace(stderr))
		case exit != 0 || line == "":
			t.Errorf("-v %s:/w:rw: exit %d, stdout %q, stderr %q; want the attempts made (exit 0) or the volume refused (125)", c.grant, exit, stdout, attackClip(stderr))
		default:
			t.Logf("-v %s:/w:rw: %s", c.grant, line)
			if strings.Contains(line, "=OK") {
				t.Errorf("-v %s:/w:rw: an attempt succeeded in the jail: %s", c.grant, line)
			}
		}
		// From the host: nothing of the rootfs changed, nothing added
		// beside it.
		if d := treeDiff(before, treeState(t, named)); d != "" {
			t.Errorf("-v %s:/w:rw: root's rootfs changed: %s", c.grant, d)
		}
		if sum := fileSum(t, file); sum != beforeSum {
			t.Errorf("-v %s:/w:rw: %s's content changed", c.grant, file)
		}
		if found, _ := filepath.Glob(filepath.Join(base, "*"+tok+"*")); len(found) > 0 {
			t.Errorf("-v %s:/w:rw: the jail made %v in root's data directory", c.grant, found)
			for _, p := range found {
				_ = os.RemoveAll(p)
			}
		}
	}
	if out, err := exec.Command(testBin, "rootfs", "verify", "--rootfs", named).CombinedOutput(); err != nil {
		t.Errorf("rljail rootfs verify after the attacks: %v: %s", err, out)
	}
	// The next rootless run of root's rootfs (the top-only check) runs
	// clean.
	next := exec.Command(testBin, "-q", "--rootfs", named, "--no-workspace", "--", "python3", "-c", "print('CLEAN')")
	next.Env = modeEnv(m)
	next.Dir = baseDir
	stdout, stderr, exit := attackExec(t, m, next)
	if exit != 0 || strings.TrimSpace(stdout) != "CLEAN" {
		t.Errorf("the next rootless run of root's rootfs: exit %d, stdout %q, stderr %q; want CLEAN alone", exit, stdout, attackClip(stderr))
	}
}

// treeState is every entry of the tree at root with its lstat: inode,
// ctime and mtime (ns), mode, owner, group and size. Any write, chmod,
// chown, link, rename or extended attribute of an entry changes its
// ctime, and an entry added or removed its directory's.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		out[p] = fmt.Sprintf("ino %d ctime %d mtime %d mode %o uid %d gid %d size %d",
			st.Ino, st.Ctim.Nano(), st.Mtim.Nano(), st.Mode, st.Uid, st.Gid, st.Size)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// treeDiff names the first difference of two treeStates, or "".
func treeDiff(a, b map[string]string) string {
	for p, s := range a {
		if b[p] != s {
			return fmt.Sprintf("%s: %s, was %s", p, b[p], s)
		}
	}
	for p, s := range b {
		if _, ok := a[p]; !ok {
			return fmt.Sprintf("%s: added (%s)", p, s)
		}
	}
	return ""
}

// fileSum is the SHA-256 of the file at p.
func fileSum(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// copyIntoUsersDataDir copies the tests' rootfs into the test user's
// stable data directory (~/.local/share/rljail/rootfs below the passwd
// entry's home) under a fresh name starting with prefix, the user's, as
// the user's own build would leave it but for its fingerprint (the copy's
// inodes are new: `rootfs verify --update-fingerprint` takes it back). It
// makes what is missing of the data directory as the user would have, and
// takes away afterwards only what it made.
func copyIntoUsersDataDir(t *testing.T, prefix string) (name, named string) {
	t.Helper()
	base := filepath.Join(testHome, ".local", "share", "rljail", "rootfs")
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
	name = prefix + "-" + strings.ToLower(randomToken("r")[:12])
	named = filepath.Join(base, name)
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
	return name, named
}
