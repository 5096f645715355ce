package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/profiles"
)

func profilesCommand() *cli.Command {
	return &cli.Command{
		Name:         "profiles",
		Usage:        "list the embedded profiles or show one's effective policy",
		OnUsageError: usageError,
		Action:       unknownSubcommand("list, show NAME"),
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the embedded profiles",
				Action: func(c *cli.Context) error {
					for _, n := range profiles.Names() {
						p, err := profiles.Load(n)
						if err != nil {
							return err
						}
						fmt.Fprintf(c.App.Writer, "%-14s %d syscall rules, violations: %s\n", n, len(p.Policy.Rules), p.Policy.Violation)
					}
					return nil
				},
			},
			{
				Name:      "show",
				Usage:     "print a profile's effective policy: every syscall and argument rule, and its defaults",
				ArgsUsage: "NAME|FILE",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return setupError("usage: rljail profiles show NAME|FILE")
					}
					p, err := profiles.Load(c.Args().First())
					if err != nil {
						return setupError("%v", err)
					}
					w := c.App.Writer
					fmt.Fprintf(w, "# source: %s\n", p.Source)
					fmt.Fprint(w, p.Policy.String())
					if p.Timeout != 0 || len(p.Env) > 0 || len(p.Volumes) > 0 || p.Workdir != "" || p.Rootfs != "" {
						fmt.Fprintf(w, "defaults: timeout=%s env=%q volumes=%q workdir=%q rootfs=%q\n", p.Timeout, p.Env, p.Volumes, p.Workdir, p.Rootfs)
					}
					return nil
				},
			},
		},
	}
}
