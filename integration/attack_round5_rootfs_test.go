package integration

// Red-team round 5, the rootfs build's copy: whoever may write a venv
// while `rljail rootfs build --venv` copies it (its owner; a jail with the
// venv in a writable volume) swaps a symlink to a file only the builder may
// read in where the copy listed a public file. Decided from the host: the
// secret's bytes in any file of the test's directories but the secret's
// own.

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "rootfs_venv_swap_publishes_private", group: groupFilesystem,
			mechanism: "while `rootfs build --venv` copies the venv, the venv's writer exchanges (renameat2 RENAME_EXCHANGE) a public file the copy has listed with a symlink to a file only the builder may read (0600 in a 0700 directory): once, as soon as the copy opens the venv's first file, and in a loop until the build ends; 8 builds",
			layer:     "rootfs copySource: each entry opened once relative to its directory's descriptor without following a symlink (O_NOFOLLOW), judged by the fstat of the descriptor it is copied from; a symlink met is read by descriptor and followed only to a file others may read (openHost), judged by what was opened",
			run:       attackRootfsVenvSwap},
	}...)
}

// venvSwapFiles is how many public modules the venv's site-packages holds
// before the file swapped: time for the swap to land between the copy's
// listing and its open of that file.
const venvSwapFiles = 300

func attackRootfsVenvSwap(t *testing.T, m mode) {
	dir := newDir(t)
	secret := randomToken("rootfs-race-secret-")
	// The builder's own private file: root's, or the rootless user's.
	private := filepath.Join(dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(private, "secret")
	writeFile(t, secretFile, secret+"\n", 0o600)
	outs := filepath.Join(dir, "outs") // the builds' rootfs directories
	if err := os.Mkdir(outs, 0o755); err != nil {
		t.Fatal(err)
	}
	if m == asRootless {
		for _, p := range []string{private, secretFile, outs} {
			if err := os.Chown(p, testUID, testGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A venv the builder may read and someone else (here the test, as
	// root) may write.
	venv := filepath.Join(dir, "venv")
	site := filepath.Join(venv, "lib", "python3.11", "site-packages")
	stash := filepath.Join(venv, "stash") // not copied: holds the link
	for _, d := range []string{site, stash} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(venv, "pyvenv.cfg"), "home = /usr/bin\nversion = 3.11.2\n", 0o644)
	for i := range venvSwapFiles {
		writeFile(t, filepath.Join(site, fmt.Sprintf("m_%04d.py", i)), fmt.Sprintf("N = %d\n", i), 0o644)
	}
	target := filepath.Join(site, "z_target.txt")
	link := filepath.Join(stash, "link")
	writeFile(t, target, "public\n", 0o644)
	if err := os.Symlink(secretFile, link); err != nil {
		t.Fatal(err)
	}
	exchange := func() error {
		return unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, target, unix.RENAME_EXCHANGE)
	}

	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, site, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	// opened waits for the copy's open of the venv's first module (after
	// it listed the directory, before it reaches z_target.txt), or for done.
	opened := func(done *atomic.Bool) bool {
		buf := make([]byte, 64<<10)
		for !done.Load() {
			if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}, 5); n <= 0 {
				continue
			}
			n, _ := unix.Read(in, buf)
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if string(bytes.TrimRight(name, "\x00")) == "m_0000.py" {
					return true
				}
			}
		}
		return false
	}

	const builds = 8
	swapped := 0
	for i := range builds {
		loop := i%2 == 1 // odd builds: a renameat2 loop; even: one exchange, timed
		var done atomic.Bool
		var wg sync.WaitGroup
		var exchanges atomic.Int64
		var swapErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !opened(&done) {
				return
			}
			for {
				if err := exchange(); err != nil {
					swapErr = err
					return
				}
				exchanges.Add(1)
				if !loop || done.Load() {
					return
				}
			}
		}()
		out := filepath.Join(outs, fmt.Sprintf("py%d", i))
		cmd := exec.Command(testBin, "rootfs", "build", "-q", "--no-commands", "--rootfs", out, "--venv", venv)
		cmd.Env = modeEnv(m)
		stdout, stderr, exit := attackExec(t, m, cmd)
		done.Store(true)
		wg.Wait()
		if swapErr != nil {
			t.Fatalf("renameat2 RENAME_EXCHANGE: %v", swapErr)
		}
		if exchanges.Load() > 0 {
			swapped++
		}
		t.Logf("build %d (%s): exit %d after %d exchanges: %s", i, map[bool]string{true: "loop", false: "one exchange"}[loop], exit, exchanges.Load(), strings.TrimSpace(stdout+stderr))
		// Back to the public file at z_target.txt for the next build.
		if fi, err := os.Lstat(target); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if err := exchange(); err != nil {
				t.Fatal(err)
			}
		}
		// Host-side: the secret's bytes anywhere the builds wrote (the
		// test's directory, the secret's own file and the link aside).
		if leaks := filesHolding(t, dir, secret, secretFile); len(leaks) > 0 {
			t.Errorf("build %d published the builder's private file (0600 in a 0700 directory) into the rootfs: %s", i, strings.Join(leaks, ", "))
			break
		}
	}
	if swapped == 0 {
		t.Fatalf("no build opened the venv's first module while the test watched: the case proves nothing")
	}
}

// filesHolding lists the regular files under root (but skip) that hold s,
// each with its mode.
func filesHolding(t *testing.T, root, s, skip string) []string {
	t.Helper()
	var found []string
	deadline := time.Now().Add(30 * time.Second)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == skip || !d.Type().IsRegular() || time.Now().After(deadline) {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			mode := "?"
			if fi, err := d.Info(); err == nil {
				mode = fmt.Sprintf("%04o", fi.Mode().Perm())
			}
			found = append(found, p+" (mode "+mode+")")
		}
		return nil
	})
	return found
}
