// Package hostcheck reports what this host allows a jail to do, and what
// rljail will do about it, before anything untrusted runs.
//
// A jail needs a recent kernel, unprivileged user namespaces, seccomp
// filters and pidfds; cgroup limits are wanted but have an announced
// fallback (rlimits). Distributions disable these features in different
// ways (a sysctl on Debian, an AppArmor restriction on Ubuntu 24.04, a
// hybrid cgroup layout on older systemd hosts), and a failed clone only
// says EPERM. This package turns each of those into one line: what was
// found and, when it fails, the concrete command that fixes it. `rljail
// check` prints the Report and exits with CanRun.
//
// The checks only read: files under /proc and /sys, statfs, uname, prctl
// and pidfd_open on this process. A missing sysctl file usually means the
// kernel does not have that restriction. The one active probe, creating a
// user namespace, is passed in by the caller (Options.ProbeUserns) so that
// this package does not depend on package jail.
package hostcheck

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Item is the result of one check.
type Item struct {
	// Name is what was checked: "kernel", "user namespaces", "seccomp",
	// "cgroups", "pidfd", "overlayfs", "limits", "rootfs", "running as".
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was found, on one line.
	Detail string `json:"detail"`
	// Fix says how to fix it when !OK, on one line: a concrete command.
	Fix string `json:"fix,omitempty"`
	// Fatal means that, when !OK, a jail cannot run. A failed item that is
	// not fatal is a warning: rljail runs with an announced fallback.
	Fatal bool `json:"fatal"`
}

// Report is the result of every check, in the order Run made them.
type Report struct {
	Items []Item `json:"items"`
}

// CanRun reports whether a jail can run on this host: no fatal item failed.
func (r Report) CanRun() bool {
	for _, it := range r.Items {
		if !it.OK && it.Fatal {
			return false
		}
	}
	return true
}

// WriteText writes the report as aligned lines, one per item, the status
// first ("ok", "warn" for a non-fatal failure, "FAIL" for a fatal one) and
// the fix, when there is one, indented on the next line:
//
//	ok    kernel          6.1.0-18-amd64 (5.12 or newer)
//	FAIL  user namespaces kernel.unprivileged_userns_clone=0 forbids them to non-root users
//	      fix: sysctl -w kernel.unprivileged_userns_clone=1
func (r Report) WriteText(w io.Writer) error {
	width := 0
	for _, it := range r.Items {
		width = max(width, len(it.Name))
	}
	var b strings.Builder
	for _, it := range r.Items {
		line := fmt.Sprintf("%-4s  %-*s %s", status(it), width, it.Name, oneLine(it.Detail))
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
		if !it.OK && it.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", oneLine(it.Fix))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write the host check report: %w", err)
	}
	return nil
}

// status is the first column of an item's line.
func status(it Item) string {
	switch {
	case it.OK:
		return "ok"
	case it.Fatal:
		return "FAIL"
	}
	return "warn"
}

// Options are the checks that need something from outside this package.
// The zero value is useful: it skips the user namespace probe and the rootfs
// item.
type Options struct {
	// Binary says whether this binary can run a jail at all (package
	// jail's CheckBinary: it was linked with its init stage's entry).
	// nil: no binary item.
	Binary func() error
	// ProbeUserns creates a user namespace for real (package jail provides
	// it). nil skips the probe: the verdict then rests on the sysctl files.
	// When given it is the truth: its success overrides every sysctl, and
	// its failure is reported with the most likely cause from them.
	ProbeUserns func() error
	// ProbeOverlay mounts a read-only overlayfs in a jail's namespaces
	// (package jail provides it). nil: no overlayfs item.
	ProbeOverlay func() error
	// Rootfs returns the rootfs status on one line ("python 3.11.2 at
	// /var/lib/rljail/rootfs/python") or why a run would refuse it (fatal).
	// An error that wraps ErrFirstRunBuilds is not fatal: rljail's default
	// place is empty, and the first run builds it. nil: no rootfs item.
	Rootfs func() (string, error)
	// Limits returns what a run with the default limits would get: one
	// line saying where its cgroup goes and what enforces each limit, and
	// the fallbacks (limits weaker than asked). nil: no limits item.
	Limits func() (detail string, fallbacks []string, err error)
}

// Run checks this host, in order: kernel, user namespaces, seccomp,
// cgroups, pidfd, overlayfs, limits, rootfs, running as.
func Run(opts Options) Report {
	var items []Item
	if opts.Binary != nil {
		it := Item{Name: "binary", OK: true, Detail: "linked with its init stage's entry point"}
		if err := opts.Binary(); err != nil {
			it = Item{Name: "binary", Fatal: true, Detail: oneLine(err.Error()), Fix: "build with `make build`, or install a release or the .deb"}
		}
		items = append(items, it)
	}
	items = append(items, []Item{
		checkKernel(),
		checkUserns(opts.ProbeUserns),
		checkSeccomp(),
		checkCgroups(),
		checkPidfd(),
	}...)
	if opts.ProbeOverlay != nil {
		items = append(items, overlayItem(opts.ProbeOverlay()))
	}
	if opts.Limits != nil {
		items = append(items, checkLimits(opts.Limits))
	}
	if opts.Rootfs != nil {
		items = append(items, checkRootfs(opts.Rootfs))
	}
	items = append(items, checkRunningAs())
	return Report{Items: items}
}

// overlayItem reports whether read-only directories can be presented
// through overlayfs, which keeps their host paths out of the jail's
// mountinfo. Without it they are bind-mounted and each run warns: a
// warning here, not a failure.
func overlayItem(err error) Item {
	if err == nil {
		return Item{Name: "overlayfs", OK: true, Detail: "read-only directories are presented through overlayfs: the jail's mountinfo shows no host path for them"}
	}
	return Item{Name: "overlayfs", Detail: "read-only directories will be bind-mounted, and the jail's mountinfo shows their host paths: " + oneLine(err.Error()),
		Fix: "load the overlay module (modprobe overlay); overlayfs in user namespaces needs Linux 5.11, over idmapped mounts 5.19"}
}

// checkLimits reports where a run's cgroup would go and what enforces
// each limit. Fallbacks are a warning, not fatal: the run announces them
// and --strict-limits refuses them.
func checkLimits(limits func() (string, []string, error)) Item {
	detail, fallbacks, err := limits()
	it := Item{Name: "limits", OK: err == nil && len(fallbacks) == 0, Detail: detail}
	switch {
	case err != nil:
		it.Detail = err.Error()
		it.Fatal = true
	case len(fallbacks) > 0:
		it.Detail += "; weaker than asked: " + strings.Join(fallbacks, "; ")
		it.Fix = "run as root, or in a cgroup v2 tree delegated to this user (systemd Delegate=yes; contrib/systemd)"
	}
	return it
}

// checkRootfs reports the rootfs status from the caller's function.
func checkRootfs(status func() (string, error)) Item {
	s, err := status()
	return rootfsItem(s, err)
}

// ErrFirstRunBuilds marks a rootfs that is missing where a run builds it
// on first use (rljail's default place): a warning, not a failure.
var ErrFirstRunBuilds = errors.New("the first run builds it")

// rootfsItem turns the rootfs status into an item. A rootfs the first run
// builds is a warning; one a run refuses (a named directory that holds
// none, a broken tree) is fatal.
func rootfsItem(status string, err error) Item {
	switch {
	case errors.Is(err, ErrFirstRunBuilds):
		return Item{Name: "rootfs", Detail: oneLine(err.Error()), Fix: "rljail rootfs build"}
	case err != nil:
		return Item{Name: "rootfs", Detail: oneLine(err.Error()), Fatal: true, Fix: "rljail rootfs build (with --rootfs DIR, or RLJAIL_ROOTFS, for a directory of your choice)"}
	}
	return Item{Name: "rootfs", OK: true, Detail: oneLine(status)}
}

// readSysctl reads a /proc/sys file. present is false when the file does
// not exist, which usually means the kernel has no such restriction.
func readSysctl(path string) (value string, present bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", true, fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// oneLine folds s onto one line, so that one item stays one line of output.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\n", "; ")
}
