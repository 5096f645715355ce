package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// plan is what Create is going to do: where the jail's cgroup goes and which
// controllers it uses. decide makes it from a host without touching
// anything, so that the placement rules are tested with tables.
type plan struct {
	placement Placement

	// v2Parent is the directory the jail's leaf cgroup is created in (v2).
	v2Parent string
	// moveSelf: move this process into v2Parent/rljail-supervisor before
	// enabling controllers in v2Parent ("own" placement, first run).
	moveSelf bool
	// scope: ask systemd for a transient scope first (PlacementSystemd);
	// v2Parent and enableIn are the scope's, known once it exists.
	scope *scopePlan
	// makeParent: create v2Parent when missing (the shared top-level cgroup).
	makeParent bool
	// enableIn are the directories whose cgroup.subtree_control gets the
	// controllers, top-down; v2Parent is always the last.
	enableIn []string

	// v1 maps each usable v1 controller to its hierarchy.
	v1 map[string]v1Hierarchy

	// use are the controllers to use: a subset of memory, pids, cpu, and on
	// v1 cpuacct. Setup may still lose one (an enable that fails), which it
	// records in why.
	use []string
	// why says, per controller not used, why not.
	why map[string]string
	// outside, when set, is the fallback line of a root jail whose cgroup
	// went to the top-level cgroup because systemd could not be asked.
	outside string
}

// decide applies the placement rules of issue 4 to a host:
//
//  1. below --cgroup-parent when given (it must exist);
//  2. below the supervisor's own cgroup: on v1 always (per controller, where
//     writable); on v2 when that cgroup holds no process but rljail itself
//     and this user may write it (a systemd Delegate=yes service, or a
//     delegated cgroup of an unprivileged user);
//  3. on a cgroup v2 host that systemd runs, in a transient scope of
//     systemd's (--cgroup-manager auto or systemd): the system manager's
//     for root, the user manager's otherwise;
//  4. as root on v2, below the top-level cgroup /sys/fs/cgroup/rljail;
//  5. no cgroup: the caller falls back to rlimits.
//
// --cgroup-manager systemd always asks systemd (--cgroup-parent then names
// the scope's slice); cgroupfs never does.
func decide(h host, parent string) (plan, error) {
	p := plan{why: make(map[string]string)}
	if h.unified {
		return p, decideV2(h, parent, &p)
	}
	if h.manager == ManagerSystemd {
		return p, errors.New("cgroup: --cgroup-manager systemd: the systemd driver needs the unified cgroup v2 hierarchy, and this host mounts cgroup v1 controllers")
	}
	return p, decideV1(h, parent, &p)
}

func decideV2(h host, parent string, p *plan) error {
	if h.manager == ManagerSystemd {
		return decideScope(h, parent, p)
	}
	var cand v2Candidate
	switch ownOK, ownWhy := ownUsable(h); {
	case parent != "":
		if !h.parent.exists {
			return fmt.Errorf("cgroup: --cgroup-parent %s: %s is not a cgroup2 directory", parent, h.parent.dir)
		}
		if h.parent.writable != nil {
			return fmt.Errorf("cgroup: --cgroup-parent %s: not writable by this user: %w", parent, h.parent.writable)
		}
		p.placement, cand = PlacementParentV2, h.parent
		p.v2Parent, p.enableIn = cand.dir, []string{cand.dir}
	case ownOK:
		p.placement, cand = PlacementOwn, h.own
		p.v2Parent, p.enableIn = cand.dir, []string{cand.dir}
		p.moveSelf = !cand.inSupervisorLeaf
	case h.manager != ManagerCgroupfs && h.systemd.running:
		return decideScope(h, parent, p)
	case h.euid == 0 && h.top.exists && h.top.writable == nil:
		p.placement, cand = PlacementTopLevel, h.top
		p.v2Parent = filepath.Join(cand.dir, h.topName)
		p.makeParent = true
		p.enableIn = []string{cand.dir, p.v2Parent}
	default:
		why := ownWhy
		switch {
		case h.euid != 0:
			why += "; an unprivileged user needs a cgroup delegated to it (run rljail as the only process of one: systemd-run --user --scope -p Delegate=yes rljail ...)"
		case !h.top.exists:
			why += "; no cgroup2 root at " + h.top.dir
		default:
			why += fmt.Sprintf("; the cgroup2 root is not writable (%v)", h.top.writable)
		}
		if h.systemd.failed != "" {
			why += "; " + h.systemd.failed
		}
		p.placement = PlacementNone
		for _, ctl := range limitControllers {
			p.why[ctl] = why
		}
		return nil
	}
	if p.placement == PlacementTopLevel && h.systemd.failed != "" {
		// Limits held all the same, but in a cgroup systemd does not know of.
		p.outside = "the jail's cgroup is below " + p.v2Parent + ", outside systemd's tree: " + h.systemd.failed
	}
	for _, ctl := range limitControllers {
		if slices.Contains(cand.controllers, ctl) {
			p.use = append(p.use, ctl)
			continue
		}
		p.why[ctl] = fmt.Sprintf("the %s controller is not available in %s (cgroup.controllers: %s)",
			ctl, cand.dir, listOrNone(cand.controllers))
	}
	return nil
}

// defaultSlice is the slice of rljail's scopes, in the system manager's
// tree for root and in the user manager's for a user.
const defaultSlice = "rljail.slice"

// decideScope plans a transient scope of systemd's. Which controllers the
// scope gets is known once it exists (setupScope): all of the limits'
// are planned.
func decideScope(h host, parent string, p *plan) error {
	if !h.systemd.running {
		why := h.systemd.why
		if why == "" {
			why = "systemd does not run this host (no /run/systemd/system)"
		}
		return errors.New("cgroup: --cgroup-manager systemd: " + why)
	}
	slice := defaultSlice
	if parent != "" {
		name := strings.TrimPrefix(parent, "/")
		if strings.Contains(name, "/") || !strings.HasSuffix(name, ".slice") || name == ".slice" {
			return fmt.Errorf("cgroup: --cgroup-parent %s: with --cgroup-manager systemd it names the scope's slice unit (such as rljail.slice or my-jails.slice)", parent)
		}
		slice = name
	}
	p.placement = PlacementSystemd
	p.scope = &scopePlan{slice: slice, user: h.euid != 0}
	p.use = slices.Clone(limitControllers)
	return nil
}

// ownUsable tells whether the supervisor's own cgroup2 cgroup may hold the
// jails, and why not.
func ownUsable(h host) (bool, string) {
	o := h.own
	switch {
	case o.dir == "":
		return false, o.why
	case !o.exists:
		return false, "own cgroup " + o.dir + " does not exist"
	case o.isRoot:
		return false, "the supervisor runs in the root cgroup"
	case o.writable != nil:
		return false, fmt.Sprintf("own cgroup %s is not writable by this user (%v)", o.dir, o.writable)
	}
	var others []int
	for _, pid := range o.procs {
		if pid != h.pid && !slices.Contains(h.helpers, pid) {
			others = append(others, pid)
		}
	}
	if len(others) > 0 {
		return false, fmt.Sprintf("own cgroup %s holds other processes than rljail (pids %s)", o.dir, pidList(others, 5))
	}
	if !o.inSupervisorLeaf && !slices.Contains(o.procs, h.pid) {
		return false, "own cgroup " + o.dir + " does not list this process"
	}
	return true, ""
}

func decideV1(h host, parent string, p *plan) error {
	p.v1 = make(map[string]v1Hierarchy)
	for _, ctl := range append(slices.Clone(limitControllers), accountingController) {
		hy, ok := h.v1[ctl]
		switch {
		case !ok:
			why := h.noCgroups
			if why == "" {
				why = "no cgroup v1 " + ctl + " hierarchy is mounted"
			}
			p.why[ctl] = why
		case !hy.mounted || hy.base == "":
			p.why[ctl] = hy.why
		case !hy.exists && parent != "":
			return fmt.Errorf("cgroup: --cgroup-parent %s: %s does not exist", parent, hy.base)
		case !hy.exists:
			p.why[ctl] = "own " + ctl + " cgroup " + hy.base + " does not exist"
		case hy.writable != nil && parent != "":
			return fmt.Errorf("cgroup: --cgroup-parent %s: not writable by this user: %w", parent, hy.writable)
		case hy.writable != nil:
			why := fmt.Sprintf("cgroup v1 %s cgroup %s is not writable (%v)", ctl, hy.base, hy.writable)
			if h.euid != 0 {
				why += "; cgroup v1 is not delegated to unprivileged users"
			}
			p.why[ctl] = why
		default:
			p.v1[ctl] = hy
			p.use = append(p.use, ctl)
		}
	}
	switch {
	case len(p.use) == 0:
		p.placement = PlacementNone
	case parent != "":
		p.placement = PlacementParentV1
	default:
		p.placement = PlacementV1
	}
	return nil
}

// describe turns what setup achieved into the per-limit mechanisms and the
// fallback lines. mech is the cgroup version in use; used tells which
// controllers hold the jail; accounted whether the jail's CPU time is
// measured by a cgroup.
func describe(l Limits, mech Mechanism, used []string, why map[string]string, accounted bool) (map[string]Mechanism, []string) {
	m := make(map[string]Mechanism, 4)
	var lines []string
	reason := func(ctl string) string {
		if w := why[ctl]; w != "" {
			return w
		}
		return "no " + ctl + " controller"
	}
	limit := func(key, ctl string, asked bool, fallback Mechanism, line string) {
		switch {
		case !asked:
			m[key] = MechanismNone
		case slices.Contains(used, ctl):
			m[key] = mech
		default:
			m[key] = fallback
			lines = append(lines, fmt.Sprintf(line, reason(ctl)))
		}
	}
	limit(LimitMemory, "memory", l.MemoryBytes > 0, MechanismRlimit,
		"memory limit enforced by RLIMIT_AS instead of a cgroup (%s); RLIMIT_AS caps each process's address space, not the jail's total memory")
	if l.PidsByRlimit && l.PidsMax > 0 && !slices.Contains(used, "pids") {
		m[LimitPids] = MechanismRlimit // the jail's own RLIMIT_NPROC count: not weaker
	} else {
		limit(LimitPids, "pids", l.PidsMax > 0, MechanismNone,
			"pids limit not enforced (%s); RLIMIT_NPROC counts every process of the host user before Linux 5.14")
	}
	limit(LimitCPU, "cpu", l.CPUs > 0, MechanismNone,
		"cpus limit not enforced (%s); RLIMIT_CPU bounds CPU time, not the CPU share")
	if accounted {
		m[LimitCPUTime] = mech
	} else {
		m[LimitCPUTime] = MechanismRlimit
		ctl := "cpu"
		if mech == MechanismCgroup1 || why[accountingController] != "" {
			ctl = accountingController
		}
		lines = append(lines, fmt.Sprintf("cpu-time limit enforced only by RLIMIT_CPU, per process (%s); the jail's CPU time as a whole is not measured", reason(ctl)))
	}
	return m, lines
}

// listOrNone joins names, or says "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// pidList words up to max pids.
func pidList(pids []int, max int) string {
	var parts []string
	for i, pid := range pids {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(pids)-max))
			break
		}
		parts = append(parts, strconv.Itoa(pid))
	}
	return strings.Join(parts, ", ")
}
