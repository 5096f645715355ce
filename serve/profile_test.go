package serve

import (
	"strings"
	"testing"

	"github.com/rljail/rljail/seccomp"
)

func TestParseConfigProfiles(t *testing.T) {
	c, err := ParseConfig([]byte("profiles = [\"python-strict\", \"python\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Profiles) != 2 || c.Profiles[0] != "python-strict" {
		t.Errorf("parsed %v", c.Profiles)
	}
	if c, _ := ParseConfig(nil); len(c.Profiles) != 1 || c.Profiles[0] != "python" {
		t.Errorf("default %v", c.Profiles)
	}
	for _, bad := range []struct{ toml, want string }{
		{"profiles = [\"nope\"]", "profiles[0] \"nope\" is not a built-in profile (python, python-strict)"},
		{"profiles = [\"python\", \"python\"]", "profiles[1] \"python\" is listed twice"},
		{"profiles = [\"/etc/rljail/x.toml\"]", "is not a built-in profile"},
	} {
		if _, err := ParseConfig([]byte(bad.toml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.toml, err, bad.want)
		}
	}
}

func TestRunProfile(t *testing.T) {
	progs := map[string]*seccomp.Program{"python": {Name: "python"}, "python-strict": {Name: "python-strict"}}
	c, err := ParseConfig([]byte("profiles = [\"python\", \"python-strict\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Config: c, Seccomp: progs, Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	for name, want := range map[string]string{"": "python", "python": "python", "python-strict": "python-strict"} {
		j, err := s.v1Job(&RunRequest{Command: []string{"true"}, Profile: name})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if got := s.jobSpec(j).Seccomp; got == nil || got.Name != want {
			t.Errorf("%q: program %v, want %s's", name, got, want)
		}
		cfg, err := s.sessionConfig(&SessionRequest{Profile: name})
		if err != nil || cfg.Spec.Seccomp == nil || cfg.Spec.Seccomp.Name != want {
			t.Errorf("session %q: %v %v", name, cfg.Spec.Seccomp, err)
		}
	}
	if _, err := s.v1Job(&RunRequest{Command: []string{"true"}, Profile: "other"}); err == nil || !strings.Contains(err.Error(), "profile \"other\" is not a profile this server permits (python, python-strict)") {
		t.Errorf("unknown profile: %v", err)
	}
	// A reload narrows what is permitted, and the default follows it; one
	// without a program set up at the start is refused.
	if err := s.Reload(Config{Profiles: []string{"python-strict"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.v1Job(&RunRequest{Command: []string{"true"}, Profile: "python"}); err == nil {
		t.Errorf("python after the reload: permitted")
	}
	if j, err := s.v1Job(&RunRequest{Command: []string{"true"}}); err != nil || s.jobSpec(j).Seccomp.Name != "python-strict" {
		t.Errorf("the default after the reload: %v", err)
	}
	s2 := New(Options{Seccomp: map[string]*seccomp.Program{"python": {Name: "python"}}})
	if err := s2.Reload(Config{Profiles: []string{"python-strict"}}, nil); err == nil || !strings.Contains(err.Error(), "no program set up at the start") {
		t.Errorf("a reload to a profile without a program: %v", err)
	}
}
