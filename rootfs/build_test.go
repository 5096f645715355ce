package rootfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// maxRootfsSize is the budget for the whole tree.
const maxRootfsSize = 80_000_000

// TestBuild builds the rootfs three times at once (twice into the same directory),
// checks that the results are identical and sound, and runs the interpreter inside with
// chroot.
func TestBuild(t *testing.T) {
	base := t.TempDir()
	outs := []string{filepath.Join(base, "a", "python"), filepath.Join(base, "b", "deeper", "python"), filepath.Join(base, "a", "python")}
	manifests := make([]Manifest, len(outs))
	errs := make([]error, len(outs))
	durations := make([]time.Duration, len(outs))
	var wg sync.WaitGroup
	for i, out := range outs {
		wg.Go(func() {
			start := time.Now()
			manifests[i], errs[i] = Build(t.Context(), BuildOptions{Out: out, Log: func(msg string) { t.Logf("build %d: %s", i, msg) }})
			durations[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil {
			t.Fatalf("build %d: %v", i, errs[i])
		}
		t.Logf("build %d: %v (three builds in parallel)", i, durations[i].Round(time.Millisecond))
	}
	m, out := manifests[0], outs[0]
	for i := range manifests {
		if !reflect.DeepEqual(manifests[i], m) {
			t.Errorf("builds differ:\n%+v\n%+v", m, manifests[i])
		}
	}
	t.Logf("rootfs: %d files, %d bytes, tree %s", m.Files, m.SizeBytes, m.TreeSHA256)
	if m.Python != "/usr/bin/python3.11" || m.Source != "/usr/bin/python3.11" || !strings.HasPrefix(m.PythonVersion, "3.11.") {
		t.Errorf("manifest %+v: not Debian 12's python3.11", m)
	}
	if checked, err := Check(out); err != nil || !reflect.DeepEqual(checked, m) {
		t.Errorf("Check = %+v, %v; want %+v", checked, err, m)
	}

	t.Run("tree", func(t *testing.T) { checkTree(t, out, m) })
	t.Run("bytecode", func(t *testing.T) { checkBytecodeFiles(t, out) })
	t.Run("python inside", func(t *testing.T) { checkPythonInside(t, out) })
	t.Run("loader cache", func(t *testing.T) { checkLoaderCache(t, out) })
	t.Run("no leftovers", func(t *testing.T) {
		for _, out := range outs {
			entries, err := os.ReadDir(filepath.Dir(out))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "python" {
				t.Errorf("%s holds %v, want only python", filepath.Dir(out), entries)
			}
		}
	})

	t.Run("rebuild replaces", func(t *testing.T) {
		// Something a jail would not see in a fresh tree; the rebuild must drop it.
		if err := os.WriteFile(filepath.Join(out, "stale"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		again, err := Build(t.Context(), BuildOptions{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rebuild: %v", time.Since(start).Round(time.Millisecond))
		if !reflect.DeepEqual(again, m) {
			t.Errorf("rebuild gives %+v, want %+v", again, m)
		}
		if _, err := os.Lstat(filepath.Join(out, "stale")); err == nil {
			t.Error("rebuild kept a file of the old tree")
		}
		entries, _ := os.ReadDir(filepath.Dir(out))
		if len(entries) != 1 {
			t.Errorf("rebuild left %v", entries)
		}
	})
}

// checkTree looks at the files of a built tree.
func checkTree(t *testing.T, out string, m Manifest) {
	var size int64
	var files int
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Errorf("%s: mode %v", p, mode)
		}
		if mode.IsRegular() || mode.IsDir() {
			if perm := mode.Perm(); perm != 0o755 && perm != 0o644 {
				t.Errorf("%s: permissions %v", p, perm)
			}
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
			t.Errorf("%s: owned by %d, not the builder", p, st.Uid)
		}
		if !fi.ModTime().Equal(fixedMtime) {
			t.Errorf("%s: mtime %v", p, fi.ModTime())
		}
		if rel, _ := filepath.Rel(out, p); isOwnFile("/" + rel) {
			return nil
		}
		if mode.IsRegular() {
			size += fi.Size()
		}
		if !mode.IsDir() {
			files++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if size != m.SizeBytes || files != m.Files {
		t.Errorf("tree has %d files, %d bytes; manifest says %d, %d", files, size, m.Files, m.SizeBytes)
	}
	if size >= maxRootfsSize {
		t.Errorf("rootfs is %d bytes, over the %d budget", size, maxRootfsSize)
	}

	links := []struct{ path, target string }{
		{"usr/bin/python3", "python3.11"},
		{"usr/bin/python", "python3.11"},
		{"bin", "usr/bin"},
		{"lib", "usr/lib"},
		{"lib64", "usr/lib64"},
		{"usr/lib/x86_64-linux-gnu/libz.so.1", ""}, // a symlink to the versioned file
	}
	for _, l := range links {
		got, err := os.Readlink(filepath.Join(out, l.path))
		if err != nil || (l.target != "" && got != l.target) {
			t.Errorf("%s -> %q (%v), want a symlink to %q", l.path, got, err, l.target)
		}
	}
	present := []string{
		"usr/bin/python3.11",
		"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"usr/lib/x86_64-linux-gnu/libc.so.6",
		"usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
		"usr/lib/python3.11/os.py",
		"usr/lib/python3.11/_sysconfigdata__x86_64-linux-gnu.py",
		"usr/lib/python3.11/lib-dynload",
		"usr/lib/locale/C.utf8",
	}
	for _, p := range present {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
	absent := []string{
		"usr/lib/python3.11/test",
		"usr/lib/python3.11/ensurepip",
		"usr/lib/python3.11/config-3.11-x86_64-linux-gnu",
		"usr/lib/python3.11/sitecustomize.py",
		"usr/lib/python3.11/unittest/test",
		"usr/lib/python3.11/lib-dynload/_testcapi.cpython-311-x86_64-linux-gnu.so",
		"usr/lib/python3/dist-packages",
		"usr/local",
		"etc",
		"dev",
	}
	for _, p := range absent {
		if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
			t.Errorf("%s should not be in the rootfs", p)
		}
	}
}

// checkBytecodeFiles requires a hash-based, unchecked .pyc beside every module.
func checkBytecodeFiles(t *testing.T, out string) {
	var modules int
	err := filepath.WalkDir(filepath.Join(out, "usr/lib/python3.11"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".py") {
			return err
		}
		modules++
		pyc := filepath.Join(filepath.Dir(p), "__pycache__", strings.TrimSuffix(d.Name(), ".py")+".cpython-311.pyc")
		head := make([]byte, 8)
		f, err := os.Open(pyc)
		if err != nil {
			t.Errorf("no bytecode for %s: %v", p, err)
			return nil
		}
		defer f.Close()
		if _, err := f.Read(head); err != nil {
			return err
		}
		// PEP 552: flags 0b01 = hash-based, source not checked.
		if flags := binary.LittleEndian.Uint32(head[4:]); flags != 1 {
			t.Errorf("%s: flags %#x, want 0x1 (unchecked hash)", pyc, flags)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if modules < 500 {
		t.Errorf("only %d modules in the stdlib", modules)
	}
}

// runInside runs argv chrooted into out with a minimal environment (as root; in a new
// user namespace otherwise) and returns its output.
func runInside(t *testing.T, out string, env []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: out}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.String(), err
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return buf.String(), errors.New("timed out")
	}
}

// checkPythonInside runs the interpreter in the tree, with nothing of the host.
func checkPythonInside(t *testing.T, out string) {
	env := []string{"PATH=/usr/bin", "LANG=C.UTF-8"}
	tests := []struct {
		name string
		env  []string
		argv []string
		want []string // substrings of the output
		deny []string
	}{
		{
			name: "extension modules load",
			argv: []string{"/usr/bin/python3", "-c", `import ssl, sqlite3, ctypes, json, decimal, zlib, hashlib, lzma, bz2, uuid, asyncio, multiprocessing
print(ssl.OPENSSL_VERSION, sqlite3.sqlite_version, ctypes.CDLL("libc.so.6").getpid() > 0, decimal.Decimal(1) / 3)
print(hashlib.sha256(b"").hexdigest()[:8], zlib.crc32(b"x"), len(lzma.compress(b"x")) > 0, bz2.decompress(bz2.compress(b"bz")), uuid.uuid4().version)
print("ok")`},
			want: []string{"OpenSSL 3.", "True", "0.3333", "e3b0c442", "b'bz'", "\nok\n"},
		},
		{
			name: "site and sysconfig",
			argv: []string{"/usr/bin/python3", "-c", `import sys, sysconfig, locale
print(sys.flags.no_site, sys.prefix, sysconfig.get_paths()["stdlib"], sysconfig.get_config_var("SOABI"), locale.setlocale(locale.LC_ALL, ""))
print(sys.path)`},
			want: []string{"0 /usr /usr/lib/python3.11 cpython-311-x86_64-linux-gnu C.UTF-8", "'/usr/lib/python3.11/lib-dynload'"},
			deny: []string{"dist-packages", "Error"},
		},
		{
			// -v names the file each module's code comes from: always a .pyc, and the
			// code's filename is the path inside the jail.
			name: "bytecode is used",
			argv: []string{"/usr/bin/python3", "-v", "-c", `import json, asyncio, ssl; print(json.dumps.__code__.co_filename)`},
			want: []string{"code object from '/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc'", "\n/usr/lib/python3.11/json/__init__.py\n"},
			deny: []string{".py'\n", "could not create", "wrote "},
		},
		{
			name: "python and python3 on PATH",
			env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			argv: []string{"/bin/python3", "-c", `import os, shutil
print(os.environ["PATH"], shutil.which("python"), shutil.which("python3"), flush=True)
os.execvp("python", ["python", "-c", "import sys; print('via PATH', sys.version_info[:2])"])`},
			want: []string{"/usr/local/bin:/usr/bin:/bin", "/usr/bin/python /usr/bin/python3", "via PATH (3, 11)"},
		},
		{
			// commands.go: busybox's applets, and GNU timeout's 124 and
			// fractions of a second.
			name: "common commands",
			argv: []string{"/bin/sh", "-c", `timeout 0.3 sleep 5; echo "timeout=$?"; ls / | grep -c usr; echo a b c | wc -w; printf 'x\ny\n' | sort -r | head -n 1; cat /usr/bin/busybox | sha256sum | cut -c1-3 | tr -d '\n' | wc -c`},
			want: []string{"timeout=124\n1\n3\ny\n3\n"},
		},
		{
			// ldconfig.go: ctypes.util.find_library's `ldconfig -p`, here of the
			// tree's own cache (the jail links /etc/ld.so.cache to it).
			name: "ldconfig lists the loader cache",
			argv: []string{"/sbin/ldconfig", "-p", "-C", LoaderCachePath},
			want: []string{"libc.so.6 (libc6,x86-64) => /"},
		},
		{
			name: "no environment at all",
			env:  []string{},
			argv: []string{"/usr/bin/python", "-c", `import sys; print(sys.flags.utf8_mode, sys.getfilesystemencoding())`},
			want: []string{"utf-8"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				e = tc.env
			}
			// PYTHONDONTWRITEBYTECODE: the test's tree is writable, the jail's is not;
			// a missing .pyc must not be papered over by this run.
			got, err := runInside(t, out, append([]string{"PYTHONDONTWRITEBYTECODE=1"}, e...), tc.argv...)
			if err != nil {
				t.Fatalf("%v: %v\n%s", tc.argv, err, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, d := range tc.deny {
				if strings.Contains(got, d) {
					t.Errorf("output has %q:\n%s", d, got)
				}
			}
		})
	}
}

// TestBuildRefusesForeignDirectory: a non-empty directory without a manifest may be the
// user's; Build must neither delete nor change it.
func TestBuildRefusesForeignDirectory(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, out string)
		wantErr string
	}{
		{"user files", func(t *testing.T, out string) {
			os.MkdirAll(out, 0o755)
			os.WriteFile(filepath.Join(out, "thesis.tex"), []byte("precious"), 0o644)
		}, "is not empty and has no .rljail-rootfs.json: not an rljail rootfs, refusing to replace it"},
		{"a file", func(t *testing.T, out string) {
			os.WriteFile(out, []byte("precious"), 0o644)
		}, "is not a directory; refusing to replace it"},
		{"a symlink", func(t *testing.T, out string) {
			os.Symlink("/usr", out)
		}, "is a symlink"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "python")
			tc.setup(t, out)
			before := listTree(t, parent)
			_, err := Build(t.Context(), BuildOptions{Out: out})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), out) {
				t.Fatalf("Build = %v, want error naming %s: %q", err, out, tc.wantErr)
			}
			if after := listTree(t, parent); after != before {
				t.Errorf("Build changed %s:\n%s\nnow:\n%s", parent, before, after)
			}
		})
	}
}

// TestBuildCancelled cancels a build in each of its phases: the error is the context's
// and nothing is left in the parent directory.
func TestBuildCancelled(t *testing.T) {
	for _, phase := range []string{"building", "copying the interpreter", "compiling bytecode"} {
		t.Run(phase, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "new")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, err := Build(ctx, BuildOptions{Out: filepath.Join(parent, "python"), Log: func(msg string) {
				if strings.HasPrefix(msg, phase) {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Build = %v, want context.Canceled", err)
			}
			entries, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 0 {
				t.Errorf("cancelled build left %v", entries)
			}
		})
	}
}

func listTree(t *testing.T, dir string) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		b.WriteString(p + " " + fi.Mode().String() + "\n")
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.Write(data)
			b.WriteString("\n")
		}
		return nil
	})
	return b.String()
}

// checkLoaderCache reads the tree's ld.so.cache with glibc's ldconfig: it
// must name the libraries Python and its extension modules need, each at a
// path of the tree that is (or leads, inside the tree, to) a regular file.
func checkLoaderCache(t *testing.T, out string) {
	entries := ldconfigList(t, filepath.Join(out, LoaderCachePath))
	byName := map[string]string{}
	for _, e := range entries {
		f := strings.Fields(e) // name (abi) => path
		if f[1] != "(libc6,x86-64)" {
			t.Errorf("cache entry %q: not an x86-64 libc6 library", e)
		}
		if _, dup := byName[f[0]]; dup {
			t.Errorf("cache names %s twice", f[0])
		}
		byName[f[0]] = f[3]
	}
	for _, name := range []string{"libc.so.6", "libm.so.6", "libz.so.1", "libexpat.so.1", "libssl.so.3", "libcrypto.so.3", "libsqlite3.so.0", "libffi.so.8", "libgcc_s.so.1"} {
		p, ok := byName[name]
		if !ok {
			t.Errorf("the cache has no %s: %v", name, entries)
			continue
		}
		if !strings.HasPrefix(p, "/") {
			t.Errorf("%s => %s: not an absolute path", name, p)
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(out, p))
		if err != nil {
			t.Errorf("%s => %s: %v", name, p, err)
			continue
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() || !strings.HasPrefix(real, out+"/") {
			t.Errorf("%s => %s leads to %s, not a file of the tree", name, p, real)
		}
	}
}
