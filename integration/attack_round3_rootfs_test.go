package integration

// Red-team round 3, the rootfs fingerprint: `rljail rootfs verify
// --update-fingerprint` is the one way to make runs take a rootfs whose
// metadata changed, and it promises never to make a changed tree pass.
// Every case decides from the host: the exit status of the update and of
// the run after it, and the tree's own files (a mode, an attribute, bytes).

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "rootfs_update_blesses_modes", group: groupFilesystem,
			mechanism: "the owner of a rootfs makes its interpreter setuid (and setgid, a directory sticky) and gives files extended attributes (a file capability as root, a user.* attribute rootless); `rootfs verify --update-fingerprint` then records the tree anew, as built",
			layer:     "rootfs.Verify compares the setuid, setgid and sticky bits (the build sets none) and lists every extended attribute but a security module's label (the build writes none); --update-fingerprint refuses both",
			run:       attackRootfsUpdateModes},
		{name: "rootfs_update_race", group: groupFilesystem,
			mechanism: "a file of the rootfs is rewritten while `rootfs verify --update-fingerprint` runs, just after Verify hashed it (inotify: IN_CLOSE_NOWRITE), so that the new fingerprint records the changed file and every later run takes it",
			layer:     "rootfs.UpdateFingerprint records the fingerprint before Verify reads the tree and again after, and records nothing when the two differ",
			run:       attackRootfsUpdateRace},
		{name: "rootfs_remove_swapped_parent", group: groupFilesystem,
			mechanism: "`rljail rootfs remove DIR/link/py` waits for the build lock beside py, which another user holds; meanwhile that user points link (theirs) at another directory holding a rootfs named py, and releases the lock: the removal lands on that one",
			layer:     "removeLocked opens the directory holding the rootfs once and takes the lock, checks the manifest and renames through that descriptor",
			run:       attackRootfsRemoveSwap},
		{name: "rootfs_changed_name_escapes", group: groupFilesystem,
			mechanism: "whoever changes the rootfs names the file it adds with terminal escapes and a newline, so that a run's refusal and `rootfs verify` write an escape sequence to the user's terminal and a forged line (\"rootfs ... is as built\")",
			layer:     "rootfs.Difference.String writes a path that holds anything Go would escape quoted (DisplayPath); `rootfs info` lists usr/bin the same way",
			run:       attackRootfsNameEscapes},
	}...)
}

// attackRootfsOwned is a fresh, fingerprinted copy of the test rootfs that
// m's user owns (rootless: chowned to the test user, whose
// --update-fingerprint takes it back first).
func attackRootfsOwned(t *testing.T, m mode) string {
	t.Helper()
	dir := rootfsCopy(t)
	if m == asRootless {
		// Its directory too: the build lock lies beside the rootfs.
		if out, err := exec.Command("chown", "-R", "--", strconv.Itoa(testUID)+":"+strconv.Itoa(testGID), filepath.Dir(dir)).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
		if out, stderr, exit := attackExec(t, m, exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", dir)); exit != 0 {
			t.Fatalf("the owner's --update-fingerprint of an intact chowned copy: exit %d: %s%s", exit, out, stderr)
		}
	}
	return dir
}

// attackRootfsRun runs a trivial payload on dir as m: 0 where the run takes
// the rootfs, 125 where it refuses it.
func attackRootfsRun(t *testing.T, m mode, dir string) (string, int) {
	t.Helper()
	cmd := exec.Command(testBin, "-q", "--no-workspace", "--rootfs", dir, "--", "python3", "-c", "pass")
	cmd.Env = modeEnv(m)
	_, stderr, exit := attackExec(t, m, cmd)
	return stderr, exit
}

func attackRootfsUpdateModes(t *testing.T, m mode) {
	dir := attackRootfsOwned(t, m)
	python := filepath.Join(dir, "usr/bin/python3.11")
	// Raw chmod(2) numbers (the owner's own right; root's hand on the
	// rootless user's files keeps their owner).
	if err := unix.Chmod(python, 0o6755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(dir, "usr/lib"), 0o1755); err != nil {
		t.Fatal(err)
	}
	// A file capability (CAP_SYS_ADMIN, version 2) where root may set one;
	// an attribute of the user's own namespace otherwise.
	attr, value, file := "user.rljail-attack", []byte("1"), filepath.Join(dir, "usr/lib/python3.11/os.py")
	if m == asRoot {
		var b bytes.Buffer
		for _, v := range []uint32{0x02000001, 1 << 21, 0, 0, 0} {
			_ = binary.Write(&b, binary.LittleEndian, v)
		}
		attr, value, file = "security.capability", b.Bytes(), filepath.Join(dir, "usr/bin/busybox")
	}
	if err := unix.Lsetxattr(file, attr, value, 0); err != nil {
		t.Fatalf("set %s on %s: %v", attr, file, err)
	}
	if _, exit := attackRootfsRun(t, m, dir); exit != 125 {
		t.Fatalf("a run on the changed rootfs: exit %d, want 125", exit)
	}
	out, stderr, exit := attackExec(t, m, exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", dir))
	if exit == 0 {
		t.Errorf("rootfs verify --update-fingerprint recorded a tree with a setuid interpreter and %s as built: %s", attr, out)
	} else {
		for _, want := range []string{"/usr/bin/python3.11: mode 6755, built 0755", "/usr/lib: mode 1755, built 0755", "extended attributes " + attr} {
			if !strings.Contains(out, want) {
				t.Errorf("the update's list does not say %q:\n%s%s", want, out, stderr)
			}
		}
	}
	if stderr, exit := attackRootfsRun(t, m, dir); exit != 125 {
		t.Errorf("after the update, a run on the rootfs with a setuid interpreter: exit %d (stderr %q), want 125", exit, stderr)
	}
	// Host-side: the tree is as the attack left it.
	if fi, err := os.Stat(python); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the interpreter is no longer setuid (%v): the case proves nothing", err)
	}
}

func attackRootfsUpdateRace(t *testing.T, m mode) {
	dir := attackRootfsOwned(t, m)
	target := filepath.Join(dir, "usr/lib/python3.11/os.py")
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, target, unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	var done, wrote atomic.Bool
	writer := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for !done.Load() {
			fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
			if n, _ := unix.Poll(fds, 5); n <= 0 {
				continue
			}
			if n, _ := unix.Read(in, buf); n <= 0 {
				continue
			}
			// Verify has hashed the file: rewrite it (valid Python, so that
			// a run that takes it would run).
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				_, err = f.WriteString("\n# planted after the check read this file\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			wrote.Store(err == nil)
			writer <- err
			return
		}
		writer <- nil
	}()
	cmd := exec.Command(testBin, "rootfs", "verify", "--update-fingerprint", dir)
	out, stderr, exit := attackExec(t, m, cmd)
	done.Store(true)
	select {
	case err := <-writer:
		if err != nil {
			t.Fatalf("rewrite %s: %v", target, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not end")
	}
	if !wrote.Load() {
		t.Fatalf("the update never read %s (no IN_CLOSE_NOWRITE): the case proves nothing; update exit %d: %s%s", target, exit, out, stderr)
	}
	runStderr, runExit := attackRootfsRun(t, m, dir)
	if exit == 0 && runExit != 125 {
		t.Errorf("a file rewritten during rootfs verify --update-fingerprint was recorded as built: the update exited 0 (%s) and a run took the rootfs (exit %d, stderr %q)", strings.TrimSpace(out), runExit, runStderr)
	}
	if exit == 0 {
		return
	}
	if !strings.Contains(out, "changed while it was verified") && !strings.Contains(out, "/usr/lib/python3.11/os.py") {
		t.Errorf("the refused update does not say why: %s%s", out, stderr)
	}
	if runExit != 125 {
		t.Errorf("a run on the rewritten rootfs: exit %d (stderr %q), want 125", runExit, runStderr)
	}
	// Host-side: the file really holds the attacker's bytes.
	if b, err := os.ReadFile(target); err != nil || !bytes.Contains(b, []byte("# planted after the check")) {
		t.Fatalf("the file does not hold the rewrite (%v): the case proves nothing", err)
	}
}

func attackRootfsRemoveSwap(t *testing.T, m mode) {
	meant := filepath.Dir(attackRootfsOwned(t, m))  // holds py: the rootfs the user removes
	victim := filepath.Dir(attackRootfsOwned(t, m)) // holds another py
	base := newDir(t)                               // the other user's: holds the link
	link := filepath.Join(base, "link")
	if err := os.Symlink(meant, link); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(meant, ".py.lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if m == asRootless {
		if err := lock.Chown(testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out, stderr string
		exit        int
	}
	done := make(chan result, 1)
	go func() {
		out, stderr, exit := attackExec(t, m, exec.Command(testBin, "rootfs", "remove", filepath.Join(link, "py")))
		done <- result{out, stderr, exit}
	}()
	// Wait until the removal is blocked on the lock (/proc/locks shows a
	// waiter, "->", on the lock file's inode), then swap the link.
	waiting := false
	for deadline := time.Now().Add(20 * time.Second); !waiting && time.Now().Before(deadline); {
		b, _ := os.ReadFile("/proc/locks")
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "->") && strings.Contains(line, ":"+strconv.FormatUint(st.Ino, 10)+" ") {
				waiting = true
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the removal ended before it waited for the lock: exit %d: %s%s", r.exit, r.out, r.stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !waiting {
		t.Fatal("the removal never waited for the build lock: the case proves nothing")
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the removal did not end")
	}
	// Host-side: the other directory's rootfs is whole.
	if _, err := os.Lstat(filepath.Join(victim, "py", ".rljail-rootfs.json")); err != nil {
		t.Errorf("rljail rootfs remove %s/py removed the rootfs of the directory the link was pointed at while it waited (%v); exit %d: %s%s", link, err, r.exit, r.out, r.stderr)
	}
	// The one it was asked to remove, through the link as it was, is gone.
	if _, err := os.Lstat(filepath.Join(meant, "py")); err == nil || r.exit != 0 {
		t.Errorf("the rootfs the removal was asked for: still there (%v) or exit %d: %s%s", err, r.exit, r.out, r.stderr)
	}
}

func attackRootfsNameEscapes(t *testing.T, m mode) {
	dir := attackRootfsOwned(t, m)
	forged := "rootfs python is as built" // no slash: a name
	name := "a\x1b]0;owned\x07\x1b[2J\n" + forged
	for _, p := range []string{filepath.Join(dir, "usr/lib/python3.11", name), filepath.Join(dir, "usr/bin", name)} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if m == asRootless {
			if err := os.Chown(p, testUID, testGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	clean := func(what, out string) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("%s wrote a terminal escape from a file name: %q", what, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, forged) {
				t.Errorf("%s wrote a line that a file name forged: %q", what, out)
			}
		}
	}
	stderr, exit := attackRootfsRun(t, m, dir)
	if exit != 125 {
		t.Errorf("a run on the changed rootfs: exit %d, want 125", exit)
	}
	clean("a run's refusal", stderr)
	out, vstderr, exit := attackExec(t, m, exec.Command(testBin, "rootfs", "verify", dir))
	if exit != 1 {
		t.Errorf("rootfs verify: exit %d, want 1", exit)
	}
	clean("rootfs verify", out+vstderr)
	out, istderr, _ := attackExec(t, m, exec.Command(testBin, "rootfs", "info", dir))
	clean("rootfs info", out+istderr)
}
