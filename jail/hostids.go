package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A root-run jail's user is a host uid and gid of its own, which the init
// stage's first step reserves from a range (stage/hostids.c says how and
// why): no other jail, and no host process, shares the kernel's per-user
// counters with it (pipe buffers, descriptors in flight, keys, signals).
// The id stays taken while its lock file is locked: by the first step,
// which outlives the jail's processes, and by the supervisor, which first
// gives back what the jail left in its writable volumes (reclaim): in those
// it writes as its own host uid (rwgrant.go), so the payload's files there
// are that uid's, and a later jail given that uid would own them; and the
// volume's ACL entry for that uid is taken out.

const (
	// IDRangeBase and IDRangeCount are the default range of the host ids
	// of root-run jails (RLJAIL_ID_BASE and RLJAIL_ID_COUNT in
	// stage/hostids.h), used unless /etc/subuid and /etc/subgid have an
	// entry for the user "rljail".
	IDRangeBase  = 2130706432
	IDRangeCount = 65536
	// IDLockDir holds one lock file per host id of a running root-run jail
	// (stage/hostids.h).
	IDLockDir = "/run/rljail/uid"
)

// overflowID is the host's nobody and nogroup: the owner the files of a
// finished run are given, never an id of the range; and the id the
// `rljail check` probe runs as.
const overflowID = 65534

// reclaimMaxDepth bounds the directories reclaim walks down, each an open
// descriptor: a volume deeper than that is not walked further, and its id
// is never taken again (a hostile payload may nest directories without end).
const reclaimMaxDepth = 512

// hostIDs are the host ids of a root-run jail and the lock that holds them
// (nil when there is none: rootless).
type hostIDs struct {
	uid, gid int
	lock     *os.File
	// marks: what the jail may leave in its writable volumes, written into
	// the lock file (mark) before the jail can write anything, to be given
	// back after the run (reclaim). othersMarked: the first step passed
	// over a marked id, whose run ended without giving its volumes back
	// (reclaimMarked).
	marks        []giveBack
	othersMarked bool
}

// giveBack is one writable volume of a root-run jail (rwgrant.go): its host
// path, the owner the jail's regular files and directories go to after
// the run (overflowID: nobody, as everything else of the jail's goes), and
// whether the jail's uid got an entry in its top's ACL, taken out then.
type giveBack struct {
	path     string
	uid, gid int
	acl      bool
}

// markHeader starts a lock file marked by an rljail before the owners and
// ACLs of issue 30: the ids, then one volume a line, whose files go to
// nobody. markHeaderV2 starts one marked now: one giveBack a line
// (formatMark). An older rljail does not read the second as a mark of its
// own, and so never clears it without giving its volumes back.
const (
	markHeader   = "rljail: files of uid %d gid %d may be left in these writable volumes:\n"
	markHeaderV2 = "rljail: files of uid %d gid %d may be left in these writable volumes, given to these owners (v2):\n"
)

// formatMark is a giveBack's line of a lock file: the owner's uid and gid,
// "acl" or "-", and the quoted path (a path may hold a newline).
func formatMark(b giveBack) string {
	acl := "-"
	if b.acl {
		acl = "acl"
	}
	return fmt.Sprintf("%d %d %s %s\n", b.uid, b.gid, acl, strconv.Quote(b.path))
}

// parseMark reads a line of formatMark.
func parseMark(line string) (giveBack, error) {
	var b giveBack
	parts := strings.SplitN(line, " ", 4)
	if len(parts) != 4 || (parts[2] != "acl" && parts[2] != "-") {
		return b, fmt.Errorf("not a line of rljail's mark: %q", line)
	}
	var err1, err2, err3 error
	b.uid, err1 = strconv.Atoi(parts[0])
	b.gid, err2 = strconv.Atoi(parts[1])
	b.path, err3 = strconv.Unquote(parts[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return b, fmt.Errorf("not a line of rljail's mark: %q: %w", line, err)
	}
	b.acl = parts[2] == "acl"
	return b, nil
}

// mark adds a writable volume to the lock file, before the jail can
// write anything there: should this process die before reclaim, the lock
// file stays non-empty and the first step never takes its id again (files
// there may still be the id's, and its ACL entry may still be there).
// Nothing to do rootless.
func (h *hostIDs) mark(b giveBack) error {
	if h.lock == nil {
		return nil
	}
	h.marks = append(h.marks, b)
	var s strings.Builder
	fmt.Fprintf(&s, markHeaderV2, h.uid, h.gid)
	for _, m := range h.marks {
		s.WriteString(formatMark(m))
	}
	// The mark only grows: a write from the start covers the one before.
	if _, err := unix.Pwrite(int(h.lock.Fd()), []byte(s.String()), 0); err != nil {
		return fmt.Errorf("reserve a host uid for the jail: mark its lock file: %w", err)
	}
	return nil
}

// reclaim gives back what the jail left in its writable volumes, once its
// processes are gone: the ACL entry of its uid is taken out, its regular
// files and directories go to the volume's owner (giveBack), the rest to
// nobody and nogroup; then the lock file's mark is cleared; once. It
// returns a warning for what it could not do; the mark then stays, and
// the id is not taken again until a later run gives the files back
// (reclaimMarked). Then it does that for the marked ids the first step
// passed over.
func (h *hostIDs) reclaim() []string {
	if h.lock == nil {
		return nil
	}
	var warnings []string
	if len(h.marks) > 0 {
		marks := h.marks
		h.marks = nil
		failed := false
		for _, b := range marks {
			for _, msg := range giveBackVolume(b, h.uid, h.gid) {
				warnings = append(warnings, msg)
				failed = failed || !strings.HasPrefix(msg, warnNobodyPrefix)
			}
		}
		if !failed {
			if err := unix.Ftruncate(int(h.lock.Fd()), 0); err != nil {
				warnings = append(warnings, fmt.Sprintf("clear the lock file of host uid %d: %v", h.uid, err))
			}
		}
	}
	if h.othersMarked {
		h.othersMarked = false
		warnings = append(warnings, reclaimMarked()...)
	}
	return warnings
}

// warnNobodyPrefix starts the warning of a volume whose files went to
// nobody rather than to its owner: all was given back, and the mark may go.
const warnNobodyPrefix = "gave to nobody"

// giveBackVolume undoes what the jail of uid and gid holds in the volume
// b: its ACL entry, then its files. It returns a warning for each failure
// (the id must then stay marked), and one starting warnNobodyPrefix when
// files that were to go to the owner went to nobody.
func giveBackVolume(b giveBack, uid, gid int) []string {
	var warnings []string
	fail := func(what string, err error) {
		warnings = append(warnings, fmt.Sprintf("%s %s: %v; its host uid %d is not used again until that is done (%s/%d)", what, b.path, err, uid, IDLockDir, uid))
	}
	if b.acl {
		if err := removeJailACL(b.path, uid); err != nil && !errors.Is(err, unix.ENOENT) {
			fail(fmt.Sprintf("take the jail's entry (user:%d) out of the ACL of", uid), err)
		}
	}
	to := owner{uid: b.uid, gid: b.gid}
	err := reclaimTree(b.path, uid, gid, &to)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		fail("give the jail's files back in", err)
	}
	if to.unmarked > 0 {
		warnings = append(warnings, fmt.Sprintf("%s %d of the jail's files in %s rather than to uid %d: they could not be marked as a jail's (%s: %v)", warnNobodyPrefix, to.unmarked, b.path, b.uid, JailWrittenAttr, to.markErr))
	}
	return warnings
}

// reclaimMarked gives back the files of every marked id that no run holds:
// its run's supervisor died (or could not give them back) before it
// cleared the mark. The lock is taken first, so that no first step takes
// the id meanwhile; an id in use is left to its holder. It returns a
// warning for each id it could not clear.
func reclaimMarked() []string {
	names, err := os.ReadDir(IDLockDir)
	if err != nil {
		return []string{fmt.Sprintf("look for marked host uids in %s: %v", IDLockDir, err)}
	}
	var warnings []string
	for _, e := range names {
		if _, err := strconv.Atoi(e.Name()); err != nil || !e.Type().IsRegular() {
			continue
		}
		if err := reclaimMarkedID(IDLockDir + "/" + e.Name()); err != nil {
			warnings = append(warnings, fmt.Sprintf("give back the files of host uid %s, marked in %s/%s: %v", e.Name(), IDLockDir, e.Name(), err))
		}
	}
	return warnings
}

// reclaimMarkedID clears the lock file p when it is marked and free.
func reclaimMarkedID(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // a run holds it and clears it itself
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil || len(b) == 0 {
		return err
	}
	head, rest, _ := strings.Cut(string(b), "\n")
	var uid, gid int
	var marks []giveBack
	if n, err := fmt.Sscanf(head+"\n", markHeaderV2, &uid, &gid); n == 2 && err == nil {
		for _, line := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
			if line == "" {
				continue
			}
			m, err := parseMark(line)
			if err != nil {
				return err
			}
			marks = append(marks, m)
		}
	} else if n, err := fmt.Sscanf(head+"\n", markHeader, &uid, &gid); n == 2 && err == nil {
		for _, v := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
			if v != "" {
				marks = append(marks, giveBack{path: v, uid: overflowID, gid: overflowID})
			}
		}
	} else {
		return fmt.Errorf("not a mark of rljail's: %q", head)
	}
	for _, m := range marks {
		for _, msg := range giveBackVolume(m, uid, gid) {
			if !strings.HasPrefix(msg, warnNobodyPrefix) {
				return errors.New(msg)
			}
		}
	}
	return f.Truncate(0)
}

// release lets go of the ids (the first step may still hold them until it
// ends). Safe to call twice.
func (h *hostIDs) release() {
	if h.lock != nil {
		h.lock.Close()
		h.lock = nil
	}
}

// owner is whom reclaimTree gives the jail's regular files and
// directories to (overflowID: nobody); unmarked counts the regular files
// that went to nobody instead, since they could not be marked as a jail's
// (markErr says why).
type owner struct {
	uid, gid int
	unmarked int
	markErr  error
}

// reclaimTree gives what is uid's or gid's in the tree at p (a file or a
// directory) back: regular files and directories to the owner to, the
// rest to nobody and nogroup (rwgrant.go says why). It follows no symbolic
// link and does not leave p's filesystem: every name is taken relative to
// a directory already open, so a link swapped in by another jail that
// shares the volume redirects nothing.
func reclaimTree(p string, uid, gid int, to *owner) error {
	fd, err := openPathNoLinks(p)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if err := reclaimOne(fd, "", &st, uid, gid, to); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	return reclaimDir(dir, st.Dev, uid, gid, to, 1)
}

// reclaimOne gives back the entry name of dirfd ("" for dirfd itself),
// whose stat is st, when it is uid's or gid's.
func reclaimOne(dirfd int, name string, st *unix.Stat_t, uid, gid int, to *owner) error {
	kind := st.Mode & unix.S_IFMT
	keep := kind == unix.S_IFREG || kind == unix.S_IFDIR
	newUID, newGID := -1, -1
	if int(st.Uid) == uid {
		newUID = overflowID
		if keep {
			newUID = to.uid
		}
	}
	if int(st.Gid) == gid {
		newGID = overflowID
		if keep {
			newGID = to.gid
		}
	}
	if newUID < 0 && newGID < 0 {
		return nil
	}
	if kind == unix.S_IFREG && ((newUID >= 0 && newUID != overflowID) || (newGID >= 0 && newGID != overflowID)) {
		return giveFile(dirfd, name, st, uid, newUID, newGID, to)
	}
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fchownat(dirfd, name, newUID, newGID, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	return nil
}

// giveFile gives a regular file of the jail of uid to an owner that is
// not nobody: on the very inode that was stat'ed (opened without following
// a link), its set-user-ID and set-group-ID bits are taken off first, then
// it is marked JailWrittenAttr, and only then chowned, so that it is
// never the owner's with a set-id bit or without the mark. A file that
// cannot be marked goes to nobody instead (to.unmarked).
func giveFile(dirfd int, name string, st *unix.Stat_t, uid, newUID, newGID int, to *owner) error {
	fd := dirfd
	if name != "" {
		var err error
		fd, err = unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		defer unix.Close(fd)
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil {
			return fmt.Errorf("stat %s: %w", name, err)
		}
		if now.Ino != st.Ino || now.Dev != st.Dev {
			return fmt.Errorf("%s was replaced while it was given back", name)
		}
		st = &now
	}
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		if err := unix.Fchmodat(unix.AT_FDCWD, procPath(fd), st.Mode&0o1777, 0); err != nil {
			return fmt.Errorf("take the set-id bits off %s: %w", name, err)
		}
	}
	if err := unix.Setxattr(procPath(fd), JailWrittenAttr, []byte(strconv.Itoa(uid)), 0); err != nil {
		to.unmarked++
		to.markErr = err
		if newUID >= 0 {
			newUID = overflowID
		}
		if newGID >= 0 {
			newGID = overflowID
		}
	}
	if err := unix.Fchownat(fd, "", newUID, newGID, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	return nil
}

// reclaimDir walks the directory dirfd (which it closes) at the given
// depth.
func reclaimDir(dirfd int, dev uint64, uid, gid int, to *owner, depth int) error {
	d := os.NewFile(uintptr(dirfd), "volume")
	defer d.Close()
	if depth > reclaimMaxDepth {
		return fmt.Errorf("directories nested deeper than %d", reclaimMaxDepth)
	}
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("stat %s: %w", name, err)
			}
			if err := reclaimOne(dirfd, name, &st, uid, gid, to); err != nil {
				return err
			}
			// Another filesystem below the volume was not in the jail's
			// mount (a clone does not take submounts).
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != dev {
				continue
			}
			sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("open %s: %w", name, err)
			}
			if err := reclaimDir(sub, dev, uid, gid, to, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the directory: %w", err)
		}
	}
}
