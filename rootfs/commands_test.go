package rootfs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBusyboxApplets: every applet linked is one the host's busybox has
// (a link to a missing applet would say "applet not found" in the jail).
func TestBusyboxApplets(t *testing.T) {
	if _, err := os.Stat(hostBusybox); err != nil {
		t.Skipf("no %s (Debian's busybox-static): %v", hostBusybox, err)
	}
	out, err := exec.Command(hostBusybox, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		have[a] = true
	}
	for _, a := range busyboxApplets {
		if !have[a] {
			t.Errorf("%s has no applet %q", hostBusybox, a)
		}
		if a == "sh" {
			t.Errorf("sh is linked to busybox: the rootfs's /bin/sh is dash")
		}
	}
}
