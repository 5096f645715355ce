package hostcheck

import (
	"github.com/rljail/rljail/cgroup"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where cgroup filesystems are mounted: cgroup2 itself (v2),
// or a tmpfs holding one directory per v1 hierarchy (v1, hybrid).
const cgroupRoot = "/sys/fs/cgroup"

// cgroupUnified is the empty cgroup2 tree of a hybrid host.
const cgroupUnified = cgroupRoot + "/unified"

// limitControllers are the controllers behind rljail's limits: --memory,
// --pids-limit and --cpus.
func limitControllers() []string { return []string{"memory", "pids", "cpu"} }

// rlimitFallback names the rlimit each limit falls back to without its
// controller.
func rlimitFallback(controller string) string {
	switch controller {
	case "memory":
		return "memory -> RLIMIT_AS"
	case "pids":
		if cgroup.NprocPerUserNS() {
			return "pids -> RLIMIT_NPROC in the jail's user namespace"
		}
		return "pids not enforced (RLIMIT_NPROC counts each namespace's own tasks only from Linux 5.14)"
	case "cpu":
		return "cpus not enforced, cpu-time by RLIMIT_CPU"
	}
	return controller
}

// cgroupMode is the cgroup layout of the host.
type cgroupMode int

const (
	cgroupNone   cgroupMode = iota // no cgroup filesystem at /sys/fs/cgroup
	cgroupV1                       // legacy: v1 hierarchies only
	cgroupHybrid                   // v1 hierarchies plus a cgroup2 tree at /sys/fs/cgroup/unified
	cgroupV2                       // unified: cgroup2 at /sys/fs/cgroup
)

// classifyCgroupFS tells the layout from the filesystem types (statfs
// f_type) of /sys/fs/cgroup and /sys/fs/cgroup/unified; 0 when statfs
// failed.
func classifyCgroupFS(rootType, unifiedType int64) cgroupMode {
	switch rootType {
	case unix.CGROUP2_SUPER_MAGIC:
		return cgroupV2
	case unix.TMPFS_MAGIC:
		if unifiedType == unix.CGROUP2_SUPER_MAGIC {
			return cgroupHybrid
		}
		return cgroupV1
	case unix.CGROUP_SUPER_MAGIC:
		// A single v1 hierarchy mounted on /sys/fs/cgroup itself.
		return cgroupV1
	}
	return cgroupNone
}

// selfCgroups is this process's cgroup membership, from /proc/self/cgroup.
type selfCgroups struct {
	// unified is the path of the "0::" line (cgroup2); hasUnified is false
	// when there is none.
	unified    string
	hasUnified bool
	// v1 maps each v1 controller ("memory", "cpu", "name=systemd") to this
	// process's path in its hierarchy.
	v1 map[string]string
}

// parseSelfCgroup parses /proc/self/cgroup with the cgroup package's
// parser.
func parseSelfCgroup(text string) (selfCgroups, error) {
	m, err := cgroup.ParseProcCgroup(text)
	if err != nil {
		return selfCgroups{}, fmt.Errorf("/proc/self/cgroup: %w", err)
	}
	return selfCgroups{unified: m.Unified, hasUnified: m.HasUnified, v1: m.V1}, nil
}

// cgroupMount is one cgroup filesystem mount from /proc/self/mountinfo.
type cgroupMount struct {
	fsType     string // "cgroup" (v1) or "cgroup2"
	root       string // the cgroup mounted there, "/" for the whole hierarchy
	mountPoint string
	// controllers are a v1 hierarchy's controllers, from its super options.
	controllers []string
}

// parseCgroupMounts returns the cgroup and cgroup2 mounts listed in
// /proc/self/mountinfo text, read by the cgroup package's own parser.
func parseCgroupMounts(mountinfo string) ([]cgroupMount, error) {
	infos, err := cgroup.ParseMountinfo(mountinfo)
	if err != nil {
		return nil, err
	}
	var mounts []cgroupMount
	for _, m := range infos {
		mounts = append(mounts, cgroupMount{fsType: m.FSType, root: m.Root, mountPoint: m.Point, controllers: m.Controllers})
	}
	return mounts, nil
}

// cgroupDir returns the directory of cgroup path (from /proc/self/cgroup)
// under mount m, or false when the mount does not show it (it mounts
// another part of the hierarchy).
func cgroupDir(m cgroupMount, path string) (string, bool) {
	rel := path
	if m.root != "/" {
		switch {
		case path == m.root:
			rel = "/"
		case strings.HasPrefix(path, m.root+"/"):
			rel = strings.TrimPrefix(path, m.root)
		default:
			return "", false
		}
	}
	return filepath.Join(m.mountPoint, rel), true
}

// cgroupHost is what the cgroups check reads beyond /proc/self; tests
// replace it.
type cgroupHost struct {
	mode     cgroupMode
	modeErr  error // why /sys/fs/cgroup could not be examined
	self     selfCgroups
	mounts   []cgroupMount
	root     bool                              // effective uid 0
	readFile func(path string) ([]byte, error) // os.ReadFile
	writable func(dir string) error            // nil when this user may create cgroups in dir
}

// checkCgroups examines the host's cgroups and where rljail would put a
// jail's cgroup.
func checkCgroups() Item {
	it := Item{Name: "cgroups"}
	h := cgroupHost{
		root:     os.Geteuid() == 0,
		readFile: os.ReadFile,
		writable: func(dir string) error { return unix.Access(dir, unix.W_OK) },
	}
	var rootFS, unifiedFS unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &rootFS); err != nil {
		h.modeErr = fmt.Errorf("statfs %s: %w", cgroupRoot, err)
	}
	var unifiedType int64
	if unix.Statfs(cgroupUnified, &unifiedFS) == nil {
		unifiedType = int64(unifiedFS.Type)
	}
	h.mode = classifyCgroupFS(int64(rootFS.Type), unifiedType)
	if h.mode == cgroupNone && h.modeErr == nil {
		h.modeErr = fmt.Errorf("%s is a filesystem of type %#x, not cgroup2 or tmpfs", cgroupRoot, rootFS.Type)
	}

	b, err := os.ReadFile("/proc/self/cgroup")
	if err == nil {
		h.self, err = parseSelfCgroup(string(b))
	}
	if err != nil {
		it.Detail = fmt.Sprintf("cannot tell this process's cgroup: %v; limits fall back to rlimits", err)
		return it
	}
	b, err = os.ReadFile("/proc/self/mountinfo")
	if err == nil {
		h.mounts, err = parseCgroupMounts(string(b))
	}
	if err != nil {
		it.Detail = fmt.Sprintf("cannot list the cgroup mounts: %v; limits fall back to rlimits", err)
		return it
	}
	return cgroupsItem(h)
}

// cgroupsItem judges the cgroup layout. It is never fatal: without usable
// controllers the limits fall back to rlimits, and the detail says so.
func cgroupsItem(h cgroupHost) Item {
	switch h.mode {
	case cgroupV2:
		return cgroupsV2Item(h)
	case cgroupV1, cgroupHybrid:
		return cgroupsV1Item(h)
	}
	detail := "no cgroup filesystem"
	if h.modeErr != nil {
		detail += ": " + h.modeErr.Error()
	}
	return Item{
		Name:   "cgroups",
		Detail: detail + "; limits fall back to rlimits (" + fallbacks(limitControllers()) + ")",
		Fix:    "mount -t cgroup2 cgroup2 " + cgroupRoot,
	}
}

// fallbacks words the rlimit fallback of each controller.
func fallbacks(controllers []string) string {
	parts := make([]string, 0, len(controllers))
	for _, c := range controllers {
		parts = append(parts, rlimitFallback(c))
	}
	return strings.Join(parts, ", ")
}

// controllersIn reads a cgroup2 cgroup.controllers file.
func (h cgroupHost) controllersIn(dir string) ([]string, error) {
	p := filepath.Join(dir, "cgroup.controllers")
	b, err := h.readFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.Fields(string(b)), nil
}

// cgroup2Mount returns the cgroup2 mount at mountPoint, or a whole-tree
// mount there when mountinfo does not list it.
func (h cgroupHost) cgroup2Mount(mountPoint string) cgroupMount {
	for _, m := range h.mounts {
		if m.fsType == "cgroup2" && m.mountPoint == mountPoint {
			return m
		}
	}
	return cgroupMount{fsType: "cgroup2", root: "/", mountPoint: mountPoint}
}

// listOrNone joins names, or says "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// cgroupsV2Item describes a unified (v2) host. A jail's cgroup goes under
// this process's own cgroup, which needs the limit controllers and must be
// writable by this user.
func cgroupsV2Item(h cgroupHost) Item {
	it := Item{Name: "cgroups"}
	m := h.cgroup2Mount(cgroupRoot)
	rootCtl, err := h.controllersIn(m.mountPoint)
	rootPart := listOrNone(rootCtl)
	if err != nil {
		rootPart = "unknown (" + err.Error() + ")"
	}
	it.Detail = "v2 (unified); root controllers " + rootPart
	if !h.self.hasUnified {
		it.Detail += "; this process has no cgroup2 path in /proc/self/cgroup; limits fall back to rlimits (" + fallbacks(limitControllers()) + ")"
		it.Fix = "run rljail in the host's cgroup namespace"
		return it
	}
	dir, ok := cgroupDir(m, h.self.unified)
	if !ok {
		it.Detail += fmt.Sprintf("; own cgroup %s is outside the mounted tree; limits fall back to rlimits (%s)", h.self.unified, fallbacks(limitControllers()))
		it.Fix = "mount the whole cgroup2 tree: mount -t cgroup2 cgroup2 " + cgroupRoot
		return it
	}
	ownCtl, err := h.controllersIn(dir)
	ownPart := listOrNone(ownCtl)
	if err != nil {
		ownPart = "unknown (" + err.Error() + ")"
	}
	it.Detail += fmt.Sprintf("; own cgroup %s controllers %s", h.self.unified, ownPart)

	var missing []string
	for _, c := range limitControllers() {
		if !slices.Contains(ownCtl, c) {
			missing = append(missing, c)
		}
	}
	werr := h.writable(dir)
	it.Detail += "; jail cgroups under " + dir + " (" + writableWord(werr) + ")"
	switch {
	case werr != nil:
		it.Detail += "; limits fall back to rlimits (" + fallbacks(limitControllers()) + ")"
		if h.root {
			it.Fix = "make " + dir + " writable (mount -o remount,rw " + m.mountPoint + ")"
		} else {
			it.Fix = "run rljail in a delegated cgroup: systemd-run --user --scope -p Delegate=yes rljail ..."
		}
	case len(missing) > 0:
		it.Detail += "; " + strings.Join(missing, ",") + " not enabled there, limits fall back to rlimits (" + fallbacks(missing) + ")"
		switch {
		case !h.root:
			it.Fix = "run rljail in a delegated cgroup: systemd-run --user --scope -p Delegate=yes -p DelegateControllers='memory pids cpu' rljail ..."
		case dir == m.mountPoint:
			it.Fix = "the kernel lacks them, or they are held by v1 hierarchies: boot with systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all"
		default:
			it.Fix = "enable them for this cgroup: echo '+memory +pids +cpu' > " + filepath.Join(filepath.Dir(dir), "cgroup.subtree_control")
		}
	default:
		it.OK = true
		it.Detail += "; limits through cgroup v2"
	}
	return it
}

// cgroupsV1Item describes a legacy or hybrid host. A jail's cgroups go under
// this process's own cgroup in each of the memory, pids and cpu
// hierarchies.
func cgroupsV1Item(h cgroupHost) Item {
	it := Item{Name: "cgroups"}
	var mounted, unmounted, placed, notWritable []string
	readOnly := false
	for _, c := range limitControllers() {
		var m *cgroupMount
		for i := range h.mounts {
			if h.mounts[i].fsType == "cgroup" && slices.Contains(h.mounts[i].controllers, c) {
				m = &h.mounts[i]
				break
			}
		}
		if m == nil {
			unmounted = append(unmounted, c)
			continue
		}
		mounted = append(mounted, c)
		path, ok := h.self.v1[c]
		if !ok {
			path = "/"
		}
		dir, ok := cgroupDir(*m, path)
		if !ok {
			notWritable = append(notWritable, c)
			placed = append(placed, fmt.Sprintf("%s (own cgroup %s outside the mount)", c, path))
			continue
		}
		werr := h.writable(dir)
		if werr != nil {
			notWritable = append(notWritable, c)
			readOnly = readOnly || errors.Is(werr, unix.EROFS)
		}
		placed = append(placed, fmt.Sprintf("%s %s (%s)", c, dir, writableWord(werr)))
	}

	if h.mode == cgroupHybrid {
		it.Detail = "hybrid: v1 controllers " + listOrNone(mounted) + " + " + h.unifiedTree()
	} else {
		it.Detail = "v1 (legacy): controllers " + listOrNone(mounted)
	}
	if len(unmounted) > 0 {
		it.Detail += "; not mounted: " + strings.Join(unmounted, ",")
	}
	if len(placed) > 0 {
		it.Detail += "; jail cgroups under " + strings.Join(placed, ", ")
	}

	unusable := append(slices.Clone(unmounted), notWritable...)
	switch {
	case len(unusable) == 0:
		it.OK = true
		it.Detail += "; limits through cgroup v1"
		return it
	case len(unusable) == len(limitControllers()):
		it.Detail += "; limits fall back to rlimits (" + fallbacks(unusable) + ")"
	default:
		it.Detail += "; limits through cgroup v1 except " + strings.Join(unusable, ",") + ", which fall back to rlimits (" + fallbacks(unusable) + ")"
	}
	switch {
	case len(unmounted) > 0:
		c := unmounted[0]
		it.Fix = fmt.Sprintf("mkdir -p %[1]s/%[2]s && mount -t cgroup -o %[2]s cgroup %[1]s/%[2]s", cgroupRoot, c)
	case !h.root:
		it.Fix = "run rljail as root (v1 cgroups are not delegated to users), or boot with systemd.unified_cgroup_hierarchy=1 and run it under systemd-run --user --scope -p Delegate=yes"
	case readOnly:
		it.Fix = "remount the cgroup hierarchies read-write: mount -o remount,rw " + cgroupRoot + "/<controller>"
	default:
		it.Fix = "make this process's cgroup directories writable, or boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2"
	}
	return it
}

// unifiedTree describes the cgroup2 tree of a hybrid host, which holds no
// limit controller when the v1 hierarchies have them.
func (h cgroupHost) unifiedTree() string {
	m := h.cgroup2Mount(cgroupUnified)
	ctl, err := h.controllersIn(m.mountPoint)
	if err != nil {
		return "v2 tree at " + m.mountPoint + " (" + err.Error() + ")"
	}
	var limits []string
	for _, c := range limitControllers() {
		if slices.Contains(ctl, c) {
			limits = append(limits, c)
		}
	}
	if len(limits) == 0 {
		return "empty v2 tree at " + m.mountPoint + " (controllers: " + listOrNone(ctl) + ")"
	}
	return "v2 tree at " + m.mountPoint + " with " + strings.Join(limits, ",")
}

// writableWord words the result of a writability test.
func writableWord(err error) string {
	if err == nil {
		return "writable"
	}
	if errors.Is(err, os.ErrNotExist) {
		return "missing"
	}
	return "not writable: " + err.Error()
}
