package hostcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestCanRun(t *testing.T) {
	tests := []struct {
		name  string
		items []Item
		want  bool
	}{
		{"empty", nil, true},
		{"all ok", []Item{{Name: "kernel", OK: true, Fatal: true}, {Name: "pidfd", OK: true, Fatal: true}}, true},
		{"warning only", []Item{{Name: "kernel", OK: true, Fatal: true}, {Name: "cgroups"}}, true},
		{"fatal failure", []Item{{Name: "kernel", OK: true, Fatal: true}, {Name: "user namespaces", Fatal: true}}, false},
		{"fatal failure among warnings", []Item{{Name: "rootfs"}, {Name: "seccomp", Fatal: true}, {Name: "cgroups"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Report{Items: tt.items}).CanRun(); got != tt.want {
				t.Errorf("CanRun() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	r := Report{Items: []Item{
		{Name: "kernel", OK: true, Fatal: true, Detail: "6.1.0-18-amd64"},
		{Name: "user namespaces", Fatal: true, Detail: "kernel.unprivileged_userns_clone=0 forbids them to non-root users",
			Fix: "sysctl -w kernel.unprivileged_userns_clone=1"},
		{Name: "cgroups", Detail: "no cgroup filesystem\nsecond line", Fix: "mount -t cgroup2 cgroup2 /sys/fs/cgroup"},
		{Name: "pidfd", OK: true, Fatal: true, Detail: "pidfd_open works", Fix: "not shown when ok"},
		{Name: "rootfs"},
	}}
	want := "" +
		"ok    kernel          6.1.0-18-amd64\n" +
		"FAIL  user namespaces kernel.unprivileged_userns_clone=0 forbids them to non-root users\n" +
		"      fix: sysctl -w kernel.unprivileged_userns_clone=1\n" +
		"warn  cgroups         no cgroup filesystem; second line\n" +
		"      fix: mount -t cgroup2 cgroup2 /sys/fs/cgroup\n" +
		"ok    pidfd           pidfd_open works\n" +
		"warn  rootfs\n"
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatalf("WriteText: %v", err)
	}
	if b.String() != want {
		t.Errorf("WriteText wrote\n%s\nwant\n%s", b.String(), want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestWriteTextError(t *testing.T) {
	err := Report{Items: []Item{{Name: "kernel", OK: true}}}.WriteText(failingWriter{})
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("WriteText error = %v, want one wrapping %v", err, os.ErrClosed)
	}
	if !strings.Contains(err.Error(), "report") {
		t.Errorf("WriteText error %q does not say what it was writing", err)
	}
}

func TestItemJSON(t *testing.T) {
	b, err := json.Marshal(Report{Items: []Item{{Name: "kernel", OK: true, Detail: "6.18"}, {Name: "seccomp", Detail: "x", Fix: "y", Fatal: true}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"items":[{"name":"kernel","ok":true,"detail":"6.18","fatal":false},{"name":"seccomp","ok":false,"detail":"x","fix":"y","fatal":true}]}`
	if string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
}

func TestRootfsItem(t *testing.T) {
	tests := []struct {
		name       string
		status     string
		err        error
		wantOK     bool
		wantFatal  bool
		wantDetail string
		wantFix    string
	}{
		{"present", "python 3.11.2 at /var/lib/rljail/rootfs/python", nil, true, false, "python 3.11.2 at /var/lib/rljail/rootfs/python", ""},
		{"missing at the default place", "", fmt.Errorf("no Python rootfs at /var/lib/rljail/rootfs/python yet: %w", ErrFirstRunBuilds), false, false,
			"no Python rootfs at /var/lib/rljail/rootfs/python yet: the first run builds it", "rljail rootfs build"},
		{"named and missing", "", errors.New("no Python rootfs at /srv/py (given by --rootfs)"), false, true,
			"no Python rootfs at /srv/py (given by --rootfs)", "rljail rootfs build (with --rootfs DIR, or RLJAIL_ROOTFS, for a directory of your choice)"},
		{"multi-line error", "", errors.New("broken:\nno python3"), false, true, "broken:; no python3", "rljail rootfs build (with --rootfs DIR, or RLJAIL_ROOTFS, for a directory of your choice)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := rootfsItem(tt.status, tt.err)
			if it.Name != "rootfs" || it.OK != tt.wantOK || it.Fatal != tt.wantFatal || it.Detail != tt.wantDetail || it.Fix != tt.wantFix {
				t.Errorf("rootfsItem = %+v, want ok=%v fatal=%v detail=%q fix=%q", it, tt.wantOK, tt.wantFatal, tt.wantDetail, tt.wantFix)
			}
		})
	}
}

func TestOverlayItem(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantOK     bool
		wantDetail string
	}{
		{"works", nil, true, "read-only directories are presented through overlayfs: the jail's mountinfo shows no host path for them"},
		{"refused", errors.New("mount overlayfs: no such device"), false, "read-only directories will be bind-mounted, and the jail's mountinfo shows their host paths: mount overlayfs: no such device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := overlayItem(tt.err)
			if it.Name != "overlayfs" || it.OK != tt.wantOK || it.Fatal || it.Detail != tt.wantDetail || (it.Fix == "") == !tt.wantOK {
				t.Errorf("overlayItem = %+v, want ok=%v fatal=false detail=%q, a fix only when it fails", it, tt.wantOK, tt.wantDetail)
			}
			if r := (Report{Items: []Item{it}}); !r.CanRun() {
				t.Errorf("an overlayfs item stops jails from running: %+v", it)
			}
		})
	}
}

func TestRunningAsItem(t *testing.T) {
	tests := []struct {
		uid, euid int
		want      string
	}{
		{0, 0, "root: jail uid 1000 -> a host uid of each jail's own, from 2130706432 (65536 ids; rljail's entry in /etc/subuid when there is one)"},
		{1000, 0, "root (uid 1000, euid 0): jail uid 1000 -> a host uid of each jail's own, from 2130706432 (65536 ids; rljail's entry in /etc/subuid when there is one)"},
		{1000, 1000, "rootless (uid 1000): jail uid 1000 -> host uid 1000"},
		{4242, 4242, "rootless (uid 4242): jail uid 1000 -> host uid 4242"},
	}
	for _, tt := range tests {
		it := runningAsItem(tt.uid, tt.euid)
		if !it.OK || it.Detail != tt.want {
			t.Errorf("runningAsItem(%d, %d) = %+v, want ok with %q", tt.uid, tt.euid, it, tt.want)
		}
	}
}

// TestRunOnThisHost runs every check on the real host. The kernel (6.18),
// seccomp and pidfd pass on the development machine and in the VM; the
// cgroup layout is cross-checked against /proc/mounts.
func TestRunOnThisHost(t *testing.T) {
	r := Run(Options{})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", b.String())

	items := make(map[string]Item)
	for _, it := range r.Items {
		if _, dup := items[it.Name]; dup {
			t.Errorf("item %q appears twice", it.Name)
		}
		items[it.Name] = it
		if strings.Contains(it.Detail, "\n") || strings.Contains(it.Fix, "\n") {
			t.Errorf("item %q is not one line: %+v", it.Name, it)
		}
		if !it.OK && it.Fix == "" {
			t.Errorf("item %q failed without a fix: %+v", it.Name, it)
		}
	}
	wantOrder := []string{"kernel", "user namespaces", "seccomp", "cgroups", "pidfd", "running as"}
	if len(r.Items) != len(wantOrder) {
		t.Fatalf("Run(Options{}) made %d items, want %d (%v): no rootfs item without Options.Rootfs", len(r.Items), len(wantOrder), wantOrder)
	}
	for i, name := range wantOrder {
		if r.Items[i].Name != name {
			t.Errorf("item %d is %q, want %q", i, r.Items[i].Name, name)
		}
	}
	for _, name := range []string{"kernel", "seccomp", "pidfd", "running as"} {
		if it := items[name]; !it.OK {
			t.Errorf("%s: not OK on this host: %+v", name, it)
		}
	}
	if !strings.HasPrefix(items["kernel"].Detail, kernelRelease(t)) {
		t.Errorf("kernel detail %q does not start with the release", items["kernel"].Detail)
	}

	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	cg := items["cgroups"]
	switch {
	case strings.Contains(string(mounts), " /sys/fs/cgroup/unified cgroup2 "):
		if !strings.HasPrefix(cg.Detail, "hybrid") {
			t.Errorf("cgroups detail %q: want hybrid (cgroup2 at /sys/fs/cgroup/unified)", cg.Detail)
		}
	case strings.Contains(string(mounts), " /sys/fs/cgroup cgroup2 "):
		if !strings.HasPrefix(cg.Detail, "v2 (unified)") {
			t.Errorf("cgroups detail %q: want v2 (cgroup2 at /sys/fs/cgroup)", cg.Detail)
		}
	}
	if cg.Fatal {
		t.Errorf("cgroups item is fatal: %+v", cg)
	}
	if !cg.OK && !strings.Contains(cg.Detail, "rlimits") {
		t.Errorf("cgroups failed without announcing the rlimit fallback: %q", cg.Detail)
	}
}

func TestRunUsesOptions(t *testing.T) {
	probeErr := errors.New("clone: operation not permitted")
	r := Run(Options{
		ProbeUserns: func() error { return probeErr },
		Rootfs:      func() (string, error) { return "python 3.11.2 at /x", nil },
	})
	var userns, rootfs *Item
	for i := range r.Items {
		switch r.Items[i].Name {
		case "user namespaces":
			userns = &r.Items[i]
		case "rootfs":
			rootfs = &r.Items[i]
		}
	}
	if userns == nil || userns.OK || !userns.Fatal || !strings.Contains(userns.Detail, probeErr.Error()) {
		t.Errorf("user namespaces item with a failing probe = %+v, want a fatal failure quoting the probe", userns)
	}
	if rootfs == nil || !rootfs.OK || rootfs.Detail != "python 3.11.2 at /x" {
		t.Errorf("rootfs item = %+v, want ok with the status", rootfs)
	}
	if r.CanRun() {
		t.Error("CanRun() = true with a failed user namespace probe")
	}
}
