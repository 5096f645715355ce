package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/egress"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
)

// egressFromFlags builds the run's egress from --allow-host and --resolve
// and the profile's [network] table; nil (no egress made at all) when no
// host is allowed. A pin to an address that is not public is announced
// with one notice (List.PinNotice), --verbose or not.
func egressFromFlags(c *cli.Context, set map[string]bool, prof *profiles.Profile, notice func(string, ...any)) (jail.Egress, error) {
	allow := append(append([]string(nil), prof.Network.Allow...), c.StringSlice("allow-host")...)
	if len(allow) == 0 {
		for _, f := range []string{"resolve", "egress-max-conns", "egress-max-bytes", "egress-idle-timeout"} {
			if set[f] {
				return nil, fmt.Errorf("--%s needs --allow-host: without it the jail has no network", f)
			}
		}
		return nil, nil
	}
	var lim egress.Limits
	var err error
	if set["egress-max-conns"] {
		n := c.Int64("egress-max-conns")
		if n < 1 || n > 4096 {
			return nil, fmt.Errorf("--egress-max-conns %d is not from 1 to 4096", n)
		}
		lim.MaxConns = int(n)
	}
	if set["egress-max-bytes"] {
		if lim.MaxBytes, err = parseSize("egress-max-bytes", c.String("egress-max-bytes")); err != nil {
			return nil, err
		}
		if lim.MaxBytes <= 0 {
			return nil, fmt.Errorf("--egress-max-bytes must be positive")
		}
	}
	if set["egress-idle-timeout"] {
		if lim.IdleTimeout, err = parseDuration("egress-idle-timeout", c.String("egress-idle-timeout")); err != nil {
			return nil, err
		}
		if lim.IdleTimeout <= 0 {
			return nil, fmt.Errorf("--egress-idle-timeout must be positive")
		}
	}
	var notify func(string)
	if c.Bool("verbose") {
		notify = func(msg string) { notice("%s", msg) }
	}
	from := fmt.Sprintf("profile %q [network] ", prof.Name)
	e, pin, err := egress.FromLists([]egress.Source{
		{AllowFrom: from + "allow", ResolveFrom: from + "resolve", Allow: prof.Network.Allow, Resolve: prof.Network.Resolve},
		{AllowFrom: "--allow-host", ResolveFrom: "--resolve", Allow: c.StringSlice("allow-host"), Resolve: c.StringSlice("resolve")},
	}, lim, notify)
	if err != nil {
		return nil, err
	}
	if pin != "" {
		notice("%s", pin)
	}
	return e, nil
}
