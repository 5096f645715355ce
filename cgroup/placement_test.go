package cgroup

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// The placement rules as a pure function of the host: cgroup layout, own
// path, the processes in it, writability, euid and --cgroup-parent.

const testPid = 4242

var errEACCES = errors.New("permission denied")

// delegated is a systemd Delegate=yes service cgroup that holds only rljail.
func delegated() v2Candidate {
	return v2Candidate{
		dir: "/sys/fs/cgroup/system.slice/rljail-runner.service", exists: true,
		procs: []int{testPid}, controllers: []string{"cpu", "io", "memory", "pids"},
	}
}

func v2Root() v2Candidate {
	return v2Candidate{dir: "/sys/fs/cgroup", exists: true, isRoot: true,
		procs: []int{1, 2, 3}, controllers: []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}}
}

func v2Host(euid int, own v2Candidate) host {
	return host{pid: testPid, euid: euid, unified: true, topName: topLevelName,
		v2Mount: mount{fsType: "cgroup2", root: "/", point: "/sys/fs/cgroup"},
		own:     own, top: v2Root()}
}

func v1Host(euid int, writable error) host {
	h := host{pid: testPid, euid: euid, v1: map[string]v1Hierarchy{}}
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct"} {
		own := "/"
		if ctl == "memory" {
			own = "/process_api/abc"
		}
		point := "/sys/fs/cgroup/" + ctl
		h.v1[ctl] = v1Hierarchy{mounted: true, point: point, base: point + strings.TrimSuffix(own, "/"),
			basePath: own, exists: true, writable: writable}
	}
	return h
}

func TestDecide(t *testing.T) {
	all := []string{"memory", "pids", "cpu"}
	allV1 := []string{"memory", "pids", "cpu", "cpuacct"}
	limits := Limits{MemoryBytes: 256 << 20, PidsMax: 64, CPUs: 1}
	tests := []struct {
		name   string
		host   func() host
		parent string

		wantErr       string // substring of the error; the rest is not checked then
		placement     Placement
		v2Parent      string
		moveSelf      bool
		enableIn      []string
		use           []string
		fallbacks     []string // substrings, one per expected fallback line
		mechanismsAre Mechanism
	}{
		{
			name:      "v2 service with Delegate=yes holding only rljail: own",
			host:      func() host { return v2Host(0, delegated()) },
			placement: PlacementOwn, v2Parent: delegated().dir, moveSelf: true,
			enableIn: []string{delegated().dir}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 service holding rljail and its own helper (the init stage): own",
			host: func() host {
				o := delegated()
				o.procs = append(o.procs, 778)
				h := v2Host(0, o)
				h.helpers = []int{778}
				return h
			},
			placement: PlacementOwn, v2Parent: delegated().dir, moveSelf: true,
			enableIn: []string{delegated().dir}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 service holding rljail and a stranger that is not its helper: top level",
			host: func() host {
				o := delegated()
				o.procs = append(o.procs, 779)
				h := v2Host(0, o)
				h.helpers = []int{778}
				return h
			},
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			enableIn: []string{"/sys/fs/cgroup", "/sys/fs/cgroup/rljail"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 service, later run: rljail already in its leaf",
			host: func() host {
				o := delegated()
				o.procs, o.inSupervisorLeaf = nil, true
				return v2Host(0, o)
			},
			placement: PlacementOwn, v2Parent: delegated().dir, moveSelf: false,
			enableIn: []string{delegated().dir}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 leaf reused but another process sits in the delegated cgroup",
			host: func() host {
				o := delegated()
				o.procs, o.inSupervisorLeaf = []int{777}, true
				return v2Host(0, o)
			},
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			enableIn: []string{"/sys/fs/cgroup", "/sys/fs/cgroup/rljail"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 root in a login shell's scope shared with other processes: top level",
			host: func() host {
				o := delegated()
				o.dir = "/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope"
				o.procs = []int{100, 101, testPid}
				o.controllers = nil
				return v2Host(0, o)
			},
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			enableIn: []string{"/sys/fs/cgroup", "/sys/fs/cgroup/rljail"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name:      "v2 root in the root cgroup: top level, never the root itself",
			host:      func() host { return v2Host(0, v2Root()) },
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			enableIn: []string{"/sys/fs/cgroup", "/sys/fs/cgroup/rljail"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name:      "v2 root, own cgroup outside the mounted tree: top level",
			host:      func() host { return v2Host(0, v2Candidate{why: "outside"}) },
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			enableIn: []string{"/sys/fs/cgroup", "/sys/fs/cgroup/rljail"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 root, shared cgroup and a read-only cgroup2 root: no cgroup",
			host: func() host {
				o := delegated()
				o.procs = []int{1, testPid}
				h := v2Host(0, o)
				h.top.writable = errors.New("read-only file system")
				return h
			},
			placement: PlacementNone,
			fallbacks: []string{
				"memory limit enforced by RLIMIT_AS instead of a cgroup (own cgroup /sys/fs/cgroup/system.slice/rljail-runner.service holds other processes than rljail (pids 1); the cgroup2 root is not writable (read-only file system))",
				"pids limit not enforced", "cpus limit not enforced", "cpu-time limit enforced only by RLIMIT_CPU",
			},
		},
		{
			name: "v2 rootless with a delegated cgroup (memory and pids delegated, no cpu): own",
			host: func() host {
				o := delegated()
				o.dir = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
				o.controllers = []string{"memory", "pids"}
				return v2Host(1000, o)
			},
			placement: PlacementOwn, v2Parent: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope",
			moveSelf: true, enableIn: []string{"/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"},
			use:       []string{"memory", "pids"},
			fallbacks: []string{"cpus limit not enforced (the cpu controller is not available in /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope (cgroup.controllers: memory pids))"},
		},
		{
			name: "v2 rootless in a shared session scope: no cgroup",
			host: func() host {
				o := delegated()
				o.dir = "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"
				o.procs = []int{900, testPid}
				return v2Host(1000, o)
			},
			placement: PlacementNone,
			fallbacks: []string{
				"holds other processes than rljail (pids 900); an unprivileged user needs a cgroup delegated to it",
				"pids limit not enforced", "cpus limit not enforced", "cpu-time limit enforced only by RLIMIT_CPU",
			},
		},
		{
			name: "v2 rootless, own cgroup not writable: no cgroup",
			host: func() host {
				o := delegated()
				o.writable = errEACCES
				return v2Host(1000, o)
			},
			placement: PlacementNone,
			fallbacks: []string{"is not writable by this user (permission denied)", "pids limit", "cpus limit", "cpu-time limit"},
		},
		{
			name: "v2 own cgroup does not list this process: not taken over",
			host: func() host {
				o := delegated()
				o.procs = nil
				return v2Host(1000, o)
			},
			placement: PlacementNone,
			fallbacks: []string{"does not list this process", "pids limit", "cpus limit", "cpu-time limit"},
		},
		{
			name: "v2 --cgroup-parent wins over a usable own cgroup",
			host: func() host {
				h := v2Host(0, delegated())
				h.parent = v2Candidate{dir: "/sys/fs/cgroup/rljail.slice", exists: true, controllers: []string{"memory", "pids", "cpu"}}
				return h
			},
			parent: "/rljail.slice", placement: PlacementParentV2, v2Parent: "/sys/fs/cgroup/rljail.slice",
			enableIn: []string{"/sys/fs/cgroup/rljail.slice"}, use: all, mechanismsAre: MechanismCgroup2,
		},
		{
			name: "v2 --cgroup-parent missing: error",
			host: func() host {
				h := v2Host(0, delegated())
				h.parent = v2Candidate{dir: "/sys/fs/cgroup/nope"}
				return h
			},
			parent: "/nope", wantErr: "--cgroup-parent /nope: /sys/fs/cgroup/nope is not a cgroup2 directory",
		},
		{
			name: "v2 --cgroup-parent not writable: error",
			host: func() host {
				h := v2Host(1000, delegated())
				h.parent = v2Candidate{dir: "/sys/fs/cgroup/x", exists: true, writable: errEACCES}
				return h
			},
			parent: "/x", wantErr: "not writable by this user",
		},
		{
			name:      "hybrid host as root: the v1 hierarchies below our own cgroups",
			host:      func() host { return v1Host(0, nil) },
			placement: PlacementV1, use: allV1, mechanismsAre: MechanismCgroup1,
		},
		{
			name:      "hybrid host rootless: v1 is not delegated, no cgroup",
			host:      func() host { return v1Host(1000, errEACCES) },
			placement: PlacementNone,
			fallbacks: []string{
				"memory limit enforced by RLIMIT_AS instead of a cgroup (cgroup v1 memory cgroup /sys/fs/cgroup/memory/process_api/abc is not writable (permission denied); cgroup v1 is not delegated to unprivileged users)",
				"pids limit not enforced (cgroup v1 pids cgroup /sys/fs/cgroup/pids is not writable",
				"cpus limit not enforced", "cpu-time limit enforced only by RLIMIT_CPU, per process (cgroup v1 cpuacct cgroup",
			},
		},
		{
			name: "v1 without a pids hierarchy: pids falls back, the rest is cgroup1",
			host: func() host {
				h := v1Host(0, nil)
				h.v1["pids"] = v1Hierarchy{why: "no cgroup v1 pids hierarchy is mounted"}
				return h
			},
			placement: PlacementV1, use: []string{"memory", "cpu", "cpuacct"},
			fallbacks: []string{"pids limit not enforced (no cgroup v1 pids hierarchy is mounted); RLIMIT_NPROC counts every process of the host user before Linux 5.14"},
		},
		{
			name: "v1 with one hierarchy not writable: only that limit falls back",
			host: func() host {
				h := v1Host(0, nil)
				hy := h.v1["cpu"]
				hy.writable = errors.New("read-only file system")
				h.v1["cpu"] = hy
				return h
			},
			placement: PlacementV1, use: []string{"memory", "pids", "cpuacct"},
			fallbacks: []string{"cpus limit not enforced (cgroup v1 cpu cgroup /sys/fs/cgroup/cpu is not writable (read-only file system))"},
		},
		{
			name: "v1 --cgroup-parent present in every hierarchy",
			host: func() host {
				h := v1Host(0, nil)
				for ctl, hy := range h.v1 {
					hy.base, hy.basePath = hy.point+"/rljail", "/rljail"
					h.v1[ctl] = hy
				}
				return h
			},
			parent: "/rljail", placement: PlacementParentV1, use: allV1, mechanismsAre: MechanismCgroup1,
		},
		{
			name: "v1 --cgroup-parent missing in one hierarchy: error",
			host: func() host {
				h := v1Host(0, nil)
				hy := h.v1["pids"]
				hy.base, hy.exists = "/sys/fs/cgroup/pids/rljail", false
				h.v1["pids"] = hy
				return h
			},
			parent: "/rljail", wantErr: "--cgroup-parent /rljail: /sys/fs/cgroup/pids/rljail does not exist",
		},
		{
			name: "no cgroup filesystem at all",
			host: func() host {
				return host{pid: testPid, v1: map[string]v1Hierarchy{}, noCgroups: "no cgroup filesystem is mounted"}
			},
			placement: PlacementNone,
			fallbacks: []string{"memory limit enforced by RLIMIT_AS instead of a cgroup (no cgroup filesystem is mounted)",
				"pids limit not enforced (no cgroup filesystem is mounted)", "cpus limit not enforced (no cgroup filesystem is mounted)",
				"cpu-time limit enforced only by RLIMIT_CPU, per process (no cgroup filesystem is mounted)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := decideCase(t, tt.host(), tt.parent, tt.wantErr)
			if !ok {
				return
			}
			if p.placement != tt.placement {
				t.Errorf("placement %s, want %s", p.placement, tt.placement)
			}
			if p.v2Parent != tt.v2Parent || p.moveSelf != tt.moveSelf || !slices.Equal(p.enableIn, tt.enableIn) {
				t.Errorf("v2 plan: parent %q moveSelf %v enableIn %q, want %q %v %q",
					p.v2Parent, p.moveSelf, p.enableIn, tt.v2Parent, tt.moveSelf, tt.enableIn)
			}
			if !slices.Equal(p.use, tt.use) {
				t.Errorf("use %q, want %q", p.use, tt.use)
			}
			for _, ctl := range p.use {
				if p.why[ctl] != "" {
					t.Errorf("controller %s is used but has a reason %q", ctl, p.why[ctl])
				}
			}

			mech := MechanismNone
			switch {
			case p.placement == PlacementNone:
			case tt.host().unified:
				mech = MechanismCgroup2
			default:
				mech = MechanismCgroup1
			}
			accounted := mech == MechanismCgroup2 || slices.Contains(p.use, "cpuacct")
			mechs, lines := describe(limits, mech, p.use, p.why, accounted)
			if len(lines) != len(tt.fallbacks) {
				t.Fatalf("fallbacks:\n%s\nwant %d lines containing %q", strings.Join(lines, "\n"), len(tt.fallbacks), tt.fallbacks)
			}
			for i, want := range tt.fallbacks {
				if !strings.Contains(lines[i], want) {
					t.Errorf("fallback %d: %q does not contain %q", i, lines[i], want)
				}
			}
			if tt.mechanismsAre != "" {
				for k, m := range mechs {
					if m != tt.mechanismsAre {
						t.Errorf("mechanism of %s is %s, want %s", k, m, tt.mechanismsAre)
					}
				}
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	full := Limits{MemoryBytes: 1 << 30, PidsMax: 10, CPUs: 0.5}
	noCPU := map[string]string{"cpu": "no cpu here", "cpuacct": "no cpuacct here"}
	tests := []struct {
		name      string
		limits    Limits
		mech      Mechanism
		used      []string
		why       map[string]string
		accounted bool
		want      map[string]Mechanism
		lines     int
	}{
		{"everything by cgroup2", full, MechanismCgroup2, []string{"memory", "pids", "cpu"}, nil, true,
			map[string]Mechanism{LimitMemory: MechanismCgroup2, LimitPids: MechanismCgroup2, LimitCPU: MechanismCgroup2, LimitCPUTime: MechanismCgroup2}, 0},
		{"nothing asked, nothing to announce", Limits{}, MechanismCgroup2, nil, nil, true,
			map[string]Mechanism{LimitMemory: MechanismNone, LimitPids: MechanismNone, LimitCPU: MechanismNone, LimitCPUTime: MechanismCgroup2}, 0},
		{"no cgroup at all", full, MechanismNone, nil, nil, false,
			map[string]Mechanism{LimitMemory: MechanismRlimit, LimitPids: MechanismNone, LimitCPU: MechanismNone, LimitCPUTime: MechanismRlimit}, 4},
		{"v1 without cpu and cpuacct", full, MechanismCgroup1, []string{"memory", "pids"}, noCPU, false,
			map[string]Mechanism{LimitMemory: MechanismCgroup1, LimitPids: MechanismCgroup1, LimitCPU: MechanismNone, LimitCPUTime: MechanismRlimit}, 2},
		{"no cgroup, pids by the user namespace's RLIMIT_NPROC: not a fallback", Limits{MemoryBytes: 1 << 30, PidsMax: 10, CPUs: 0.5, PidsByRlimit: true}, MechanismNone, nil, nil, false,
			map[string]Mechanism{LimitMemory: MechanismRlimit, LimitPids: MechanismRlimit, LimitCPU: MechanismNone, LimitCPUTime: MechanismRlimit}, 3},
		{"a pids cgroup wins over RLIMIT_NPROC", Limits{PidsMax: 10, PidsByRlimit: true}, MechanismCgroup1, []string{"memory", "pids", "cpu", "cpuacct"}, nil, true,
			map[string]Mechanism{LimitMemory: MechanismNone, LimitPids: MechanismCgroup1, LimitCPU: MechanismNone, LimitCPUTime: MechanismCgroup1}, 0},
		{"a limit not asked is never claimed", Limits{PidsMax: 5}, MechanismCgroup1, []string{"memory", "pids", "cpu", "cpuacct"}, nil, true,
			map[string]Mechanism{LimitMemory: MechanismNone, LimitPids: MechanismCgroup1, LimitCPU: MechanismNone, LimitCPUTime: MechanismCgroup1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lines := describe(tt.limits, tt.mech, tt.used, tt.why, tt.accounted)
			if !maps.Equal(got, tt.want) {
				t.Errorf("mechanisms %v, want %v", got, tt.want)
			}
			if len(lines) != tt.lines {
				t.Errorf("%d fallback lines, want %d:\n%s", len(lines), tt.lines, strings.Join(lines, "\n"))
			}
			for _, l := range lines {
				if strings.Contains(l, "no cpu here") && !strings.Contains(l, "cpus limit") {
					t.Errorf("line %q carries the cpu reason", l)
				}
			}
		})
	}
}

func TestOptionsCheck(t *testing.T) {
	tests := []struct {
		opts       Options
		wantParent string
		wantErr    string
	}{
		{Options{}, "", ""},
		{Options{Parent: "rljail.slice"}, "/rljail.slice", ""},
		{Options{Parent: "/a//b/"}, "/a/b", ""},
		{Options{Parent: "/a/../b"}, "", "a \"..\" element is not allowed"},
		{Options{Name: "a/b"}, "", "not a cgroup name"},
		{Options{Name: ".."}, "", "not a cgroup name"},
		{Options{Name: supervisorLeaf}, "", "not a cgroup name"},
		{Options{Limits: Limits{MemoryBytes: -1}}, "", "negative"},
		{Options{Limits: Limits{PidsMax: -1}}, "", "negative"},
		{Options{Limits: Limits{CPUs: -0.5}}, "", "not a non-negative number"},
	}
	for _, tt := range tests {
		got, err := tt.opts.check()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v: %v", tt.opts, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v: error %v, want %q", tt.opts, err, tt.wantErr)
		case got != tt.wantParent:
			t.Errorf("%+v: parent %q, want %q", tt.opts, got, tt.wantParent)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	for _, tt := range []struct {
		cpus float64
		want int64
	}{{1, 100000}, {0.5, 50000}, {2.25, 225000}, {0.333333, 33333}, {0.01, 1000}} {
		if got := cpuQuotaUS(tt.cpus); got != tt.want {
			t.Errorf("cpuQuotaUS(%v) = %d, want %d", tt.cpus, got, tt.want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 /docker/abc /mnt/my\040cg rw - cgroup2 cgroup2 rw
`
	got, err := parseMountinfo(hybrid)
	if err != nil {
		t.Fatal(err)
	}
	want := []mount{
		{"cgroup", "/", "/sys/fs/cgroup/cpu,cpuacct", []string{"cpu", "cpuacct"}},
		{"cgroup", "/", "/sys/fs/cgroup/memory", []string{"memory"}},
		{"cgroup", "/", "/sys/fs/cgroup/systemd", nil},
		{"cgroup2", "/", "/sys/fs/cgroup/unified", nil},
		{"cgroup2", "/docker/abc", "/mnt/my cg", nil},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mounts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].fsType != want[i].fsType || got[i].root != want[i].root || got[i].point != want[i].point ||
			!slices.Equal(got[i].controllers, want[i].controllers) {
			t.Errorf("mount %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if dir, ok := got[4].dir("/docker/abc/x"); !ok || dir != "/mnt/my cg/x" {
		t.Errorf("dir below a mounted subtree: %q %v", dir, ok)
	}
	if _, ok := got[4].dir("/other"); ok {
		t.Error("a cgroup outside the mounted subtree has a directory")
	}
	if p := got[4].cgroupPath("/x/y"); p != "/docker/abc/x/y" {
		t.Errorf("cgroupPath = %q", p)
	}
	if _, err := parseMountinfo("1 2 3\n"); err == nil {
		t.Error("a malformed line parsed")
	}
}

func TestParseProcCgroup(t *testing.T) {
	pc, err := parseProcCgroup("9:name=systemd:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/a\n0::/user.slice/s.scope\n")
	if err != nil {
		t.Fatal(err)
	}
	if !pc.hasUnified || pc.unified != "/user.slice/s.scope" || pc.v1["memory"] != "/process_api/x" ||
		pc.v1["cpuacct"] != "/a" || pc.v1["cpu"] != "/a" || pc.v1["name=systemd"] != "/" {
		t.Errorf("parsed %+v", pc)
	}
	if _, err := parseProcCgroup("garbage\n"); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseKVAndPids(t *testing.T) {
	kv, err := parseKV("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", "cpu.stat")
	if err != nil || kv["usage_usec"] != 1500 || kv["system_usec"] != 500 {
		t.Errorf("parseKV: %v %v", kv, err)
	}
	if _, err := parseKV("populated\n", "cgroup.events"); err == nil {
		t.Error("a line without a value parsed")
	}
	pids, err := parsePids("1\n22\n333\n", "cgroup.procs")
	if err != nil || !slices.Equal(pids, []int{1, 22, 333}) {
		t.Errorf("parsePids: %v %v", pids, err)
	}
	if _, err := parsePids("1\nx\n", "cgroup.procs"); err == nil {
		t.Error("a non-pid parsed")
	}
}

func TestV1Layout(t *testing.T) {
	// cpu and cpuacct mounted together share one directory.
	p := plan{v1: map[string]v1Hierarchy{
		"memory":  {point: "/sys/fs/cgroup/memory", base: "/sys/fs/cgroup/memory/m", basePath: "/m"},
		"cpu":     {point: "/sys/fs/cgroup/cpu,cpuacct", base: "/sys/fs/cgroup/cpu,cpuacct", basePath: "/"},
		"cpuacct": {point: "/sys/fs/cgroup/cpu,cpuacct", base: "/sys/fs/cgroup/cpu,cpuacct", basePath: "/"},
	}}
	dirs, paths, mk := v1Layout(&p, "j")
	wantDirs := map[string]string{"memory": "/sys/fs/cgroup/memory/m/j", "cpu": "/sys/fs/cgroup/cpu,cpuacct/j", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct/j"}
	if !maps.Equal(dirs, wantDirs) {
		t.Errorf("dirs %v, want %v", dirs, wantDirs)
	}
	if paths["memory"] != "/m/j" || paths["cpuacct"] != "/j" {
		t.Errorf("paths %v", paths)
	}
	if !slices.Equal(mk, []string{"/sys/fs/cgroup/memory/m/j", "/sys/fs/cgroup/cpu,cpuacct/j"}) {
		t.Errorf("directories to make %q", mk)
	}
}
