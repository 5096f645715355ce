package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/cgroup"
	"github.com/rljail/rljail/hostcheck"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/rootfs"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:         "check",
		Usage:        "report what this host allows and what rljail will do; exit 0 when a jail can run, 1 when not",
		OnUsageError: usageError,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rootfs", Usage: "rootfs directory to check"},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "check placement below this cgroup, as a run with --cgroup-parent would"},
			&cli.StringFlag{Name: "cgroup-manager", Value: "auto", Usage: "check placement with this cgroup manager (auto, cgroupfs, systemd), as a run would"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			// Bad flags are bad input (125), as to a run, not a failed check.
			if err := emptyValue(c, "rootfs", "cgroup-manager", "cgroup-parent"); err != nil {
				return err
			}
			if _, err := cgroup.ParseManager(c.String("cgroup-manager")); err != nil {
				return setupError("%v", err)
			}
			flag := c.String("rootfs")
			report := hostcheck.Run(hostcheck.Options{
				Binary:       jail.CheckBinary,
				ProbeUserns:  jail.Probe,
				ProbeOverlay: jail.ProbeOverlay,
				Limits: func() (string, []string, error) {
					timeout, err := systemdTimeout()
					if err != nil {
						return "", nil, err
					}
					opts := cgroup.Options{
						Parent:         c.String("cgroup-parent"),
						Manager:        cgroup.Manager(c.String("cgroup-manager")),
						ManagerTimeout: timeout,
						Limits:         cgroup.Limits{MemoryBytes: jail.DefaultMemory, PidsMax: jail.DefaultPids, CPUs: jail.DefaultCPUs, PidsByRlimit: cgroup.NprocPerUserNS()},
					}
					pl, mech, fallbacks, err := cgroup.Preview(opts)
					if err != nil {
						return "", nil, err
					}
					manager, err := cgroup.DescribeManager(opts)
					if err != nil {
						return "", nil, err
					}
					// Linux 5.14 counts these per user namespace: in the jail's
					// they count the jail alone (docs/limits.md, "Fallbacks without a cgroup").
					ucounts := "RLIMIT_NPROC and RLIMIT_SIGPENDING count per user namespace (Linux 5.14): the jail's own tasks and queued signals"
					if !cgroup.NprocPerUserNS() {
						ucounts = "RLIMIT_NPROC and RLIMIT_SIGPENDING count every process of the host user (before Linux 5.14)"
					}
					return fmt.Sprintf("jail cgroups: %s; memory by %s, pids by %s, cpus by %s, cpu-time by %s; cgroup manager: %s; %s",
						pl, mech[cgroup.LimitMemory], mech[cgroup.LimitPids], mech[cgroup.LimitCPU], mech[cgroup.LimitCPUTime], manager, ucounts), fallbacks, nil
				},
				Rootfs: func() (string, error) {
					dir, namedBy, err := locateRootfs(flag, "")
					if err != nil {
						return "", err
					}
					m, build, err := rootfsVerdict(dir, namedBy)
					if err != nil {
						return "", err
					}
					if build {
						return "", fmt.Errorf("no Python rootfs at %s yet: %w", dir, hostcheck.ErrFirstRunBuilds)
					}
					if err := rootfs.CheckFingerprint(dir); err != nil {
						return "", err // every run would refuse it
					}
					return fmt.Sprintf("Python %s at %s (%d files, %.1f MB)", m.PythonVersion, dir, m.Files, float64(m.SizeBytes)/1e6), nil
				},
			})
			if c.Bool("json") {
				b, _ := json.MarshalIndent(report, "", "  ")
				fmt.Fprintln(c.App.Writer, string(b))
			} else if err := report.WriteText(c.App.Writer); err != nil {
				return err
			}
			if !report.CanRun() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
}
