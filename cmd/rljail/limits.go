package main

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/cgroup"
	"github.com/rljail/rljail/jail"
)

// parseSize parses a byte size flag (jail.ParseSize), its error naming
// the flag.
func parseSize(flag, s string) (int64, error) {
	n, err := jail.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--%s %q %v", flag, s, err)
	}
	return n, nil
}

// resourcesFromFlags reads the limit flags; unset flags leave the jail's
// defaults.
func resourcesFromFlags(c *cli.Context, set map[string]bool) (jail.Resources, error) {
	var r jail.Resources
	var err error
	sizes := []struct {
		flag string
		into *int64
	}{
		{"memory", &r.MemoryBytes}, {"output-limit", &r.OutputBytes}, {"file-size", &r.FileSize},
	}
	for _, sz := range sizes {
		if set[sz.flag] {
			if *sz.into, err = parseSize(sz.flag, c.String(sz.flag)); err != nil {
				return r, err
			}
		}
	}
	if set["pids-limit"] {
		if r.PidsMax = c.Int64("pids-limit"); r.PidsMax <= 0 {
			return r, fmt.Errorf("--pids-limit %d must be positive", r.PidsMax)
		}
	}
	if set["nofile"] {
		if r.NoFile = c.Int64("nofile"); r.NoFile <= 0 {
			return r, fmt.Errorf("--nofile %d must be positive", r.NoFile)
		}
	}
	if set["cpus"] {
		if r.CPUs = c.Float64("cpus"); !(r.CPUs > 0) || math.IsInf(r.CPUs, 0) {
			return r, fmt.Errorf("--cpus %v must be a positive number", c.Float64("cpus"))
		}
	}
	if set["cpu-time"] {
		if r.CPUTime, err = parseDuration("cpu-time", c.String("cpu-time")); err != nil {
			return r, err
		}
	}
	r.CgroupParent = c.String("cgroup-parent")
	if set["cgroup-parent"] && r.CgroupParent == "" {
		return r, fmt.Errorf("--cgroup-parent: an empty value names no cgroup; give one, or leave the flag out")
	}
	if set["cgroup-manager"] && c.String("cgroup-manager") == "" {
		return r, fmt.Errorf("--cgroup-manager %q is not auto, cgroupfs or systemd", "")
	}
	if r.CgroupManager, err = cgroup.ParseManager(c.String("cgroup-manager")); err != nil {
		return r, err
	}
	if r.CgroupManagerTimeout, err = systemdTimeout(); err != nil {
		return r, err
	}
	r.Strict = c.Bool("strict-limits")
	return r, nil
}

// systemdTimeout reads $RLJAIL_SYSTEMD_TIMEOUT: the exchange with systemd
// is bounded at 2 s, and a machine that slow (a test VM under software
// emulation) may allow it more. Zero when unset.
func systemdTimeout() (time.Duration, error) {
	v := os.Getenv("RLJAIL_SYSTEMD_TIMEOUT")
	if v == "" {
		return 0, nil
	}
	d, err := parseDuration("x", v)
	if err != nil {
		return 0, fmt.Errorf("$RLJAIL_SYSTEMD_TIMEOUT %q is not a positive duration (such as 10s)", v)
	}
	return d, nil
}

// tmpSize reads --tmp-size.
func tmpSize(c *cli.Context, set map[string]bool) (int64, error) {
	if !set["tmp-size"] {
		return 0, nil
	}
	return parseSize("tmp-size", c.String("tmp-size"))
}

// summary is --verbose's one line.
func summary(r jail.Result) string {
	s := fmt.Sprintf("%s, exit %d, %d ms wall, %d ms user + %d ms system CPU, %.1f MiB memory peak, %d pids peak",
		r.Status, r.ExitCode, r.WallMS, r.CPUUserMS, r.CPUSystemMS, float64(r.MemoryPeakBytes)/(1<<20), r.PidsPeak)
	if r.OOMKills > 0 {
		s += fmt.Sprintf(", %d OOM kills", r.OOMKills)
	}
	s += fmt.Sprintf("; limits: memory %s, pids %s, cpus %s, cgroup %s",
		r.Limits.Memory.Mechanism, r.Limits.Pids.Mechanism, r.Limits.CPUs.Mechanism, r.Limits.Placement)
	return s
}
