package hostcheck

import (
	"fmt"
	"os"
	"strings"
)

// The sysctls that can forbid user namespaces, and their /proc/sys files.
const (
	// maxUserNamespacesName at 0 disables user namespaces for everyone,
	// root included.
	maxUserNamespacesName = "user.max_user_namespaces"
	// unprivUsernsCloneName at 0 (Debian, Ubuntu kernels) forbids them to
	// users without CAP_SYS_ADMIN.
	unprivUsernsCloneName = "kernel.unprivileged_userns_clone"
	// apparmorRestrictName at 1 (Ubuntu 24.04) lets unprivileged users
	// create them only from programs whose AppArmor profile allows
	// `userns,`.
	apparmorRestrictName = "kernel.apparmor_restrict_unprivileged_userns"
)

// sysctlPath returns the /proc/sys file of a dotted sysctl name.
func sysctlPath(name string) string {
	return "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
}

// sysctl is one sysctl as read from /proc/sys.
type sysctl struct {
	name    string
	value   string
	present bool  // false: the file does not exist
	err     error // the file exists but could not be read
}

// readSysctlValue reads the sysctl called name.
func readSysctlValue(name string) sysctl {
	v, present, err := readSysctl(sysctlPath(name))
	return sysctl{name: name, value: v, present: present, err: err}
}

// is reports whether the sysctl was read and has value v.
func (s sysctl) is(v string) bool { return s.present && s.err == nil && s.value == v }

func (s sysctl) String() string {
	switch {
	case !s.present:
		return s.name + " absent"
	case s.err != nil:
		return fmt.Sprintf("%s unreadable (%v)", s.name, s.err)
	}
	return s.name + "=" + s.value
}

// usernsHost is what decides whether this process may create a user
// namespace, as read from the host.
type usernsHost struct {
	// supported: the kernel has user namespaces (/proc/self/ns/user).
	supported        bool
	maxUserNS        sysctl
	unprivClone      sysctl
	apparmorRestrict sysctl
	root             bool   // effective uid 0
	exe              string // the rljail binary, for an AppArmor profile
}

// usernsCause is one reason the host forbids user namespaces, and its fix.
type usernsCause struct {
	why, fix string
}

// causes lists every reason, from the sysctls alone, that this process
// cannot create a user namespace; none means "allowed as far as the files
// say".
func (h usernsHost) causes() []usernsCause {
	var cs []usernsCause
	if !h.supported {
		cs = append(cs, usernsCause{
			"the kernel has no user namespaces (no /proc/self/ns/user)",
			"run a kernel built with CONFIG_USER_NS=y",
		})
	}
	if h.maxUserNS.is("0") {
		cs = append(cs, usernsCause{
			maxUserNamespacesName + "=0 disables them, for root too",
			"sysctl -w " + maxUserNamespacesName + "=15000",
		})
	}
	if !h.root && h.unprivClone.is("0") {
		cs = append(cs, usernsCause{
			unprivUsernsCloneName + "=0 forbids them to non-root users",
			"sysctl -w " + unprivUsernsCloneName + "=1",
		})
	}
	if !h.root && h.apparmorRestrict.is("1") {
		cs = append(cs, usernsCause{
			apparmorRestrictName + "=1: AppArmor allows them only to profiled programs",
			apparmorProfileFix(h.exe) + ", or sysctl -w " + apparmorRestrictName + "=0",
		})
	}
	return cs
}

// apparmorProfileFix is a one-line command that installs the AppArmor
// profiles of contrib/apparmor/rljail for exe (Ubuntu 24.04): rljail, which
// lets exe create user namespaces, and rljail-host, without that, which the
// programs rljail starts on the host run as (package hostexec; without it
// rljail refuses to start them).
func apparmorProfileFix(exe string) string {
	if exe == "" {
		exe = "/usr/local/bin/rljail"
	}
	return `printf 'abi <abi/4.0>,\ninclude <tunables/global>\nprofile rljail "` + exe +
		`" flags=(unconfined) {\n  userns,\n}\nprofile rljail-host flags=(unconfined) {\n}\n' > /etc/apparmor.d/rljail && apparmor_parser -r /etc/apparmor.d/rljail`
}

// sysctlSummary lists the restricting sysctls that exist on this host.
func (h usernsHost) sysctlSummary() string {
	var present []string
	for _, s := range []sysctl{h.maxUserNS, h.unprivClone, h.apparmorRestrict} {
		if s.present {
			present = append(present, s.String())
		}
	}
	if len(present) == 0 {
		return "no restricting sysctl"
	}
	return strings.Join(present, ", ")
}

// checkUserns reads the host's user namespace restrictions and runs probe
// when it is not nil.
func checkUserns(probe func() error) Item {
	exe, _ := os.Executable() // only used to word a fix
	_, nsErr := os.Stat("/proc/self/ns/user")
	h := usernsHost{
		supported:        nsErr == nil,
		maxUserNS:        readSysctlValue(maxUserNamespacesName),
		unprivClone:      readSysctlValue(unprivUsernsCloneName),
		apparmorRestrict: readSysctlValue(apparmorRestrictName),
		root:             os.Geteuid() == 0,
		exe:              exe,
	}
	var probeErr error
	if probe != nil {
		probeErr = probe()
	}
	return usernsItem(h, probe != nil, probeErr)
}

// usernsItem judges the host. A probe, when one ran, is the truth; the
// sysctls then only explain its failure.
func usernsItem(h usernsHost, probed bool, probeErr error) Item {
	it := Item{Name: "user namespaces", Fatal: true}
	causes := h.causes()
	whys := make([]string, 0, len(causes))
	fixes := make([]string, 0, len(causes))
	for _, c := range causes {
		whys = append(whys, c.why)
		fixes = append(fixes, c.fix)
	}
	switch {
	case probed && probeErr == nil:
		it.OK = true
		it.Detail = "a probe created one (" + h.sysctlSummary() + ")"
	case probed:
		it.Detail = "probe failed: " + oneLine(probeErr.Error())
		if len(causes) > 0 {
			it.Detail += "; likely cause: " + strings.Join(whys, "; ")
			it.Fix = strings.Join(fixes, "; ")
		} else {
			it.Detail += "; no sysctl forbids them (" + h.sysctlSummary() +
				"), so likely a container's seccomp profile or its namespace limits"
			it.Fix = "run rljail outside the container, or give the container a seccomp profile that allows clone with CLONE_NEWUSER and unshare"
		}
	case len(causes) > 0:
		it.Detail = strings.Join(whys, "; ")
		it.Fix = strings.Join(fixes, "; ")
	default:
		it.OK = true
		it.Detail = "allowed by the sysctls, not probed (" + h.sysctlSummary() + ")"
	}
	return it
}
