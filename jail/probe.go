package jail

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// probeArg0 selects the probe stage: a child in the same namespaces as a
// jail that checks it may mount there, then exits.
const probeArg0 = "rljail-probe"

// Probe creates the namespaces a jail uses and checks that a mount works
// inside them, without a rootfs. rljail check reports its error; AppArmor's
// restriction of unprivileged user namespaces (Ubuntu 24.04) shows up here
// as a failed mount rather than a failed clone.
func Probe() error {
	return probe("")
}

// ProbeOverlay checks, in the namespaces of a jail, that a read-only
// overlayfs with two lower layers can be mounted, as init does to present
// read-only directories without their host paths (see mount.go). Where it
// cannot, runs bind those directories plainly and warn.
func ProbeOverlay() error {
	return probe("overlay")
}

func probe(what string) error {
	capLast, err := readCapLast()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	pidfd := -1
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{probeArg0, what},
		Env:         []string{},
		Stderr:      &stderr,
		SysProcAttr: namespaceAttrs(os.Geteuid() == 0, capLast, &pidfd),
	}
	if err := cmd.Start(); err != nil {
		return startError(err)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("inside the namespaces: %s", msg)
	}
	return nil
}

// probeMain is the probe stage's body.
func probeMain() {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "make the mount tree private: %v\n", err)
		os.Exit(1)
	}
	fd, err := tmpfs("0755", 4096, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mount a tmpfs: %v\n", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "overlay" {
		if err := probeOverlay(fd); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	unix.Close(fd)
	os.Exit(0)
}

// probeOverlay mounts a read-only overlay of two directories of the tmpfs
// fd, attached over /tmp of this private mount namespace (overlayfs wants
// its layers attached).
func probeOverlay(fd int) error {
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, "/tmp", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach a tmpfs: %w", err)
	}
	for _, d := range []string{"/tmp/a", "/tmp/b", "/tmp/m"} {
		if err := unix.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := unix.Mount("rljail", "/tmp/m", "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir=/tmp/a:/tmp/b"); err != nil {
		return fmt.Errorf("mount overlayfs: %w", err)
	}
	return nil
}
