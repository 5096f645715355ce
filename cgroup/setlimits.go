package cgroup

import "fmt"

// SetLimits writes l into a jail's cgroup made earlier, before the jail's
// payload starts: a jail made ahead of its payload (jail.Prepared) gets
// its request's memory, pids and CPU limits so. The mechanisms stay
// those of Create: a limit that had no controller then gets none now, and
// the caller refuses a change that would need one (a limit asked where
// Create's was zero, or the other way round), so nothing is weakened here.
func (c *Cgroup) SetLimits(l Limits) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("cgroup: set the limits: the cgroup is removed")
	}
	switch {
	case c.v2Leaf != "":
		var use []string
		for key, ctl := range map[string]string{LimitMemory: "memory", LimitPids: "pids", LimitCPU: "cpu"} {
			if c.mechanisms[key] == MechanismCgroup2 {
				use = append(use, ctl)
			}
		}
		_, err := limitV2(c.v2Leaf, use, l)
		return err
	case len(c.v1Dirs) > 0:
		_, err := limitV1(c.v1Dirs, l)
		return err
	}
	return nil
}
