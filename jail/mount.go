package jail

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The jail's root is built with the new mount API (open_tree, fsopen,
// fsmount, move_mount, mount_setattr): every mount is made detached, given
// its final flags while nobody else can see it, then attached at a
// mountpoint that was resolved inside the new root (RESOLVE_IN_ROOT), so a
// symlink in the rootfs or a volume can never point a mount at the host.

// skeletonParent is where init attaches the new root before pivot_root.
// It is only covered inside init's private mount namespace, after every
// host path has been opened, so hiding it costs nothing.
const skeletonParent = "/tmp"

// deviceNodes are the only devices the jail sees, bind-mounted from the
// host's /dev (a user namespace cannot mknod).
var deviceNodes = []string{"null", "zero", "full", "random", "urandom"}

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
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attrs}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set mount flags on %s: %w", name, err)
	}
	return fd, nil
}

// cloneHostPath clones the mount of a host path that Validate resolved to
// its canonical form. The path is opened again without following any
// symlink (RESOLVE_NO_SYMLINKS) and the tree is cloned from that very
// descriptor, so a component swapped for a symlink since the check (by a
// jail writing to a shared directory, say) makes the run fail rather than
// mount something else.
func cloneHostPath(p string, attrs uint64) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
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

// deviceAttrs are the flags for a bind-mounted device node: read-only so it
// cannot be chmod-ed, and it must not be nodev.
const deviceAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC

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

// attach moves the detached mount fd onto the mountpoint fd and closes fd.
func attach(fd, target int, what string) error {
	defer unix.Close(fd)
	err := unix.MoveMount(fd, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("attach %s: %w", what, err)
	}
	return nil
}

// resolveInRoot opens p (absolute, inside the jail) relative to root
// without ever leaving root, whatever symlinks say.
func resolveInRoot(root int, p string, flags uint64) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// mountpoint returns an O_PATH descriptor of dest inside root, creating it
// (a directory, or an empty file when dir is false) and its parents where
// they are missing.
func mountpoint(root int, dest string, dir bool) (int, error) {
	if fd, err := resolveInRoot(root, dest, unix.O_PATH); err == nil {
		return fd, nil
	} else if !errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("open mountpoint %s: %w", dest, err)
	}
	parent, name := path.Split(dest)
	pfd, err := mountpoint(root, path.Clean(parent), true)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	// mkdirat/openat need a real directory fd, not O_PATH.
	dfd, err := unix.Openat(pfd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", parent, err)
	}
	defer unix.Close(dfd)
	if dir {
		if err := unix.Mkdirat(dfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("create mountpoint %s: %w", dest, err)
		}
	} else {
		f, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, fmt.Errorf("create mountpoint %s: %w", dest, err)
		}
		unix.Close(f)
	}
	fd, err := resolveInRoot(root, dest, unix.O_PATH)
	if err != nil {
		return -1, fmt.Errorf("open mountpoint %s: %w", dest, err)
	}
	return fd, nil
}

// attachAt attaches the detached mount fd at dest inside root.
func attachAt(root, fd int, dest string, dir bool) error {
	target, err := mountpoint(root, dest, dir)
	if err != nil {
		unix.Close(fd)
		return err
	}
	defer unix.Close(target)
	return attach(fd, target, dest)
}

// openGrantedTrees returns a detached mount for every bindMount: the one
// the supervisor passed, or (rootless) a clone made here, with the user's
// own rights. All of them are opened before anything is mounted over the
// host's paths.
func openGrantedTrees(mounts []bindMount) ([]int, error) {
	fds := make([]int, len(mounts))
	for i, m := range mounts {
		if m.FD >= 0 {
			fds[i] = m.FD
			continue
		}
		attrs := bindAttrs(m.Writable)
		if m.Device {
			attrs = deviceAttrs
		}
		fd, err := cloneHostPath(m.Source, attrs)
		if err != nil {
			closeAll(fds[:i])
			return nil, err
		}
		fds[i] = fd
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// buildRoot assembles the jail's root filesystem and pivots into it. On
// return the process's root is the new root, read-only, and the host's
// mount tree is detached.
func buildRoot(cfg *initConfig) error {
	// Nothing mounted from now on may propagate to the host, and nothing the
	// host mounts later may appear here.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount tree private: %w", err)
	}
	trees, err := openGrantedTrees(cfg.Mounts)
	if err != nil {
		return err
	}
	defer closeAll(trees) // attach closes each; this covers an early return

	skel, err := tmpfs("0755", 1<<20, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("root skeleton: %w", err)
	}
	if err := unix.MoveMount(skel, "", unix.AT_FDCWD, skeletonParent, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		unix.Close(skel)
		return fmt.Errorf("attach the root skeleton at %s: %w", skeletonParent, err)
	}
	unix.Close(skel)
	root, err := unix.Open(skeletonParent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the root skeleton: %w", err)
	}
	defer unix.Close(root)

	for _, l := range cfg.Symlinks {
		if err := unix.Symlinkat(l.Target, root, l.Name); err != nil {
			return fmt.Errorf("create /%s -> %s: %w", l.Name, l.Target, err)
		}
	}
	if err := writeEtc(root); err != nil {
		return err
	}
	// Scratch space and the device directory first, so that volumes may be
	// placed below /tmp.
	if err := mountTmpfsAt(root, "/dev", "0755", 64<<10, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
		return err
	}
	if err := mountTmpfsAt(root, "/tmp", "1777", cfg.TmpSize, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	for i, m := range cfg.Mounts {
		fd := trees[i]
		trees[i] = -1
		if err := attachAt(root, fd, m.Dest, m.Dir); err != nil {
			return err
		}
	}
	if err := populateDev(root, cfg.TmpSize); err != nil {
		return err
	}
	if err := readOnlyAt(root, "/dev"); err != nil {
		return err
	}
	if err := mountProc(root); err != nil {
		return err
	}
	return pivotInto(root)
}

func mountTmpfsAt(root int, dest, mode string, size int64, attrs int) error {
	fd, err := tmpfs(mode, size, attrs)
	if err != nil {
		return fmt.Errorf("%s: %w", dest, err)
	}
	return attachAt(root, fd, dest, true)
}

// populateDev adds the symlinks and /dev/shm; the device nodes themselves
// are bind mounts listed in cfg.Mounts.
func populateDev(root int, shmSize int64) error {
	dev, err := resolveInRoot(root, "/dev", unix.O_DIRECTORY|unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer unix.Close(dev)
	links := [][2]string{
		{"/proc/self/fd", "fd"},
		{"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"},
		{"/proc/self/fd/2", "stderr"},
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], dev, l[1]); err != nil {
			return fmt.Errorf("create /dev/%s: %w", l[1], err)
		}
	}
	return mountTmpfsAt(root, "/dev/shm", "1777", shmSize, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// readOnlyAt makes the mount at dest (not its submounts) read-only.
func readOnlyAt(root int, dest string) error {
	fd, err := resolveInRoot(root, dest, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("open %s: %w", dest, err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make %s read-only: %w", dest, err)
	}
	return nil
}

// pivotInto makes root the process's root and detaches the host's tree.
func pivotInto(root int) error {
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("chdir into the new root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// lazy unmount then drops it, with every host mount below it. (The
	// technique is documented in pivot_root(2).)
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	// The skeleton itself (/, /etc, mountpoints) becomes read-only; /tmp,
	// /dev/shm and rw volumes are mounts of their own and keep their flags.
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make / read-only: %w", err)
	}
	return nil
}

// writeEtc writes the jail's minimal /etc into the skeleton.
func writeEtc(root int) error {
	files := []struct{ name, content string }{
		{"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"rljail:x:" + strconv.Itoa(JailUID) + ":" + strconv.Itoa(JailGID) + ":rljail:/tmp:/usr/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{"group", "root:x:0:\nrljail:x:" + strconv.Itoa(JailGID) + ":\nnogroup:x:65534:\n"},
		{"hosts", "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"hostname", Hostname + "\n"},
		{"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"},
	}
	if err := unix.Mkdirat(root, "etc", 0o755); err != nil {
		return fmt.Errorf("create /etc: %w", err)
	}
	etc, err := unix.Openat(root, "etc", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /etc: %w", err)
	}
	defer unix.Close(etc)
	for _, f := range files {
		fd, err := unix.Openat(etc, f.name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create /etc/%s: %w", f.name, err)
		}
		file := os.NewFile(uintptr(fd), f.name)
		_, err = file.WriteString(f.content)
		file.Close()
		if err != nil {
			return fmt.Errorf("write /etc/%s: %w", f.name, err)
		}
	}
	return nil
}
