package cgroup

import (
	"strings"
	"testing"
)

// The placement with a systemd manager (--cgroup-manager and what auto
// picks), as a pure function of the host; the D-Bus exchange itself runs
// in the VM with systemd as PID 1.

// session is a login shell's scope: shared, not delegated.
func session(uid string) v2Candidate {
	return v2Candidate{
		dir: "/sys/fs/cgroup/user.slice/user-" + uid + ".slice/session-2.scope", exists: true,
		procs: []int{100, 101, testPid}, writable: errEACCES,
	}
}

// withSystemd is a host whose cgroup v2 tree systemd runs.
func withSystemd(h host, m Manager) host {
	h.manager, h.systemd = m, systemdHost{running: true}
	return h
}

func TestDecideManager(t *testing.T) {
	all := []string{"memory", "pids", "cpu"}
	tests := []struct {
		name   string
		host   host
		parent string

		wantErr   string
		placement Placement
		slice     string // of the scope
		user      bool
		v2Parent  string // for the placements without a scope
		outside   string // substring of plan.outside
		why       string // substring of every controller's reason (placement none)
	}{
		{
			name: "auto, root at a login shell on a systemd host: a scope of the system manager in rljail.slice",
			host: withSystemd(v2Host(0, session("0")), ManagerAuto), placement: PlacementSystemd, slice: "rljail.slice",
		},
		{
			name: "the zero manager is auto",
			host: withSystemd(v2Host(0, session("0")), ""), placement: PlacementSystemd, slice: "rljail.slice",
		},
		{
			name: "auto, a user at a login shell: a scope of the user manager",
			host: withSystemd(v2Host(1000, session("1000")), ManagerAuto), placement: PlacementSystemd, slice: "rljail.slice", user: true,
		},
		{
			name: "auto, in a Delegate=yes service holding only rljail: own, systemd not asked",
			host: withSystemd(v2Host(0, delegated()), ManagerAuto), placement: PlacementOwn, v2Parent: delegated().dir,
		},
		{
			name: "auto with --cgroup-parent: below it, systemd not asked",
			host: func() host {
				h := withSystemd(v2Host(0, session("0")), ManagerAuto)
				h.parent = v2Candidate{dir: "/sys/fs/cgroup/jobs", exists: true, controllers: all}
				return h
			}(),
			parent: "/jobs", placement: PlacementParentV2, v2Parent: "/sys/fs/cgroup/jobs",
		},
		{
			name: "auto without systemd (busybox init, pure cgroup v2): top level as before",
			host: v2Host(0, session("0")), placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
		},
		{
			name: "cgroupfs on a systemd host: top level, never a scope",
			host: withSystemd(v2Host(0, session("0")), ManagerCgroupfs), placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
		},
		{
			name: "cgroupfs, a user at a login shell: no cgroup",
			host: withSystemd(v2Host(1000, session("1000")), ManagerCgroupfs), placement: PlacementNone,
			why: "needs a cgroup delegated to it",
		},
		{
			name: "systemd with a delegated cgroup of its own: a scope all the same",
			host: withSystemd(v2Host(0, delegated()), ManagerSystemd), placement: PlacementSystemd, slice: "rljail.slice",
		},
		{
			name: "systemd, --cgroup-parent names the scope's slice",
			host: withSystemd(v2Host(1000, session("1000")), ManagerSystemd), parent: "/my-jails.slice",
			placement: PlacementSystemd, slice: "my-jails.slice", user: true,
		},
		{
			name: "systemd, --cgroup-parent a path rather than a slice: an error",
			host: withSystemd(v2Host(0, session("0")), ManagerSystemd), parent: "/system.slice/foo.slice",
			wantErr: "with --cgroup-manager systemd it names the scope's slice unit",
		},
		{
			name: "systemd, --cgroup-parent not a slice: an error",
			host: withSystemd(v2Host(0, session("0")), ManagerSystemd), parent: "/jobs",
			wantErr: "names the scope's slice unit",
		},
		{
			name: "systemd where systemd does not run: an error",
			host: func() host {
				h := v2Host(0, session("0"))
				h.manager, h.systemd.why = ManagerSystemd, "systemd does not run this host (no /run/systemd/system)"
				return h
			}(),
			wantErr: "--cgroup-manager systemd: systemd does not run this host",
		},
		{
			name:    "systemd on a cgroup v1 host: an error",
			host:    func() host { h := v1Host(0, nil); h.manager = ManagerSystemd; return h }(),
			wantErr: "needs the unified cgroup v2 hierarchy",
		},
		{
			name: "auto on a cgroup v1 host: v1 as before",
			host: v1Host(0, nil), placement: PlacementV1,
		},
		{
			name: "auto, root, systemd could not be asked: top level, announced",
			host: func() host {
				h := v2Host(0, session("0"))
				h.systemd.failed = "systemd: cannot reach the system manager"
				return h
			}(),
			placement: PlacementTopLevel, v2Parent: "/sys/fs/cgroup/rljail",
			outside: "outside systemd's tree: systemd: cannot reach the system manager",
		},
		{
			name: "auto, a user whose manager could not be asked: no cgroup, and why",
			host: func() host {
				h := v2Host(1000, session("1000"))
				h.systemd.failed = "systemd: cannot reach the user manager"
				return h
			}(),
			placement: PlacementNone, why: "systemd: cannot reach the user manager",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := decideCase(t, tt.host, tt.parent, tt.wantErr)
			if !ok {
				return
			}
			if p.placement != tt.placement {
				t.Fatalf("placement %s, want %s", p.placement, tt.placement)
			}
			switch {
			case tt.placement == PlacementSystemd:
				if p.scope == nil || p.scope.slice != tt.slice || p.scope.user != tt.user {
					t.Errorf("scope %+v, want slice %s user %v", p.scope, tt.slice, tt.user)
				}
				if p.v2Parent != "" || p.moveSelf || len(p.enableIn) > 0 {
					t.Errorf("a scope's cgroup is known once it exists; planned %q %v %q", p.v2Parent, p.moveSelf, p.enableIn)
				}
			case p.scope != nil:
				t.Errorf("placement %s with a scope %+v", p.placement, p.scope)
			case p.v2Parent != tt.v2Parent:
				t.Errorf("v2Parent %q, want %q", p.v2Parent, tt.v2Parent)
			}
			if !strings.Contains(p.outside, tt.outside) || (tt.outside == "") != (p.outside == "") {
				t.Errorf("outside %q, want %q", p.outside, tt.outside)
			}
			if tt.why != "" {
				for _, ctl := range limitControllers {
					if !strings.Contains(p.why[ctl], tt.why) {
						t.Errorf("why %s: %q, want %q in it", ctl, p.why[ctl], tt.why)
					}
				}
			}
		})
	}
}

// probeSystemd asks nothing (not even the stat) where the run cannot use
// systemd.
func TestProbeSystemdSkips(t *testing.T) {
	tests := []struct {
		name   string
		host   host
		parent string
		lay    layout
		why    string
	}{
		{"cgroupfs", withManager(v2Host(0, session("0")), ManagerCgroupfs), "", layout{}, "--cgroup-manager cgroupfs"},
		{"auto in an own delegated cgroup", withManager(v2Host(0, delegated()), ManagerAuto), "", layout{}, "not needed"},
		{"auto in an own delegated cgroup with rljail's helper", func() host {
			o := delegated()
			o.procs = append(o.procs, 778)
			h := withManager(v2Host(0, o), ManagerAuto)
			h.helpers = []int{778}
			return h
		}(), "", layout{}, "not needed"},
		{"auto with --cgroup-parent", withManager(v2Host(0, session("0")), ManagerAuto), "/jobs", layout{}, "not needed"},
		{"a test's tree", withManager(v2Host(0, session("0")), ManagerSystemd), "", layout{v2Mount: "/tmp/x"}, "a test's own cgroup2 tree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := probeSystemd(tt.host, tt.parent, tt.lay)
			if got.running || !strings.HasPrefix(got.why, tt.why) {
				t.Errorf("probeSystemd = %+v, want not running because %q", got, tt.why)
			}
		})
	}
}

func withManager(h host, m Manager) host { h.manager = m; return h }

func TestParseManager(t *testing.T) {
	for in, want := range map[string]Manager{"": ManagerAuto, "auto": ManagerAuto, "cgroupfs": ManagerCgroupfs, "systemd": ManagerSystemd} {
		if got, err := ParseManager(in); err != nil || got != want {
			t.Errorf("ParseManager(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Systemd", "cgroupfs ", "none"} {
		if _, err := ParseManager(in); err == nil {
			t.Errorf("ParseManager(%q): no error", in)
		}
	}
	if _, err := (Options{Manager: "bogus"}).check(); err == nil || !strings.Contains(err.Error(), "--cgroup-manager") {
		t.Errorf("Options.check with a bad manager: %v", err)
	}
}
