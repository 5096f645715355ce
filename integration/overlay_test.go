package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Read-only directories reach the jail through a read-only overlayfs, so
// that its mountinfo names no host path (attack mountinfo_host_paths).
// These tests check what a user sees of that: the grant reads like the
// host directory, host changes to a file show, and where overlayfs refuses
// a directory the plain bind it gets instead is announced.

// TestOverlayReadsLikeTheHost compares, from the host, a listing and file
// contents read through the jail with the directory itself, and changes a
// file on the host while the jail runs.
func TestOverlayReadsLikeTheHost(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			ws := newDir(t)
			for _, d := range []string{"a", "a/b", "c"} {
				if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]string{"top.txt": "top", "a/one": "1", "a/b/two": "22", "c/three": "333"}
			for p, c := range want {
				writeFile(t, filepath.Join(ws, p), c, 0o644)
			}
			if err := os.Symlink("a/one", filepath.Join(ws, "link")); err != nil {
				t.Fatal(err)
			}
			changed := randomToken("changed")
			// The jail waits for the host to change top.txt, then reads it again.
			code := `
import os, sys, time
out = []
for root, dirs, files in os.walk("/workspace"):
    dirs.sort()
    for f in sorted(files):
        p = os.path.join(root, f)
        out.append("%s=%s" % (os.path.relpath(p, "/workspace"), open(p).read()))
print(";".join(sorted(out)))
print("LINK", os.readlink("/workspace/link"))
print("MNT", [l for l in open("/proc/self/mountinfo") if l.split()[4] == "/workspace"])
sys.stdout.flush()
for _ in range(500):
    if open("/workspace/top.txt").read() != "top":
        break
    time.sleep(0.01)
print("NOW", open("/workspace/top.txt").read())
`
			p := startJail(t, m, runOpts{dir: ws}, python(code)...)
			go func() {
				// Rewrite in place, as an editor that keeps the inode would.
				for i := 0; i < 200; i++ {
					if strings.Contains(p.stdout.String(), "LINK") {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				_ = os.WriteFile(filepath.Join(ws, "top.txt"), []byte(changed), 0o644)
			}()
			p.wait()
			if p.exit != 0 {
				t.Fatalf("%s", p)
			}
			lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
			if len(lines) != 4 {
				t.Fatalf("unexpected output: %s", p)
			}
			wantWalk := "a/b/two=22;a/one=1;c/three=333;link=1;top.txt=top"
			if lines[0] != wantWalk {
				t.Errorf("the workspace reads as %q through the jail, the host has %q", lines[0], wantWalk)
			}
			if lines[1] != "LINK a/one" {
				t.Errorf("the symlink reads as %q", lines[1])
			}
			// The workspace's one mountinfo line: an overlay with root /.
			if f := strings.Fields(lines[2]); len(f) < 6 || f[4] != "/" || !strings.Contains(lines[2], " - overlay rljail ") {
				t.Errorf("the workspace is not an overlay in the jail's mountinfo: %s", lines[2])
			}
			if strings.Contains(p.stderr.String(), "plain bind") {
				t.Errorf("rljail warned: %s", p.stderr.String())
			}
			if lines[3] != "NOW "+changed {
				t.Errorf("a file rewritten on the host reads as %q in the jail, want %q", lines[3], changed)
			}
		})
	}
}

// TestOverlayFallbackAnnounced grants a directory below two stacked
// overlays on the host: overlayfs refuses a third level, so rljail binds
// the directory plainly, and must say so on stderr and in the report.
func TestOverlayFallbackAnnounced(t *testing.T) {
	base := newDir(t)
	mk := func(name string) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	l1, l2, m1, l3, m2 := mk("l1"), mk("l2"), mk("m1"), mk("l3"), mk("m2")
	secret := randomToken("stacked")
	writeFile(t, filepath.Join(l1, "data.txt"), secret, 0o644)
	mount := func(lower, at string) {
		out, err := exec.Command("mount", "-t", "overlay", "-o", "ro,lowerdir="+lower, "rljail-it-stack", at).CombinedOutput()
		if err != nil {
			t.Fatalf("mount an overlay at %s: %v: %s", at, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", at).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", at, err, out)
			}
		})
	}
	mount(l1+":"+l2, m1)
	mount(m1+":"+l3, m2)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			stdout, stderr, exit, res := runJail(t, m, runOpts{dir: newDir(t)}, append([]string{"-v", m2 + ":/data"},
				python(`print(open("/data/data.txt").read())`)...)...)
			if exit != 0 || strings.TrimSpace(stdout) != secret {
				t.Fatalf("exit %d, stdout %q, stderr %q", exit, stdout, stderr)
			}
			const says = "/data is mounted as a plain bind"
			var lines int
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "rljail: warning: ") && strings.Contains(l, says) {
					lines++
				}
			}
			if lines != 1 {
				t.Errorf("want one stderr warning line saying %q, got stderr %q", says, stderr)
			}
			warnings, _ := res["warnings"].([]any)
			if !strings.Contains(fmt.Sprint(warnings...), says) {
				t.Errorf("the report's warnings %q do not say %q", warnings, says)
			}
		})
	}
}

// TestNoMountReachesTheHost grants a directory on a shared mount (as
// systemd makes /) read-write, with a volume nested inside it. The clone
// of a shared mount is a peer of the host's unless made private, and the
// nested volume init mounts below it would then appear on the host, and
// stay there. Decided from the host's mount table, during the run and
// after it.
func TestNoMountReachesTheHost(t *testing.T) {
	shared := newOpenDir(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "rljail-it-shared", shared).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// Whatever leaked below it goes first.
		for {
			b, _ := os.ReadFile("/proc/self/mountinfo")
			leaked := ""
			for _, row := range attackMountinfoRoots(string(b)) {
				if strings.HasPrefix(row[1], shared+"/") {
					leaked = row[1]
				}
			}
			if leaked == "" {
				break
			}
			if out, err := exec.Command("umount", leaked).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", leaked, err, out)
				break
			}
		}
		if out, err := exec.Command("umount", shared).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", shared, err, out)
		}
	})
	if out, err := exec.Command("mount", "--make-shared", shared).CombinedOutput(); err != nil {
		t.Fatalf("make %s shared: %v: %s", shared, err, out)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	nested := newDir(t)
	hostMountsBelow := func() []string {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var below []string
		for _, row := range attackMountinfoRoots(string(b)) {
			if strings.HasPrefix(row[1], shared+"/") {
				below = append(below, row[1]+" ("+row[2]+")")
			}
		}
		return below
	}
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			sub := filepath.Join(shared, "sub-"+string(m))
			if err := os.Mkdir(sub, 0o777); err != nil {
				t.Fatal(err)
			}
			p := startJail(t, m, runOpts{dir: newDir(t)}, append([]string{"-v", shared + ":/data:rw", "-v", nested + ":/data/sub-" + string(m)},
				python(`import time, os; print("IN", os.path.ismount("/data/sub-`+string(m)+`"), flush=True); time.sleep(1)`)...)...)
			if !p.stdout.waitFor("IN True", 10*time.Second) {
				_ = p.cmd.Process.Kill()
				p.wait()
				t.Fatalf("the nested volume was not mounted in the jail: %s", p)
			}
			if below := hostMountsBelow(); len(below) > 0 {
				t.Errorf("while the jail runs, the host has mounts below the granted %s: %v", shared, below)
			}
			p.wait()
			if p.exit != 0 {
				t.Fatalf("%s", p)
			}
			if below := hostMountsBelow(); len(below) > 0 {
				t.Errorf("after the run, the host has mounts below the granted %s: %v", shared, below)
			}
		})
	}
}
