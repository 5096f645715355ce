// Package profiles loads rljail's profiles: TOML files holding a seccomp
// policy and defaults for the other settings of a run. Two are embedded:
// "python" (the default) and "python-strict". A profile may start from an
// embedded one (base = "python") and change it.
//
// Profiles are decoded strictly: an unknown key, a wrong type or a syscall
// name the policy's table does not know is an error naming the file, the
// line and the key, because a silently ignored line in a security policy
// is a hole nobody sees.
package profiles

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/rootfs"
	"github.com/rljail/rljail/seccomp"
)

//go:embed embedded/*.toml
var embedded embed.FS

//go:generate go run ./gen -out precompiled.go

// Default is the profile used without --profile.
const Default = "python"

// Profile is a loaded profile: the effective seccomp policy and defaults
// that flags override.
type Profile struct {
	Name   string // embedded name or file path
	Source string // "embedded" or the file path
	Policy seccomp.Policy
	// Program, when set, is the policy compiled already (Precompiled);
	// Policy is then empty.
	Program *seccomp.Program
	// Defaults; zero means "not set by the profile".
	Timeout time.Duration
	Env     []string
	Volumes []string
	Workdir string
	// Rootfs is the root filesystem the profile runs on: a name of one in
	// rljail's data directory (rljail rootfs list) or an absolute directory;
	// --rootfs overrides it.
	Rootfs string
	// Network is the profile's [network] table: egress by allowlist
	// (--allow-host and --resolve add to it).
	Network Network
}

// Network is a profile's [network] table.
type Network struct {
	Allow   []string `toml:"allow"`
	Resolve []string `toml:"resolve"`
}

// file is the TOML layout of a profile.
type file struct {
	Base        string       `toml:"base"`
	Description string       `toml:"description"`
	Seccomp     seccompTable `toml:"seccomp"`
	Defaults    defaults     `toml:"defaults"`
	Network     Network      `toml:"network"`
}

type seccompTable struct {
	Violation string   `toml:"violation"`
	Allow     []string `toml:"allow"`
	Remove    []string `toml:"remove"`
	ENOSYS    []string `toml:"enosys"`
	Rule      []rule   `toml:"rule"`
}

type rule struct {
	Syscall string `toml:"syscall"`
	Args    []arg  `toml:"args"`
	Comment string `toml:"comment"`
}

type arg struct {
	Index *uint   `toml:"index"`
	Op    string  `toml:"op"`
	Value *uint64 `toml:"value"`
	Mask  uint64  `toml:"mask"`
}

type defaults struct {
	Timeout string   `toml:"timeout"`
	Env     []string `toml:"env"`
	Volumes []string `toml:"volumes"`
	Workdir string   `toml:"workdir"`
	// Rootfs is a pointer so that rootfs = "" is refused as a name rather
	// than taken for "not given" (the default rootfs).
	Rootfs *string `toml:"rootfs"`
}

// Names lists the embedded profiles.
func Names() []string {
	entries, _ := embedded.ReadDir("embedded")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".toml"); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Precompiled returns the program of an embedded profile as compiled at
// build time (make runs `go generate ./profiles`), so that a run with an
// unmodified embedded profile neither decodes TOML nor runs libseccomp
// (together about 4 ms). The policy itself is loaded only if the
// supervisor needs it. ok is false for names that are not embedded.
func Precompiled(name string) (prog *seccomp.Program, ok bool) {
	bpf, violation, ok := precompiledBPF(name)
	if !ok {
		return nil, false
	}
	v := seccomp.Violation(violation)
	return &seccomp.Program{
		BPF:       []byte(bpf),
		Notify:    v != seccomp.ViolationErrno,
		Name:      name,
		Violation: v,
		Policy: func() (*seccomp.Policy, error) {
			p, err := Load(name)
			if err != nil {
				return nil, err
			}
			return &p.Policy, nil
		},
	}, true
}

// MaxFileSize is the largest profile file read (the embedded ones are a
// few KB).
const MaxFileSize = 1 << 20

// Load loads an embedded profile by name, or a profile file by path (a
// value with a slash or ending in .toml) as LoadGuarded does with a Guard
// that knows no writable volume.
func Load(nameOrPath string) (*Profile, error) { return LoadGuarded(nameOrPath, nil) }

// IsFile reports whether nameOrPath names a profile file rather than an
// embedded profile.
func IsFile(nameOrPath string) bool {
	return strings.Contains(nameOrPath, "/") || strings.HasSuffix(nameOrPath, ".toml")
}

// LoadGuarded loads an embedded profile by name, or a profile file by path,
// read through g (hostfile's rules for a file read for the caller: never
// from a volume the jail may write, never a planted link, never blocking
// without a bound); nil g knows no writable volume. A profile file is a
// security policy: one a payload could have written would grant it the
// host.
func LoadGuarded(nameOrPath string, g *hostfile.Guard) (*Profile, error) {
	if nameOrPath == "" {
		nameOrPath = Default
	}
	if IsFile(nameOrPath) {
		if g == nil {
			g = &hostfile.Guard{}
		}
		data, err := g.ReadFile("--profile", nameOrPath, MaxFileSize)
		if err != nil {
			return nil, err
		}
		return parse(nameOrPath, nameOrPath, data, 0)
	}
	return loadEmbedded(nameOrPath, 0)
}

func loadEmbedded(name string, depth int) (*Profile, error) {
	data, err := embedded.ReadFile(path.Join("embedded", name+".toml"))
	if err != nil {
		return nil, fmt.Errorf("no profile named %q (embedded: %s; or give a file path)", name, strings.Join(Names(), ", "))
	}
	return parse(name, "embedded", data, depth)
}

// Parse decodes a profile from data; where names the source in errors.
func Parse(where string, data []byte) (*Profile, error) {
	return parse(where, where, data, 0)
}

func parse(name, source string, data []byte, depth int) (*Profile, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(source, err)
	}
	p := &Profile{Name: name, Source: source}
	if f.Base != "" {
		if depth > 0 {
			return nil, fmt.Errorf("profile %s: base %q: a base profile may not have a base itself", source, f.Base)
		}
		base, err := loadEmbedded(f.Base, depth+1)
		if err != nil {
			return nil, fmt.Errorf("profile %s: base: %w", source, err)
		}
		p.Policy = base.Policy
		p.Policy.Rules = append([]seccomp.Rule(nil), base.Policy.Rules...)
		p.Policy.NoSys = append([]string(nil), base.Policy.NoSys...)
		p.Timeout, p.Env, p.Volumes, p.Workdir, p.Rootfs = base.Timeout, base.Env, base.Volumes, base.Workdir, base.Rootfs
		p.Network = base.Network
	} else {
		p.Policy.Violation = seccomp.ViolationErrno
	}
	p.Policy.Name = name
	if err := applySeccomp(&p.Policy, f.Seccomp, f.Base != ""); err != nil {
		return nil, locate(source, data, err)
	}
	if err := p.Policy.Validate(); err != nil {
		return nil, locate(source, data, err)
	}
	if err := applyDefaults(p, f.Defaults); err != nil {
		return nil, fmt.Errorf("profile %s: %w", source, err)
	}
	// [network] entries are checked where they are used (egress.List.Add),
	// which names the profile and its table in its message.
	p.Network.Allow = append(p.Network.Allow, f.Network.Allow...)
	p.Network.Resolve = append(p.Network.Resolve, f.Network.Resolve...)
	return p, nil
}

func applySeccomp(pol *seccomp.Policy, t seccompTable, hasBase bool) error {
	if t.Violation != "" {
		pol.Violation = seccomp.Violation(t.Violation)
		if pol.Violation == seccomp.ViolationLearn {
			return errors.New("seccomp.violation: learn is chosen with --seccomp=learn, not in a profile")
		}
	}
	if len(t.Remove) > 0 && !hasBase {
		return errors.New("seccomp.remove needs a base profile to remove from")
	}
	for _, n := range t.Remove {
		if _, err := seccomp.SyscallNumber(n); err != nil {
			return &nameError{"seccomp.remove", n, err}
		}
	}
	pol.Remove(t.Remove...)
	for _, n := range t.Allow {
		if _, err := seccomp.SyscallNumber(n); err != nil {
			return &nameError{"seccomp.allow", n, err}
		}
	}
	if err := pol.Allow(t.Allow...); err != nil {
		return fmt.Errorf("seccomp.allow: %w", err)
	}
	// Rules add alternatives to the base's rules for the same call; to
	// narrow a call, remove it first (seccomp.remove) and give its rules.
	for i, r := range t.Rule {
		if r.Syscall == "" {
			return fmt.Errorf("seccomp.rule[%d]: syscall is missing", i)
		}
		if _, err := seccomp.SyscallNumber(r.Syscall); err != nil {
			return &nameError{"seccomp.rule.syscall", r.Syscall, err}
		}
		sr := seccomp.Rule{Syscall: r.Syscall, Comment: r.Comment}
		for k, a := range r.Args {
			if a.Index == nil || a.Value == nil || a.Op == "" {
				return fmt.Errorf("seccomp.rule[%d] (%s): args[%d] needs index, op and value", i, r.Syscall, k)
			}
			if a.Op != string(seccomp.OpMaskedEq) && a.Mask != 0 {
				return fmt.Errorf("seccomp.rule[%d] (%s): args[%d]: mask only goes with op = \"masked_eq\"", i, r.Syscall, k)
			}
			sr.Args = append(sr.Args, seccomp.Arg{Index: *a.Index, Op: seccomp.Op(a.Op), Value: *a.Value, Mask: a.Mask})
		}
		pol.Rules = append(pol.Rules, sr)
	}
	for _, n := range t.ENOSYS {
		if _, err := seccomp.SyscallNumber(n); err != nil {
			return &nameError{"seccomp.enosys", n, err}
		}
		if pol.Allowed(n) {
			return &nameError{"seccomp.enosys", n, fmt.Errorf("%s is also allowed", n)}
		}
		pol.NoSys = append(pol.NoSys, n)
	}
	return nil
}

func applyDefaults(p *Profile, d defaults) error {
	if d.Timeout != "" {
		t, err := time.ParseDuration(d.Timeout)
		if err != nil || t <= 0 {
			return fmt.Errorf("defaults.timeout %q is not a positive duration", d.Timeout)
		}
		p.Timeout = t
	}
	if d.Env != nil {
		p.Env = d.Env
	}
	if d.Volumes != nil {
		p.Volumes = d.Volumes
	}
	if d.Workdir != "" {
		p.Workdir = d.Workdir
	}
	if d.Rootfs != nil {
		v := *d.Rootfs
		switch {
		case rootfs.IsDirValue(v):
			if !path.IsAbs(v) {
				return fmt.Errorf("defaults.rootfs %q: a directory must be an absolute path (or give a rootfs name)", v)
			}
		default:
			if err := rootfs.ValidName(v); err != nil {
				return fmt.Errorf("defaults.rootfs: %w", err)
			}
		}
		p.Rootfs = v
	}
	return nil
}

// nameError is a semantic error about one syscall name under a key.
type nameError struct {
	key, name string
	err       error
}

func (e *nameError) Error() string { return e.key + ": " + e.err.Error() }
func (e *nameError) Unwrap() error { return e.err }

// locate adds the line where the offending name stands to err. TOML
// decoding cannot tell where an array element was, so the line is found by
// the quoted name itself.
func locate(source string, data []byte, err error) error {
	name := ""
	var ne *nameError
	var ve *seccomp.RuleError
	switch {
	case errors.As(err, &ne):
		name = ne.name
	case errors.As(err, &ve):
		name = ve.Syscall
	}
	if name != "" {
		if i := bytes.Index(data, []byte(`"`+name+`"`)); i >= 0 {
			line := bytes.Count(data[:i], []byte("\n")) + 1
			return fmt.Errorf("profile %s: line %d: %w", source, line, err)
		}
	}
	return fmt.Errorf("profile %s: %w", source, err)
}

// decodeError turns a TOML error into one line with the line and the key.
func decodeError(source string, err error) error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) && len(sm.Errors) > 0 {
		var parts []string
		for i := range sm.Errors {
			de := &sm.Errors[i]
			row, _ := de.Position()
			parts = append(parts, fmt.Sprintf("line %d: unknown key %s", row, strings.Join(de.Key(), ".")))
		}
		return fmt.Errorf("profile %s: %s", source, strings.Join(parts, "; "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		if key != "" {
			return fmt.Errorf("profile %s: line %d: key %s: %s", source, row, key, de.Error())
		}
		return fmt.Errorf("profile %s: line %d: %s", source, row, de.Error())
	}
	return fmt.Errorf("profile %s: %w", source, err)
}
