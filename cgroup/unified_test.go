//go:build !cgroupv2vm

package cgroup

import "testing"

// The development host is hybrid: its cgroup2 tree at /sys/fs/cgroup/unified
// is real but holds no limit controller. The v2 code runs against it for
// real; the limits themselves are tested in the VM (v2_vm_test.go).
var hybridUnified = v2Env{mount: "/sys/fs/cgroup/unified"}

func TestUnifiedOwn(t *testing.T)          { testV2Own(t, hybridUnified) }
func TestUnifiedShared(t *testing.T)       { testV2Shared(t, hybridUnified) }
func TestUnifiedRootless(t *testing.T)     { testV2Rootless(t, hybridUnified) }
func TestUnifiedParent(t *testing.T)       { testV2Parent(t, hybridUnified) }
func TestUnifiedSetupFailure(t *testing.T) { testV2SetupFailure(t, hybridUnified) }
func TestUnifiedNoLeftovers(t *testing.T)  { testV2NoLeftovers(t, hybridUnified) }

// TestHostLayout: without a test layout, this hybrid host is driven through
// its v1 hierarchies, not the controller-less cgroup2 tree.
func TestHostLayout(t *testing.T) {
	h, err := probe("", ManagerAuto, layout{})
	if err != nil {
		t.Fatal(err)
	}
	if h.unified {
		t.Fatal("the hybrid host was taken for a unified one")
	}
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if hy := h.v1[ctl]; !hy.mounted || !hy.exists || hy.writable != nil {
			t.Errorf("%s hierarchy: %+v", ctl, hy)
		}
	}
}
