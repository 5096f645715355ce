package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Issue 30: as root a writable volume is now writable. A volume of a user
// other than root is an idmapped mount on which the jail writes as that
// user; root's gets an ACL entry of the jail's host uid for the run, and
// what the jail made there goes to nobody after it, never to root (a file
// root owns is trusted by root's programs for its owner alone). These cases try to turn that access into more.
// Each decides from the host: modes, owners, ACLs and attributes read
// with lstat and getxattr, file contents, rljail's exit status. On the
// binary before, the payload cannot write such a volume at all, and each
// case fails at its first step, the write it needs.
func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "rw_volume_setid_as_owner", group: groupFilesystem, modes: rootOnly,
			mechanism: "in a writable volume of root's (ACL) and of a user's (idmapped: the jail writes as that user), copy an executable and make it set-user-ID or set-group-ID: chmod 6755/4755/2755, open(O_CREAT, 04755), mknod of a regular file, a file in a directory made 2775; the host then runs a set-id program of the owner's",
			layer:     "seccomp refuses set-id bits in every call that sets a mode; in root's volume the jail's files go to nobody after the run (chown takes set-id bits off too)",
			run:       attackVolumeSetID},
		{name: "rw_volume_links_given_back", group: groupFilesystem, modes: rootOnly,
			mechanism: "in root's writable volume, leave a symbolic link to /etc/shadow, a FIFO, a socket and regular files, so that after the run they are root's (a root-owned link in a sticky directory is followed by root; a root-owned file is trusted as root's); hardlink root's 0600 file of the volume and write through the new name; leave a profile that a later run takes as the caller's own",
			layer:     "the give-back gives everything the jail made in root's volume to nobody, never to root, and hostfile.Guard refuses a file of nobody's as the caller's; fs.protected_hardlinks and the modes keep root's file",
			run:       attackVolumeLinksGivenBack},
		{name: "rw_volume_left_for_next_jail", group: groupFilesystem, modes: rootOnly,
			mechanism: "leave files and directories in root's writable volume (0755, no ACL of its own) that a later jail, of the same or another host uid and granted the same volume, rewrites, deletes or adds to",
			layer:     "what the first jail made is nobody's after its run, and the later jail's ACL entry is on the volume's top only (no default ACL)",
			run:       attackVolumeLeftForNextJail},
		{name: "rw_volume_acl_outlives_run", group: groupFilesystem, modes: rootOnly,
			mechanism: "keep the ACL entry that opens root's volume to the jail's host uid after the run: four jails at once on the same volume (each supervisor rewrites the ACL), and a supervisor killed (SIGKILL) during the run, so that a later jail given that uid writes there",
			layer:     "the supervisors change ACLs under one lock (/run/rljail/acl.lock) and take their entry out after the run; a killed run's lock file names the volume and the ACL, its id is taken by no jail meanwhile, and the next root run takes the entry out and gives the files back",
			run:       attackVolumeACLOutlivesRun},
	}...)
}

// rootVolume makes a fresh directory of root's, 0755, as `mkdir out` does.
func rootVolume(t *testing.T) string {
	t.Helper()
	out := filepath.Join(newDir(t), "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// noSetID fails for every regular file below vol with a set-user-ID bit,
// or a set-group-ID bit with group execute (a set-gid program).
func noSetID(t *testing.T, vol string) {
	t.Helper()
	_ = filepath.WalkDir(vol, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Mode&syscall.S_ISUID != 0 || (st.Mode&syscall.S_ISGID != 0 && st.Mode&0o010 != 0) {
			t.Errorf("SET-ID: %s on the host is mode %04o, owned by %d:%d", p, st.Mode&0o7777, st.Uid, st.Gid)
		}
		return nil
	})
}

const setIDCode = `
import os, shutil, stat
src = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "/bin/python3"
open("/out/plain", "w").write("plain")
shutil.copy(src, "/out/prog")
def attempt(name, fn):
    try:
        fn()
        print("DONE", name)
    except OSError as e:
        print("FAILED", name, e)
for mode in (0o6755, 0o4755, 0o2755):
    attempt("chmod %o" % mode, lambda: os.chmod("/out/prog", mode))
attempt("fchmod", lambda: os.fchmod(os.open("/out/prog", os.O_RDONLY), 0o4755))
attempt("open 4755", lambda: os.close(os.open("/out/created", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("mknod", lambda: os.mknod("/out/node", stat.S_IFREG | 0o4755))
os.mkdir("/out/sg")
attempt("chmod dir 2775", lambda: os.chmod("/out/sg", 0o2775))
shutil.copy(src, "/out/sg/prog")
attempt("chmod in dir", lambda: os.chmod("/out/sg/prog", 0o2755))
`

func attackVolumeSetID(t *testing.T, m mode) {
	for _, owner := range []struct {
		name             string
		uid, gid         int
		fileUID, fileGID int // what the jail's files are after the run
	}{{"root", 0, 0, 65534, 65534}, {"user", testUID, testGID, testUID, testGID}} {
		t.Run(owner.name, func(t *testing.T) {
			vol := rootVolume(t)
			if err := os.Chown(vol, owner.uid, owner.gid); err != nil {
				t.Fatal(err)
			}
			r := attackPy(t, m, runOpts{}, []string{"-v", vol + ":/out:rw"}, setIDCode)
			t.Logf("%s", r)
			plain := filepath.Join(vol, "plain")
			if b, err := os.ReadFile(plain); err != nil || string(b) != "plain" {
				t.Fatalf("the jail could not write the writable volume of %s's (the issue): %q, %v\n%s", owner.name, b, err, r)
			}
			if uid, gid, _ := ownerOf(t, plain); uid != owner.fileUID || gid != owner.fileGID {
				t.Errorf("the jail's file is %d:%d on the host, want %d:%d (the volume is %s's)", uid, gid, owner.fileUID, owner.fileGID, owner.name)
			}
			noSetID(t, vol)
		})
	}
}

const linksCode = `
import os, socket
def attempt(name, fn):
    try:
        fn()
        print("DONE", name)
    except OSError as e:
        print("FAILED", name, e)
attempt("symlink", lambda: os.symlink("/etc/shadow", "/out/shadow"))
attempt("fifo", lambda: os.mkfifo("/out/fifo", 0o644))
def sock():
    s = socket.socket(socket.AF_UNIX)
    s.bind("/out/sock")
attempt("socket", sock)
attempt("link root's file", lambda: os.link("/out/keep", "/out/keep2"))
attempt("write root's file", lambda: open("/out/keep", "a").write("TAMPERED"))
attempt("write the link", lambda: open("/out/keep2", "a").write("TAMPERED"))
attempt("replace root's file", lambda: os.replace("/out/new", "/out/keep") if open("/out/new", "w").write("x") else None)
open("/out/p.toml", "w").write('base = "python"\n[defaults]\nvolumes = ["/etc:/hostetc"]\n')
open("/out/own", "w").write("own")
os.link("/out/own", "/out/own2")
`

func attackVolumeLinksGivenBack(t *testing.T, m mode) {
	vol := rootVolume(t)
	keep := filepath.Join(vol, "keep")
	writeFile(t, keep, "ROOT'S\n", 0o600)
	// The volume's parent holds another file of root's on the same
	// filesystem, outside the grant.
	outside := filepath.Join(filepath.Dir(vol), "outside")
	writeFile(t, outside, "OUTSIDE\n", 0o644)
	r := attackPy(t, m, runOpts{}, []string{"-v", vol + ":/out:rw"}, linksCode)
	t.Logf("%s", r)
	prof := filepath.Join(vol, "p.toml")
	if !exists(prof) {
		t.Fatalf("the jail could not write the writable volume of root's (the issue)\n%s", r)
	}
	for _, name := range []string{"shadow", "fifo", "sock"} {
		p := filepath.Join(vol, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if uid, gid, mode := ownerOf(t, p); uid == 0 || gid == 0 || uid != 65534 {
			t.Errorf("the jail's %s (%v) is %d:%d after the run, want nobody's: root follows a root-owned link in a sticky directory", name, mode, uid, gid)
		}
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "ROOT'S\n" {
		// The jail may replace the name in the top directory it may
		// write (rename over it), but never write root's file itself.
		if err != nil || !strings.HasPrefix(string(b), "x") {
			t.Errorf("root's 0600 file of the volume holds %q, %v", b, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "OUTSIDE\n" {
		t.Errorf("root's file outside the volume holds %q", b)
	}
	for _, p := range []string{keep, outside} {
		if fi, err := os.Lstat(p); err == nil && fi.Sys().(*syscall.Stat_t).Nlink != 1 {
			t.Errorf("%s has %d links after the run: the jail linked it", p, fi.Sys().(*syscall.Stat_t).Nlink)
		}
	}
	for _, name := range []string{"p.toml", "own", "own2"} {
		p := filepath.Join(vol, name)
		if uid, gid, _ := ownerOf(t, p); uid == 0 || gid == 0 {
			t.Errorf("the jail's %s is %d:%d after the run: a file of root's, trusted as root's", name, uid, gid)
		}
	}
	// A later run, which grants nothing, takes the jail's profile: were
	// it root's, it would pass for the caller's own.
	stdout, stderr, exit, _ := attackCallerRun(t, m, 30*time.Second, "--profile", prof, "--", "python3", "-c", "import os; print('RAN', os.path.exists('/hostetc/shadow'))")
	t.Logf("--profile %s: exit %d, stdout %q, stderr %q", prof, exit, stdout, stderr)
	if exit != 125 || strings.Contains(stdout, "RAN") || !strings.Contains(stderr, "a host id jails run as") {
		t.Errorf("--profile of a root-run jail's file: exit %d, stdout %q, stderr %q; want 125 and the reason", exit, stdout, stderr)
	}
}

func attackVolumeLeftForNextJail(t *testing.T, m mode) {
	vol := rootVolume(t)
	p1, pl1 := startWatched(t, m, runOpts{}, "READY", fmt.Sprintf(plantCode, "0.3"), "-v", vol+":/out:rw")
	uid1, gid1 := checkJailHostIDs(t, m, pl1)
	// A second jail, of another host uid, at the same time.
	p2, pl2 := startWatched(t, m, runOpts{}, "READY", "import time\nprint('READY', flush=True)\ntime.sleep(1.5)", "-v", vol+":/out:rw")
	uid2, gid2 := checkJailHostIDs(t, m, pl2)
	p1.wait()
	if p1.exit != 0 {
		t.Fatalf("the first jail could not write root's writable volume (the issue): %s\n%s", p1, p1.stderr.String())
	}
	p3, pl3 := startWatched(t, m, runOpts{}, "READY", tamperCode, "-v", vol+":/out:rw")
	uid3, gid3 := checkJailHostIDs(t, m, pl3)
	p3.wait()
	p2.wait()
	t.Logf("tamper run (uid %d): %s", uid3, p3.stdout.String())
	checkLeftUntouched(t, vol, p3, uid1, gid1, uid2, gid2, uid3, gid3)
}

func attackVolumeACLOutlivesRun(t *testing.T, m mode) {
	t.Run("concurrent", func(t *testing.T) {
		vol := rootVolume(t)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				code := fmt.Sprintf("import time\nopen('/out/f%d', 'w').write('x')\ntime.sleep(0.3)\nprint('WROTE')", i)
				stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{"-v", vol + ":/out:rw"}, python(code)...)...)
				if exit != 0 || !strings.Contains(stdout, "WROTE") {
					t.Errorf("jail %d could not write root's writable volume: exit %d, %q, %q", i, exit, stdout, stderr)
				}
			})
		}
		wg.Wait()
		if ids := aclNamedUsers(t, vol); len(ids) > 0 {
			t.Errorf("after four jails at once the volume's ACL names uids %v", ids)
		}
		if _, _, mode := ownerOf(t, vol); mode.Perm() != 0o755 {
			t.Errorf("the volume is %v after the runs, want 0755", mode)
		}
		for i := range 4 {
			p := filepath.Join(vol, "f"+strconv.Itoa(i))
			if uid, gid, _ := ownerOf(t, p); uid != 65534 || gid != 65534 {
				t.Errorf("%s is %d:%d, want nobody's (never root's)", p, uid, gid)
			}
		}
	})
	t.Run("killed_supervisor", func(t *testing.T) {
		vol := rootVolume(t)
		p1, pl1 := startWatched(t, m, runOpts{}, "READY", "import time\nopen('/out/left', 'w').write('x')\nprint('READY', flush=True)\ntime.sleep(30)", "-v", vol+":/out:rw")
		uid1, _ := checkJailHostIDs(t, m, pl1)
		if err := p1.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p1.wait()
		lock := filepath.Join("/run/rljail/uid", strconv.Itoa(uid1))
		deadline := time.Now().Add(10 * time.Second)
		for {
			free := false
			if fd, err := unix.Open(lock, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				free = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
				unix.Close(fd)
			}
			_, alive := readProc(pl1.pid)
			if (free && !alive) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		// While the entry stays, no process may have its uid: the id is
		// marked, and no jail is given it.
		left := aclNamedUsers(t, vol)
		t.Logf("after the kill the volume's ACL names uids %v (the killed jail's: %d)", left, uid1)
		for _, id := range left {
			for _, q := range allProcs() {
				if us, _, err := statusIDs(q.pid); err == nil && q.state != "Z" && us[0] == strconv.Itoa(int(id)) {
					t.Errorf("the volume's ACL names uid %d, and process %s has it", id, q)
				}
			}
		}
		// The next root runs pass over the marked id and give it back.
		for i := 0; i < 3; i++ {
			b, _ := os.ReadFile(lock)
			if len(b) == 0 {
				break
			}
			// A plain run: nothing of it is watched, and a payload that
			// ends at once may never be seen in /proc.
			if _, stderr, exit, _ := runJail(t, m, runOpts{}, python("print('RAN')")...); exit != 0 {
				t.Fatalf("a later root run failed: exit %d, %s", exit, stderr)
			}
		}
		if b, _ := os.ReadFile(lock); len(b) > 0 {
			t.Errorf("the lock file of host uid %d stays marked after later runs: %q", uid1, b)
		}
		if ids := aclNamedUsers(t, vol); len(ids) > 0 {
			t.Errorf("the ACL of the killed run's volume names uids %v after later runs", ids)
		}
		if uid, gid, _ := ownerOf(t, filepath.Join(vol, "left")); uid != 65534 || gid != 65534 {
			t.Errorf("the killed run's file is %d:%d after later runs, want nobody's", uid, gid)
		}
		if _, _, mode := ownerOf(t, vol); mode.Perm() != 0o755 {
			t.Errorf("the volume is %v after the runs, want 0755", mode)
		}
	})
}
