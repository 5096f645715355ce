// The host uid and gid of a root-run jail: one pair of its own, from a
// reserved range, for as long as anything of the jail may run.
//
// Were every root-run jail the host's nobody, all of them (and every host
// process of nobody) would share what the kernel counts per user: one
// jail's large pipes shrank every other's (fs.pipe-user-pages-soft), its
// descriptors in flight made another's SCM_RIGHTS fail, the key quota was
// shared, and a host nobody process could signal a jail's payload. So each
// jail gets an id of a range no real user has, as container engines take
// subordinate ids (subuid(5)): the entry of a user named "rljail" in
// /etc/subuid and /etc/subgid when there is one, else RLJAIL_ID_BASE and
// RLJAIL_ID_COUNT ids up.
//
// No daemon hands the ids out: id N is taken while a lock file of its own,
// RLJAIL_ID_LOCKS/N, is locked (flock) by the first step, which lives
// until the jail's processes are gone (it is the cgroup's guard), and by
// the supervisor, which gives back what the jail left in its writable
// volumes before it lets go (jail.hostIDs). The kernel drops a lock when
// its last holder ends, even by SIGKILL. Ids are tried from the lowest up,
// so that the lock files stay as few as the most jails that ever ran at
// once, and each lock file stays for the next run. A lock file that is not
// empty names the writable volumes of a run whose supervisor died before
// it gave them back: its id is never taken again, since files there may
// still be the id's (SECURITY.md).
#define _GNU_SOURCE
#include "hostids.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LOCK_EX_NB (2 | 4) // LOCK_EX | LOCK_NB (sys/file.h)

// read_subid looks for the entry of the user "rljail" (name:start:count)
// in path, a subuid(5) file: 1 and *start, *count when there is one, 0
// when there is none (or no file), -1 when the entry is not a usable range.
static int read_subid(const char *path, unsigned *start, unsigned *count)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	static const char name[] = "rljail:";
	char buf[4096];
	size_t have = 0;
	int found = 0, eof = 0;
	while (!found && !eof) {
		ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			eof = 1;
			if (have == 0)
				break;
			buf[have++] = '\n'; // a last line without its newline
		} else {
			have += (size_t)n;
		}
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
			*nl = 0;
			if (strncmp(line, name, sizeof name - 1) == 0) {
				char *p = line + sizeof name - 1, *e;
				unsigned long long s = strtoull(p, &e, 10);
				unsigned long long c = 0;
				int ok = e != p && *e == ':';
				if (ok) {
					p = e + 1;
					c = strtoull(p, &e, 10);
					ok = e != p && *e == 0;
				}
				// Never root, never the overflow id (which the files of a
				// finished run are given), never the invalid (uid_t)-1.
				if (!ok || s == 0 || c == 0 || s + c > 0xffffffffULL ||
				    (s <= RLJAIL_OVERFLOW_ID && RLJAIL_OVERFLOW_ID < s + c)) {
					close(fd);
					return -1;
				}
				*start = (unsigned)s;
				*count = (unsigned)c;
				found = 1;
				break;
			}
			line = nl + 1;
		}
		if (found)
			break;
		// Keep the start of a line that did not fit; a line longer than
		// the buffer is no entry of ours.
		size_t rest = have - (size_t)(line - buf);
		if (rest == sizeof buf - 1)
			rest = 0;
		memmove(buf, line, rest);
		have = rest;
	}
	close(fd);
	return found;
}

const char *rljail_reserve_ids(struct rljail_ids *ids)
{
	unsigned ubase = RLJAIL_ID_BASE, ucount = RLJAIL_ID_COUNT;
	unsigned gbase = RLJAIL_ID_BASE, gcount = RLJAIL_ID_COUNT;
	if (read_subid("/etc/subuid", &ubase, &ucount) < 0) {
		errno = 0;
		return "the entry of rljail in /etc/subuid is not a range of ids without 0 and 65534";
	}
	if (read_subid("/etc/subgid", &gbase, &gcount) < 0) {
		errno = 0;
		return "the entry of rljail in /etc/subgid is not a range of ids without 0 and 65534";
	}
	unsigned n = ucount < gcount ? ucount : gcount;
	int made = 0;
	for (unsigned i = 0; i < n; i++) {
		char path[64];
		snprintf(path, sizeof path, "%s/%u", RLJAIL_ID_LOCKS, ubase + i);
		int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno == ENOENT && !made) {
			// The first root run since boot (/run is a tmpfs): only root
			// may look in.
			made = 1;
			if (syscall(SYS_mkdirat, AT_FDCWD, RLJAIL_ID_DIR, 0700) < 0 && errno != EEXIST)
				return "mkdir " RLJAIL_ID_DIR;
			if (syscall(SYS_mkdirat, AT_FDCWD, RLJAIL_ID_LOCKS, 0700) < 0 && errno != EEXIST)
				return "mkdir " RLJAIL_ID_LOCKS;
			fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		}
		if (fd < 0)
			return "open a lock file in " RLJAIL_ID_LOCKS;
		if (syscall(SYS_flock, fd, LOCK_EX_NB) == 0) {
			struct stat st;
			if (fstat(fd, &st) == 0 && st.st_size == 0) {
				ids->uid = ubase + i;
				ids->gid = gbase + i;
				ids->lock = fd;
				return NULL;
			}
			// Marked: a run that may have left files of this id. The
			// supervisor gives them back after its own run
			// (jail.reclaimMarked), and the id is free again.
			ids->marked = 1;
		} else if (errno != EWOULDBLOCK) {
			int saved = errno;
			close(fd);
			errno = saved;
			return "lock a lock file in " RLJAIL_ID_LOCKS;
		}
		close(fd);
	}
	errno = EUSERS;
	return "every id of the range is taken (see /run/rljail/uid)";
}
