package hostcheck

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestUsernsItem(t *testing.T) {
	set := func(name, v string) sysctl { return sysctl{name: name, value: v, present: true} }
	absent := func(name string) sysctl { return sysctl{name: name} }
	host := func(maxNS, clone, apparmor string, root bool) usernsHost {
		h := usernsHost{supported: true, root: root, exe: "/usr/local/bin/rljail",
			maxUserNS:        absent(maxUserNamespacesName),
			unprivClone:      absent(unprivUsernsCloneName),
			apparmorRestrict: absent(apparmorRestrictName)}
		if maxNS != "" {
			h.maxUserNS = set(maxUserNamespacesName, maxNS)
		}
		if clone != "" {
			h.unprivClone = set(unprivUsernsCloneName, clone)
		}
		if apparmor != "" {
			h.apparmorRestrict = set(apparmorRestrictName, apparmor)
		}
		return h
	}
	probeErr := errors.New("clone: operation not permitted")
	unsupported := host("", "", "", false)
	unsupported.supported = false
	unreadable := host("", "", "", false)
	unreadable.unprivClone = sysctl{name: unprivUsernsCloneName, present: true, err: errors.New("permission denied")}

	tests := []struct {
		name       string
		host       usernsHost
		probed     bool
		probeErr   error
		wantOK     bool
		wantDetail []string
		wantFix    []string
	}{
		{"no files, not probed", host("", "", "", false), false, nil, true, []string{"not probed", "no restricting sysctl"}, nil},
		{"plain kernel", host("96365", "", "", false), false, nil, true, []string{"user.max_user_namespaces=96365"}, nil},
		{"debian allows", host("15000", "1", "", false), false, nil, true, []string{"kernel.unprivileged_userns_clone=1"}, nil},
		{"disabled for everyone", host("0", "", "", true), false, nil, false,
			[]string{"user.max_user_namespaces=0", "root too"}, []string{"sysctl -w user.max_user_namespaces=15000"}},
		{"debian sysctl off, rootless", host("15000", "0", "", false), false, nil, false,
			[]string{"kernel.unprivileged_userns_clone=0"}, []string{"sysctl -w kernel.unprivileged_userns_clone=1"}},
		{"debian sysctl off, root", host("15000", "0", "", true), false, nil, true, nil, nil},
		{"ubuntu apparmor, rootless", host("", "1", "1", false), false, nil, false,
			[]string{"kernel.apparmor_restrict_unprivileged_userns=1", "AppArmor"},
			[]string{"userns,", `"/usr/local/bin/rljail"`, "apparmor_parser -r", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"}},
		{"ubuntu apparmor, root", host("", "1", "1", true), false, nil, true, nil, nil},
		{"ubuntu apparmor, probe succeeds", host("", "1", "1", false), true, nil, true,
			[]string{"a probe created one", "kernel.apparmor_restrict_unprivileged_userns=1"}, nil},
		{"sysctl says no, probe says yes", host("15000", "0", "", false), true, nil, true, []string{"a probe created one"}, nil},
		{"two causes", host("0", "0", "", false), false, nil, false,
			[]string{"user.max_user_namespaces=0", "kernel.unprivileged_userns_clone=0"},
			[]string{"sysctl -w user.max_user_namespaces=15000; sysctl -w kernel.unprivileged_userns_clone=1"}},
		{"probe fails, sysctl explains", host("15000", "0", "", false), true, probeErr, false,
			[]string{"probe failed: clone: operation not permitted", "likely cause: kernel.unprivileged_userns_clone=0"},
			[]string{"sysctl -w kernel.unprivileged_userns_clone=1"}},
		{"probe fails, apparmor explains", host("", "", "1", false), true, probeErr, false,
			[]string{"probe failed", "likely cause: kernel.apparmor_restrict_unprivileged_userns=1"}, []string{"userns,"}},
		{"probe fails, nothing explains", host("96365", "1", "0", false), true, probeErr, false,
			[]string{"probe failed", "no sysctl forbids them", "container"}, []string{"seccomp profile"}},
		{"no kernel support", unsupported, false, nil, false, []string{"no /proc/self/ns/user"}, []string{"CONFIG_USER_NS=y"}},
		{"unreadable sysctl is not a restriction", unreadable, false, nil, true, []string{"unreadable (permission denied)"}, nil},
		{"non-numeric value ignored", host("lots", "", "", false), false, nil, true, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := usernsItem(tt.host, tt.probed, tt.probeErr)
			if it.Name != "user namespaces" || !it.Fatal || it.OK != tt.wantOK {
				t.Fatalf("usernsItem = %+v, want ok=%v fatal=true", it, tt.wantOK)
			}
			for _, s := range tt.wantDetail {
				if !strings.Contains(it.Detail, s) {
					t.Errorf("detail %q lacks %q", it.Detail, s)
				}
			}
			for _, s := range tt.wantFix {
				if !strings.Contains(it.Fix, s) {
					t.Errorf("fix %q lacks %q", it.Fix, s)
				}
			}
			if !it.OK && it.Fix == "" {
				t.Errorf("failed without a fix: %+v", it)
			}
			if strings.Contains(it.Fix, "\n") {
				t.Errorf("fix is not one line: %q", it.Fix)
			}
		})
	}
}

func TestSysctlPath(t *testing.T) {
	for name, want := range map[string]string{
		maxUserNamespacesName: "/proc/sys/user/max_user_namespaces",
		unprivUsernsCloneName: "/proc/sys/kernel/unprivileged_userns_clone",
		apparmorRestrictName:  "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
	} {
		if got := sysctlPath(name); got != want {
			t.Errorf("sysctlPath(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestReadSysctlAbsent(t *testing.T) {
	v, present, err := readSysctl("/proc/sys/kernel/no_such_sysctl_rljail")
	if present || err != nil || v != "" {
		t.Errorf("readSysctl(absent) = %q, %v, %v; want absent without error", v, present, err)
	}
	v, present, err = readSysctl("/proc/sys/kernel/ostype")
	if !present || err != nil || v != "Linux" {
		t.Errorf("readSysctl(kernel/ostype) = %q, %v, %v; want Linux", v, present, err)
	}
}

// TestAppArmorProfileFix runs the fix's printf and checks the file it writes:
// both profiles of contrib/apparmor/rljail, userns in rljail alone (without
// rljail-host, rljail would refuse to start any host program).
func TestAppArmorProfileFix(t *testing.T) {
	fix := apparmorProfileFix("/opt/x/rljail")
	printf, _, ok := strings.Cut(fix, " > /etc/apparmor.d/rljail && ")
	if !ok {
		t.Fatalf("the fix does not write /etc/apparmor.d/rljail: %s", fix)
	}
	out, err := exec.Command("sh", "-c", printf).Output()
	if err != nil {
		t.Fatalf("%s: %v", printf, err)
	}
	got := string(out)
	rljail, host, ok := strings.Cut(got, "profile rljail-host flags=(unconfined) {\n")
	if !ok || !strings.Contains(rljail, "profile rljail \"/opt/x/rljail\" flags=(unconfined) {\n  userns,\n}\n") || strings.Contains(host, "userns") {
		t.Errorf("the fix writes:\n%s\nwant the profiles rljail (with userns) and rljail-host (without)", got)
	}
}
