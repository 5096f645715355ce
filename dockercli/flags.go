package dockercli

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// flagDef is one flag of `docker run --help`: its names, whether it takes
// a value, and its rule. A flag without a rule is refused with why.
type flagDef struct {
	long  string
	short byte
	value bool
	rule  func(s *state, spelled, value string) error
	why   string
}

// Reasons shared by several refused flags.
const (
	noNetwork   = "the jail has no network (an empty network namespace with only lo)"
	noEquiv     = "rljail has no equivalent"
	noOthers    = "every jail stands alone: there are no other containers, networks or volumes to join"
	noDevices   = "the jail gets no host devices"
	alwaysLimit = "rljail's limits are --memory, --cpus, --pids-limit and --ulimit nofile, fsize and cpu"
)

// flagTable is every flag of `docker run --help` (docker 27, Linux) and
// rljail's own --rljail- flags. It is built on first use, not at package
// init: every run of the binary would pay for it (about 0.1 ms with the
// indexes and the regular expressions below, GODEBUG=inittrace=1).
var flagTable = sync.OnceValue(func() []*flagDef { return flagDefs() })

func flagDefs() []*flagDef {
	return []*flagDef{
		// Honoured: they map onto the jail.
		{long: "rm", rule: mustBe("true", "every jail is removed when it ends")},
		{long: "read-only", rule: mustBe("true", "the jail's root filesystem is always read-only (its /tmp is a writable tmpfs)")},
		{long: "init", rule: accept}, // rljail's own init is always PID 1 and reaps
		{long: "interactive", short: 'i', rule: func(s *state, _, v string) error { s.run.Interactive = v == "true"; return nil }},
		{long: "network", value: true, rule: network},
		{long: "net", value: true, rule: network},
		{long: "memory", short: 'm', value: true, rule: func(s *state, _, v string) error { s.memory = v; return nil }},
		{long: "memory-swap", value: true, rule: func(s *state, f, v string) error { s.memorySwap, s.swapFlag = v, f; return nil }},
		{long: "cpus", value: true, rule: passSingle("--cpus")},
		{long: "pids-limit", value: true, rule: pidsLimit},
		{long: "user", short: 'u', value: true, rule: user},
		{long: "cap-drop", value: true, rule: capDrop},
		{long: "security-opt", value: true, rule: securityOpt},
		{long: "volume", short: 'v', value: true, rule: volume},
		{long: "mount", value: true, rule: mount},
		{long: "tmpfs", value: true, rule: tmpfs},
		{long: "env", short: 'e', value: true, rule: passRepeated("-e")},
		{long: "env-file", value: true, rule: passRepeated("--env-file")},
		{long: "workdir", short: 'w', value: true, rule: passSingle("--workdir")},
		{long: "name", value: true, rule: name},
		{long: "stop-timeout", value: true, rule: stopTimeout},
		{long: "ulimit", value: true, rule: ulimit},
		{long: "entrypoint", value: true, rule: func(s *state, _, v string) error { s.entrypoint = &v; return nil }},
		{long: "quiet", short: 'q', rule: accept}, // rljail pulls nothing
		{long: "pull", value: true, rule: oneOf("rljail pulls no images: it runs on its own root filesystems", "missing", "never")},
		{long: "platform", value: true, rule: oneOf("the jail runs on this host only", "linux/amd64", "linux/x86_64", "amd64")},
		{long: "restart", value: true, rule: oneOf("a jail runs once", "no")},
		{long: "sig-proxy", rule: mustBe("true", "rljail always passes the caller's SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the payload")},
		{long: "no-healthcheck", rule: accept},
		{long: "disable-content-trust", rule: accept}, // no image is pulled to verify
		{long: "help", rule: func(s *state, _, v string) error { s.run.Help = v == "true"; return nil }},

		// rljail's own.
		{long: "rljail-images", value: true, rule: func(s *state, _, v string) error { s.run.ImagesFile = v; return nil }},
		{long: "rljail-timeout", value: true, rule: func(s *state, _, v string) error { s.run.Timeout = v; return nil }},
		{long: "rljail-profile", value: true, rule: passSingle("--profile")},
		{long: "rljail-result", value: true, rule: passSingle("--result")},
		{long: "rljail-verbose", rule: func(s *state, _, v string) error {
			if v == "true" {
				s.set("--verbose", "true")
			}
			return nil
		}},

		// Refused: they would weaken the jail.
		{long: "privileged", rule: mustBe("false", "it would give the payload every capability and the host's devices; the jail is never weakened")},
		{long: "cap-add", value: true, why: "the payload never has a capability"},
		{long: "pid", value: true, rule: namespace("PID")},
		{long: "ipc", value: true, rule: namespace("IPC")},
		{long: "uts", value: true, rule: namespace("UTS")},
		{long: "userns", value: true, rule: namespace("user")},
		{long: "cgroupns", value: true, rule: namespace("cgroup")},
		{long: "device", value: true, why: noDevices},
		{long: "device-cgroup-rule", value: true, why: noDevices},
		{long: "gpus", value: true, why: noDevices},
		{long: "publish", short: 'p', value: true, why: noNetwork + " to publish a port on"},
		{long: "publish-all", short: 'P', rule: mustBe("false", noNetwork+" to publish a port on")},
		{long: "expose", value: true, why: noNetwork + " to expose a port on"},
		{long: "detach", short: 'd', rule: mustBe("false", "rljail runs a jail in the foreground only; a persistent jail is `rljail session`")},
		{long: "tty", short: 't', rule: mustBe("false", "rljail gives the payload no terminal (docker's -t would make one inside); leave it out: -i alone passes stdin (python3 -i shows its prompt without a terminal)")},
		{long: "oom-kill-disable", rule: mustBe("false", "the memory limit always ends the jail")},
		{long: "sysctl", value: true, why: "the jail's kernel settings are rljail's"},
		{long: "use-api-socket", rule: mustBe("false", "the jail never gets the docker API socket")},
		{long: "add-host", value: true, why: noNetwork},
		{long: "dns", value: true, why: noNetwork},
		{long: "dns-option", value: true, why: noNetwork},
		{long: "dns-search", value: true, why: noNetwork},
		{long: "ip", value: true, why: noNetwork},
		{long: "ip6", value: true, why: noNetwork},
		{long: "mac-address", value: true, why: noNetwork},
		{long: "network-alias", value: true, why: noNetwork},
		{long: "net-alias", value: true, why: noNetwork},
		{long: "link", value: true, why: noOthers},
		{long: "link-local-ip", value: true, why: noNetwork},
		{long: "volumes-from", value: true, why: noOthers},
		{long: "volume-driver", value: true, why: "only host paths are granted (-v /host/path:/path)"},
		{long: "group-add", value: true, why: "the payload has the jail's one group"},

		// Refused: rljail cannot honour them.
		{long: "attach", short: 'a', value: true, why: "the payload's stdout and stderr always pass, and its stdin with -i"},
		{long: "annotation", value: true, why: noEquiv},
		{long: "blkio-weight", value: true, why: noEquiv},
		{long: "blkio-weight-device", value: true, why: noEquiv},
		{long: "cgroup-parent", value: true, why: "its meaning is docker's cgroup driver's; rljail's own flag is --cgroup-parent"},
		{long: "cidfile", value: true, why: "a jail has no container ID"},
		{long: "cpu-count", value: true, why: "use --cpus"},
		{long: "cpu-percent", value: true, why: "use --cpus"},
		{long: "cpu-period", value: true, why: "use --cpus"},
		{long: "cpu-quota", value: true, why: "use --cpus"},
		{long: "cpu-rt-period", value: true, why: noEquiv},
		{long: "cpu-rt-runtime", value: true, why: noEquiv},
		{long: "cpu-shares", short: 'c', value: true, why: "use --cpus"},
		{long: "cpuset-cpus", value: true, why: "use --cpus"},
		{long: "cpuset-mems", value: true, why: noEquiv},
		{long: "credentialspec", value: true, why: noEquiv},
		{long: "detach-keys", value: true, why: "rljail runs a jail in the foreground only"},
		{long: "device-read-bps", value: true, why: noDevices},
		{long: "device-read-iops", value: true, why: noDevices},
		{long: "device-write-bps", value: true, why: noDevices},
		{long: "device-write-iops", value: true, why: noDevices},
		{long: "domainname", value: true, why: "the jail's names are rljail's"},
		{long: "health-cmd", value: true, why: noEquiv},
		{long: "health-interval", value: true, why: noEquiv},
		{long: "health-retries", value: true, why: noEquiv},
		{long: "health-start-interval", value: true, why: noEquiv},
		{long: "health-start-period", value: true, why: noEquiv},
		{long: "health-timeout", value: true, why: noEquiv},
		{long: "hostname", short: 'h', value: true, why: "the jail's host name is always rljail"},
		{long: "io-maxbandwidth", value: true, why: noEquiv},
		{long: "io-maxiops", value: true, why: noEquiv},
		{long: "isolation", value: true, why: noEquiv},
		{long: "kernel-memory", value: true, why: "use --memory"},
		{long: "label", short: 'l', value: true, why: "a jail has no metadata"},
		{long: "label-file", value: true, why: "a jail has no metadata"},
		{long: "log-driver", value: true, why: "the payload's output goes to rljail's stdout and stderr"},
		{long: "log-opt", value: true, why: "the payload's output goes to rljail's stdout and stderr"},
		{long: "memory-reservation", value: true, why: "use --memory"},
		{long: "memory-swappiness", value: true, why: "the jail has no swap"},
		{long: "oom-score-adj", value: true, why: noEquiv},
		{long: "runtime", value: true, why: "rljail is the runtime"},
		{long: "shm-size", value: true, why: "/dev/shm shares the size of /tmp: give --tmpfs /tmp:size=N"},
		{long: "stop-signal", value: true, why: "rljail passes the caller's signals as they come"},
		{long: "storage-opt", value: true, why: noEquiv},
	}
}

// flagIndex gives the flags by long and by short name.
var flagIndex = sync.OnceValues(func() (map[string]*flagDef, map[byte]*flagDef) {
	byLong, byShort := map[string]*flagDef{}, map[byte]*flagDef{}
	for _, f := range flagTable() {
		byLong[f.long] = f
		if f.short != 0 {
			byShort[f.short] = f
		}
	}
	return byLong, byShort
})

// longNames lists the long names, in the table's order (honoured ones
// first: a suggestion for a mistyped flag prefers them).
func longNames() []string {
	var names []string
	for _, f := range flagTable() {
		names = append(names, f.long)
	}
	return names
}

func accept(*state, string, string) error { return nil }

// mustBe accepts a bool flag with the value the jail always has, and
// refuses the other.
func mustBe(want, why string) func(*state, string, string) error {
	return func(_ *state, f, v string) error {
		if v != want {
			if want == "true" {
				f += "=false"
			}
			return refuse(f, why)
		}
		return nil
	}
}

// oneOf accepts the values given, and refuses any other with why.
func oneOf(why string, values ...string) func(*state, string, string) error {
	return func(_ *state, f, v string) error {
		for _, ok := range values {
			if strings.EqualFold(v, ok) {
				return nil
			}
		}
		return refuse(f+" "+v, why)
	}
}

func passSingle(to string) func(*state, string, string) error {
	return func(s *state, _, v string) error { s.set(to, v); return nil }
}

func passRepeated(to string) func(*state, string, string) error {
	return func(s *state, _, v string) error { s.add(to, v); return nil }
}

// namespace accepts "private" (the jail has its own namespace of each
// kind) and refuses sharing one.
func namespace(kind string) func(*state, string, string) error {
	return func(_ *state, f, v string) error {
		if v == "private" || (kind == "IPC" && v == "none") {
			return nil
		}
		return refuse(f+" "+v, "the jail always has a "+kind+" namespace of its own")
	}
}

func network(s *state, f, v string) error {
	if v == "none" {
		s.set("--network", "none")
		return nil
	}
	return refuse(f+" "+v, noNetwork+"; none is the only mode")
}

func pidsLimit(s *state, f, v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not a number", v)}
	}
	if n <= 0 {
		return refuse(f+" "+v, "the jail's processes are always limited; give a positive number")
	}
	s.set("--pids-limit", v)
	return nil
}

// jailUsers are the --user values accepted as the jail's user: uid 1000
// inside the jail, which maps to an unprivileged host id (never root).
// docker's recipes name 65534 (nobody) for "a user without privileges",
// which is what the jail's user is; its files inside show uid 1000.
var jailUsers = map[string]bool{
	"65534": true, "nobody": true, "1000": true, "rljail": true,
}
var jailGroups = map[string]bool{
	"65534": true, "nogroup": true, "nobody": true, "1000": true, "rljail": true,
}

func user(_ *state, f, v string) error {
	u, g, hasGroup := strings.Cut(v, ":")
	if jailUsers[u] && (!hasGroup || jailGroups[g]) {
		return nil
	}
	if u == "0" || u == "root" || g == "0" || g == "root" {
		return refuse(f+" "+v, "the payload never runs as root, not even the jail's own")
	}
	return refuse(f+" "+v, "the payload always runs as the jail's one unprivileged user (uid 1000 inside); --user 65534 (nobody) or 1000 names it")
}

var capName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_]+$`) })

// capDrop accepts any capability: the payload has none to drop.
func capDrop(_ *state, f, v string) error {
	if !capName().MatchString(v) {
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not a capability name (such as ALL or NET_RAW)", v)}
	}
	return nil
}

func securityOpt(_ *state, f, v string) error {
	// KEY=VALUE, or docker's older KEY:VALUE (no-new-privileges:true).
	key, val := v, ""
	if i := strings.IndexAny(v, "=:"); i >= 0 {
		key, val = v[:i], v[i+1:]
	}
	switch key {
	case "no-new-privileges":
		if val == "" || val == "true" {
			return nil // every payload runs with no_new_privs
		}
		return refuse(f+" "+v, "the payload always runs with no_new_privs")
	case "seccomp":
		return refuse(f+" "+v, "the jail's seccomp profile is always on; rljail's own profiles are chosen with --rljail-profile NAME|FILE")
	case "apparmor", "label":
		return refuse(f+" "+v, "rljail sets no AppArmor profile or SELinux label; the jail does not depend on them")
	case "systempaths":
		return refuse(f+" "+v, "the jail's /proc is always masked")
	}
	return refuse(f+" "+v, noEquiv)
}

var containerName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`) })

// name accepts a container name as docker would, and ignores it: a jail
// has nothing to be found by.
func name(_ *state, f, v string) error {
	if !containerName().MatchString(v) {
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not a container name: only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", v)}
	}
	return nil
}

// stopTimeout is docker's seconds between the stop signal and the kill:
// rljail's --stop-grace.
func stopTimeout(s *state, f, v string) error {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not a number of seconds", v)}
	case n < 0:
		return refuse(f+" "+v, "a stopped jail is always killed after its grace; give seconds")
	case n == 0:
		s.set("--stop-grace", "1ms")
	default:
		s.set("--stop-grace", v+"s")
	}
	return nil
}

// ulimit maps the limits rljail has: nofile, fsize and cpu (seconds).
// The soft value is the limit (rljail sets soft and hard alike).
func ulimit(s *state, f, v string) error {
	kind, limits, ok := strings.Cut(v, "=")
	soft, hard, hasHard := strings.Cut(limits, ":")
	sn, err := strconv.ParseInt(soft, 10, 64)
	if !ok || err != nil || sn <= 0 {
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not NAME=SOFT[:HARD] with positive numbers", v)}
	}
	if hasHard {
		if hn, err := strconv.ParseInt(hard, 10, 64); err != nil || hn < sn {
			return &Error{Flag: f, Msg: fmt.Sprintf("%q: the hard limit must be a number no lower than the soft one", v)}
		}
	}
	switch kind {
	case "nofile":
		s.set("--nofile", soft)
	case "fsize":
		s.set("--file-size", soft)
	case "cpu":
		s.set("--cpu-time", soft+"s")
	default:
		return refuse(f+" "+v, alwaysLimit)
	}
	return nil
}
