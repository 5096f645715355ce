package dockercli

import (
	"encoding/csv"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// bind adds a grant of host path src at dst, writable or not, as rljail's
// -v value SRC:DST:ro|rw.
//
// A relative source is a host path when it starts with . (., .., ./x,
// ../x), as docker 23 and later read it (-v ./task:/task:ro): resolved
// against the current directory. Any other name is a named volume's.
func (s *state) bind(f, src, dst string, writable bool) error {
	if isRelativePath(src) {
		abs, err := filepath.Abs(src)
		if err != nil {
			return &Error{Flag: f, Msg: fmt.Sprintf("resolve %s against the current directory: %v", src, err)}
		}
		src = abs
	}
	if !filepath.IsAbs(src) {
		return refuse(f+" "+src, "named volumes do not exist in rljail: give a host path (absolute, or starting with ./ or ../)")
	}
	if !filepath.IsAbs(dst) {
		return &Error{Flag: f, Msg: fmt.Sprintf("the destination %q is not an absolute path", dst)}
	}
	mode := "ro"
	if writable {
		mode = "rw"
	}
	v := src + ":" + dst + ":" + mode
	s.add("-v", v)
	s.run.Volumes = append(s.run.Volumes, v)
	return nil
}

// volume reads -v SRC:DST[:OPTIONS]. As in docker, a grant is writable
// unless ro is among its options.
func volume(s *state, f, v string) error {
	parts := strings.Split(v, ":")
	switch len(parts) {
	case 1:
		return refuse(f+" "+v, "anonymous volumes do not exist in rljail: give HOST_PATH:PATH (the jail's /tmp is a writable tmpfs)")
	case 2, 3:
	default:
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not SRC:DST[:OPTIONS] (a path with a colon cannot be granted)", v)}
	}
	writable := true
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro", "readonly":
				writable = false
			case "rw":
			case "private", "rprivate", "nocopy", "consistent", "cached", "delegated":
				// The jail's mounts are private; the others are docker's
				// volume and macOS settings.
			case "shared", "rshared", "slave", "rslave":
				return refuse(f+" "+v, "the jail's mounts never propagate to or from the host")
			case "z", "Z":
				return refuse(f+" "+v, "rljail does not relabel host files for SELinux")
			default:
				return &Error{Flag: f, Msg: fmt.Sprintf("%q: unknown option %q (ro, rw)", v, o)}
			}
		}
	}
	return s.bind(f, parts[0], parts[1], writable)
}

// mount reads --mount type=bind|tmpfs,...: docker's comma-separated
// KEY=VALUE list (CSV, so a value may be quoted).
func mount(s *state, f, v string) error {
	fields, err := csv.NewReader(strings.NewReader(v)).Read()
	if err != nil {
		return &Error{Flag: f, Msg: fmt.Sprintf("%q is not a KEY=VALUE list: %v", v, err)}
	}
	kind := "volume" // docker's default
	var src, dst, size string
	readonly := false
	for _, field := range fields {
		key, val, hasVal := strings.Cut(field, "=")
		switch strings.ToLower(key) {
		case "type":
			kind = val
		case "source", "src":
			src = val
		case "target", "destination", "dst":
			dst = val
		case "readonly", "ro":
			readonly = true
			if hasVal {
				b, err := strconv.ParseBool(val)
				if err != nil {
					return &Error{Flag: f, Msg: fmt.Sprintf("%q: readonly=%q is not true or false", v, val)}
				}
				readonly = b
			}
		case "bind-propagation":
			if val != "private" && val != "rprivate" {
				return refuse(f+" "+v, "the jail's mounts never propagate to or from the host")
			}
		case "consistency":
		case "tmpfs-size":
			size = val
		case "tmpfs-mode":
			if val != "1777" && val != "01777" {
				return refuse(f+" "+v, "the jail's /tmp always has mode 1777")
			}
		default:
			return refuse(f+" "+v, fmt.Sprintf("rljail knows type, source, target, readonly, bind-propagation=rprivate and, for a tmpfs at /tmp, tmpfs-size; not %s", key))
		}
	}
	switch kind {
	case "bind":
		if src == "" || dst == "" {
			return &Error{Flag: f, Msg: fmt.Sprintf("%q: a bind mount needs source and target", v)}
		}
		return s.bind(f, src, dst, !readonly)
	case "tmpfs":
		if src != "" {
			return &Error{Flag: f, Msg: fmt.Sprintf("%q: a tmpfs has no source", v)}
		}
		return s.tmpTarget(f, v, dst, size)
	}
	return refuse(f+" "+v, "only type=bind (an absolute host path) and type=tmpfs (at /tmp) are supported")
}

// tmpfs reads --tmpfs PATH[:OPTIONS]: the jail's /tmp is a tmpfs already,
// so PATH must be /tmp, and size= sets its size.
func tmpfs(s *state, f, v string) error {
	dst, opts, _ := strings.Cut(v, ":")
	size := ""
	if opts != "" {
		for _, o := range strings.Split(opts, ",") {
			key, val, _ := strings.Cut(o, "=")
			switch key {
			case "size":
				size = val
			case "mode":
				if val != "1777" && val != "01777" {
					return refuse(f+" "+v, "the jail's /tmp always has mode 1777")
				}
			case "rw", "exec", "nosuid", "nodev", "suid", "dev":
				// rljail mounts /tmp nosuid and nodev whatever is asked:
				// set-id bits and devices mean nothing to the payload.
			case "noexec":
				return refuse(f+" "+v, "the jail's /tmp is nosuid and nodev, but programs written there may run")
			default:
				return refuse(f+" "+v, fmt.Sprintf("rljail knows size=, mode=1777, rw, exec, nosuid and nodev, not %s", key))
			}
		}
	}
	return s.tmpTarget(f, v, dst, size)
}

func (s *state) tmpTarget(f, v, dst, size string) error {
	if filepath.Clean(dst) != "/tmp" {
		return refuse(f+" "+v, "the jail's one tmpfs that rljail sizes is /tmp (with /dev/shm); mount it there")
	}
	if size != "" {
		s.tmpSize = size
	}
	return nil
}

// isRelativePath reports whether a volume's source is a relative host
// path in docker's reading: ., .., or a path starting with ./ or ../.
func isRelativePath(src string) bool {
	return src == "." || src == ".." || strings.HasPrefix(src, "./") || strings.HasPrefix(src, "../")
}
