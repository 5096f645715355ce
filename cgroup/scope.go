package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup/systemd"
)

// On a host whose cgroup v2 tree systemd owns, a cgroup made outside a
// delegated subtree is outside systemd's knowledge (it may disturb it: a
// daemon-reload that realizes the slices rewrites the controllers above
// it), and an unprivileged user at a login shell has no cgroup to write at
// all (session-N.scope is not delegated). So there the jail's cgroup goes
// into a transient scope, asked of systemd over D-Bus as runc's and
// podman's systemd drivers do: rljail-<id>.scope in rljail.slice (or the
// slice --cgroup-parent names), Delegate=yes, CollectMode=inactive-or-failed.
//
// The scope's process is the run's first step (the cgroup guard), not the
// supervisor: the guard is what must sit in the scope, because it clones
// the jail's init into the jail's cgroup (CLONE_INTO_CGROUP), and the
// kernel lets an unprivileged process do that only where it may write the
// cgroup.procs of the source's and destination's common ancestor, which
// for a user is nothing above the scope. The supervisor stays where its
// caller put it (its login session, its service), its own memory is not
// charged to the scope, and the scope lives exactly as long as the run:
// once the jail's cgroup is removed and the guard ends, the scope is empty
// and systemd stops and collects it; a supervisor killed with SIGKILL
// leaves the guard to kill the jail and remove its cgroup, and the same
// follows. Inside the scope the guard moves into the leaf rljail-guard
// (cgroup v2's no-internal-process rule), and the jail's cgroup, with the
// limits, goes beside it; the scope itself sets no limit.
//
// The exchange costs one D-Bus connection, the call and its job's wait per
// run (some milliseconds), and runs only where no cgroup of rljail's own
// exists: a run below --cgroup-parent or in a delegated cgroup of its own
// never asks systemd.

// guardLeaf is the leaf of a systemd scope that holds the scope's processes
// (the run's first step) beside the jail's cgroup.
const guardLeaf = "rljail-guard"

// scopeTimeout bounds the whole exchange with systemd: connection,
// authentication, the call and its job (Options.ManagerTimeout changes it).
const scopeTimeout = 2 * time.Second

// managerTimeout is Options.ManagerTimeout, or the default.
func managerTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return scopeTimeout
	}
	return d
}

// scopePlan is a transient scope to ask for.
type scopePlan struct {
	slice string
	user  bool // the user's manager, not the system's
}

// startScope asks systemd for the jail's scope with the run's first step
// (or, without one, this process) in it, and returns the scope's directory.
func (c *Cgroup) startScope(h host, p plan, name string) (string, error) {
	pids := h.helpers
	if len(pids) == 0 {
		pids = []int{h.pid}
	}
	unit := name + ".scope"
	timeout := managerTimeout(h.managerTimeout)
	sc, err := systemd.StartScope(systemd.Request{
		Unit: unit, Slice: p.scope.slice, PIDs: pids, User: p.scope.user,
		Description: "rljail jail " + name,
	}, timeout)
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	c.scopeUnit, c.scopeTook = sc.Unit, sc.Took
	// The scope's cgroup is where its first process is now: no second
	// round trip for the unit's ControlGroup property.
	b, err := readFile("/proc/" + strconv.Itoa(pids[0]) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroup: find %s's cgroup: %w", unit, err)
	}
	pc, err := parseProcCgroup(string(b))
	if err != nil {
		return "", fmt.Errorf("cgroup: find %s's cgroup: %w", unit, err)
	}
	dir, ok := h.v2Mount.dir(pc.unified)
	if !pc.hasUnified || !ok || filepath.Base(dir) != unit {
		return "", fmt.Errorf("cgroup: systemd started %s, but process %d is in %q, not in it", unit, pids[0], pc.unified)
	}
	return dir, nil
}

// setupScope makes the jail's cgroup in the scope at dir: the scope's
// processes go into its leaf rljail-guard, the controllers the scope was
// given are enabled for its children, and the jail's cgroup goes beside the
// leaf as in any v2 placement.
func (c *Cgroup) setupScope(h host, p *plan, dir, name string, l Limits) ([]string, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	have := strings.Fields(string(b))
	for _, ctl := range slices.Clone(p.use) {
		if !slices.Contains(have, ctl) {
			p.drop(ctl, fmt.Sprintf("systemd did not delegate the %s controller to %s (cgroup.controllers: %s)", ctl, c.scopeUnit, listOrNone(have)))
		}
	}
	leaf := filepath.Join(dir, guardLeaf)
	if err := mkdirCgroup(leaf, true); err != nil {
		return nil, fmt.Errorf("cgroup: create %s: %w", leaf, err)
	}
	pids := h.helpers
	if len(pids) == 0 {
		pids = []int{h.pid}
	}
	for _, pid := range pids {
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid)); err != nil && !errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("cgroup: move process %d into %s: %w", pid, leaf, err)
		}
	}
	p.v2Parent, p.enableIn = dir, []string{dir}
	return c.setupV2(h, p, name, l)
}

// DescribeManager says, for rljail check, which manager a run with opts
// would use on this host and why; where that is systemd it asks the
// manager for its version (one connection), so that the line says whether
// it answers and on which bus, as a run's start would find it.
func DescribeManager(opts Options) (string, error) {
	parent, err := opts.check()
	if err != nil {
		return "", err
	}
	h, err := probe(parent, opts.Manager, layout{})
	if err != nil {
		return "", err
	}
	h.systemd = probeSystemd(h, parent, layout{})
	m := opts.Manager
	if m == "" {
		m = ManagerAuto
	}
	p, err := decide(h, parent)
	switch {
	case err != nil:
		return "", err
	case p.placement != PlacementSystemd:
		why := h.systemd.why
		switch {
		case !h.unified:
			why = "cgroup v1 controllers (the systemd driver is for the unified cgroup v2 tree)"
		case why == "not needed" && parent != "":
			why = "--cgroup-parent is a cgroup of the caller's own"
		case why == "not needed":
			why = "rljail's own cgroup is delegated to it"
		}
		return fmt.Sprintf("cgroupfs (--cgroup-manager %s: %s)", m, why), nil
	}
	who := "the system manager"
	if p.scope.user {
		who = "the user manager"
	}
	bus, version, err := systemd.Ping(p.scope.user, managerTimeout(opts.ManagerTimeout))
	if err != nil {
		if m == ManagerSystemd {
			return "", fmt.Errorf("cgroup: --cgroup-manager systemd: %w", err)
		}
		return fmt.Sprintf("cgroupfs (--cgroup-manager auto: systemd runs this host but %s does not answer, so runs fall back: %v)", who, err), nil
	}
	return fmt.Sprintf("systemd (--cgroup-manager %s: cgroup v2 and /run/systemd/system, and no cgroup of rljail's own): a transient scope per run in %s of %s (systemd %s at %s)",
		m, p.scope.slice, who, version, bus), nil
}
