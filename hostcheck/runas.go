package hostcheck

import (
	"fmt"
	"os"
)

// The jail's identity. They mirror jail.JailUID and the default range of
// host ids package jail maps it to as root (jail.IDRangeBase and
// jail.IDRangeCount); this package does not import jail.
const (
	jailUID     = 1000
	idRangeBase = 2130706432
	idRangeSize = 65536
)

// checkRunningAs reports who runs rljail and whom the jail's user is on
// the host.
func checkRunningAs() Item {
	return runningAsItem(os.Getuid(), os.Geteuid())
}

// runningAsItem describes the uid mapping for a real and effective uid.
// As root the jail's user maps to a host uid of each jail's own, never to
// root; rootless it maps to the invoking user, so the jail can do nothing
// that user cannot.
func runningAsItem(uid, euid int) Item {
	it := Item{Name: "running as", OK: true}
	switch {
	case euid == 0 && uid == 0:
		it.Detail = fmt.Sprintf("root: jail uid %d -> %s", jailUID, rootRange())
	case euid == 0:
		it.Detail = fmt.Sprintf("root (uid %d, euid 0): jail uid %d -> %s", uid, jailUID, rootRange())
	default:
		it.Detail = fmt.Sprintf("rootless (uid %d): jail uid %d -> host uid %d", uid, jailUID, uid)
	}
	return it
}

// rootRange says which host uid a root-run jail's user is.
// A function, not a package variable: formatted at init it cost every run.
func rootRange() string {
	return fmt.Sprintf("a host uid of each jail's own, from %d (%d ids; rljail's entry in /etc/subuid when there is one)", idRangeBase, idRangeSize)
}
