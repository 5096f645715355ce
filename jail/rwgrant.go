package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/hostfile"
)

// How a root-run jail writes a volume granted rw. Its user is a host uid
// of its own (hostids.go), which has no right in a directory its caller
// made (`mkdir out` as root: root's, 0755), so a plain bind of it left the
// payload a PermissionError (issue 30). What rljail does instead depends
// on the owner of the granted object's top, read from the very tree it
// cloned (writableGrant):
//
//   - A user other than root, and not an id jails run as: the mount is
//     idmapped as a read-only grant is (idmap.go), writable. The jail
//     writes there as that owner, with the owner's rights, exactly as a
//     rootless jail of that user would (SECURITY.md: the jail is then that
//     user for the files below the grant); what it creates is the owner's
//     from the start, so nothing of the jail's host ids is left there and
//     nothing is given back.
//   - Root: never idmapped, since the jail would then create files as host
//     root, and a setuid-root program left there would be kept out by
//     seccomp alone. The jail writes as its own host uid, through one entry
//     that rljail adds to the top's POSIX access ACL for the run,
//     user:UID:rwx (rw- on a single file), and takes out after it (before
//     the id can go to another jail; the lock file's mark names it should
//     the supervisor die first). No default ACL: what the jail makes below
//     is its own anyway, what root has below stays out of its reach, and a
//     file the host makes there meanwhile gets no entry of the jail's.
//     After the run everything the jail left there goes to nobody, as
//     before, never to root: a file root owns is trusted by root's own
//     programs for its owner alone (sudoers.d, cron.d, sshd's
//     authorized_keys, systemd units), and a jail's must not become one.
//     The caller reads the files (the jail's umask leaves them readable)
//     and, owning the directory, may remove or chown them.
//   - A user's volume that could not be idmapped (below): the jail's
//     regular files and directories are given to the owner after the run,
//     set-user-ID and set-group-ID bits taken off first and each regular
//     file marked JailWrittenAttr, so that rljail never reads one as its
//     caller's profile (hostfile); symbolic links, FIFOs and sockets go to
//     nobody.
//   - An id jails run as, or nobody (a directory an earlier jail made, or
//     was given): the ACL entry too, and everything goes to nobody.
//   - A top that every user may write already (mode o+wx, the chmod 1777
//     README once asked for): no ACL is needed, and the jail's files go to
//     nobody, as before; a directory that every user shares is no place
//     for files of root's made by a jail.
//
// Where the idmapped mount is refused (a filesystem that cannot idmap),
// the ACL is the fallback, announced, and refused by --strict-limits.
// Where no ACL can be added (a filesystem without POSIX ACLs), the run is
// refused at its start with one line that says what to do.

// JailWrittenAttr is the extended attribute rljail sets on a regular file
// a root-run jail made in a writable volume before it gives the file to
// the volume's owner (its value: the jail's host uid); hostfile.Guard
// refuses such a file as a profile or an env file, as it refuses one a
// jail's id owns.
const JailWrittenAttr = hostfile.JailWrittenAttr

// aclLockPath serializes the supervisors' changes of volumes' ACLs: two
// root runs granted the same volume at once each read the ACL, add or take
// out their entry and write it back, and without it one would undo the
// other's. It is the directory of the ids' lock files, flocked (not a file
// in it: no jail can reach it, /run/rljail is root's, 0700, and nothing
// else locks the directory itself); the first step made it before any
// volume is granted.
const aclLockPath = IDLockDir

// POSIX ACLs as the kernel stores them in system.posix_acl_access
// (include/uapi/linux/posix_acl_xattr.h): a version, then entries of a
// tag, permissions and an id, sorted by tag and id.
const (
	aclAttr        = "system.posix_acl_access"
	aclVersion     = 2
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclGroup       = 0x08
	aclMask        = 0x10
	aclOther       = 0x20
	aclUndefinedID = 0xffffffff
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// parseACL decodes a system.posix_acl_access value.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, fmt.Errorf("not a POSIX ACL of version %d (%d bytes)", aclVersion, len(b))
	}
	var out []aclEntry
	for p := b[4:]; len(p) > 0; p = p[8:] {
		out = append(out, aclEntry{tag: binary.LittleEndian.Uint16(p), perm: binary.LittleEndian.Uint16(p[2:]), id: binary.LittleEndian.Uint32(p[4:])})
	}
	return out, nil
}

// encodeACL encodes entries, sorted as the kernel wants them.
func encodeACL(entries []aclEntry) []byte {
	sorted := append([]aclEntry(nil), entries...)
	sort.Slice(sorted, func(i, k int) bool {
		if sorted[i].tag != sorted[k].tag {
			return sorted[i].tag < sorted[k].tag
		}
		return sorted[i].id < sorted[k].id
	})
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range sorted {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// modeACL is the ACL equivalent to a mode's permission bits.
func modeACL(mode uint32) []aclEntry {
	return []aclEntry{
		{tag: aclUserObj, perm: uint16(mode>>6) & 7, id: aclUndefinedID},
		{tag: aclGroupObj, perm: uint16(mode>>3) & 7, id: aclUndefinedID},
		{tag: aclOther, perm: uint16(mode) & 7, id: aclUndefinedID},
	}
}

// withJailEntry returns entries with user:uid:perm added (replacing any
// entry of uid) and a mask that lets it through. An existing mask that
// would have to widen is refused: it would give the ACL's other named
// entries rights their owner took away.
func withJailEntry(entries []aclEntry, uid int, perm uint16) ([]aclEntry, error) {
	var out []aclEntry
	var groupObj uint16
	mask := -1
	for _, e := range entries {
		switch {
		case e.tag == aclUser && e.id == uint32(uid):
			continue
		case e.tag == aclMask:
			mask = int(e.perm)
			continue
		case e.tag == aclGroupObj:
			groupObj = e.perm
		}
		out = append(out, e)
	}
	named := false
	for _, e := range out {
		named = named || e.tag == aclUser || e.tag == aclGroup
	}
	switch {
	case mask < 0 || !named:
		// A new mask: the group class keeps its rights (the group's
		// entry still holds them), widened only for the jail's entry.
		mask = int(perm | groupObj)
	case uint16(mask)&perm != perm:
		return nil, fmt.Errorf("its ACL's mask (%s) would have to widen to %s, giving its other entries rights they do not have", permString(uint16(mask)), permString(perm|uint16(mask)))
	}
	out = append(out, aclEntry{tag: aclUser, perm: perm, id: uint32(uid)}, aclEntry{tag: aclMask, perm: uint16(mask), id: aclUndefinedID})
	return out, nil
}

// withoutJailEntry returns entries without the entry of uid; dropped says
// whether there was one. When no named entry remains, the result is the
// minimal ACL of the owner, group and other entries, which the kernel
// stores as the mode alone (posix_acl_update_mode): the group bits, which
// showed the mask, are the group's again.
func withoutJailEntry(entries []aclEntry, uid int) (out []aclEntry, dropped bool) {
	named := false
	for _, e := range entries {
		if e.tag == aclUser && e.id == uint32(uid) {
			dropped = true
			continue
		}
		named = named || e.tag == aclUser || e.tag == aclGroup
		out = append(out, e)
	}
	if !named {
		minimal := out[:0:0]
		for _, e := range out {
			if e.tag != aclMask {
				minimal = append(minimal, e)
			}
		}
		out = minimal
	}
	return out, dropped
}

func permString(p uint16) string {
	b := []byte("---")
	for i, c := range "rwx" {
		if p&(4>>i) != 0 {
			b[i] = byte(c)
		}
	}
	return string(b)
}

// procPath names the object of an O_PATH descriptor for the calls that
// take no descriptor of that kind (getxattr, setxattr, chmod): the magic
// link leads to that very inode, whatever its path names now.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// readACL reads the access ACL of the object of fd, or the one its mode
// makes when it has none.
func readACL(fd int) ([]aclEntry, error) {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(procPath(fd), aclAttr, buf)
	if errors.Is(err, unix.ENODATA) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		return modeACL(st.Mode), nil
	}
	if err != nil {
		return nil, err
	}
	return parseACL(buf[:n])
}

// lockACLs takes aclLockPath; the returned function lets it go.
func lockACLs() (func(), error) {
	fd, err := unix.Open(aclLockPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		// Made as the first step makes it (stage/hostids.c): root's only.
		if err = os.MkdirAll(aclLockPath, 0o700); err == nil {
			fd, err = unix.Open(aclLockPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}

// addJailACL adds user:uid:perm to the access ACL of the object of fd.
func addJailACL(fd, uid int, perm uint16) error {
	unlock, err := lockACLs()
	if err != nil {
		return fmt.Errorf("lock %s: %w", aclLockPath, err)
	}
	defer unlock()
	entries, err := readACL(fd)
	if err != nil {
		return fmt.Errorf("read its ACL: %w", err)
	}
	entries, err = withJailEntry(entries, uid, perm)
	if err != nil {
		return err
	}
	if err := unix.Setxattr(procPath(fd), aclAttr, encodeACL(entries), 0); err != nil {
		return fmt.Errorf("add user:%d:%s to its ACL: %w", uid, permString(perm), err)
	}
	return nil
}

// removeJailACL takes the entry of uid out of the access ACL of the object
// at path p (no symbolic link followed), if it has one.
func removeJailACL(p string, uid int) error {
	fd, err := openPathNoLinks(p)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	unlock, err := lockACLs()
	if err != nil {
		return fmt.Errorf("lock %s: %w", aclLockPath, err)
	}
	defer unlock()
	entries, err := readACL(fd)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil // a filesystem without ACLs holds no entry of the jail's
	}
	if err != nil {
		return fmt.Errorf("read its ACL: %w", err)
	}
	entries, dropped := withoutJailEntry(entries, uid)
	if !dropped {
		return nil
	}
	if err := unix.Setxattr(procPath(fd), aclAttr, encodeACL(entries), 0); err != nil {
		return fmt.Errorf("take user:%d out of its ACL: %w", uid, err)
	}
	return nil
}

// writableGrant makes the detached writable mount fd, the clone of the
// host path p, writable for the root-run jail of ids (see above): an
// idmapped mount for an owner other than root (m maps it), else the ACL
// entry, which it first marks in the lock file with what is to be given
// back after the run. strict refuses the fallback from the one to the
// other; warn announces it.
func writableGrant(fd int, p string, ids *hostIDs, m *idmapper, strict bool, warn func(string)) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	back := giveBack{path: p, uid: overflowID, gid: overflowID}
	var idmapErr error
	switch {
	case st.Uid != 0 && !IsJailHostUID(st.Uid):
		err := m.apply(fd, p)
		if err == nil {
			return nil // written as its owner: nothing of the jail's ids is left
		}
		idmapErr = err
		fallback := fmt.Sprintf("the jail writes it as its own host uid %d, not as its owner (uid %d), and what it leaves there is given to that owner after the run", ids.uid, st.Uid)
		if strict {
			return fmt.Errorf("writable volume %s: %v; --strict-limits refuses the fallback (%s)", p, err, fallback)
		}
		warn(fmt.Sprintf("writable volume %s: %v: %s", p, err, fallback))
		back.uid, back.gid = int(st.Uid), int(st.Gid)
	}
	// Root's volume: what the jail leaves goes to nobody, as before, never
	// to root. A file root owns is one that root's own programs trust by
	// its owner alone (sudo's sudoers.d, cron.d, sshd's authorized_keys,
	// systemd's units): a jail's file must not become one.
	// Open to all: the jail needs no entry, and what it leaves in a place
	// every user shares goes to nobody.
	open := st.Mode&0o002 != 0 && (!dir || st.Mode&0o001 != 0)
	if open {
		back.uid, back.gid = overflowID, overflowID
		return ids.mark(back)
	}
	if !dir && st.Nlink > 1 {
		return fmt.Errorf("writable volume %s: the file has %d hard links, and as root rljail does not open a file of several names to the jail's host uid (a name elsewhere may be one the caller never meant to grant): grant a copy", p, st.Nlink)
	}
	back.acl = true
	if err := ids.mark(back); err != nil {
		return err
	}
	perm := uint16(6)
	if dir {
		perm = 7
	}
	if err := addJailACL(fd, ids.uid, perm); err != nil {
		return fmt.Errorf("writable volume %s: %s", p, aclRefusal(dir, st.Uid, ids.uid, idmapErr, err))
	}
	return nil
}

// aclRefusal is the line that refuses a writable volume whose top took no
// ACL entry for the jail's host uid: what failed, and what to do.
func aclRefusal(dir bool, ownerUID uint32, jailUID int, idmapErr, aclErr error) string {
	open := "chmod o+w it"
	if dir {
		open = "chmod 1777 it"
	}
	if idmapErr != nil {
		return fmt.Sprintf("its filesystem takes neither a mount idmapped to its owner, uid %d (%v), nor an ACL entry for the jail's host uid %d (%v): %s, or grant a place on another filesystem (ext4, xfs, btrfs, tmpfs)", ownerUID, idmapErr, jailUID, aclErr, open)
	}
	return fmt.Sprintf("as root the jail writes as a host uid of its own (%d), and it takes no ACL entry for it (%v): chown it to the user the jail should write as (not root: the jail then writes as that user), or %s", jailUID, aclErr, open)
}
