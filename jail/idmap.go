package jail

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// When rljail runs as root, the jail's user is a host uid of its own
// (hostids.go), which could not read a project below /root. Read-only
// volumes (-v without rw) are therefore idmapped mounts (Linux 5.12+): the
// owner of the granted tree appears, inside the jail, as the jail's own
// user, so the jail can read what the owner can read there, and nothing
// else. That is what granting a path with -v means. The default workspace
// (the current directory) is not idmapped: the kernel checks the jail's
// own host uid against the real modes, so the jail reads there only what
// any other user could (a 0600 file of root's in a root-owned /tmp, say,
// stays unread; the old idmapping of the workspace read it). A writable
// volume is idmapped only when its owner is a user other than root (and
// not an id jails run as): the jail then writes as that user, as a
// rootless jail of that user would; through root's it would write as host
// root and could leave a setuid-root program held back by seccomp alone,
// so there it writes as its own host uid, through an ACL entry for the run
// (rwgrant.go). (The technique is the one of mount_setattr(2),
// MOUNT_ATTR_IDMAP.)

// idmapper hands out user namespaces that map a host owner to the jail's
// host ids, one per distinct owner, and releases them at the end of the
// setup.
type idmapper struct {
	hostUID, hostGID int
	byOwner          map[[2]int]int // (uid, gid) -> user namespace fd
}

// apply makes the detached mount fd an idmapped mount for the owner of
// the granted path p.
func (m *idmapper) apply(fd int, p string) error {
	// The owner of the very tree that was cloned, not of whatever the path
	// names now.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	owner := [2]int{int(st.Uid), int(st.Gid)}
	userns, ok := m.byOwner[owner]
	if !ok {
		var err error
		userns, err = ownerUserns(owner[0], owner[1], m.hostUID, m.hostGID)
		if err != nil {
			return err
		}
		if m.byOwner == nil {
			m.byOwner = map[[2]int]int{}
		}
		m.byOwner[owner] = userns
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmapped mount of uid %d: %w; the filesystem does not support it", owner[0], err)
	}
	return nil
}

// close releases the user namespaces; mounts made with them keep theirs.
func (m *idmapper) close() {
	for _, fd := range m.byOwner {
		unix.Close(fd)
	}
}

// ownerUserns returns a user namespace fd whose map sends uid to hostUID
// and gid to hostGID. The namespace is made by a child that exits at once
// (usernsChild); its maps are written and the namespace opened while the
// child is a zombie, then it is reaped.
func ownerUserns(uid, gid, hostUID, hostGID int) (int, error) {
	pid, errno := usernsChild()
	if pid < 0 {
		return -1, fmt.Errorf("create an id-mapping user namespace: %w", unix.Errno(errno))
	}
	defer func() {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
	}()
	dir := "/proc/" + strconv.Itoa(pid)
	writes := []struct{ file, content string }{
		{"uid_map", fmt.Sprintf("%d %d 1\n", uid, hostUID)},
		{"setgroups", "deny"},
		{"gid_map", fmt.Sprintf("%d %d 1\n", gid, hostGID)},
	}
	for _, w := range writes {
		if err := os.WriteFile(dir+"/"+w.file, []byte(w.content), 0); err != nil {
			return -1, fmt.Errorf("write the id map of an id-mapping user namespace: %w", err)
		}
	}
	fd, err := unix.Open(dir+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open an id-mapping user namespace: %w", err)
	}
	return fd, nil
}

// usernsChild creates a user namespace that no process stays in: a child
// made in it exits at once and is left unreaped, so that the caller can
// still write the namespace's id maps and open it through /proc/PID
// (a zombie keeps its credentials until reaped), then reap it. It returns
// the pid, or -1 and the errno (entry_amd64.s).
func usernsChild() (pid, errno int)
