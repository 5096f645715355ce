package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup/systemd"
)

// cgroupRoot is where the cgroup filesystems live: cgroup2 itself on a
// unified host, a tmpfs of v1 hierarchies (and maybe a cgroup2 tree at
// "unified") on a legacy or hybrid one.
const cgroupRoot = "/sys/fs/cgroup"

// supervisorLeaf is the leaf child of a delegated cgroup that the supervisor
// moves itself into (cgroup v2's no-internal-process rule: a cgroup that
// distributes controllers to children may hold no process itself).
const supervisorLeaf = "rljail-supervisor"

// topLevelName is the cgroup below the v2 root that holds the jails of a root
// supervisor whose own cgroup cannot be used (runc's cgroupfs driver does the
// same with its parents). It is shared by concurrent rljail processes and
// kept.
const topLevelName = "rljail"

// limitControllers are the controllers behind the limits, in the order their
// cgroups are set up.
var limitControllers = []string{"memory", "pids", "cpu"}

// accountingController is the v1 controller that measures CPU time (cpu.stat
// in v1 has only throttling counters). cgroup v2 measures CPU time in every
// cgroup (cpu.stat is a core file).
const accountingController = "cpuacct"

// mount is one cgroup filesystem mount from /proc/self/mountinfo.
type mount struct {
	fsType      string   // "cgroup" (v1) or "cgroup2"
	root        string   // the cgroup mounted there, "/" for the whole hierarchy
	point       string   // mount point
	controllers []string // a v1 hierarchy's controllers
}

// dir returns the directory of cgroup path (as /proc/<pid>/cgroup shows it)
// under the mount, or false when the mount does not show that cgroup.
func (m mount) dir(path string) (string, bool) {
	rel, ok := relToRoot(m.root, path)
	if !ok {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// cgroupPath returns the cgroup path (as /proc/<pid>/cgroup shows it) of a
// path given relative to the mount point, such as --cgroup-parent.
func (m mount) cgroupPath(rel string) string {
	return filepath.Join(m.root, rel)
}

// relToRoot returns path relative to root ("/" for root itself), or false
// when path is outside root.
func relToRoot(root, path string) (string, bool) {
	switch {
	case root == "/":
		return path, true
	case path == root:
		return "/", true
	case strings.HasPrefix(path, root+"/"):
		return strings.TrimPrefix(path, root), true
	}
	return "", false
}

// parseMountinfo returns the cgroup and cgroup2 mounts in /proc/self/mountinfo
// text.
func parseMountinfo(text string) ([]mount, error) {
	var mounts []mount
	for i, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		// ID parent major:minor root mount-point options [optional...] - fstype source super-options
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("/proc/self/mountinfo line %d: %q: malformed", i+1, line)
		}
		fsType := f[sep+1]
		if fsType != "cgroup" && fsType != "cgroup2" {
			continue
		}
		m := mount{fsType: fsType, root: UnescapeMountinfo(f[3]), point: UnescapeMountinfo(f[4])}
		if fsType == "cgroup" {
			for _, o := range strings.Split(f[sep+3], ",") {
				if isV1Controller(o) {
					m.controllers = append(m.controllers, o)
				}
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

// MountInfo is one cgroup or cgroup2 mount of /proc/self/mountinfo.
type MountInfo struct {
	FSType      string   // "cgroup" (v1) or "cgroup2"
	Root        string   // the cgroup mounted there, "/" for the whole hierarchy
	Point       string   // mount point
	Controllers []string // a v1 hierarchy's controllers
}

// ParseMountinfo returns the cgroup and cgroup2 mounts in
// /proc/self/mountinfo text (paths unescaped), for rljail check, which
// describes the host with the same reading Create uses.
func ParseMountinfo(text string) ([]MountInfo, error) {
	mounts, err := parseMountinfo(text)
	if err != nil {
		return nil, err
	}
	out := make([]MountInfo, len(mounts))
	for i, m := range mounts {
		out[i] = MountInfo{FSType: m.fsType, Root: m.root, Point: m.point, Controllers: m.controllers}
	}
	return out, nil
}

// isV1Controller reports whether a v1 super option names a controller.
func isV1Controller(opt string) bool {
	switch opt {
	case "cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer",
		"net_cls", "net_prio", "perf_event", "hugetlb", "rdma", "misc":
		return true
	}
	return false
}

// UnescapeMountinfo decodes the octal escapes (\040 for a space) of a
// mountinfo path.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procCgroups is one process's cgroup membership, from /proc/<pid>/cgroup.
type procCgroups struct {
	unified    string            // the "0::" path (cgroup2)
	hasUnified bool              // whether there is a "0::" line
	v1         map[string]string // v1 controller ("memory", "name=systemd") -> path
}

// parseProcCgroup parses /proc/<pid>/cgroup: lines of
// "hierarchy-ID:controller,list:path", "0::/path" for cgroup2.
func parseProcCgroup(text string) (procCgroups, error) {
	pc := procCgroups{v1: make(map[string]string)}
	for i, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return procCgroups{}, fmt.Errorf("cgroup file line %d: %q is not ID:controllers:/path", i+1, line)
		}
		id, ctls, path := parts[0], parts[1], parts[2]
		if id == "0" && ctls == "" {
			pc.unified, pc.hasUnified = path, true
			continue
		}
		for _, c := range strings.Split(ctls, ",") {
			if c != "" {
				pc.v1[c] = path
			}
		}
	}
	return pc, nil
}

// Membership is a process's cgroups, as /proc/<pid>/cgroup lists them.
type Membership struct {
	Unified    string            // the path of the "0::" line (cgroup2)
	HasUnified bool              // whether there is a "0::" line
	V1         map[string]string // v1 controller ("memory", "name=systemd") -> path
}

// ParseProcCgroup parses /proc/<pid>/cgroup text, for rljail check to read
// the host the way Create does.
func ParseProcCgroup(text string) (Membership, error) {
	pc, err := parseProcCgroup(text)
	return Membership{Unified: pc.unified, HasUnified: pc.hasUnified, V1: pc.v1}, err
}

// v2Candidate is a cgroup2 directory that could hold the jail's cgroup.
type v2Candidate struct {
	dir    string // absolute directory; "" when there is no such candidate
	exists bool
	// isRoot is true for the hierarchy's real root cgroup (it has no
	// cgroup.type file), which is exempt from the no-internal-process rule and
	// is never the supervisor's "own" cgroup to take over.
	isRoot bool
	// writable is nil when this user may create children in dir and write its
	// cgroup.procs and cgroup.subtree_control (what systemd's Delegate=yes
	// hands to a service's user).
	writable    error
	procs       []int    // cgroup.procs: the processes directly in it
	controllers []string // cgroup.controllers: what it may hand to children
	// inSupervisorLeaf is true for the "own" candidate when this process sits
	// in dir/rljail-supervisor already (it moved there at an earlier run).
	inSupervisorLeaf bool
	// why says why the candidate is missing (dir == "").
	why string
}

// v1Hierarchy is what the v1 setup needs to know about one controller.
type v1Hierarchy struct {
	mounted bool
	point   string // mount point, to tell co-mounted controllers apart
	// base is the directory the jail's cgroup goes below: this process's own
	// cgroup in that hierarchy, or --cgroup-parent; "" with why when there is
	// none.
	base     string
	basePath string // base as /proc/<pid>/cgroup shows it
	exists   bool
	writable error
	why      string
}

// host is everything the placement decision looks at; probe reads it, tests
// write it by hand.
type host struct {
	pid  int
	euid int
	// helpers are the caller's own processes beside it (Options.Helpers).
	helpers []int

	// unified is true when cgroup2 is the hierarchy for limits (the host's
	// layout is unified, or a test says so); the fields below it are for v2.
	unified bool
	v2Mount mount
	topName string // topLevelName, or a test's own
	own     v2Candidate
	top     v2Candidate // the hierarchy's root: where the top-level cgroup goes
	parent  v2Candidate // --cgroup-parent

	// v1 maps memory, pids, cpu and cpuacct to their hierarchies (legacy and
	// hybrid layouts).
	v1 map[string]v1Hierarchy

	// noCgroups says why no cgroup filesystem can be used at all.
	noCgroups string

	// manager is Options.Manager (ManagerAuto for ""), managerTimeout
	// Options.ManagerTimeout.
	manager        Manager
	managerTimeout time.Duration
	// systemd is whether systemd manages the cgroup v2 tree.
	systemd systemdHost
}

// systemdHost is what the placement knows of systemd before asking it
// anything.
type systemdHost struct {
	// running: cgroup v2 at /sys/fs/cgroup and /run/systemd/system exists.
	running bool
	// why says why systemd cannot be asked, when not running.
	why string
	// failed says why asking it failed: the placement then falls back.
	failed string
}

// layout says where probe looks; tests point it at a private cgroup2 tree.
type layout struct {
	// v2Mount, when set, is the cgroup2 mount point to use as the unified
	// hierarchy whatever the host layout is. Otherwise cgroup2 is used only
	// when it is mounted at /sys/fs/cgroup itself (a unified host); on a
	// hybrid host the cgroup2 tree at /sys/fs/cgroup/unified holds no limit
	// controllers and the v1 hierarchies are used.
	v2Mount string
	topName string
	// v1Only, when set, limits the v1 hierarchies to these controllers, as
	// if the others were not mounted.
	v1Only []string
}

// probe reads the host's cgroup layout, this process's cgroups and the
// candidate directories for the jail's cgroup.
func probe(parent string, manager Manager, lay layout) (host, error) {
	h := host{pid: os.Getpid(), euid: os.Geteuid(), topName: lay.topName, manager: manager}
	if h.topName == "" {
		h.topName = topLevelName
	}
	b, err := readFile("/proc/self/mountinfo")
	if err != nil {
		return h, fmt.Errorf("cgroup: %w", err)
	}
	mounts, err := parseMountinfo(string(b))
	if err != nil {
		return h, fmt.Errorf("cgroup: %w", err)
	}
	b, err = readFile("/proc/self/cgroup")
	if err != nil {
		return h, fmt.Errorf("cgroup: %w", err)
	}
	self, err := parseProcCgroup(string(b))
	if err != nil {
		return h, fmt.Errorf("cgroup: /proc/self/cgroup: %w", err)
	}

	v2Point := lay.v2Mount
	if v2Point == "" {
		v2Point = cgroupRoot
	}
	for _, m := range mounts {
		if m.fsType == "cgroup2" && m.point == v2Point {
			h.unified, h.v2Mount = true, m
		}
	}
	if lay.v2Mount != "" && !h.unified {
		return h, fmt.Errorf("cgroup: no cgroup2 filesystem is mounted at %s", lay.v2Mount)
	}
	if h.unified {
		probeV2(&h, self, parent)
		return h, nil
	}
	probeV1(&h, mounts, self, parent, lay.v1Only)
	if len(mounts) == 0 {
		h.noCgroups = "no cgroup filesystem is mounted"
	}
	return h, nil
}

// probeV2 fills in the cgroup2 candidates.
func probeV2(h *host, self procCgroups, parent string) {
	m := h.v2Mount
	h.top = readV2Candidate(m.point)
	if parent != "" {
		h.parent = readV2Candidate(filepath.Join(m.point, parent))
	}
	switch {
	case !self.hasUnified:
		h.own.why = "this process has no cgroup2 path in /proc/self/cgroup"
	default:
		dir, ok := m.dir(self.unified)
		if !ok {
			h.own.why = fmt.Sprintf("this process's cgroup %s is outside the cgroup2 tree mounted at %s", self.unified, m.point)
			break
		}
		inLeaf := filepath.Base(dir) == supervisorLeaf
		if inLeaf {
			dir = filepath.Dir(dir)
		}
		h.own = readV2Candidate(dir)
		h.own.inSupervisorLeaf = inLeaf
	}
}

// probeSystemd finds out whether systemd runs the host's cgroup v2 tree,
// only where the placement may ask it: not with --cgroup-manager cgroupfs,
// nor (auto) with --cgroup-parent or an own cgroup rljail can use, whose
// runs cost not even the stat. h.helpers must be set.
func probeSystemd(h host, parent string, lay layout) systemdHost {
	switch ownOK, _ := ownUsable(h); {
	case !h.unified:
		return systemdHost{why: "cgroup v1"}
	case h.manager == ManagerCgroupfs:
		return systemdHost{why: "--cgroup-manager cgroupfs"}
	case h.manager != ManagerSystemd && (parent != "" || ownOK):
		return systemdHost{why: "not needed"}
	case lay.v2Mount != "":
		return systemdHost{why: "a test's own cgroup2 tree at " + lay.v2Mount}
	case !systemd.Running():
		return systemdHost{why: "systemd does not run this host (no /run/systemd/system)"}
	}
	return systemdHost{running: true}
}

// readV2Candidate reads what the decision needs to know about a cgroup2
// directory.
func readV2Candidate(dir string) v2Candidate {
	c := v2Candidate{dir: dir}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return c
	}
	c.exists = true
	_, err := os.Stat(filepath.Join(dir, "cgroup.type"))
	c.isRoot = errors.Is(err, os.ErrNotExist)
	c.writable = writableCgroup(dir, "cgroup.procs", "cgroup.subtree_control")
	c.procs, _ = readPids(filepath.Join(dir, "cgroup.procs"))
	if b, err := readFile(filepath.Join(dir, "cgroup.controllers")); err == nil {
		c.controllers = strings.Fields(string(b))
	}
	return c
}

// writableCgroup returns nil when this user may create cgroups in dir and
// write the named files in it.
func writableCgroup(dir string, files ...string) error {
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// probeV1 fills in the v1 hierarchies of the limit controllers and cpuacct.
func probeV1(h *host, mounts []mount, self procCgroups, parent string, only []string) {
	h.v1 = make(map[string]v1Hierarchy)
	for _, ctl := range append(slices.Clone(limitControllers), accountingController) {
		var m *mount
		for i := range mounts {
			if only != nil && !slices.Contains(only, ctl) {
				break
			}
			if mounts[i].fsType == "cgroup" && slices.Contains(mounts[i].controllers, ctl) {
				// Prefer the mount under /sys/fs/cgroup when a hierarchy is
				// mounted twice.
				if m == nil || strings.HasPrefix(mounts[i].point, cgroupRoot+"/") {
					m = &mounts[i]
				}
			}
		}
		if m == nil {
			h.v1[ctl] = v1Hierarchy{why: "no cgroup v1 " + ctl + " hierarchy is mounted"}
			continue
		}
		hy := v1Hierarchy{mounted: true, point: m.point}
		if parent != "" {
			hy.base, hy.basePath = filepath.Join(m.point, parent), m.cgroupPath(parent)
		} else {
			path, ok := self.v1[ctl]
			if !ok {
				hy.why = "this process has no " + ctl + " cgroup in /proc/self/cgroup"
				h.v1[ctl] = hy
				continue
			}
			dir, ok := m.dir(path)
			if !ok {
				hy.why = fmt.Sprintf("this process's %s cgroup %s is outside the hierarchy mounted at %s", ctl, path, m.point)
				h.v1[ctl] = hy
				continue
			}
			hy.base, hy.basePath = dir, path
		}
		if st, err := os.Stat(hy.base); err == nil && st.IsDir() {
			hy.exists = true
			hy.writable = writableCgroup(hy.base)
		}
		h.v1[ctl] = hy
	}
}
