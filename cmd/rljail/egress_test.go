package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/egress"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
)

// egressOf runs egressFromFlags on the run command's own flags, as rljail
// run would parse args, and returns the egress, the notices printed
// and the error.
func egressOf(t *testing.T, prof *profiles.Profile, args ...string) (jail.Egress, []string, error) {
	t.Helper()
	cmd := runCommand(strings.NewReader(""), io.Discard, io.Discard)
	var (
		eg      jail.Egress
		err     error
		notices []string
	)
	cmd.Action = func(c *cli.Context) error {
		eg, err = egressFromFlags(c, flagsSet(c), prof, func(format string, a ...any) {
			notices = append(notices, fmt.Sprintf(format, a...))
		})
		return nil
	}
	app := &cli.App{Name: "rljail", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if runErr := app.Run(append([]string{"rljail", "run"}, append(args, "--", "true")...)); runErr != nil {
		t.Fatalf("%q: the flags did not parse: %v", args, runErr)
	}
	if eg != nil {
		t.Cleanup(func() { eg.Close() })
	}
	return eg, notices, err
}

// TestAllowHostForms: the forms a user writes (issue 30) make an egress
// whose report lists the rules as written; a bad one is one line that
// names the flag and the value, never a parser's internals.
func TestAllowHostForms(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--allow-host", "http://api.test:8080"}},
		{args: []string{"--allow-host", "https://api.test"}},
		{args: []string{"--allow-host", "http://api.test/"}},
		{args: []string{"--allow-host", "api.test:8080"}},
		{args: []string{"--allow-host", "*.example.org:443", "--allow-host", "10.0.0.0/8:443", "--allow-host", "[::1]:8080"}},
		{args: []string{"--allow-host", "http://api.test:8080", "--resolve", "api.test:10.99.0.1"}},
		{args: []string{"--allow-host", "http://api.test:8080/v1"}, wantErr: `--allow-host "http://api.test:8080/v1": a rule allows a whole host and port, not the path "/v1": write http://api.test:8080`},
		{args: []string{"--allow-host", "gopher://api.test"}, wantErr: `--allow-host "gopher://api.test": the scheme "gopher"`},
		{args: []string{"--allow-host", "api.test/"}, wantErr: `--allow-host "api.test/": `},
		{args: []string{"--allow-host", "10.0.0.0/99"}, wantErr: `--allow-host "10.0.0.0/99": not a CIDR`},
		{args: []string{"--allow-host", "api.test", "--resolve", "api.test:http://10.0.0.1"}, wantErr: `--resolve "api.test:http://10.0.0.1": `},
		{args: []string{"--resolve", "api.test:10.0.0.1"}, wantErr: "--resolve needs --allow-host"},
	} {
		eg, _, err := egressOf(t, &profiles.Profile{Name: "python"}, c.args...)
		if c.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
				t.Errorf("%q: %v; want an error starting %q", c.args, err, c.wantErr)
				continue
			}
			msg := err.Error()
			if msg != oneLine(msg) || strings.Contains(msg, "netip") || strings.Contains(msg, "Parse") {
				t.Errorf("%q: %q is not one plain line", c.args, msg)
			}
			continue
		}
		if err != nil || eg == nil {
			t.Errorf("%q: %v, %v", c.args, eg, err)
		}
	}
}

// TestProfileEntryNamed: a bad entry of a profile's [network] table is
// named as the profile's, not as a flag the user did not type.
func TestProfileEntryNamed(t *testing.T) {
	prof := &profiles.Profile{Name: "net.toml", Network: profiles.Network{Allow: []string{"http://api.test/x"}}}
	_, _, err := egressOf(t, prof)
	if err == nil || !strings.HasPrefix(err.Error(), `profile "net.toml" [network] allow "http://api.test/x": `) {
		t.Errorf("a profile's bad rule: %v", err)
	}
	prof = &profiles.Profile{Name: "net.toml", Network: profiles.Network{Allow: []string{"api.test"}, Resolve: []string{"api.test:nowhere"}}}
	if _, _, err = egressOf(t, prof); err == nil || !strings.HasPrefix(err.Error(), `profile "net.toml" [network] resolve "api.test:nowhere": `) {
		t.Errorf("a profile's bad pin: %v", err)
	}
}

// TestPinNoticeOnce: pins to addresses that are not public get one
// notice, whatever --verbose says, and the report lists every pin; the
// command line's pin replaces the profile's for the same name.
func TestPinNoticeOnce(t *testing.T) {
	prof := &profiles.Profile{Name: "p", Network: profiles.Network{Resolve: []string{"api.test:192.0.2.7"}}}
	eg, notices, err := egressOf(t, prof, "--allow-host", "http://api.test:8080", "--allow-host", "db.test:5432",
		"--resolve", "api.test:10.99.0.1", "--resolve", "db.test:127.0.0.1", "--resolve", "pub.test:93.184.216.34")
	if err != nil {
		t.Fatal(err)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "api.test 10.99.0.1 (a private address)") || !strings.Contains(notices[0], "db.test 127.0.0.1 (a loopback address)") {
		t.Fatalf("notices %q; want one naming both pins", notices)
	}
	rep := eg.(*egress.Server).Close()
	var got []string
	for _, p := range rep.Resolve {
		got = append(got, p.Name+"="+p.Address)
	}
	if strings.Join(got, " ") != "api.test=10.99.0.1 db.test=127.0.0.1 pub.test=93.184.216.34" {
		t.Errorf("the report's resolve is %v", got)
	}
	if _, notices, _ := egressOf(t, &profiles.Profile{Name: "p"}, "--allow-host", "pub.test", "--resolve", "pub.test:93.184.216.34"); len(notices) != 0 {
		t.Errorf("a public pin got notices %q", notices)
	}
}
