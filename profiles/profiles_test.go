package profiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rljail/rljail/seccomp"
)

func TestEmbeddedProfiles(t *testing.T) {
	names := Names()
	if strings.Join(names, ",") != "python,python-strict" {
		t.Fatalf("embedded profiles = %v", names)
	}
	py, err := Load("python")
	if err != nil {
		t.Fatal(err)
	}
	strict, err := Load("python-strict")
	if err != nil {
		t.Fatal(err)
	}
	if py.Policy.Violation != seccomp.ViolationErrno || strict.Policy.Violation != seccomp.ViolationKill {
		t.Errorf("violations: python %s, python-strict %s", py.Policy.Violation, strict.Policy.Violation)
	}
	for _, n := range []string{"fork", "vfork", "clone", "socket", "execve", "openat", "mmap"} {
		if !py.Policy.Allowed(n) {
			t.Errorf("python does not allow %s", n)
		}
	}
	for _, n := range []string{"fork", "vfork"} {
		if strict.Policy.Allowed(n) {
			t.Errorf("python-strict allows %s", n)
		}
	}
	// python-strict narrows clone to threads (one rule) and socket to
	// AF_UNIX (every rule), not the base's alternatives as well.
	var clones, sockets []seccomp.Rule
	for _, r := range strict.Policy.Rules {
		switch r.Syscall {
		case "clone":
			clones = append(clones, r)
		case "socket":
			sockets = append(sockets, r)
		}
	}
	if len(clones) != 1 {
		t.Errorf("python-strict has %d rules for clone, want 1: %+v", len(clones), clones)
	}
	if len(sockets) == 0 {
		t.Error("python-strict has no socket rule")
	}
	for _, r := range sockets {
		if len(r.Args) == 0 || r.Args[0].Index != 0 || r.Args[0].Value != 1 {
			t.Errorf("python-strict allows a socket family other than AF_UNIX: %+v", r)
		}
	}
	for _, n := range seccomp.AlwaysDenied() {
		if py.Policy.Allowed(n) || strict.Policy.Allowed(n) {
			t.Errorf("an embedded profile allows %s", n)
		}
	}
}

// TestCheckedCallsMatchProfiles holds seccomp's table of checked calls,
// which learn mode never suggests allowing beyond their checks, to the
// embedded profiles: every call a profile allows only with some arguments
// is in it, and every call in it is such a call of the python profile, never allowed unconditionally.
func TestCheckedCallsMatchProfiles(t *testing.T) {
	checked := map[string]bool{}
	for _, n := range seccomp.CheckedCalls() {
		checked[n] = true
	}
	for _, name := range Names() {
		p, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		filtered := map[string]bool{}
		unconditional := map[string]bool{}
		for _, r := range p.Policy.Rules {
			if len(r.Args) == 0 {
				unconditional[r.Syscall] = true
			} else {
				filtered[r.Syscall] = true
			}
		}
		for n := range filtered {
			if !checked[n] {
				t.Errorf("%s checks the arguments of %s, which seccomp's checkedCalls lacks", name, n)
			}
		}
		for n := range checked {
			if unconditional[n] {
				t.Errorf("%s allows %s whatever its arguments", name, n)
			}
			if name == Default && !filtered[n] {
				t.Errorf("seccomp's checkedCalls has %s, which %s does not allow with checked arguments", n, name)
			}
		}
	}
}

// TestPrecompiled checks the programs precompiled.go holds (that the file
// is current is precompile's test).
func TestPrecompiled(t *testing.T) {
	for _, n := range Names() {
		prog, ok := Precompiled(n)
		if !ok || len(prog.BPF) == 0 {
			t.Fatalf("no precompiled program for %s", n)
		}
		pol, err := prog.Policy()
		if err != nil || pol.Name != n {
			t.Fatalf("the lazy policy of %s: %v", n, err)
		}
	}
	if _, ok := Precompiled("nosuch"); ok {
		t.Error("Precompiled of an unknown name succeeded")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // all must appear in the one-line error
	}{
		{"unknown top-level key", "bsae = \"python\"\n", []string{"line 1", "unknown key bsae"}},
		{"unknown nested key", "[seccomp]\nviolation = \"errno\"\nallwo = []\n", []string{"line 3", "unknown key seccomp.allwo"}},
		{"wrong type", "[seccomp]\nallow = 3\n", []string{"line 2", "seccomp.allow"}},
		{"unknown syscall", "[seccomp]\nallow = [\n  \"read\",\n  \"nosuchcall\",\n]\n", []string{"line 4", `unknown syscall "nosuchcall"`}},
		{"always denied", "[seccomp]\nallow = [\"read\", \"ptrace\"]\n", []string{"line 2", "ptrace", "every profile"}},
		{"unknown rule syscall", "[[seccomp.rule]]\nsyscall = \"nope\"\n", []string{"line 2", `"nope"`}},
		{"rule without args fields", "[[seccomp.rule]]\nsyscall = \"socket\"\nargs = [{ index = 0 }]\n", []string{"needs index, op and value"}},
		{"mask without masked_eq", "[[seccomp.rule]]\nsyscall = \"socket\"\nargs = [{ index = 0, op = \"eq\", value = 1, mask = 1 }]\n", []string{"mask only goes with"}},
		{"bad violation", "[seccomp]\nviolation = \"ignore\"\n", []string{"unknown violation"}},
		{"learn in a file", "[seccomp]\nviolation = \"learn\"\n", []string{"--seccomp=learn"}},
		{"remove without base", "[seccomp]\nremove = [\"read\"]\n", []string{"needs a base"}},
		{"unknown base", "base = \"ruby\"\n", []string{"no profile named", "python"}},
		{"bad timeout", "[defaults]\ntimeout = \"soon\"\n", []string{"defaults.timeout"}},
		{"bad rootfs name", "[defaults]\nrootfs = \"Data\"\n", []string{"defaults.rootfs", `"Data" is not a rootfs name`}},
		{"relative rootfs directory", "[defaults]\nrootfs = \"./py\"\n", []string{"defaults.rootfs", "absolute path"}},
		{"empty rootfs", "[defaults]\nrootfs = \"\"\n", []string{"defaults.rootfs", `"" is not a rootfs name`}},
		{"rootfs at the top level", "rootfs = \"data\"\n", []string{"unknown key rootfs"}},
		{"syntax", "[seccomp\n", []string{"line 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.toml", []byte(tt.src))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "profile p.toml") {
				t.Errorf("error is not one line naming the file: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestCustomProfile(t *testing.T) {
	src := `base = "python"
[seccomp]
allow = ["getpid"]
remove = ["vfork"]
[[seccomp.rule]]
syscall = "socket"
args = [{ index = 0, op = "eq", value = 16 }]
comment = "netlink, for this test"
[defaults]
timeout = "3s"
env = ["A=1"]
volumes = ["/srv:/srv:ro"]
workdir = "/srv"
rootfs = "data"
`
	path := filepath.Join(t.TempDir(), "custom.toml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Policy.Allowed("vfork") || !p.Policy.Allowed("fork") {
		t.Error("remove/base: vfork should be gone, fork kept")
	}
	var socketRules int
	for _, r := range p.Policy.Rules {
		if r.Syscall == "socket" {
			socketRules++
		}
	}
	base, err := Load("python")
	if err != nil {
		t.Fatal(err)
	}
	var baseSocketRules int
	for _, r := range base.Policy.Rules {
		if r.Syscall == "socket" {
			baseSocketRules++
		}
	}
	if socketRules != baseSocketRules+1 {
		t.Errorf("socket rules = %d, want the base's %d plus 1", socketRules, baseSocketRules)
	}
	if p.Timeout != 3*time.Second || p.Workdir != "/srv" || len(p.Env) != 1 || len(p.Volumes) != 1 || p.Rootfs != "data" {
		t.Errorf("defaults = %v %q %q %q %q", p.Timeout, p.Workdir, p.Env, p.Volumes, p.Rootfs)
	}
	if _, err := seccomp.Compile(&p.Policy); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.toml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzParse: the decoder never panics, and every rejection is one line
// naming the source.
func FuzzParse(f *testing.F) {
	for _, n := range Names() {
		b, _ := embedded.ReadFile("embedded/" + n + ".toml")
		f.Add(b)
	}
	f.Add([]byte("[seccomp]\nallow = [\"read\"]\n"))
	f.Add([]byte("base = \"python\"\n[[seccomp.rule]]\nsyscall = \"socket\"\nargs = [{ index = 0, op = \"masked_eq\", mask = 0xff, value = 1 }]\n"))
	f.Add([]byte("[defaults]\ntimeout = \"1s\"\nenv = [\"A=1\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "profile fuzz.toml") {
				t.Fatalf("error does not name the source: %q", err)
			}
			return
		}
		if _, err := seccomp.Compile(&p.Policy); err != nil && !strings.Contains(err.Error(), "instructions") {
			t.Fatalf("a profile that parsed does not compile: %v", err)
		}
	})
}

func TestNetworkTable(t *testing.T) {
	p, err := Parse("net.toml", []byte("base = \"python\"\n[network]\nallow = [\"api.example.org\", \"10.0.0.0/8:443\"]\nresolve = [\"api.example.org:192.0.2.1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Network.Allow) != 2 || p.Network.Allow[1] != "10.0.0.0/8:443" || len(p.Network.Resolve) != 1 {
		t.Errorf("network = %+v", p.Network)
	}
	if _, err := Parse("bad.toml", []byte("[network]\nallowed = [\"x\"]\n")); err == nil || !strings.Contains(err.Error(), "network.allowed") {
		t.Errorf("an unknown key in [network]: %v", err)
	}
	if p, err := Load(Default); err != nil || len(p.Network.Allow) != 0 {
		t.Errorf("the default profile allows %v (%v): no network by default", p.Network.Allow, err)
	}
}
