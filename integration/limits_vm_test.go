//go:build rljailvm

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vmBuild: this build runs in the cgroup v2 test VM (integration/vm, which
// runs only TestLimits* and TestPlacement* of it).
const vmBuild = true

// TestPlacementV2VM checks every cgroup v2 placement in the VM: root from
// a shell-like cgroup shared with other processes (the test's /init.scope,
// which holds the VM's init) goes to the top-level cgroup; root as the
// only process of a service-like cgroup takes it over (cgroup2-own, rljail
// in its rljail-supervisor leaf); --cgroup-parent (and a missing one); the
// test user in a cgroup delegated to it gets the same cgroup v2 limits
// rootless (cgroup2-own); the test user without delegation falls back
// (none), and --strict-limits refuses that.
func TestPlacementV2VM(t *testing.T) {
	requireLimitHost(t)
	own, err := procCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	shared, _ := os.ReadFile(filepath.Join(cgroupDir(t, "", own[""]), "cgroup.procs"))
	if others := strings.Fields(string(shared)); len(others) < 2 {
		t.Fatalf("the test's cgroup %s should be shell-like, shared with other processes, but holds %v", own[""], others)
	}

	svc := newV2Cgroup(t, "rljail-it-svc", 0)
	if procs, _ := os.ReadFile(svc + "/cgroup.procs"); len(strings.TrimSpace(string(procs))) > 0 {
		t.Fatalf("the fresh cgroup %s holds processes %q", svc, procs)
	}
	parent := newV2Cgroup(t, "rljail-it-parent", 0)
	deleg := newV2Cgroup(t, "rljail-it-deleg", testUID)
	rel := func(dir string) string { return strings.TrimPrefix(dir, cgroupFS) }

	envs := limitEnvs()
	top := envs[0]
	ownEnv, parentEnv, delegEnv := top, top, envs[1]
	ownEnv.placement, parentEnv.placement = "cgroup2-own", "cgroup2-parent"
	// Without a cgroup the pids limit is the jail's own RLIMIT_NPROC count
	// (the VM's kernel is newer than 5.14).
	noneEnv := limitEnv{placement: "none", mech: mechanisms("rlimit", "rlimit", "none", "rlimit")}
	missing := rel(parent) + "/missing"

	runPlacementCases(t, []placementCase{
		{name: "root-shell-like-cgroup2-toplevel", mode: asRoot, env: top, parents: map[string]string{"": "/rljail"}, owner: 0,
			supervisor: own[""],
			check: func(t *testing.T, ob observedRun) {
				if !exists(cgroupFS + "/rljail") {
					t.Errorf("the shared top-level cgroup %s/rljail is gone", cgroupFS)
				}
			}},
		{name: "root-service-like-cgroup2-own", mode: asRoot, opts: runOpts{moveInto: svc}, env: ownEnv,
			parents: map[string]string{"": rel(svc)}, supervisor: rel(svc) + "/rljail-supervisor", owner: 0},
		{name: "root-cgroup-parent-cgroup2-parent", mode: asRoot, flags: []string{"--cgroup-parent", rel(parent)}, env: parentEnv,
			parents: map[string]string{"": rel(parent)}, supervisor: own[""], owner: 0,
			check: func(t *testing.T, ob observedRun) {
				if !exists(parent) {
					t.Errorf("rljail removed the --cgroup-parent %s", parent)
				}
			}},
		{name: "root-missing-cgroup-parent", mode: asRoot, flags: []string{"--cgroup-parent", missing}, setupError: missing},
		{name: "delegated-uid-cgroup2-own", mode: asRootless, opts: runOpts{moveInto: deleg}, env: delegEnv,
			parents: map[string]string{"": rel(deleg)}, supervisor: rel(deleg) + "/rljail-supervisor", owner: testUID},
		{name: "rootless-undelegated-none", mode: asRootless, env: noneEnv, owner: -1},
		{name: "rootless-strict-limits", mode: asRootless, flags: []string{"--strict-limits"}, setupError: "strict-limits"},
	})
	if exists(cgroupFS + missing) {
		t.Errorf("a missing --cgroup-parent was created: %s", cgroupFS+missing)
	}
}

// newServeCgroupParent makes an empty cgroup for a server's
// --cgroup-parent, and returns the flag's value and its directory.
func newServeCgroupParent(t *testing.T) (string, []string) {
	t.Helper()
	dir := newV2Cgroup(t, "rljail-it-serve", 0)
	return strings.TrimPrefix(dir, cgroupFS), []string{dir}
}
