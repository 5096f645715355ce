package serve

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/rljail/rljail/jail"
)

// VolumePolicy is a [volumes.NAME] table of the configuration: a host
// directory (or file) a request may ask for by its name, never by its
// path, so that what a client can reach on the host is the operator's
// list alone.
type VolumePolicy struct {
	// Source is the host path, absolute and clean; it existed when the
	// configuration was read.
	Source string
	// Target is where the volume goes in the jail when a request names
	// none.
	Target string
	// Writable says whether a request may ask for it rw (it is read-only
	// otherwise, and by default).
	Writable bool
}

// VolumeRequest is one entry of a request's "volumes": a configured
// volume by name, at its configured target unless Target is given,
// read-only unless RW.
type VolumeRequest struct {
	Name   string `json:"name"`
	Target string `json:"target,omitempty"`
	RW     bool   `json:"rw,omitempty"`
}

// volumeFile is a [volumes.NAME] table's shape.
type volumeFile struct {
	Source   string `toml:"source"`
	Target   string `toml:"target"`
	Writable bool   `toml:"writable"`
}

// serverReservedTargets are the jail's places no volume of a request may
// go on or below: the kernel's (which the jail refuses too) and /tmp,
// where the server puts a request's code and files.
var serverReservedTargets = []string{"/proc", "/sys", "/dev", "/tmp"}

// parseVolumes checks the [volumes] tables: each source an absolute,
// clean host path that exists now, each target one a request could ask
// for (checkTarget).
func parseVolumes(files map[string]volumeFile) (map[string]VolumePolicy, error) {
	if len(files) == 0 {
		return nil, nil
	}
	out := map[string]VolumePolicy{}
	for name, f := range files {
		key := fmt.Sprintf("[volumes.%s]", name)
		switch {
		case name == "" || strings.ContainsAny(name, "\x00/"):
			return nil, fmt.Errorf("%s: a volume's name must be non-empty, without / or NUL", key)
		case f.Source == "" || !path.IsAbs(f.Source) || path.Clean(f.Source) != f.Source || strings.ContainsAny(f.Source, ":\x00"):
			return nil, fmt.Errorf("%s source %q must be an absolute, clean host path without : or NUL", key, f.Source)
		case f.Target == "":
			return nil, fmt.Errorf("%s needs a target: where the volume goes in the jail", key)
		}
		if _, err := os.Stat(f.Source); err != nil {
			return nil, fmt.Errorf("%s source %s: %v", key, f.Source, unwrapErr(err))
		}
		if _, err := buildVolume(f.Source, f.Target, false); err != nil {
			return nil, fmt.Errorf("%s target: %v", key, err)
		}
		out[name] = VolumePolicy(f)
	}
	return out, nil
}

func unwrapErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// buildVolume makes the jail.Volume of source at target the way the CLI
// makes one of -v (jail.ParseVolume, so the jail's own checks of a
// destination apply), after the server's own: no place in
// serverReservedTargets.
func buildVolume(source, target string, rw bool) (jail.Volume, error) {
	if strings.IndexByte(target, 0) >= 0 || strings.IndexByte(target, ':') >= 0 {
		return jail.Volume{}, fmt.Errorf("target %q may not contain : or NUL", target)
	}
	if !path.IsAbs(target) || path.Clean(target) != target || strings.Contains(target, "..") {
		return jail.Volume{}, fmt.Errorf("target %q must be an absolute, clean path (no .., //, or trailing /)", target)
	}
	for _, r := range serverReservedTargets {
		if target == r || strings.HasPrefix(target, r+"/") {
			return jail.Volume{}, fmt.Errorf("target %s is on or below %s, which the jail keeps for itself", target, r)
		}
	}
	mode := "ro"
	if rw {
		mode = "rw"
	}
	v, err := jail.ParseVolume(source + ":" + target + ":" + mode)
	if err != nil {
		return jail.Volume{}, err
	}
	return v, nil
}

// volumes checks a request's "volumes" against the policy and makes the
// jail's; every refusal names its field.
func (s *Server) volumes(reqs []VolumeRequest) ([]jail.Volume, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	conf := s.conf().Volumes
	var out []jail.Volume
	seen := map[string]int{}
	for i, r := range reqs {
		field := fmt.Sprintf("volumes[%d]", i)
		p, ok := conf[r.Name]
		if !ok {
			return nil, fmt.Errorf("%s.name: %q is not a volume this server grants (%s)", field, r.Name, volumeNames(conf))
		}
		if j, dup := seen[r.Name]; dup {
			return nil, fmt.Errorf("%s.name: volume %q is asked for twice (volumes[%d])", field, r.Name, j)
		}
		seen[r.Name] = i
		if r.RW && !p.Writable {
			return nil, fmt.Errorf("%s.rw: volume %q is read-only on this server (its writable is false)", field, r.Name)
		}
		target := r.Target
		if target == "" {
			target = p.Target
		}
		v, err := buildVolume(p.Source, target, r.RW)
		if err != nil {
			return nil, fmt.Errorf("%s.target: %v", field, err)
		}
		for j, o := range out {
			if under(v.Dest, o.Dest) || under(o.Dest, v.Dest) {
				return nil, fmt.Errorf("%s.target: %s is on or below volumes[%d]'s target %s, or above it", field, v.Dest, j, o.Dest)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

func volumeNames(conf map[string]VolumePolicy) string {
	if len(conf) == 0 {
		return "it grants none: see [volumes] in docs/api.md"
	}
	names := make([]string, 0, len(conf))
	for n := range conf {
		names = append(names, n)
	}
	sort.Strings(names)
	return "it grants " + strings.Join(names, ", ")
}

// WritableSources lists the host sources of the volumes a request may
// ask for rw: the caller refuses a rootfs inside one, and one over
// rljail's data directory, as a run does for -v ...:rw.
func (c Config) WritableSources() []string {
	var out []string
	for _, v := range c.Volumes {
		if v.Writable {
			out = append(out, v.Source)
		}
	}
	sort.Strings(out)
	return out
}
