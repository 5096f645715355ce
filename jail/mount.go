package jail

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// The jail's root is built (by init.c) with the new mount API (open_tree,
// fsopen, fsmount, move_mount, mount_setattr): every mount is made
// detached, given its final flags while nobody else can see it, then
// attached at a mountpoint resolved inside the new root (RESOLVE_IN_ROOT),
// so a symlink in the rootfs or a volume can never point a mount at the
// host. The supervisor's part is here: as root it clones the granted trees
// itself (the jail's host uid may not reach them) and passes them to init.

// Hiding host paths. A bind mount shows, in the jail's
// /proc/self/mountinfo, its root's path within the host filesystem and the
// host's device: the workspace would name the user's home and project. So
// init presents every read-only directory (the rootfs's directories, the
// workspace, read-only volumes) through a read-only overlayfs whose only
// real layer is the cloned tree, named by /proc/self/fd/N when it is
// mounted: mountinfo then shows root "/", source "rljail" and those fd
// paths. overlayfs without an upper layer copies nothing up and writes
// nothing. Writable volumes and single files stay plain binds (an overlay
// cannot write through to its lower layer, and its layers are
// directories), so their host paths show; SECURITY.md says so. Where
// overlayfs refuses a tree (too deep a stack of overlays below it, a
// kernel without overlayfs in user namespaces), the tree is bound as it
// is, with a warning on stderr and in the result.

// cloneTree makes a detached copy of the mount at path (not its submounts:
// a recursive copy could carry /proc or /sys of the host into the jail),
// with the given MOUNT_ATTR_* flags set.
func cloneTree(dirfd int, p, name string, attrs uint64) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if p == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, p, flags)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("clone mount of %s: %w (a directory with other filesystems mounted below it cannot be granted rootless; grant a path below it)", name, err)
		}
		return -1, fmt.Errorf("clone mount of %s: %w", name, err)
	}
	// Private: a clone of a shared mount (systemd makes / shared) would
	// otherwise be a peer of the host's, and what init mounts below it (a
	// nested volume) would appear, and stay, on the host.
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attrs, Propagation: unix.MS_PRIVATE}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set mount flags on %s: %w", name, err)
	}
	return fd, nil
}

// openPathNoLinks opens the absolute path p as an O_PATH descriptor
// through no symbolic link in any component (RESOLVE_NO_SYMLINKS; ELOOP
// where one is), so that what a check or a clone then judges is the very
// object the path named when it was opened.
func openPathNoLinks(p string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// cloneHostPath clones the mount of a host path that Validate resolved to
// its canonical form. The path is opened again without following any
// symlink (RESOLVE_NO_SYMLINKS) and the tree is cloned from that very
// descriptor, so a component swapped for a symlink since the check (by a
// jail writing to a shared directory, say) makes the run fail rather than
// mount something else.
func cloneHostPath(p string, attrs uint64) (int, error) {
	fd, err := openPathNoLinks(p)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("open %s: a component became a symlink after it was checked", p)
		}
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	return cloneTree(fd, "", p, attrs)
}

// bindAttrs are the mount flags for a granted path.
func bindAttrs(writable bool) uint64 {
	a := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if !writable {
		a |= unix.MOUNT_ATTR_RDONLY
	}
	return a
}

// newFS creates a detached filesystem mount (tmpfs, proc) with options.
func newFS(fstype string, opts [][2]string, attrs int) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fsfd)
	for _, o := range opts {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("%s option %s=%s: %w", fstype, o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create %s: %w", fstype, err)
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return -1, fmt.Errorf("fsmount %s: %w", fstype, err)
	}
	return fd, nil
}

func tmpfs(mode string, size int64, attrs int) (int, error) {
	return newFS("tmpfs", [][2]string{{"mode", mode}, {"size", strconv.FormatInt(size, 10)}}, attrs)
}
