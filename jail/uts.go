package jail

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setupNamespaces configures the namespaces that need no filesystem: the
// UTS names and the loopback interface of the empty network namespace.
func setupNamespaces() error {
	if err := unix.Sethostname([]byte(Hostname)); err != nil {
		return fmt.Errorf("set the hostname: %w", err)
	}
	if err := unix.Setdomainname([]byte("(none)")); err != nil {
		return fmt.Errorf("set the domain name: %w", err)
	}
	return loopbackUp()
}

// loopbackUp brings up lo, the only interface of the jail's network
// namespace: local servers work, nothing leaves.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring up lo: socket: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: read flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	return nil
}
