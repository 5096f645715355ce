package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Red-team issue 18: as root the default workspace was idmapped to its
// owner (from /tmp the jail read root's 0600 files), and every root-run
// jail was the host's nobody, so all of them, and every host process of
// nobody, shared the kernel's per-user counters and could signal each
// other. Each case decides from the host: the output that reached it,
// /proc/PID/status, a pipe opened through /proc/PID/fd, a file's content
// and owner.
func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "workspace_root_private_file", group: groupSecrets, modes: rootOnly, // also a readable directory below a 0700 one
			mechanism: "run as root from a root-owned directory (as from /tmp or /var) and read its 0600 file and a file below a 0700 directory through /workspace",
			layer:     "the default workspace is not idmapped: the kernel checks the jail's own host uid against the real modes",
			run:       attackWorkspaceRootPrivate},
		{name: "workspace_other_user_file", group: groupSecrets, modes: rootOnly,
			mechanism: "run as root from another user's directory and read that user's 0600 file, or their 0700 directory, through /workspace",
			layer:     "the default workspace is not idmapped; a directory other users may not enter is not mounted",
			run:       attackWorkspaceOtherUser},
		{name: "jails_share_host_uid", group: groupProcesses, modes: rootOnly,
			mechanism: "two root-run jails at once run as one host uid (nobody), and so share every per-user kernel counter",
			layer:     "each root-run jail gets a host uid and gid of its own from a reserved range, held by a lock file under /run/rljail/uid",
			run:       attackJailsShareUID},
		{name: "host_nobody_signals_payload", group: groupProcesses, modes: rootOnly,
			mechanism: "a host process of nobody sends SIGKILL, SIGSTOP and SIGTERM to a root-run jail's payload",
			layer:     "the payload's host uid is the jail's own, not nobody: kill(2) refuses another user's process",
			run:       attackNobodySignals},
		{name: "pipe_pages_shared", group: groupDoS, modes: rootOnly,
			mechanism: "one jail grows its pipes to its user's fs.pipe-user-pages-soft, so that every other jail's new pipes get 8 KiB instead of 64 KiB",
			layer:     "per-user pipe accounting counts each jail's own host uid",
			run:       attackPipePagesShared},
		{name: "unix_fds_in_flight_shared", group: groupDoS, modes: rootOnly,
			mechanism: "one jail keeps more descriptors in flight over a Unix socket (SCM_RIGHTS, never received) than another jail's RLIMIT_NOFILE, so that the other's every SCM_RIGHTS fails with ETOOMANYREFS",
			layer:     "the kernel counts descriptors in flight per user: each jail's own host uid",
			run:       attackUnixInflightShared},
		{name: "rw_volume_files_outlive_uid", group: groupFilesystem, modes: rootOnly,
			mechanism: "leave files in a writable volume that a later jail, given the same host uid, can rewrite, delete or add to",
			layer:     "after the run the supervisor gives every file of the jail's host ids in its writable volumes to nobody; the id is reused only then",
			run:       attackVolumeFilesOutlive},
		{name: "rw_volume_files_outlive_killed_supervisor", group: groupFilesystem, modes: rootOnly,
			mechanism: "the supervisor is SIGKILLed during the run, before it could give the payload's files in a writable volume back; a later jail rewrites them",
			layer:     "the lock file of the id names the volumes until they are given back: no first step takes a marked id, and the next run gives its files back",
			run:       attackVolumeFilesKilledSupervisor},
	}...)
}

// jailIDRange is the range of the host ids of root-run jails: the entry of
// the user rljail in /etc/subuid and /etc/subgid, else jail.IDRangeBase
// and jail.IDRangeCount (stage/hostids.h).
func jailIDRange() (ubase, gbase, count int) {
	ubase, gbase, count = 2130706432, 2130706432, 65536
	read := func(path string) (int, int, bool) {
		f, err := os.Open(path)
		if err != nil {
			return 0, 0, false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			p := strings.Split(sc.Text(), ":")
			if len(p) == 3 && p[0] == "rljail" {
				s, err1 := strconv.Atoi(p[1])
				c, err2 := strconv.Atoi(p[2])
				return s, c, err1 == nil && err2 == nil
			}
		}
		return 0, 0, false
	}
	ucount, gcount := count, count
	if s, c, ok := read("/etc/subuid"); ok {
		ubase, ucount = s, c
	}
	if s, c, ok := read("/etc/subgid"); ok {
		gbase, gcount = s, c
	}
	return ubase, gbase, min(ucount, gcount)
}

// inJailIDRange tells whether uid is a host uid of root-run jails.
func inJailIDRange(uid int) bool {
	base, _, n := jailIDRange()
	return uid >= base && uid < base+n
}

// isJailHostUID tells whether the decimal uid s is one the jail's user
// maps to in mode m.
func isJailHostUID(m mode, s string) bool {
	uid, err := strconv.Atoi(s)
	if err != nil {
		return false
	}
	if m == asRootless {
		return uid == testUID
	}
	return inJailIDRange(uid)
}

// statusIDs reads the four uids and gids of process pid from the host's
// /proc.
func statusIDs(pid int) (uids, gids []string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, nil, err
	}
	u, _ := lineValue(string(b), "Uid:")
	g, _ := lineValue(string(b), "Gid:")
	uids, gids = strings.Fields(u), strings.Fields(g)
	if len(uids) != 4 || len(gids) != 4 {
		return nil, nil, fmt.Errorf("malformed status: Uid %q Gid %q", u, g)
	}
	return uids, gids, nil
}

// checkJailHostIDs checks, from the host's /proc, the ids of the payload
// pl while it runs: all four uids and gids the invoking user's rootless;
// as root one uid and one gid of the jail's own, at the same place in the
// range, that no live process outside the payload's PID namespace has. It
// returns them.
func checkJailHostIDs(t *testing.T, m mode, pl proc) (uid, gid int) {
	t.Helper()
	uids, gids, err := statusIDs(pl.pid)
	if err != nil {
		t.Fatalf("read the payload's ids from the host: %v", err)
	}
	for _, ids := range [][]string{uids, gids} {
		for _, v := range ids[1:] {
			if v != ids[0] {
				t.Errorf("the payload's host ids differ among real, effective, saved and fs: %v", ids)
			}
		}
	}
	uid, _ = strconv.Atoi(uids[0])
	gid, _ = strconv.Atoi(gids[0])
	if m == asRootless {
		if uid != testUID || gid != testGID {
			t.Errorf("rootless, the payload's host uid:gid is %d:%d, want the invoking user's %d:%d", uid, gid, testUID, testGID)
		}
		return uid, gid
	}
	ubase, gbase, n := jailIDRange()
	if uid < ubase || uid >= ubase+n || gid-gbase != uid-ubase {
		t.Errorf("as root, the payload's host uid:gid is %d:%d, want a pair of the range (uid %d+, gid %d+, %d ids) at the same place", uid, gid, ubase, gbase, n)
	}
	for _, q := range allProcs() {
		// A zombie runs nothing: the init of a jail whose supervisor was
		// killed stays one until the host's PID 1 reaps it (SECURITY.md).
		if q.pidNS == pl.pidNS || q.state == "Z" {
			continue
		}
		if us, _, err := statusIDs(q.pid); err == nil && us[0] == strconv.Itoa(uid) {
			t.Errorf("host uid %d of the jail is also the uid of a process outside it: %s", uid, q)
		}
	}
	return uid, gid
}

// privateFiles fills dir (its owner's, mode 0755) with a 0644 file, a 0600
// file and a 0644 file in a 0700 directory, all owned by uid:gid, and
// returns their markers.
func privateFiles(t *testing.T, dir string, uid, gid int) (public, private, hidden string) {
	t.Helper()
	public, private, hidden = randomToken("public"), randomToken("private"), randomToken("hidden")
	sub := filepath.Join(dir, "closed")
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{filepath.Join(dir, "readme.txt"), public, 0o644},
		{filepath.Join(dir, "secret.key"), private, 0o600},
		{sub, "", 0o700},
		{filepath.Join(sub, "notes.txt"), hidden, 0o644},
	} {
		var err error
		if f.mode&0o100 != 0 {
			err = os.Mkdir(f.path, f.mode)
		} else {
			err = os.WriteFile(f.path, []byte(f.content+"\n"), f.mode)
		}
		if err == nil {
			err = os.Chmod(f.path, f.mode)
		}
		if err == nil {
			err = os.Chown(f.path, uid, gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return public, private, hidden
}

// readEverything is a payload that prints every file it can read below
// /workspace, and the errors for the rest.
const readEverything = `
import os
for top, dirs, files in os.walk("/workspace", onerror=lambda e: print("DENIED", e)):
    for name in files:
        p = os.path.join(top, name)
        try:
            print("READ", p, open(p).read().strip())
        except OSError as e:
            print("DENIED", p, e)
for p in ("/workspace/secret.key", "/workspace/closed/notes.txt"):
    try:
        print("READ", p, open(p).read().strip())
    except OSError as e:
        print("DENIED", p, e)
`

func attackWorkspaceRootPrivate(t *testing.T, m mode) {
	dir := newDir(t) // root's, 0755: as /tmp or a project of root's
	public, private, hidden := privateFiles(t, dir, 0, 0)
	r := attackPy(t, m, runOpts{dir: dir}, nil, readEverything)
	for name, marker := range map[string]string{"root's 0600 file": private, "a file in root's 0700 directory": hidden} {
		if strings.Contains(r.all(), marker) {
			t.Errorf("the jail read %s in the default workspace (root runs rljail in a root-owned directory): %s", name, r)
		}
	}
	if r.exit != 0 || !strings.Contains(r.stdout, public) {
		t.Errorf("the workspace's 0644 file must stay readable: %s", r)
	}

	// A readable directory below one that others may not enter (root in
	// /home/alice/proj of a 0700 /home/alice): other users cannot reach
	// its files, so neither may the jail (red-team pass).
	closedParent := newDir(t)
	if err := os.Chmod(closedParent, 0o700); err != nil {
		t.Fatal(err)
	}
	below := filepath.Join(closedParent, "proj")
	if err := os.Mkdir(below, 0o755); err != nil {
		t.Fatal(err)
	}
	unreachable := randomToken("unreachable")
	writeFile(t, filepath.Join(below, "notes.txt"), unreachable+"\n", 0o644)
	r = attackPy(t, m, runOpts{dir: below}, nil, readEverything)
	if strings.Contains(r.all(), unreachable) {
		t.Errorf("the jail read a file below a 0700 directory of root's through the default workspace: %s", r)
	}
	if r.exit != 0 {
		t.Errorf("a workspace that other users cannot reach must be left out, not fail the run: %s", r)
	}
}

func attackWorkspaceOtherUser(t *testing.T, m mode) {
	dir := newDir(t)
	if err := os.Chown(dir, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	public, private, hidden := privateFiles(t, dir, testUID, testGID)
	r := attackPy(t, m, runOpts{dir: dir}, nil, readEverything)
	for name, marker := range map[string]string{"the user's 0600 file": private, "a file in the user's 0700 directory": hidden} {
		if strings.Contains(r.all(), marker) {
			t.Errorf("root ran rljail in %s's directory and the jail read %s there: %s", testUserName, name, r)
		}
	}
	if r.exit != 0 || !strings.Contains(r.stdout, public) {
		t.Errorf("the workspace's 0644 file must stay readable: %s", r)
	}

	// The user's 0700 directory itself as the current directory.
	closed := filepath.Join(dir, "closed")
	r = attackPy(t, m, runOpts{dir: closed}, nil, readEverything)
	if strings.Contains(r.all(), hidden) {
		t.Errorf("root ran rljail in %s's 0700 directory and the jail read a file there: %s", testUserName, r)
	}
	if r.exit != 0 {
		t.Errorf("a workspace that other users may not enter must be left out, not fail the run: %s", r)
	}
}

// startWatched starts a jail and returns it with its payload as seen from
// the host, once the payload printed ready.
func startWatched(t *testing.T, m mode, o runOpts, ready, code string, flags ...string) (*jailProc, proc) {
	t.Helper()
	marker := randomToken("uid")
	p := startJail(t, m, o, attackPython(flags, code, marker)...)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil { // a test that failed before it waited
			_ = p.cmd.Process.Kill()
			p.wait()
		}
	})
	pl, ok := findPayload(marker, p.cmd.Process.Pid, 15*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for ok && !strings.Contains(p.stdout.String(), ready) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !ok || !strings.Contains(p.stdout.String(), ready) {
		t.Fatalf("the payload did not get ready (seen: %v): stdout %q stderr %q", ok, p.stdout.String(), p.stderr.String())
	}
	// The first match may be a process on its way to the payload (a
	// stage that carried the marker in its cmdline and then exited:
	// seen in CI as a pid whose /proc entry was gone a moment later).
	// Once the payload said it is ready, the process that holds the
	// marker is the payload itself, unless it has ended already (a
	// payload that exits after its ready line): then the first match is
	// returned as before.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pl.pid)); err != nil {
		if again, ok := findPayload(marker, p.cmd.Process.Pid, time.Second); ok {
			pl = again
		}
	}
	return p, pl
}

func attackJailsShareUID(t *testing.T, m mode) {
	// Each payload lasts until the test closes its stdin, so that both
	// run at once while the host looks at them.
	const code = "import sys\nprint('READY', flush=True)\nsys.stdin.read()\n"
	type started struct {
		p        *jailProc
		uid, gid int
	}
	var jails []started
	var stdins []*os.File
	defer func() {
		for _, w := range stdins {
			w.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, w)
		p, pl := startWatched(t, m, runOpts{stdinFile: r}, "READY", code)
		r.Close()
		uid, gid := checkJailHostIDs(t, m, pl)
		jails = append(jails, started{p, uid, gid})
	}
	a, b := jails[0], jails[1]
	if a.uid == b.uid || a.gid == b.gid {
		t.Errorf("two root-run jails at once share host ids: %d:%d and %d:%d", a.uid, a.gid, b.uid, b.gid)
	}
	for _, w := range stdins {
		w.Close()
	}
	for _, j := range jails {
		j.p.wait()
		if j.p.exit != 0 {
			t.Errorf("a jail failed: %s", j.p)
		}
	}
	// Nothing of the reservation is held once the runs are over: each
	// lock file is empty and unlocked, a reusable one, and /run/rljail
	// holds nothing else.
	for _, j := range jails {
		lock := filepath.Join("/run/rljail/uid", strconv.Itoa(j.uid))
		st, err := os.Lstat(lock)
		if err != nil || !st.Mode().IsRegular() || st.Size() != 0 {
			t.Errorf("the lock file of host uid %d after its run: %v, %v (want an empty regular file)", j.uid, st, err)
			continue
		}
		fd, err := unix.Open(lock, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("open %s: %v", lock, err)
			continue
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			// The uid may be another program's jail's by now (a shared
			// host): only a holder of this test's counts.
			if holder := flockHolder(lock); holder == 0 || inOwnCgroups(holder) {
				t.Errorf("host uid %d is still locked after its run (holder pid %d): %v", j.uid, holder, err)
			}
		}
		unix.Close(fd)
	}
	_ = filepath.WalkDir("/run/rljail", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "/run/rljail" || p == "/run/rljail/uid" {
			return nil
		}
		id, aerr := strconv.Atoi(filepath.Base(p))
		if filepath.Dir(p) != "/run/rljail/uid" || !d.Type().IsRegular() || aerr != nil || !inJailIDRange(id) {
			t.Errorf("left in /run/rljail: %s (%v)", p, d.Type())
		}
		return nil
	})
}

func attackNobodySignals(t *testing.T, m mode) {
	const code = "import time\nprint('READY', flush=True)\ntime.sleep(2)\nprint('SURVIVED', flush=True)\n"
	p, pl := startWatched(t, m, runOpts{}, "READY", code)
	for _, sig := range []string{"STOP", "TERM", "KILL"} {
		kill := exec.Command("/bin/sh", "-c", "exec kill -"+sig+" "+strconv.Itoa(pl.pid))
		kill.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := kill.CombinedOutput()
		if err == nil {
			t.Errorf("a host process of nobody sent SIG%s to the jail's payload (pid %d): %s", sig, pl.pid, out)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if now, ok := readProc(pl.pid); !ok || now.start != pl.start || now.state == "T" || now.state == "t" || now.state == "Z" {
		t.Errorf("the payload did not survive a host nobody's signals: %+v (was %+v)", now, pl)
	}
	p.wait()
	if p.exit != 0 || !strings.Contains(p.stdout.String(), "SURVIVED") {
		t.Errorf("the payload did not finish after a host nobody's signals: %s", p)
	}
}

// pipeSize opens the pipe that process pid holds as descriptor fd through
// the host's /proc and returns its buffer size (F_GETPIPE_SZ).
func pipeSize(pid, fd int) (int, error) {
	f, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(f)
	return unix.FcntlInt(uintptr(f), unix.F_GETPIPE_SZ, 0)
}

func attackPipePagesShared(t *testing.T, m mode) {
	soft, err := os.ReadFile("/proc/sys/fs/pipe-user-pages-soft")
	if err != nil || strings.TrimSpace(string(soft)) == "0" {
		t.Skipf("fs.pipe-user-pages-soft is %q (%v): no per-user soft limit to share", soft, err)
	}
	// Every pipe as large as its user's soft limit still allows, write
	// ends only, until a new pipe comes out small: the limit is reached.
	const hog = `
import fcntl, os, time
pipes = []
small = -1
while len(pipes) < 200:
    r, w = os.pipe()
    os.close(r)
    if fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) < 65536:
        small = w
        break
    for size in (1 << 20, 1 << 18, 1 << 16, 1 << 14, 1 << 12):
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, size)
            break
        except OSError:
            pass
    pipes.append(w)
print("SMALL", small, flush=True)
print("READY", flush=True)
time.sleep(4)
`
	hogP, hogPl := startWatched(t, m, runOpts{}, "READY", hog, "--nofile", "1024")
	v, _ := lineValue(hogP.stdout.String(), "SMALL ")
	smallFD, _ := strconv.Atoi(strings.TrimSpace(v))
	if size, err := pipeSize(hogPl.pid, smallFD); err != nil || size >= 65536 {
		t.Fatalf("the hog did not reach its user's pipe soft limit (its last pipe, fd %q: %d bytes, %v): the test cannot decide", v, size, err)
	}
	const probe = "import os, time\nr, w = os.pipe()\nprint('PIPE', w, flush=True)\nprint('READY', flush=True)\ntime.sleep(1)\n"
	probeP, probePl := startWatched(t, m, runOpts{}, "READY", probe)
	v, _ = lineValue(probeP.stdout.String(), "PIPE ")
	fd, _ := strconv.Atoi(strings.TrimSpace(v))
	size, err := pipeSize(probePl.pid, fd)
	if err != nil {
		t.Fatalf("open the second jail's pipe from the host: %v", err)
	}
	if size < 65536 {
		t.Errorf("another jail's pipes shrank another's: the second jail's new pipe holds %d bytes, want 65536 (the first holds its user's fs.pipe-user-pages-soft of %s pages)", size, strings.TrimSpace(string(soft)))
	}
	probeP.wait()
	hogP.wait()
}

func attackUnixInflightShared(t *testing.T, m mode) {
	// 1200 descriptors in flight, more than the second jail's
	// RLIMIT_NOFILE of 256 (the default): the kernel refuses SCM_RIGHTS
	// to a user who has more in flight than the sender's own limit.
	const hog = `
import array, os, socket, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
fd = os.open("/dev/null", os.O_RDONLY)
sent = 0
for _ in range(6):
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd] * 200))])
    sent += 200
print("INFLIGHT", sent, flush=True)
print("READY", flush=True)
time.sleep(4)
`
	hogP, _ := startWatched(t, m, runOpts{}, "READY", hog, "--nofile", "2048")
	if v, _ := lineValue(hogP.stdout.String(), "INFLIGHT "); v != "1200" {
		t.Fatalf("the first jail did not get its descriptors in flight: the test cannot decide: %s", hogP.stdout.String())
	}
	// The second opens a file of its own, passes it to itself and closes
	// the original: from the host, its descriptors then name that file
	// only if the pass went through.
	const probe = `
import array, os, socket, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
fd = os.open("/tmp/passed-fd-marker", os.O_CREAT | os.O_RDWR)
try:
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    msg, anc, flags, addr = b.recvmsg(1, socket.CMSG_SPACE(4))
    got = array.array("i", anc[0][2]) if anc else None
except OSError as e:
    got = e
os.close(fd)
print("READY", flush=True)
time.sleep(1)
`
	probeP, probePl := startWatched(t, m, runOpts{}, "READY", probe)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", probePl.pid))
	if err != nil {
		t.Fatalf("read the second jail's descriptors from the host: %v", err)
	}
	passed := false
	for _, e := range ents {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", probePl.pid, e.Name())); strings.HasSuffix(l, "/passed-fd-marker") {
			passed = true
		}
	}
	if !passed {
		t.Errorf("another jail's descriptors in flight made the second jail's SCM_RIGHTS fail: no descriptor of the second jail names the file it passed itself")
	}
	probeP.wait()
	hogP.wait()
}

// tamperCode is a payload that tries to change what an earlier jail left
// in /out: f and d/sub/x (both "ORIG\n", 0644, in 0755 directories).
const tamperCode = `
import os, time
print("READY", flush=True)
def attempt(name, fn):
    try:
        fn()
        print("DONE", name)
    except OSError as e:
        print("FAILED", name, e)
attempt("append", lambda: open("/out/f", "a").write("TAMPERED\n"))
attempt("append_sub", lambda: open("/out/d/sub/x", "a").write("TAMPERED\n"))
attempt("create_in_dir", lambda: open("/out/d/sub/new", "w").write("x"))
attempt("unlink_in_dir", lambda: os.unlink("/out/d/sub/x"))
attempt("chmod", lambda: os.chmod("/out/f", 0o666))
attempt("utime", lambda: os.utime("/out/f", (0, 0)))
time.sleep(0.3)
`

// plantCode leaves in /out what tamperCode tries to change, and then
// sleeps for its %s seconds.
const plantCode = `
import os, time
os.makedirs("/out/d/sub")
with open("/out/f", "w") as f:
    f.write("ORIG\n")
with open("/out/d/sub/x", "w") as f:
    f.write("ORIG\n")
os.chmod("/out/d", 0o755)
os.symlink("f", "/out/link")
os.mkfifo("/out/fifo", 0o644)
print("READY", flush=True)
time.sleep(%s)
`

// checkLeftUntouched checks, from the host, that the tamper run p2 changed
// nothing in vol, and that no entry of vol is owned by an id of the range
// or by the ids the jails ran as.
func checkLeftUntouched(t *testing.T, vol string, p2 *jailProc, ids ...int) {
	t.Helper()
	for _, f := range []string{"f", "d/sub/x"} {
		b, err := os.ReadFile(filepath.Join(vol, f))
		if err != nil || string(b) != "ORIG\n" {
			t.Errorf("a later jail rewrote %s that an earlier one left in a writable volume: %q, %v\n%s", f, b, err, p2)
		}
	}
	if exists(filepath.Join(vol, "d/sub/new")) {
		t.Errorf("a later jail created a file in a directory an earlier one left\n%s", p2)
	}
	if st, err := os.Stat(filepath.Join(vol, "f")); err == nil && (st.Mode().Perm() != 0o644 || st.ModTime().Unix() == 0) {
		t.Errorf("a later jail changed the mode or times of a file an earlier one left: %v %v\n%s", st.Mode(), st.ModTime(), p2)
	}
	_ = filepath.WalkDir(vol, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walk the volume: %v", err)
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		u, g := int(st.Uid), int(st.Gid)
		bad := inJailIDRange(u) || inJailIDRange(g)
		for _, id := range ids {
			bad = bad || u == id || g == id
		}
		if bad {
			t.Errorf("after the runs %s is owned by %d:%d, ids a root-run jail runs as (the jails ran as %v)", p, u, g, ids)
		}
		return nil
	})
}

func attackVolumeFilesKilledSupervisor(t *testing.T, m mode) {
	vol := newOpenDir(t)
	p1, pl1 := startWatched(t, m, runOpts{}, "READY", fmt.Sprintf(plantCode, "30"), "-v", vol+":/out:rw")
	uid1, gid1 := checkJailHostIDs(t, m, pl1)
	if err := p1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p1.wait()
	// The jail dies with its supervisor; its id is free once its guard
	// has seen the jail's cgroup empty (a later run then passes over the
	// marked id, and gives its files back).
	lock := filepath.Join("/run/rljail/uid", strconv.Itoa(uid1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		free := false
		if fd, err := unix.Open(lock, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			free = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
			unix.Close(fd)
		} else {
			free = true // the old layout: no lock at all
		}
		_, alive := readProc(pl1.pid)
		if (free && !alive) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p2, pl2 := startWatched(t, m, runOpts{}, "READY", tamperCode, "-v", vol+":/out:rw")
	uid2, gid2 := checkJailHostIDs(t, m, pl2)
	p2.wait()
	if uid1 == uid2 {
		t.Errorf("the jail after a killed one got its host uid %d while files of that id were left in its volume", uid1)
	}
	checkLeftUntouched(t, vol, p2, uid1, gid1, uid2, gid2)
	if b, err := os.ReadFile(lock); err == nil && len(b) > 0 {
		t.Errorf("the lock file of host uid %d stays marked after a later run: %q", uid1, b)
	}
}

func attackVolumeFilesOutlive(t *testing.T, m mode) {
	vol := newOpenDir(t) // 0777: any jail may write
	p1, pl1 := startWatched(t, m, runOpts{}, "READY", fmt.Sprintf(plantCode, "0.3"), "-v", vol+":/out:rw")
	uid1, gid1 := checkJailHostIDs(t, m, pl1)
	p1.wait()
	if p1.exit != 0 {
		t.Fatalf("the first jail failed: %s", p1)
	}
	// A later jail, which may be given the first one's host ids (they are
	// free now), must not own what the first left.
	p2, pl2 := startWatched(t, m, runOpts{}, "READY", tamperCode, "-v", vol+":/out:rw")
	uid2, gid2 := checkJailHostIDs(t, m, pl2)
	p2.wait()
	checkLeftUntouched(t, vol, p2, uid1, gid1, uid2, gid2)
}

// TestIDRangeFromSubuid runs rljail as root in a private mount namespace
// whose /etc/subuid and /etc/subgid hold an entry for the user rljail: the
// payload's host ids, read from the host's /proc, are then the first of
// those ranges. An entry that is no usable range (one with 0 or 65534 in
// it) is refused with one error line, exit 125.
func TestIDRangeFromSubuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: the range is for root-run jails")
	}
	const ubase, gbase = 1600000000, 1700000000
	t.Cleanup(func() {
		for i := 0; i < 4; i++ {
			_ = os.Remove(filepath.Join("/run/rljail/uid", strconv.Itoa(ubase+i)))
		}
	})
	run := func(t *testing.T, subuid, subgid string, code string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
		dir := newDir(t)
		for name, content := range map[string]string{"subuid": subuid, "subgid": subgid} {
			writeFile(t, filepath.Join(dir, name), content, 0o644)
		}
		script := `mount --make-rprivate / && mount --bind "$1/subuid" /etc/subuid && mount --bind "$1/subgid" /etc/subgid && shift && exec "$@"`
		args := append([]string{"--mount", "sh", "-c", script, "sh", dir, testBin, "--rootfs", rootfsDir}, python(code)...)
		cmd := exec.Command("unshare", args...)
		cmd.Dir = dir
		out, errb := &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out, errb
	}
	if !exists("/etc/subuid") || !exists("/etc/subgid") {
		t.Skip("no /etc/subuid or /etc/subgid to bind over")
	}
	t.Run("entry", func(t *testing.T) {
		marker := randomToken("subuid")
		cmd, out, errb := run(t, "someone:100000:65536\nrljail:1600000000:4\n", "rljail:1700000000:8\n",
			"import sys, time\nprint('READY', flush=True)\ntime.sleep(1)\n#"+marker)
		pl, ok := findPayload(marker, cmd.Process.Pid, 15*time.Second)
		for ok && !strings.Contains(out.String(), "READY") {
			time.Sleep(10 * time.Millisecond)
		}
		var uids, gids []string
		var err error
		if ok {
			uids, gids, err = statusIDs(pl.pid)
		}
		werr := cmd.Wait()
		if !ok || err != nil || werr != nil {
			t.Fatalf("payload seen %v, ids %v, rljail %v: %s", ok, err, werr, errb.String())
		}
		uid, _ := strconv.Atoi(uids[0])
		gid, _ := strconv.Atoi(gids[0])
		if uid < ubase || uid >= ubase+4 || gid-gbase != uid-ubase {
			t.Errorf("with rljail:%d:4 in /etc/subuid and rljail:%d:8 in /etc/subgid the payload's host ids are %d:%d", ubase, gbase, uid, gid)
		}
	})
	for _, bad := range []struct{ name, subuid string }{
		{"with_root", "rljail:0:100\n"},
		{"with_nobody", "rljail:65000:1000\n"},
		{"empty_count", "rljail:1600000000:0\n"},
		{"malformed", "rljail:16x:4\n"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			cmd, out, errb := run(t, bad.subuid, "", "open('/tmp/x', 'w')\nprint('RAN')")
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 || strings.Contains(out.String(), "RAN") {
				t.Errorf("with %q in /etc/subuid: %v, stdout %q, want exit 125 and no run", bad.subuid, err, out.String())
			}
			if lines := strings.Split(strings.TrimSpace(errb.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "/etc/subuid") {
				t.Errorf("want one error line naming /etc/subuid, got %q", errb.String())
			}
		})
	}
}
