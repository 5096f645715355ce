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
// gives back what the jail left in its writable volumes (reclaim): those
// are not idmapped, so the payload's files there are its host uid's, and a
// later jail given that uid would own them.

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
	// marked: the lock file names the writable volumes (markVolumes), to
	// be given back (reclaim). othersMarked: the first step passed over a
	// marked id, whose run ended without giving its volumes back
	// (reclaimMarked).
	marked, othersMarked bool
}

// markHeader starts a marked lock file: the ids, then one volume a line.
const markHeader = "rljail: files of uid %d gid %d may be left in these writable volumes:\n"

// markVolumes writes into the lock file the writable volumes the jail will
// get, before it can write anything: should this process die before
// reclaim, the lock file stays non-empty and the first step never takes
// its id again (files there may still be the id's). Nothing to do without
// writable volumes: nothing else outlives the jail.
func (h *hostIDs) markVolumes(vols []Volume) error {
	var b strings.Builder
	for _, v := range vols {
		if v.Writable {
			b.WriteString(v.Source + "\n")
		}
	}
	if h.lock == nil || b.Len() == 0 {
		return nil
	}
	data := fmt.Sprintf(markHeader, h.uid, h.gid) + b.String()
	if _, err := unix.Pwrite(int(h.lock.Fd()), []byte(data), 0); err != nil {
		return fmt.Errorf("reserve a host uid for the jail: mark its lock file: %w", err)
	}
	h.marked = true
	return nil
}

// reclaim gives every file of the jail's host uid or gid in the writable
// volumes to nobody and nogroup, once the jail's processes are gone, and
// then clears the lock file's mark; once. It returns a warning for what it
// could not do; the mark then stays, and the id is not taken again until
// a later run gives the files back (reclaimMarked). Then it does that for
// the marked ids the first step passed over.
func (h *hostIDs) reclaim(vols []Volume) []string {
	if h.lock == nil {
		return nil
	}
	var warnings []string
	if h.marked {
		h.marked = false
		for _, v := range vols {
			if !v.Writable {
				continue
			}
			if err := reclaimTree(v.Source, h.uid, h.gid); err != nil {
				warnings = append(warnings, fmt.Sprintf("give the jail's files in %s back to nobody: %v; its host uid %d is not used again until they are (%s/%d)", v.Source, err, h.uid, IDLockDir, h.uid))
			}
		}
		if len(warnings) == 0 {
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
	if n, err := fmt.Sscanf(head+"\n", markHeader, &uid, &gid); n != 2 || err != nil {
		return fmt.Errorf("not a mark of rljail's: %q", head)
	}
	for _, v := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
		if v == "" {
			continue
		}
		if err := reclaimTree(v, uid, gid); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s: %w", v, err)
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

// reclaimTree chowns what is uid's or gid's in the tree at p (a file or a
// directory) to nobody and nogroup, without following any symbolic link
// and without leaving p's filesystem: every name is taken relative to a
// directory already open, so a link swapped in by another jail that shares
// the volume redirects nothing.
func reclaimTree(p string, uid, gid int) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if err := reclaimOne(fd, "", &st, uid, gid); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	return reclaimDir(dir, st.Dev, uid, gid, 1)
}

// reclaimOne chowns the entry name of dirfd ("" for dirfd itself), whose
// stat is st, when it is uid's or gid's.
func reclaimOne(dirfd int, name string, st *unix.Stat_t, uid, gid int) error {
	newUID, newGID := -1, -1
	if int(st.Uid) == uid {
		newUID = overflowID
	}
	if int(st.Gid) == gid {
		newGID = overflowID
	}
	if newUID < 0 && newGID < 0 {
		return nil
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

// reclaimDir walks the directory dirfd (which it closes) at the given
// depth.
func reclaimDir(dirfd int, dev uint64, uid, gid, depth int) error {
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
			if err := reclaimOne(dirfd, name, &st, uid, gid); err != nil {
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
			if err := reclaimDir(sub, dev, uid, gid, depth+1); err != nil {
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
