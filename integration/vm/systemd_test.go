package vm

// The systemd VM: Debian's kernel under qemu (TCG) booting a Debian 12 root
// whose PID 1 is systemd, with dbus, logind and the unprivileged user
// rljailtest (uid 1001). The root is built once by systemd/build-image.sh
// (debootstrap from deb.debian.org, `make vm-systemd-image`) into the VM
// cache as a cpio archive; every run appends a second archive with what is
// new each time (the kernel unpacks concatenated archives into one
// initramfs):
//
//	/init                          systemd/init.sh: loads overlayfs, execs systemd
//	/rljail-vm/busybox             for init.sh only
//	/rljail-vm/bin/rljail          the static rljail under test (RLJAIL_BIN)
//	/rljail-vm/debs/*.deb          the package, twice: version 1 and 2 (upgrades)
//	/rljail-vm/src/                packaging/install.sh and contrib/ (make install)
//	/rljail-vm/run-tests.sh        systemd/run-tests.sh, the tests' runner
//	/rljail-vm/run-guests.sh       run-guests.sh, the test loop both VMs share
//	/rljail-vm/tests/<name>/       each `go test -c` binary, its testdata, run
//	/rljail-vm/apparmor4/          AppArmor 4.1's parser, its C library and abi/tunables
//	                               (packaging/apparmor-check.sh's cache), for apparmor_test.go
//	/var/lib/rljail/rootfs/python  a copy of the Python rootfs (RLJAIL_ROOTFS)
//
// The image's rljail-vm-tests.service (after multi-user.target) runs
// run-tests.sh, which runs each binary as root with -test.v, prints
// RLJAIL-VM-VERDICT and powers off; this harness fails on FAIL, no verdict,
// a kernel panic or a timeout, as TestCgroupV2InVM does.
//
// To add a case: write a Test function in integration/vm/systemd (build tag
// rljailsystemd; a file of your own, e.g. driver_test.go), using the helpers
// of helpers_test.go there: rljail(t, ...) runs RLJAIL_BIN and returns its
// result report, asLoginUser(t, func(t){...}) runs the body as rljailtest in
// a logind session (session-N.scope, user@1001.service running), and
// leftovers(t) checks from root that no jail cgroup or process is left. It
// runs in the next `make test-systemd-vm` without any change here. Another
// package's tests are added with RLJAIL_VM_SYSTEMD_PACKAGES (the syntax of
// RLJAIL_VM_PACKAGES).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// systemdKernelCmdline: the serial console, quiet; a panic ends qemu
	// (-no-reboot); cgroup v2 only, as bookworm's systemd 252 mounts by
	// default; rdinit runs init.sh, which execs systemd.
	systemdKernelCmdline = "console=ttyS0,115200 panic=-1 quiet loglevel=4 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 systemd.show_status=0 rdinit=/init"
	systemdVMMemoryMiB   = 2048
	systemdImageHint     = "run `make vm-systemd-image` (`make test-systemd-vm` does it and then runs this test)"
)

// systemdGuests are the packages whose tests run in the systemd VM.
var systemdGuests = []guestPackage{
	{dir: "./integration/vm/systemd", tags: []string{"rljailsystemd"}, required: true},
}

// systemdImage is the cached image's archive, built by build-image.sh. An
// image built by another version of that script is stale: the script's
// hash names the image's directory.
func systemdImage(repoRoot string) (string, error) {
	p := filepath.Join(vmCacheDir(), "systemd-image", "image.cpio")
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("no systemd VM image at %s: %s", p, systemdImageHint)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "integration", "vm", "systemd", "build-image.sh"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(script)
	want := "systemd-" + hex.EncodeToString(sum[:])[:16]
	if dir, _ := os.Readlink(filepath.Join(vmCacheDir(), "systemd-image")); filepath.Base(dir) != want {
		return "", fmt.Errorf("the systemd VM image %s was built by another build-image.sh (this one's is %s): %s", dir, want, systemdImageHint)
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// buildDebs builds the package twice from the rljail under test, as
// versions 1 and 2 of one upstream version, for the install and upgrade
// cases.
func buildDebs(ctx context.Context, root, rljail, out string) ([]string, error) {
	var debs []string
	for _, v := range []string{"1", "2"} {
		cmd := exec.CommandContext(ctx, "sh", filepath.Join(root, "packaging", "deb", "build-deb.sh"),
			"--bin", rljail, "--version", "0.0~vmtest"+v, "--out", out, "--compress", "gzip")
		cmd.Dir = root
		b, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			return nil, fmt.Errorf("packaging/deb/build-deb.sh version %s: %v\n%s", v, err, stderr)
		}
		debs = append(debs, strings.TrimSpace(string(b)))
	}
	return debs, nil
}

// systemdRun is what one run appends to the image.
type systemdRun struct {
	image   string   // the cached image.cpio
	initSh  string   // systemd/init.sh
	runner  string   // systemd/run-tests.sh
	busybox string   // static busybox for init.sh
	rljail  string   // static rljail
	rootfs  string   // Python rootfs
	modules []string // kernel modules init.sh loads
	debs    []string // packages
	aa4     string   // apparmor-check.sh's unpacked AppArmor 4 (root of usr/sbin/apparmor_parser)
	repo    string   // the repository: packaging/install.sh and contrib/ go in
	guests  []guest
	conf    []byte
}

// write writes the initrd: the image's archive, then the run's.
func (r systemdRun) write(out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	img, err := os.Open(r.image)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, img)
	img.Close()
	if err != nil {
		return fmt.Errorf("copying %s: %w", r.image, err)
	}
	// The kernel wants each archive to start 4-byte aligned (GNU cpio
	// pads to 512 bytes anyway).
	if pad := (4 - n%4) % 4; pad != 0 {
		if _, err := f.Write(make([]byte, pad)); err != nil {
			return err
		}
	}
	c := newCpioWriter(f)
	c.mkdirAll("rljail-vm", 0o755)
	c.hostFile("init", r.initSh, 0o755)
	c.hostFile("rljail-vm/busybox", r.busybox, 0o755)
	c.hostFile("rljail-vm/run-tests.sh", r.runner, 0o755)
	c.hostFile("rljail-vm/run-guests.sh", filepath.Join(r.repo, "integration", "vm", "run-guests.sh"), 0o644)
	c.hostFile("rljail-vm/bin/rljail", r.rljail, 0o755)
	for _, m := range r.modules {
		c.hostFile("rljail-vm/modules/"+filepath.Base(m), m, 0o644)
	}
	for _, d := range r.debs {
		c.hostFile("rljail-vm/debs/"+filepath.Base(d), d, 0o644)
	}
	c.bytesFile("rljail-vm/conf", 0o644, r.conf)
	// What `make install` runs, for the install case.
	c.hostFile("rljail-vm/src/packaging/install.sh", filepath.Join(r.repo, "packaging", "install.sh"), 0o755)
	c.tree("rljail-vm/src/contrib", filepath.Join(r.repo, "contrib"))
	// AppArmor 4.1's parser under its own loader, to load contrib/apparmor/rljail
	// into the VM's kernel (apparmor_test.go): the parser, the C library, and the
	// abi and tunables files the profile includes; some 4 MiB.
	lib := "usr/lib/x86_64-linux-gnu/"
	for _, f := range []string{"usr/sbin/apparmor_parser", lib + "ld-linux-x86-64.so.2", lib + "libc.so.6"} {
		c.hostFile("rljail-vm/apparmor4/"+f, filepath.Join(r.aa4, f), 0o755)
	}
	for _, d := range []string{"etc/apparmor.d/abi", "etc/apparmor.d/tunables"} {
		c.tree("rljail-vm/apparmor4/"+d, filepath.Join(r.aa4, d))
	}
	c.guestTests("rljail-vm/tests", r.guests)
	c.tree("var/lib/rljail/rootfs/python", r.rootfs)
	if err := c.close(); err != nil {
		return fmt.Errorf("initramfs %s: %w", out, err)
	}
	return nil
}

// TestSystemdVM boots the systemd VM and runs the rljailsystemd tests in it.
// Environment: that of TestCgroupV2InVM (RLJAIL_BIN, RLJAIL_ROOTFS,
// RLJAIL_VM_CACHE, RLJAIL_VM_TESTFLAGS, RLJAIL_VM_TIMEOUT, RLJAIL_VM_ACCEL,
// RLJAIL_VM_LOG, RLJAIL_VM_APPEND), and RLJAIL_VM_SYSTEMD_PACKAGES for more
// packages to test there. RLJAIL_VM_KERNEL is not supported: the image's
// modules are Debian's.
func TestSystemdVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a qemu VM for minutes; not with -short")
	}
	if os.Getenv("RLJAIL_VM_KERNEL") != "" {
		t.Fatal("RLJAIL_VM_KERNEL: the systemd VM boots only the cached Debian kernel (its overlay.ko)")
	}
	ctx, budget, clock, h := startVMTest(t)
	image, err := systemdImage(h.repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	kernel := h.kernel
	if real, err := filepath.EvalSymlinks(h.kernel); err == nil {
		// build-image.sh's decompressed copy, booted through the PVH
		// entry: the bzImage's own decompression costs some 15 s of TCG.
		if elf := filepath.Join(vmCacheDir(), "pvh", filepath.Base(real)+".elf"); fileExists(elf) {
			kernel = elf
		} else {
			t.Logf("no %s: booting the bzImage (slower); `make vm-systemd-image` makes it", elf)
		}
	}
	imageReal, _ := filepath.EvalSymlinks(image)
	t.Logf("kernel %s, image %s, rljail %s, rootfs %s, budget %v", kernel, imageReal, h.rljail, h.rootfs, budget.Round(time.Second))
	aa4 := filepath.Join(vmCacheDir(), "apparmor4", "root")
	if !fileExists(filepath.Join(aa4, "usr", "sbin", "apparmor_parser")) {
		t.Fatalf("no AppArmor 4 parser in %s: run `make test-apparmor` (packaging/apparmor-check.sh fetches it; `make test-systemd-vm` does)", aa4)
	}

	start := time.Now()
	work := t.TempDir()
	guests := buildGuests(ctx, t, h, systemdGuests, "RLJAIL_VM_SYSTEMD_PACKAGES", work)
	clock.phase("build test binaries", start)

	start = time.Now()
	debs, err := buildDebs(ctx, h.repoRoot, h.rljail, filepath.Join(work, "debs"))
	if err != nil {
		t.Fatal(err)
	}
	clock.phase("debs", start)

	start = time.Now()
	guestTimeout := budget - time.Since(clock.began) - time.Minute
	conf := fmt.Sprintf("GUEST_TIMEOUT=%ds\nGUEST_FLAGS=%s\n", int(guestTimeout.Seconds()),
		shellQuote([]string{strings.Join(strings.Fields(os.Getenv("RLJAIL_VM_TESTFLAGS")), " ")}))
	dir := filepath.Join(h.repoRoot, "integration", "vm", "systemd")
	run := systemdRun{
		image: image, initSh: filepath.Join(dir, "init.sh"), runner: filepath.Join(dir, "run-tests.sh"),
		busybox: h.busybox, rljail: h.rljail, rootfs: h.rootfs, modules: h.modules,
		debs: debs, aa4: aa4, repo: h.repoRoot, guests: guests, conf: []byte(conf),
	}
	initrd := filepath.Join(work, "initrd.cpio")
	if err := run.write(initrd); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(initrd); err == nil {
		t.Logf("initrd %s: %d MiB, %d test binaries", initrd, st.Size()>>20, len(guests))
	}
	clock.phase("initrd", start)

	q := qemuRun{
		qemu: h.qemu, kernel: kernel, initrd: initrd,
		memMiB: systemdVMMemoryMiB, cpus: vmCPUs,
		cmdline: strings.TrimSpace(systemdKernelCmdline + " " + os.Getenv("RLJAIL_VM_APPEND")),
	}
	bootAndJudge(ctx, t, q, "test runner started", clock)
}

// TestSystemdImageStale: an image whose directory names another script's
// hash is refused, the current one's taken.
func TestSystemdImageStale(t *testing.T) {
	repo := t.TempDir()
	script := filepath.Join(repo, "integration", "vm", "systemd", "build-image.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("#!/bin/sh\necho v2\n"))
	cache := t.TempDir()
	t.Setenv("RLJAIL_VM_CACHE", cache)
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"systemd-0123456789abcdef", false},
		{"systemd-" + hex.EncodeToString(sum[:])[:16], true},
	} {
		if err := os.MkdirAll(filepath.Join(cache, tc.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cache, tc.dir, "image.cpio"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(cache, "systemd-image"))
		if err := os.Symlink(tc.dir, filepath.Join(cache, "systemd-image")); err != nil {
			t.Fatal(err)
		}
		if _, err := systemdImage(repo); (err == nil) != tc.ok {
			t.Errorf("image %s: err %v, want ok=%v", tc.dir, err, tc.ok)
		}
	}
}
