package jail

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The jail's /proc is a fresh procfs of its own PID namespace, so it lists
// only the jail's processes. Some files describe the whole machine rather
// than a process; they are masked or made read-only. The list follows the
// masked and read-only paths of the OCI runtime spec's defaults, extended.

// procMaskedFiles are covered with /dev/null: reading them discloses kernel
// memory, addresses or other users' activity.
var procMaskedFiles = []string{
	"kcore",         // physical memory image of the host
	"kallsyms",      // kernel symbol addresses (KASLR)
	"keys",          // keys of the key retention service, other users' too
	"key-users",     // key quota per uid of the host
	"timer_list",    // timers of every process on the host, with PIDs and symbols
	"sched_debug",   // scheduler state of every host task
	"latency_stats", // latency records with kernel symbols
	"config.gz",     // the kernel's build configuration
	"kmsg",          // the kernel log
	"kpagecount",    // page frame information (row hammer aids)
	"kpageflags",
	"kpagecgroup",
	"vmallocinfo", // kernel virtual addresses
	"pagetypeinfo",
	"slabinfo",
	"sysrq-trigger", // writing here reboots or crashes the host
}

// procMaskedDirs are covered with an empty read-only tmpfs: they describe
// host hardware and drivers.
var procMaskedDirs = []string{"acpi", "asound", "scsi", "firmware", "driver", "tty", "dynamic_debug"}

// procReadOnly are bind-mounted over themselves read-only: kernel tunables
// and hardware state (/proc/sys covers sysctls such as core_pattern, whose
// write from a container has been an escape).
var procReadOnly = []string{"sys", "bus", "fs", "irq"}

// mountProc mounts the fresh procfs at /proc inside root and masks it.
func mountProc(root int) error {
	fd, err := newFS("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := attachAt(root, fd, "/proc", true); err != nil {
		return err
	}
	for _, name := range procMaskedFiles {
		target, err := resolveInRoot(root, "/proc/"+name, unix.O_PATH|unix.O_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue // not in this kernel's build
		}
		if err != nil {
			return fmt.Errorf("open /proc/%s: %w", name, err)
		}
		null, err := cloneTree(root, "dev/null", "/dev/null", deviceAttrs)
		if err != nil {
			unix.Close(target)
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
		err = attach(null, target, "/dev/null over /proc/"+name)
		unix.Close(target)
		if err != nil {
			return err
		}
	}
	for _, name := range procMaskedDirs {
		target, err := resolveInRoot(root, "/proc/"+name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open /proc/%s: %w", name, err)
		}
		empty, err := tmpfs("0555", 4096, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			unix.Close(target)
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
		err = attach(empty, target, "empty tmpfs over /proc/"+name)
		unix.Close(target)
		if err != nil {
			return err
		}
	}
	for _, name := range procReadOnly {
		target, err := resolveInRoot(root, "/proc/"+name, unix.O_PATH|unix.O_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open /proc/%s: %w", name, err)
		}
		ro, err := cloneTree(target, "", "/proc/"+name, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err == nil {
			err = attach(ro, target, "read-only /proc/"+name)
		}
		unix.Close(target)
		if err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", name, err)
		}
	}
	return nil
}
