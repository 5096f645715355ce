package serve

import (
	"strings"
	"testing"
)

func TestAllowedCallback(t *testing.T) {
	allow := []string{"http://127.0.0.1:9000/calls/", "https://Runner.Example"}
	var prefixes []callbackPrefix
	for _, a := range allow {
		p, err := parseCallbackPrefix(a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		prefixes = append(prefixes, p)
	}
	for _, c := range []struct {
		url  string
		want string // "" taken, else part of the refusal
	}{
		{"http://127.0.0.1:9000/calls/", ""},
		{"http://127.0.0.1:9000/calls/s1?x=1", ""},
		{"http://127.0.0.1:9000/calls", ""},
		{"https://runner.example/any/path", ""},
		{"https://runner.example:443/", ""},
		{"https://RUNNER.example", ""},
		{"http://127.0.0.1:9000/callsX", "not below a place"},
		{"http://127.0.0.1:9000/other", "not below a place"},
		{"http://127.0.0.1:9001/calls/", "not below a place"},
		{"https://127.0.0.1:9000/calls/", "not below a place"},
		{"http://localhost:9000/calls/", "not below a place"},
		{"http://runner.example/", "not below a place"},
		{"https://runner.example.evil/", "not below a place"},
		{"http://127.0.0.1:9000/calls/../admin", ". or .. segments"},
		{"http://127.0.0.1:9000/calls/%2e%2e/admin", ". or .. segments"},
		{"http://user:pw@127.0.0.1:9000/calls/", "no user or password"},
	} {
		err := allowedCallback(c.url, prefixes)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.url, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want a refusal saying %q", c.url, err, c.want)
		}
	}
	if err := allowedCallback("http://10.0.0.1/", nil); err != nil {
		t.Errorf("no callback_allow: %v", err)
	}
}

func TestCallbackAllowConfig(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{"[sessions]\ncallback_allow = [\"http://127.0.0.1:9000/calls/\"]\n", ""},
		{"[sessions]\ncallback_allow = [\"ftp://x/\"]\n", "callback_allow[0]: \"ftp://x/\": the scheme must be http or https"},
		{"[sessions]\ncallback_allow = [\"http:///x\"]\n", "callback_allow[0]: \"http:///x\" has no host"},
		{"[sessions]\ncallback_allow = [\"http://a/\", \"http://b/../c\"]\n", "callback_allow[1]"},
	} {
		_, err := ParseConfig([]byte(c.toml))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.toml, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.toml, err, c.want)
		}
	}
}
