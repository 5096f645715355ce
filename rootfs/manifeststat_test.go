package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// makeTree makes a tree of about n entries shaped like a rootfs (directories of 20
// files, two levels deep, a few symlinks) and finishes it as Build does: normalized,
// then fingerprinted.
func makeTree(t testing.TB, root string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		dir := filepath.Join(root, "usr", fmt.Sprintf("d%02d", i/400), fmt.Sprintf("s%02d", (i/20)%20))
		if i%20 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("f%03d.py", i%20))
		if i%50 == 7 {
			if err := os.Symlink("f000.py", p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("x = %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	finishTree(t, root)
}

// finishTree writes the file list, a manifest and the fingerprint as Build does.
func finishTree(t testing.TB, root string) {
	t.Helper()
	ctx := context.Background()
	if err := normalize(ctx, root); err != nil {
		t.Fatal(err)
	}
	sum, err := summarize(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := writeFileList(root, sum.entries)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{FormatVersion: formatVersion, PythonVersion: "3.11.2", Python: "/usr/bin/python3.11", Source: "/usr/bin/python3.11",
		Files: sum.files, SizeBytes: sum.size, TreeSHA256: sum.sha256, FilesSHA256: files}
	if err := writeManifest(root, m); err != nil {
		t.Fatal(err)
	}
	if err := normalize(ctx, root); err != nil {
		t.Fatal(err)
	}
	if err := writeFingerprint(root); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(p string) {
	unix.Mkfifo(p, 0o644)
}

func TestFingerprintDetectsChanges(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string)
		want   string // in the error; "" for no error
	}{
		{"unchanged", func(*testing.T, string) {}, ""},
		{"content, same size", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
		}, "/usr/d00/s00/f001.py: content or mtime changed"},
		{"content, same size and mtime (touch -r)", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f001.py")
			fi, _ := os.Stat(p)
			write(t, p, "x = 9\n")
			os.Chtimes(p, fi.ModTime(), fi.ModTime())
		}, "/usr/d00/s00/f001.py: changed (its ctime"},
		{"mode", func(t *testing.T, root string) {
			os.Chmod(filepath.Join(root, "usr/d00/s01/f002.py"), 0o755)
		}, "/usr/d00/s01/f002.py: mode changed (0755, built 0644)"},
		{"added", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "usr/d00/s01/evil.py"), "import os\n")
		}, "/usr/d00/s01/evil.py: added"},
		{"added at the top", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "evil"), "x")
		}, "/evil: added"},
		{"removed", func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, "usr/d00/s02/f003.py"))
		}, "/usr/d00/s02/f003.py: missing"},
		{"replaced by rename, same size and mtime", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f004.py")
			fi, _ := os.Stat(p)
			q := p + ".new"
			write(t, q, "x = 9\n")
			os.Chtimes(q, fi.ModTime(), fi.ModTime())
			if err := os.Rename(q, p); err != nil {
				t.Fatal(err)
			}
		}, "/usr/d00/s00/f004.py: replaced"},
		{"a symlink retargeted", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f007.py")
			os.Remove(p)
			os.Symlink("/etc/passwd", p)
		}, "/usr/d00/s00/f007.py: "}, // replaced, or content changed where the inode number was reused
		{"a directory replaced by a link", func(t *testing.T, root string) {
			d := filepath.Join(root, "usr/d00/s03")
			os.Rename(d, d+".old")
			os.Symlink("/tmp", d)
		}, "/usr/d00/s03"},
		{"the file list changed", func(t *testing.T, root string) {
			f, _ := os.OpenFile(filepath.Join(root, filesName), os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString("")
			f.Chmod(0o600)
			f.Close()
		}, "/" + filesName + ": mode changed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "rootfs")
			makeTree(t, root, 200)
			tc.change(t, root)
			err := CheckFingerprint(root)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unchanged tree refused: %v", err)
				}
				return
			}
			var ce *ChangedError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want a ChangedError with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error is not one line: %q", err)
			}
		})
	}
}

// TestFingerprintFileDamage: a missing, damaged or planted fingerprint file is an
// error, never a pass.
func TestFingerprintFileDamage(t *testing.T) {
	tests := []struct {
		name   string
		change func(p string)
		want   string
	}{
		{"missing", func(p string) { os.Remove(p) }, "no .rljail-stat (built by an older rljail"},
		{"truncated", func(p string) { os.Truncate(p, 40) }, "damaged"},
		{"empty", func(p string) { os.Truncate(p, 0) }, "damaged"},
		{"a FIFO", func(p string) { os.Remove(p); mkfifo(p) }, "not a regular file"},
		{"a link", func(p string) { os.Remove(p); os.Symlink("/dev/zero", p) }, "open .rljail-stat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "rootfs")
			makeTree(t, root, 40)
			tc.change(filepath.Join(root, fingerprintName))
			done := make(chan error, 1)
			go func() { done <- CheckFingerprint(root) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v; want an error with %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("CheckFingerprint hung")
			}
		})
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCheckFingerprint is the per-run check against the cost of what every run
// did before it (Check: the manifest and the programs' sizes), on trees the size of
// the default rootfs (2211 entries) and of a data-science one (20000), and on the
// rootfs at $RLJAIL_ROOTFS when set. Verify (hashing every file) is given for scale.
func BenchmarkCheckFingerprint(b *testing.B) {
	type tree struct{ name, dir string }
	var trees []tree
	for _, n := range []int{2211, 20000} {
		dir := filepath.Join(b.TempDir(), "rootfs")
		makeTree(b, dir, n)
		trees = append(trees, tree{fmt.Sprintf("synthetic-%d", n), dir})
	}
	if d := os.Getenv("RLJAIL_ROOTFS"); d != "" {
		if _, err := os.Stat(filepath.Join(d, fingerprintName)); err == nil {
			trees = append(trees, tree{"rootfs", d})
		}
	}
	for _, tr := range trees {
		b.Run(tr.name+"/fingerprint", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := CheckFingerprint(tr.dir); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/compare-%d-workers", tr.name, workers), func(b *testing.B) {
				root, err := unix.Open(tr.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(root)
				data, err := readFingerprintAt(root)
				if err != nil {
					b.Fatal(err)
				}
				cpu := cpuTime()
				for i := 0; i < b.N; i++ {
					if same, err := fingerprintMatches(root, data, workers); !same || err != nil {
						b.Fatal(same, err)
					}
				}
				// CPU time per comparison: what it costs the machine, which
				// a loaded host's wall clock hides.
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
		if tr.name == "rootfs" {
			b.Run(tr.name+"/check", func(b *testing.B) {
				cpu := cpuTime()
				for i := 0; i < b.N; i++ {
					if _, err := Check(tr.dir); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestFingerprintTop: the top-only check of a rootfs no jail can write
// passes a tree as built and one changed deep inside (what only the host
// could do there, and the full check finds), and catches a tree copied in
// and a change at its top, with the full check's verdict.
func TestFingerprintTop(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, root string) string // returns the tree to check
		want   string                                 // in the error; "" for none
	}{
		{"as built", func(t *testing.T, root string) string { return root }, ""},
		{"changed deep inside", func(t *testing.T, root string) string {
			write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
			return root
		}, ""},
		{"copied in", func(t *testing.T, root string) string {
			dst := filepath.Join(t.TempDir(), "copy")
			if out, err := exec.Command("cp", "-a", root, dst).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v: %s", err, out)
			}
			return dst
		}, "changed since its build"},
		{"added at the top", func(t *testing.T, root string) string {
			write(t, filepath.Join(root, "evil"), "x")
			return root
		}, "/evil: added"},
		// The record says another user may write an entry deep inside (a
		// tree copied in with its owner's files, taken back by
		// UpdateFingerprint): that user's jails may have, so it is walked.
		{"an entry recorded as another user's", func(t *testing.T, root string) string {
			p := filepath.Join(root, "usr/d00/s00/f002.py")
			if err := os.Lchown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
			if _, err := UpdateFingerprint(root); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
			return root
		}, "/usr/d00/s00/f001.py"},
		{"an entry recorded as group-writable", func(t *testing.T, root string) string {
			if err := os.Chmod(filepath.Join(root, "usr/d00/s01"), 0o775); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(root, fingerprintName)); err != nil {
				t.Fatal(err)
			}
			if err := writeFingerprint(root); err != nil { // as it is now
				t.Fatal(err)
			}
			write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
			return root
		}, "/usr/d00/s00/f001.py"},
		{"top directory's entry changed", func(t *testing.T, root string) string {
			if err := os.Chmod(filepath.Join(root, "usr"), 0o700); err != nil {
				t.Fatal(err)
			}
			return root
		}, "/usr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "r")
			makeTree(t, root, 200)
			err := CheckFingerprintTop(c.change(t, root), uint32(os.Geteuid()))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("CheckFingerprintTop = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("CheckFingerprintTop = %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestFingerprintTopReadsThePrefix: the top-only check reads the record's
// first topPrefix bytes only (its owner summary and the top's section), so
// that what it costs does not grow with the rootfs: a record damaged past
// them is not seen by it (the full check finds it), and a record of format
// 1, which has no summary, is read whole and each entry's owner looked at.
func TestFingerprintTopReadsThePrefix(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	makeTree(t, root, 1500)
	p := filepath.Join(root, fingerprintName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2*topPrefix {
		t.Fatalf("the record is %d bytes, not past the prefix of %d", len(data), topPrefix)
	}
	owner := uint32(os.Geteuid())
	if err := CheckFingerprintTop(root, owner); err != nil {
		t.Fatalf("as built: %v", err)
	}
	damaged := append([]byte(nil), data...)
	for i := topPrefix + 100; i < len(damaged); i++ {
		damaged[i] = 0xff
	}
	write(t, p, string(damaged))
	if err := CheckFingerprintTop(root, owner); err != nil {
		t.Errorf("damaged past the prefix, the top-only check: %v, want nil (it reads the prefix only)", err)
	}
	if err := CheckFingerprint(root); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("damaged past the prefix, the full check: %v, want the damage", err)
	}
	if err := CheckFingerprintTop(root, owner+1); err == nil {
		t.Error("a record summarized as another owner's passed the top-only check")
	}

	// Format 1: the magic of an earlier rljail, no summary.
	body, _, summarized, _, err := fpHeader(data)
	if err != nil || !summarized {
		t.Fatalf("fpHeader of the record as built: %v, summarized %v", err, summarized)
	}
	v1 := append([]byte(fingerprintMagicV1), data[body:]...)
	write(t, p, string(v1))
	if err := CheckFingerprintTop(root, owner); err != nil {
		t.Errorf("a record of format 1 as built: %v", err)
	}
	if err := CheckFingerprint(root); err != nil {
		t.Errorf("the full check of a record of format 1 as built: %v", err)
	}
	// A change deep inside: not seen where the record is the runner's, walked
	// (and named) where it is not.
	write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
	if err := CheckFingerprintTop(root, owner); err != nil {
		t.Errorf("a record of format 1 changed deep inside, the owner's: %v, want nil", err)
	}
	if err := CheckFingerprintTop(root, owner+1); err == nil || !strings.Contains(err.Error(), "/usr/d00/s00/f001.py") {
		t.Errorf("a record of format 1 of another owner's entries, changed deep inside: %v, want the walk's verdict", err)
	}
}

// TestFingerprintTimesOnly: a change of times alone (touch, a chmod set
// back) says so and names the one command that takes the rootfs back,
// which does so only where every file's content is as built; any other
// change keeps the longer message.
func TestFingerprintTimesOnly(t *testing.T) {
	f := "usr/d00/s00/f001.py"
	tests := []struct {
		name      string
		change    func(t *testing.T, root string)
		timesOnly bool
		accepted  bool // by UpdateFingerprint
	}{
		{"touch", func(t *testing.T, root string) {
			future := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(root, f), future, future); err != nil {
				t.Fatal(err)
			}
		}, true, true},
		{"chmod set back", func(t *testing.T, root string) {
			p := filepath.Join(root, f)
			os.Chmod(p, 0o600)
			os.Chmod(p, 0o644)
		}, true, true},
		{"content, same size and mtime", func(t *testing.T, root string) {
			p := filepath.Join(root, f)
			fi, _ := os.Stat(p)
			write(t, p, "x = 9\n")
			os.Chtimes(p, fi.ModTime(), fi.ModTime())
		}, true, false},
		{"mode", func(t *testing.T, root string) {
			os.Chmod(filepath.Join(root, f), 0o755)
		}, false, false},
		{"added", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "usr/d00/s01/evil.py"), "import os\n")
		}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "rootfs")
			makeTree(t, root, 50)
			tc.change(t, root)
			err := CheckFingerprint(root)
			var ce *ChangedError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v; want a ChangedError", err)
			}
			cmd := "`rljail rootfs verify --update-fingerprint " + root + "`"
			if ce.TimesOnly != tc.timesOnly || strings.Contains(err.Error(), cmd) != tc.timesOnly {
				t.Errorf("TimesOnly %v, message %q; want TimesOnly %v and the command named iff so", ce.TimesOnly, err, tc.timesOnly)
			}
			if !tc.timesOnly {
				return
			}
			diffs, uerr := UpdateFingerprint(root)
			after := CheckFingerprint(root)
			if tc.accepted && (uerr != nil || len(diffs) > 0 || after != nil) {
				t.Errorf("UpdateFingerprint = %v, %v, then CheckFingerprint %v; want it taken back", diffs, uerr, after)
			}
			if !tc.accepted && after == nil {
				t.Errorf("UpdateFingerprint took back a rootfs whose content changed (%v, %v)", diffs, uerr)
			}
		})
	}
}
