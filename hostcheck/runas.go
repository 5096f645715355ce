package hostcheck

import (
	"fmt"
	"os"
)

// The jail's identity. They mirror jail.JailUID and the host id package
// jail maps it to as root; this package does not import jail.
const (
	jailUID       = 1000
	hostNobodyUID = 65534
)

// checkRunningAs reports who runs rljail and whom the jail's user is on
// the host.
func checkRunningAs() Item {
	return runningAsItem(os.Getuid(), os.Geteuid())
}

// runningAsItem describes the uid mapping for a real and effective uid.
// As root the jail's user maps to nobody, never to root; rootless it maps
// to the invoking user, so the jail can do nothing that user cannot.
func runningAsItem(uid, euid int) Item {
	it := Item{Name: "running as", OK: true}
	switch {
	case euid == 0 && uid == 0:
		it.Detail = fmt.Sprintf("root: jail uid %d -> host uid %d (nobody)", jailUID, hostNobodyUID)
	case euid == 0:
		it.Detail = fmt.Sprintf("root (uid %d, euid 0): jail uid %d -> host uid %d (nobody)", uid, jailUID, hostNobodyUID)
	default:
		it.Detail = fmt.Sprintf("rootless (uid %d): jail uid %d -> host uid %d", uid, jailUID, uid)
	}
	return it
}
