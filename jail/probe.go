package jail

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

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

// namespaceAttrs are the clone settings of the probe: the namespaces and
// id maps of a jail (which stage1_main in init.c makes for a run), made
// through Go's own clone, and (as ambient capabilities) the rights to
// mount in them.
func namespaceAttrs(root bool, capLast int, pidfd *int) *syscall.SysProcAttr {
	ambient := make([]uintptr, 0, capLast+1)
	for c := 0; c <= capLast; c++ {
		ambient = append(ambient, uintptr(c))
	}
	hostUID, hostGID := os.Getuid(), os.Getgid()
	if root {
		hostUID, hostGID = overflowID, overflowID
	}
	return &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
			unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: JailUID, HostID: hostUID, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: JailGID, HostID: hostGID, Size: 1}},
		GidMappingsEnableSetgroups: root,
		// As root the supplementary groups (root's among them) are cleared;
		// rootless, setgroups is denied and the user's own groups stay,
		// which grant nothing the user could not do.
		Credential:  &syscall.Credential{Uid: JailUID, Gid: JailGID, Groups: []uint32{}, NoSetGroups: !root},
		AmbientCaps: ambient,
		Setsid:      true,
		PidFD:       pidfd,
	}
}

// startError turns a failed clone into one actionable line, in the words
// of clone_error in init.c, which says it for a run.
func startError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("cannot create the jail's namespaces: %w; see rljail check", unwrapPathError(err))
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("cannot create the jail's namespaces: the per-user namespace limit is reached (user.max_user_namespaces): %w", unwrapPathError(err))
	case errors.Is(err, unix.EUSERS):
		return fmt.Errorf("cannot create the jail's namespaces: too many nested user namespaces: %w", unwrapPathError(err))
	}
	return fmt.Errorf("start the jail: %w", err)
}
