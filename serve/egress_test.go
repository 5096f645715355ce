package serve

import (
	"strings"
	"testing"
)

func TestParseConfigEgress(t *testing.T) {
	c, err := ParseConfig([]byte("egress_allow = [\"api.example.com:443\", \"*.example.org:443\", \"127.0.0.1:8080\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EgressAllow) != 3 || c.EgressAllow[1].Name != "example.org" || !c.EgressAllow[1].Wildcard {
		t.Errorf("parsed %+v", c.EgressAllow)
	}
	for _, bad := range []struct{ toml, want string }{
		{"egress_allow = [\"*.com\"]", "egress_allow[0]: \"*.com\": a wildcard needs"},
		{"egress_allow = [\"a.example.com:0\"]", "egress_allow[0]"},
		{"egress_allow = [\"ok.example.com\", \"https://x.example.com/v1\"]", "egress_allow[1]"},
		{"egress_allow = \"api.example.com\"", "EgressAllow"},
	} {
		if _, err := ParseConfig([]byte(bad.toml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.toml, err, bad.want)
		}
	}
}

func TestRunEgress(t *testing.T) {
	c, err := ParseConfig([]byte("egress_allow = [\"api.example.com:443\", \"*.example.org:443\", \"10.0.0.0/24:80\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Config: c, Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	for _, ok := range [][]string{
		{"api.example.com:443"}, {"https://api.example.com"}, {"API.example.com:443"},
		{"a.example.org:443", "b.c.example.org:443"}, {"*.example.org:443"}, {"*.x.example.org:443"},
		{"10.0.0.7:80"}, {"10.0.0.0/25:80"},
	} {
		j, err := s.v1Job(&RunRequest{Command: []string{"true"}, Egress: ok})
		if err != nil {
			t.Errorf("%v: %v", ok, err)
			continue
		}
		e, err := jailEgress(j.egress)
		if err != nil || e == nil {
			t.Errorf("%v: the jail's egress %v %v", ok, e, err)
		}
	}
	for _, bad := range []struct {
		egress []string
		want   string
	}{
		{[]string{"api.example.com"}, "egress[0]: \"api.example.com\" is not covered"}, // 443 and 80
		{[]string{"api.example.com:443", "api.example.com:80"}, "egress[1]: \"api.example.com:80\" is not covered"},
		{[]string{"other.example.com:443"}, "egress[0]"},
		{[]string{"example.org:443"}, "egress[0]"}, // a wildcard covers subdomains only
		{[]string{"badexample.org:443"}, "egress[0]"},
		{[]string{"10.0.1.1:80"}, "egress[0]"},
		{[]string{"10.0.0.0/16:80"}, "egress[0]"},
		{[]string{"*.com:443"}, "egress[0]: \"*.com:443\": a wildcard needs"},
		{[]string{"api.example.com:443:1.2.3.4"}, "egress[0]"},
	} {
		_, err := s.v1Job(&RunRequest{Command: []string{"true"}, Egress: bad.egress})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.egress, err, bad.want)
		}
		if _, err := s.sessionConfig(&SessionRequest{Egress: bad.egress}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("session %v: %v, want %q", bad.egress, err, bad.want)
		}
	}
	// Without egress_allow nothing is permitted; none asked: no egress.
	s2 := New(Options{Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	if _, err := s2.v1Job(&RunRequest{Command: []string{"true"}, Egress: []string{"api.example.com:443"}}); err == nil || !strings.Contains(err.Error(), "it permits none") {
		t.Errorf("no egress_allow: %v", err)
	}
	if e, err := jailEgress(nil); e != nil || err != nil {
		t.Errorf("no entries: %v %v", e, err)
	}
}
