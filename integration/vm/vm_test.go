// Package vm runs rljail's cgroup v2 tests on a real cgroup v2 host: it boots
// Debian's kernel (linux-image-amd64, unpacked into a cache, never installed)
// under qemu with software emulation, from an initramfs that holds
// busybox-static, the static rljail, the Python rootfs and static `go test -c`
// binaries. The VM's init (init.sh) mounts cgroup2 with every controller
// enabled, runs each binary with -test.v, prints one line
// `RLJAIL-VM-VERDICT: PASS` (or `FAIL <names>`) and powers off. The harness
// streams the serial console into the test log and fails on a FAIL verdict, on
// no verdict or more than one, on a kernel panic, and when the run outlives
// its time bound (it kills qemu then).
//
// The binaries run in the VM are, in order: the self-check in guest/ (build
// tag rljailvm; always), ./cgroup's tests with build tag cgroupv2vm (when it
// has any), ./integration's limit and placement tests (build tag rljailvm,
// only TestLimits*, TestPlacement* and TestOverlay*), and whatever RLJAIL_VM_PACKAGES adds. Inside, they see
// RLJAIL_IN_VM=1, RLJAIL_BIN=/bin/rljail, RLJAIL_ROOTFS=/rootfs/python, run as
// root in the leaf cgroup /init.scope, and find the unprivileged user
// rljailtest (uid and gid 1001, home /home/rljailtest). Each runs in its own
// directory /tests/<name> (with the package's testdata), on tmpfs: Debian 12's
// kernel (6.1) cannot idmap tmpfs (6.3 can), so a jail started there as root
// needs --no-workspace, or its idmapped /workspace mount fails with EINVAL.
//
// Environment (`make test-vm` sets what it needs):
//
//	RLJAIL_BIN           static rljail (default: `make -C <repo> build`, bin/rljail)
//	RLJAIL_ROOTFS        Python rootfs (default /var/lib/rljail/rootfs/python)
//	RLJAIL_VM_CACHE      kernel cache of fetch-kernel.sh (default /var/cache/rljail-vm
//	                     for root, else $XDG_CACHE_HOME/rljail-vm)
//	RLJAIL_VM_KERNEL     a bzImage to boot instead of the cached Debian kernel
//	RLJAIL_VM_PACKAGES   more packages to test in the VM: "dir[:tag,tag[:runregex]] ..."
//	RLJAIL_VM_TESTFLAGS  extra flags for every binary in the VM, e.g. -test.run=Memory
//	RLJAIL_VM_TIMEOUT    bound of the whole run (default 10m)
//	RLJAIL_VM_ACCEL      qemu accelerator (default tcg; kvm where there is one)
//	RLJAIL_VM_LOG        also write the whole console to this file
//	RLJAIL_VM_APPEND     more kernel command line, e.g. loglevel=7 (later words win)
package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	defaultRootfs  = "/var/lib/rljail/rootfs/python"
	defaultTimeout = 10 * time.Minute
	vmMemoryMiB    = 2048
	vmCPUs         = 2
	// fixHint is how to get what the harness needs.
	fixHint = "run `make deps vm-kernel` (`make test-vm` does it and then runs this test)"
)

// kernelCmdline: serial console; reboot at once on a panic (-no-reboot
// turns that into qemu's exit); no cgroup v1 hierarchy may claim a
// controller. systemd.unified_cgroup_hierarchy=1 changes nothing without
// systemd and is there for whoever reads the console.
const kernelCmdline = "console=ttyS0,115200 panic=-1 quiet loglevel=4 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 rdinit=/init"

// hostTools is what the harness found on this machine.
type hostTools struct {
	repoRoot string
	goBin    string
	qemu     string
	busybox  string
	kernel   string
	modules  []string // kernel modules for the initramfs
	rljail   string
	rootfs   string
}

// findHostTools looks up everything the VM run needs and says how to get
// what is missing.
func findHostTools(ctx context.Context) (hostTools, error) {
	var h hostTools
	var errs []error
	goBin, err := exec.LookPath("go")
	if err != nil {
		return h, fmt.Errorf("go not found in PATH: %w", err)
	}
	h.goBin = goBin
	gomod, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return h, fmt.Errorf("cannot find the repository root (go env GOMOD: %v)", err)
	}
	h.repoRoot = filepath.Dir(strings.TrimSpace(string(gomod)))

	if h.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		errs = append(errs, fmt.Errorf("qemu-system-x86_64 not found in PATH (Debian package qemu-system-x86)"))
	}
	h.busybox = "/bin/busybox"
	if p, err := exec.LookPath("busybox"); err == nil {
		h.busybox = p
	}
	if err := checkStatic(h.busybox); err != nil {
		errs = append(errs, fmt.Errorf("no static busybox (Debian package busybox-static): %v", err))
	}

	h.kernel = os.Getenv("RLJAIL_VM_KERNEL")
	if h.kernel == "" {
		h.kernel = filepath.Join(vmCacheDir(), "vmlinuz")
	}
	if st, err := os.Stat(h.kernel); err != nil || !st.Mode().IsRegular() {
		errs = append(errs, fmt.Errorf("no VM kernel at %s (integration/vm/fetch-kernel.sh unpacks Debian's linux-image-amd64 there without installing it)", h.kernel))
	}
	// The modules of that kernel the VM loads: overlayfs, through which
	// rljail presents read-only directories, is one in Debian's build. A
	// kernel of RLJAIL_VM_KERNEL is expected to have what it needs built in.
	if os.Getenv("RLJAIL_VM_KERNEL") == "" {
		h.modules, _ = filepath.Glob(filepath.Join(vmCacheDir(), "modules", "*.ko"))
		if !slices.ContainsFunc(h.modules, func(m string) bool { return filepath.Base(m) == "overlay.ko" }) {
			errs = append(errs, fmt.Errorf("no overlay.ko in %s (integration/vm/fetch-kernel.sh unpacks it with the kernel)", filepath.Join(vmCacheDir(), "modules")))
		}
	}
	if len(errs) > 0 {
		return h, fmt.Errorf("%w\n%s", errors.Join(errs...), fixHint)
	}

	h.rootfs = os.Getenv("RLJAIL_ROOTFS")
	if h.rootfs == "" {
		h.rootfs = defaultRootfs
	}
	if _, err := os.Stat(filepath.Join(h.rootfs, "usr", "bin")); err != nil {
		return h, fmt.Errorf("no Python rootfs at %s (%v): run `make rootfs` or set RLJAIL_ROOTFS", h.rootfs, err)
	}

	h.rljail = os.Getenv("RLJAIL_BIN")
	if h.rljail == "" {
		out, err := exec.CommandContext(ctx, "make", "-C", h.repoRoot, "build").CombinedOutput()
		if err != nil {
			return h, fmt.Errorf("RLJAIL_BIN is not set and `make -C %s build` failed: %v\n%s", h.repoRoot, err, out)
		}
		h.rljail = filepath.Join(h.repoRoot, "bin", "rljail")
	}
	if err := checkStatic(h.rljail); err != nil {
		return h, fmt.Errorf("rljail for the VM: %v: build it with `make build`", err)
	}
	return h, nil
}

// vmCacheDir is where fetch-kernel.sh keeps the kernel.
func vmCacheDir() string {
	if d := os.Getenv("RLJAIL_VM_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/rljail-vm"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "rljail-vm")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "rljail-vm")
}

// runBudget is how long the whole run may take: RLJAIL_VM_TIMEOUT (10 min by
// default), and less when `go test -timeout` would end it first.
func runBudget(t *testing.T) (time.Duration, error) {
	budget := defaultTimeout
	if s := os.Getenv("RLJAIL_VM_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("RLJAIL_VM_TIMEOUT=%q: want a duration like 10m", s)
		}
		budget = d
	}
	if dl, ok := t.Deadline(); ok {
		// Leave time to kill qemu and report before the test binary panics.
		if left := time.Until(dl) - 20*time.Second; left < budget {
			budget = left
		}
	}
	if budget < time.Minute {
		return 0, fmt.Errorf("only %v left for the VM run: raise go test -timeout (make test-vm uses 20m)", budget)
	}
	return budget, nil
}

// TestCgroupV2InVM boots the VM and runs the guest test binaries in it.
func TestCgroupV2InVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a qemu VM for minutes; not with -short")
	}
	ctx, budget, clock, h := startVMTest(t)
	kernelReal, _ := filepath.EvalSymlinks(h.kernel)
	t.Logf("kernel %s, rljail %s, rootfs %s, budget %v", kernelReal, h.rljail, h.rootfs, budget.Round(time.Second))

	// 1. The test binaries.
	start := time.Now()
	work := t.TempDir()
	guests := buildGuests(ctx, t, h, defaultGuests, "RLJAIL_VM_PACKAGES", work)
	clock.phase("build test binaries", start)

	// 2. The initramfs, rebuilt every run: writing it (uncompressed, about
	// 60 MiB) takes a tenth of a second, as long as hashing its inputs would.
	start = time.Now()
	applets, err := exec.CommandContext(ctx, h.busybox, "--list-full").Output()
	if err != nil {
		t.Fatalf("%s --list-full: %v", h.busybox, err)
	}
	guestTimeout := budget - time.Since(clock.began) - time.Minute
	conf := fmt.Sprintf("GUEST_TIMEOUT=%ds\nGUEST_FLAGS=%s\n", int(guestTimeout.Seconds()),
		shellQuote([]string{strings.Join(strings.Fields(os.Getenv("RLJAIL_VM_TESTFLAGS")), " ")}))
	ir := initramfs{
		busybox: h.busybox,
		rljail:  h.rljail,
		rootfs:  h.rootfs,
		initSh:  filepath.Join(h.repoRoot, "integration", "vm", "init.sh"),
		guests:  guests,
		conf:    []byte(conf),
		applets: strings.Fields(string(applets)),
		modules: h.modules,
	}
	initrd := filepath.Join(work, "initramfs.cpio")
	if err := ir.write(initrd); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(initrd); err == nil {
		t.Logf("initramfs %s: %d MiB, %d test binaries", initrd, st.Size()>>20, len(guests))
	}
	clock.phase("initramfs", start)

	// 3. Boot and follow the console.
	q := qemuRun{
		qemu: h.qemu, kernel: h.kernel, initrd: initrd,
		memMiB: vmMemoryMiB, cpus: vmCPUs, cmdline: strings.TrimSpace(kernelCmdline + " " + os.Getenv("RLJAIL_VM_APPEND")),
	}
	bootAndJudge(ctx, t, q, "init's tmpfs root", clock)
}

// at renders a moment of the boot, if it came.
func at(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return d.Round(100 * time.Millisecond).String()
}

// judgeOrTail is the console's verdict, or its last lines, for an error
// message.
func (c *console) judgeOrTail() string {
	if err := c.judge(); err != nil {
		return err.Error()
	}
	return "(the VM had passed)"
}
