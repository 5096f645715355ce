//go:build !rljailvm

package integration

import (
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// vmBuild: this build runs on the development host (cgroup v1); the
// cgroup v2 cases run in the VM (build tag rljailvm, limits_vm_test.go).
const vmBuild = false

// v1Controllers are the hierarchies rljail uses on cgroup v1.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// TestPlacementV1Host checks where the jail's cgroups go on this cgroup v1
// host: below rljail's own cgroup in each hierarchy as root (cgroup1),
// below an existing --cgroup-parent (cgroup1-parent), a missing
// --cgroup-parent refused (125), rootless nowhere with the rlimit fallback
// announced (none), and --strict-limits refusing that fallback (125).
func TestPlacementV1Host(t *testing.T) {
	requireLimitHost(t)
	own, err := procCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, ctl := range v1Controllers {
		if _, ok := own[ctl]; !ok {
			t.Fatalf("this process has no %s cgroup (/proc/self/cgroup: %v): the host has no cgroup v1 %s hierarchy", ctl, own, ctl)
		}
	}
	parent := newV1Parent(t, own)
	missing := path.Join(parent, "missing")

	ownParents := map[string]string{}
	parentParents := map[string]string{}
	for _, ctl := range v1Controllers {
		ownParents[ctl] = own[ctl]
		parentParents[ctl] = parent
	}
	envs := limitEnvs()
	rootEnv, rootlessEnv := envs[0], envs[1]
	parentEnv := rootEnv
	parentEnv.placement = "cgroup1-parent"

	runPlacementCases(t, []placementCase{
		{name: "root-own-cgroup1", mode: asRoot, env: rootEnv, parents: ownParents, owner: -1},
		{name: "root-cgroup-parent-cgroup1-parent", mode: asRoot, flags: []string{"--cgroup-parent", parent},
			env: parentEnv, parents: parentParents, owner: -1,
			check: func(t *testing.T, ob observedRun) {
				for _, ctl := range v1Controllers {
					if !exists(cgroupDir(t, ctl, parent)) {
						t.Errorf("rljail removed the --cgroup-parent %s of the %s hierarchy", parent, ctl)
					}
				}
			}},
		{name: "root-strict-limits-cgroup1", mode: asRoot, flags: []string{"--strict-limits"}, env: rootEnv, parents: ownParents, owner: -1},
		{name: "root-missing-cgroup-parent", mode: asRoot, flags: []string{"--cgroup-parent", missing}, setupError: missing},
		{name: "rootless-none", mode: asRootless, env: rootlessEnv, owner: -1},
		{name: "rootless-strict-limits", mode: asRootless, flags: []string{"--strict-limits"}, setupError: "strict-limits"},
	})
	for _, ctl := range v1Controllers {
		if dir := cgroupDir(t, ctl, missing); exists(dir) {
			t.Errorf("a missing --cgroup-parent was created: %s", dir)
		}
	}
}

// newV1Parent creates an empty cgroup for --cgroup-parent: the same path
// in the memory, pids, cpu and cpuacct hierarchies, below this process's
// own cgroup in each. The own cgroups may differ between hierarchies (here
// memory is /process_api/<id>, the others /): the path goes below the
// deepest of them, which must lie below the others. It is removed when the
// test ends (with what this test created above it).
func newV1Parent(t *testing.T, own map[string]string) string {
	t.Helper()
	base := "/"
	for _, ctl := range v1Controllers {
		if len(own[ctl]) > len(base) {
			base = own[ctl]
		}
	}
	for _, ctl := range v1Controllers {
		if o := own[ctl]; o != "/" && o != base && !strings.HasPrefix(base, o+"/") {
			t.Fatalf("this process's cgroups %v are not nested: no one path lies below each of them", own)
		}
	}
	parent := path.Join(base, randomToken("rljail-it-parent-"))
	var created []string
	t.Cleanup(func() {
		// What rljail left is judged in the test's own parent only; a
		// level above it that this test made may hold another test
		// process's parent by now (the same missing levels, made by the
		// first of them): it is removed only once empty.
		for i := len(created) - 1; i >= 0; i-- {
			leaf := strings.HasSuffix(created[i], parent)
			entries, _ := os.ReadDir(created[i])
			busy := false
			for _, e := range entries {
				if !e.IsDir() || slices.Contains(created, created[i]+"/"+e.Name()) {
					continue
				}
				if !leaf {
					busy = true
					continue
				}
				t.Errorf("rljail left the cgroup %s/%s behind", created[i], e.Name())
				_ = rmdirCgroup(created[i] + "/" + e.Name())
			}
			if busy {
				continue
			}
			if !leaf {
				_ = syscall.Rmdir(created[i]) // another test's may have come meanwhile
				continue
			}
			if err := rmdirCgroup(created[i]); err != nil {
				t.Errorf("remove the test's cgroup %s: %v", created[i], err)
			}
		}
	})
	for _, ctl := range v1Controllers {
		// Create each missing level, remembering what this test made.
		dir := cgroupDir(t, ctl, "/")
		for _, elem := range strings.Split(strings.TrimPrefix(parent, "/"), "/") {
			dir = dir + "/" + elem
			if exists(dir) {
				continue
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("create the --cgroup-parent %s: %v", dir, err)
			}
			created = append(created, dir)
		}
	}
	t.Logf("--cgroup-parent %s (own cgroups %v)", parent, own)
	return parent
}

// newServeCgroupParent makes an empty cgroup below this test's own for a
// server's --cgroup-parent, and returns the flag's value and its directory
// in each hierarchy a jail's cgroup goes into: a test that judges what its
// server left judges only these.
func newServeCgroupParent(t *testing.T) (string, []string) {
	t.Helper()
	own, err := procCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	parent := newV1Parent(t, own)
	var dirs []string
	for _, ctl := range v1Controllers {
		dirs = append(dirs, cgroupDir(t, ctl, parent))
	}
	return parent, dirs
}
