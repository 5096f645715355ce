package jail

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
)

// The supervisor and the init stage (init.c) talk over a control socket and
// a status pipe that init inherits as fixed descriptors. On the control
// socket the supervisor first passes the init stage's first step, on
// cgroup v2, the cgroup to clone the init into ("cgr!", SCM_RIGHTS:
// sendCgroup); the first step sends the init's pidfd ("pid!":
// receivePidfd); then the supervisor sends the descriptors
// init needs for its root (mount trees: sendFDs) and one initConfig as
// tagged records (encode), then the cgroup's files and one initLimits the
// same way (sendLimits), then control lines ("signal N"), and closes it
// when the run ends. init writes initMessage lines (JSON) on the status
// pipe. Init starts before the supervisor has made those descriptors
// (Run), so they cannot be inherited. Nothing the payload can reach is on
// either channel: both are closed before the payload's execve.

const (
	initArg0  = "rljail-init" // argv[0] that selects the init stage (init.c)
	fdControl = 3             // init receives descriptors, its encoded initConfig, then control lines here
	fdStatus  = 4             // init reports here
	fdNotify  = 5             // a Unix socket to the supervisor for the seccomp listener
)

// initConfig is everything init needs; it must not depend on anything else
// of the host.
type initConfig struct {
	Command  []string
	Env      []string
	Workdir  string
	TmpSize  int64
	Mounts   []bindMount
	Symlinks []rootSymlink
	// Filter is the payload's seccomp program (BPF), installed last.
	Filter []byte
	// Notify: the filter has a user-notification listener, which the
	// payload's child sends to the supervisor over fdNotify.
	Notify bool
	// Egress, when set, adds its sockets and /etc files (egressRecords).
	Egress Egress
	// HasChannel: the payload gets a socket as descriptor 3
	// (Spec.Channel), the Channel'th of the descriptors sent before the
	// config.
	HasChannel bool
	Channel    int
}

// initLimits are the payload's limits and the jail's cgroup, sent after
// the config (sendLimits): init builds the jail's root from the config
// while the supervisor still makes the cgroup, then waits for these before
// it starts the payload.
type initLimits struct {
	// Rlimits are the payload's resource limits.
	Rlimits []rlimit
	// Env are entries added to the payload's environment.
	Env []string
	// UnshareCgroup: init was not born in its cgroup (v1, where clone
	// cannot place it, or no cgroup): it joins the cgroups of CgroupTasks
	// itself, then enters a new cgroup namespace, so that
	// /proc/self/cgroup shows no host path, before the payload starts.
	UnshareCgroup bool
	// CgroupTasks are the indexes, among the descriptors sent before the
	// limits, of the v1 "tasks" files init writes "0" to
	// (cgroup.Cgroup.TaskFiles says why).
	CgroupTasks []int
	// Nice lowers the payload's priority where no cgroup caps its CPU
	// share, so that a payload spinning on every CPU cannot delay the
	// supervisor's kill timer.
	Nice int
}

// rlimit is one resource limit for the payload.
type rlimit struct {
	Resource int
	Soft     uint64
	Hard     uint64
}

// bindMount grants a host object to the jail. A root supervisor clones the
// tree itself (the jail's host uid may not be able to traverse to it) and
// sends it as the FD'th of the descriptors before the config; a rootless
// one leaves FD at -1 and init clones Source, with the same rights as the
// user.
type bindMount struct {
	Source   string
	Dest     string
	FD       int
	Dir      bool
	Writable bool
	// Idmap: a read-only volume, whose owner is mapped to the jail's user
	// as root (idmap.go); never the workspace.
	Idmap bool
}

// rootSymlink recreates a top-level symlink of the rootfs (lib -> usr/lib).
type rootSymlink struct {
	Name   string
	Target string
}

// initMessage is one status line from init.
type initMessage struct {
	// Error is set when setup failed: the step and its cause, one line.
	Error string `json:"error,omitempty"`
	// ExitCode is the code rljail should exit with for Error (125, 126, 127).
	ExitCode int `json:"exit_code,omitempty"`
	// Warning is a weaker choice init had to make (see overlay_of).
	Warning string `json:"warning,omitempty"`
	// Started is sent once the payload's execve succeeded.
	Started bool `json:"started,omitempty"`
	// Exited is sent when the payload ended, with Code or Signal.
	Exited bool `json:"exited,omitempty"`
	Code   int  `json:"code,omitempty"`
	Signal int  `json:"signal,omitempty"`
}

// parseInitMessage reads one status line. The two every run sends, the
// payload's start and its end (init.c writes them with snprintf), are
// read here without encoding/json, whose first Unmarshal in a process
// builds a decoder by reflection: 0.05 to 0.1 ms, paid around the
// payload's end when it is short. Anything else, such as a warning or an
// error with its quoted text, goes to encoding/json.
func parseInitMessage(line []byte) (initMessage, error) {
	var m initMessage
	if string(line) == `{"started":true}` {
		m.Started = true
		return m, nil
	}
	for _, f := range []struct {
		prefix string
		into   *int
	}{{`{"exited":true,"code":`, &m.Code}, {`{"exited":true,"signal":`, &m.Signal}} {
		rest, ok := bytes.CutPrefix(line, []byte(f.prefix))
		if !ok {
			continue
		}
		digits, ok := bytes.CutSuffix(rest, []byte("}"))
		// An exit code or a signal number, written as %d writes it.
		if n, err := strconv.Atoi(string(digits)); ok && err == nil && n >= 0 && n <= 255 && strconv.Itoa(n) == string(digits) {
			m.Exited, *f.into = true, n
			return m, nil
		}
	}
	err := json.Unmarshal(line, &m)
	return m, err
}

// Record tags of the encoded config; init.c reads them.
const (
	tagEnd           = 0
	tagArg           = 1
	tagEnv           = 2
	tagWorkdir       = 3
	tagTmpSize       = 4
	tagMount         = 5
	tagSymlink       = 6
	tagFilter        = 7
	tagNotify        = 8
	tagRlimit        = 9
	tagUnshareCgroup = 10
	// 11 was the hostname: init.c's JAIL_HOSTNAME is Hostname
	tagNice        = 12
	tagCgroupTasks = 13
	// tagListen asks init for a socket on the jail's loopback, which it
	// sends back (Egress); tagEtcFile replaces a file of its /etc.
	tagListen  = 14
	tagEtcFile = 15
	tagChannel = 16
)

// Flags of a tagMount record.
const (
	mountDir      = 1
	mountWritable = 2
	// 4 was a device node: init mounts the devices itself, before its config
)

// encode writes the config as a little-endian 32-bit length of all that
// follows, then records of a tag byte, a little-endian 32-bit length and
// the payload; fields within a payload are separated by
// NUL bytes, which no path, argument or environment entry may contain
// (Validate refuses them). C can read that without a parser.
func (c *initConfig) encode() []byte {
	return encodeRecords(func(rec func(byte, ...string)) {
		for _, a := range c.Command {
			rec(tagArg, a)
		}
		for _, e := range c.Env {
			rec(tagEnv, e)
		}
		rec(tagWorkdir, c.Workdir)
		rec(tagTmpSize, strconv.FormatInt(c.TmpSize, 10))
		for _, m := range c.Mounts {
			flags := 0
			if m.Dir {
				flags |= mountDir
			}
			if m.Writable {
				flags |= mountWritable
			}
			rec(tagMount, strconv.Itoa(m.FD), strconv.Itoa(flags), m.Source, m.Dest)
		}
		for _, l := range c.Symlinks {
			rec(tagSymlink, l.Name, l.Target)
		}
		if len(c.Filter) > 0 {
			rec(tagFilter, string(c.Filter))
		}
		if c.Notify {
			rec(tagNotify)
		}
		if c.Egress != nil {
			egressRecords(c.Egress, rec)
		}
		if c.HasChannel {
			rec(tagChannel, strconv.Itoa(c.Channel))
		}
	})
}

// encode writes the limits as encode writes a config.
func (l *initLimits) encode() []byte {
	return encodeRecords(func(rec func(byte, ...string)) {
		for _, r := range l.Rlimits {
			rec(tagRlimit, strconv.Itoa(r.Resource), strconv.FormatUint(r.Soft, 10), strconv.FormatUint(r.Hard, 10))
		}
		for _, e := range l.Env {
			rec(tagEnv, e)
		}
		if l.UnshareCgroup {
			rec(tagUnshareCgroup)
		}
		for _, fd := range l.CgroupTasks {
			rec(tagCgroupTasks, strconv.Itoa(fd))
		}
		if l.Nice > 0 {
			rec(tagNice, strconv.Itoa(l.Nice))
		}
	})
}

// encodeRecords frames the records that fill writes (see encode).
func encodeRecords(fill func(rec func(tag byte, fields ...string))) []byte {
	b := make([]byte, 4, 1024) // the length of all records, so that init reads them at once
	fill(func(tag byte, fields ...string) {
		payload := strings.Join(fields, "\x00")
		b = append(b, tag)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		b = append(b, payload...)
	})
	b = append(b, tagEnd, 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}
