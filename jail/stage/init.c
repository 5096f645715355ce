// The jail's init (PID 1 of its namespaces), in C.
//
// The supervisor re-executes the rljail binary with argv[0] "rljail-init".
// The binary's ELF entry point (jail/entry_amd64.s) catches that before
// the Go runtime starts, and runs the whole init stage here, on its own
// small runtime (rt.c): a second Go runtime start costs a few milliseconds
// on every run, its threads stall while cgroup v1 moves the process
// (runc's nsexec runs its namespace setup in C before the Go runtime for
// the same reason), and a static libc's start costs another millisecond
// of CPU in a VM. Init reads its config from the supervisor, builds the jail's root
// filesystem with the new mount API, starts the payload (spawn.c),
// forwards the signals the supervisor asks for, reaps every process and
// reports the payload's end. It never returns.
#define _GNU_SOURCE
#include "hostids.h"
#include "prestart.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define FD_CONTROL 3 // descriptors, config, then control lines, from the supervisor
#define FD_STATUS 4  // JSON status lines to the supervisor
#define FD_NOTIFY 5  // seccomp listener socket to the supervisor
#define FD_GUARD 6   // the first step only: the cgroup guard's pipe
#define FD_IDLOCK 7  // the first step only, as root: the lock of the jail's host ids (hostids.c)
#define SKELETON "/tmp"
#define JAIL_HOSTNAME "rljail" // jail.Hostname
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

#ifndef MNT_DETACH
#define MNT_DETACH 2
#endif
#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 8
#endif
#ifndef MS_REC
#define MS_REC 16384
#endif
#ifndef MS_PRIVATE
#define MS_PRIVATE (1 << 18)
#endif

// Record tags of the config (protocol.go writes them).
enum {
	T_END = 0,
	T_ARG = 1,
	T_ENV = 2,
	T_WORKDIR = 3,
	T_TMPSIZE = 4,
	T_MOUNT = 5,
	T_SYMLINK = 6,
	T_FILTER = 7,
	T_NOTIFY = 8,
	T_RLIMIT = 9,
	T_UNSHARE_CGROUP = 10,
	// 11 was the hostname, now fixed (JAIL_HOSTNAME)
	T_NICE = 12,
	T_CGROUP_TASKS = 13,
	T_LISTEN = 14,
	T_ETC_FILE = 15,
	T_CHANNEL = 16,
};

enum { M_DIR = 1, M_WRITABLE = 2 }; // 4 was a device node: init makes those itself

struct mnt {
	int fd;
	int flags;
	char *src, *dest;
};

struct lnk {
	char *name, *target;
};

struct config {
	char **argv;
	int argc, argcap;
	char **envp;
	int envc, envcap;
	char *workdir;
	long long tmpsize;
	struct mnt *mounts;
	int nmounts, mountcap;
	struct lnk *links;
	int nlinks, linkcap;
	unsigned char *filter;
	size_t filter_len;
	int notify;
	struct rljail_rlimit *rl;
	int nrl, rlcap;
	int unshare_cgroup;
	int tasks[8];
	int ntasks;
	int nice;
	// Egress (jail/egress.go): sockets to make and hand over, /etc files.
	struct listen_req *listens;
	int nlistens, listencap;
	struct lnk *etc_files;
	int netc, etccap;
	int channel; // a received socket the payload gets as descriptor 3, or 0
};

// listen_req is one socket on the jail's loopback for the supervisor.
struct listen_req {
	int datagram;
	char *addr;
	int port;
};

// ---- reporting

static void json_string(char *out, size_t cap, const char *s)
{
	size_t n = 0;
	out[n++] = '"';
	for (; *s && n + 8 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[n++] = '\\';
			out[n++] = (char)c;
		} else if (c < 0x20) {
			n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
		} else {
			out[n++] = (char)c;
		}
	}
	out[n++] = '"';
	out[n] = 0;
}

static void report(const char *json)
{
	size_t len = strlen(json);
	char buf[8192];
	if (len + 2 > sizeof buf)
		len = sizeof buf - 2;
	memcpy(buf, json, len);
	buf[len] = '\n';
	ssize_t w = write(FD_STATUS, buf, len + 1);
	(void)w;
}

// report_message sends one message line: {"KEY":"<message>"[,"exit_code":N]}.
__attribute__((format(printf, 3, 0))) static void report_message(const char *key, int code, const char *fmt, va_list ap)
{
	char msg[2048], quoted[4200], line[4400];
	vsnprintf(msg, sizeof msg, fmt, ap);
	json_string(quoted, sizeof quoted, msg);
	if (code != 0)
		snprintf(line, sizeof line, "{\"%s\":%s,\"exit_code\":%d}", key, quoted, code);
	else
		snprintf(line, sizeof line, "{\"%s\":%s}", key, quoted);
	report(line);
}

// die reports a setup failure (one line: the step and the cause) and ends
// init with code.
__attribute__((noreturn, format(printf, 2, 3))) static void die(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	report_message("error", code, fmt, ap);
	va_end(ap);
	_exit(code);
}

// warn reports a weaker choice init had to make; the supervisor prints it
// and lists it in the result's warnings.
__attribute__((format(printf, 1, 2))) static void warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	report_message("warning", 0, fmt, ap);
	va_end(ap);
}

// errstr is strerror in Go's spelling (lower-case first letter), so that
// messages read the same whichever side made them.
static const char *errstr(int err)
{
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(err));
	if (buf[0] >= 'A' && buf[0] <= 'Z')
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

// ---- reading the config

static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);
	if (q == NULL)
		die(125, "read the jail config: out of memory");
	return q;
}

// grow returns the array p of n elements of size elem with room for two
// more, doubling its capacity *cap when it is full: the allocator (rt.c)
// gives back only its last block, so growing by one element a record made
// n records cost n squared bytes (15,000 arguments took 440 MB, charged
// to rljail's caller, since on cgroup v1 the init joins the jail's cgroup
// only after its config).
static void *grow(void *p, int n, int *cap, size_t elem)
{
	if (p && n + 2 <= *cap)
		return p;
	int c = *cap > 0 ? *cap : 8;
	while (c < n + 2)
		c *= 2;
	*cap = c;
	return xrealloc(p, elem * (size_t)c);
}

// field returns the next NUL-separated field of a record.
static char *field(char **cur, char *end)
{
	char *s = *cur;
	if (s >= end)
		die(125, "read the jail config: a record is short of fields");
	char *z = memchr(s, 0, (size_t)(end - s));
	if (z == NULL)
		z = end;
	*cur = z + 1;
	return s;
}

#define MAX_MSG_FDS 253 // the most descriptors one message carries (SCM_MAX_FD)

// recv_msg reads one message of len bytes from the control socket into
// data, with its descriptors (close-on-exec, at most max) into fds and
// their count into *nfds. It returns the bytes read, 0 at EOF, -1 on an
// error, and -2 for a message whose descriptors did not fit (they are
// closed).
static ssize_t recv_msg(void *data, size_t len, int *fds, int max, int *nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * MAX_MSG_FDS)];
	} u;
	struct iovec iov = {.iov_base = data, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t r;
	do
		r = recvmsg(FD_CONTROL, &msg, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	*nfds = 0;
	if (r <= 0)
		return r < 0 ? -1 : 0;
	int over = (msg.msg_flags & MSG_CTRUNC) != 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + sizeof(int) * (size_t)i, sizeof fd);
			if (*nfds < max)
				fds[(*nfds)++] = fd;
			else {
				close(fd);
				over = 1;
			}
		}
	}
	if (over) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		return -2;
	}
	return r;
}

// receive_fds reads the descriptors the supervisor sends before the
// config (sendFDs in run.go): messages of a 4-byte little-endian count and
// that many descriptors, ending with a count of 0. They arrive close-on-exec.
static int *receive_fds(int *n)
{
	int *fds = NULL;
	*n = 0;
	for (;;) {
		unsigned char count[4];
		int chunk[MAX_MSG_FDS], got;
		ssize_t r = recv_msg(count, sizeof count, chunk, MAX_MSG_FDS, &got);
		if (r == 0 || r == -1)
			_exit(125); // the supervisor is gone: nothing to report to
		if (r != sizeof count)
			die(125, "read the jail config: a malformed descriptor message");
		uint32_t want = (uint32_t)count[0] | (uint32_t)count[1] << 8 | (uint32_t)count[2] << 16 | (uint32_t)count[3] << 24;
		if ((uint32_t)got != want)
			die(125, "read the jail config: %u descriptors announced, %d received", want, got);
		if (want == 0)
			return fds;
		fds = xrealloc(fds, sizeof(int) * (size_t)(*n + got));
		memcpy(fds + *n, chunk, sizeof(int) * (size_t)got);
		*n += got;
	}
}

// fd_at is the index'th received descriptor; -1 stays -1 (none sent).
static int fd_at(const int *fds, int n, int index)
{
	if (index == -1)
		return -1;
	if (index < 0 || index >= n)
		die(125, "read the jail config: descriptor %d of %d", index, n);
	return fds[index];
}

// read_message reads one message of the supervisor into c: its
// descriptors, then its records. The config comes first (initConfig in
// protocol.go), the limits later (initLimits: sendLimits in run.go).
static void read_message(struct config *c)
{
	int nfds;
	int *fds = receive_fds(&nfds);
	// The message comes whole, after its length, so that one read takes it
	// (protocol.go: encodeRecords); it is never freed.
	unsigned char size[4];
	if (read_full(FD_CONTROL, size, sizeof size) < 0)
		_exit(125); // the supervisor is gone: nothing to report to
	uint32_t total = (uint32_t)size[0] | (uint32_t)size[1] << 8 | (uint32_t)size[2] << 16 | (uint32_t)size[3] << 24;
	if (total > (64u << 20))
		die(125, "read the jail config: %u bytes", total);
	char *buf = xrealloc(NULL, (size_t)total + 1);
	if (read_full(FD_CONTROL, buf, total) < 0)
		_exit(125);
	char *at = buf, *stop = buf + total;
	for (;;) {
		if (stop - at < 5)
			die(125, "read the jail config: it ends within a record");
		const unsigned char *hdr = (const unsigned char *)at;
		int tag = hdr[0];
		uint32_t len = (uint32_t)hdr[1] | (uint32_t)hdr[2] << 8 | (uint32_t)hdr[3] << 16 | (uint32_t)hdr[4] << 24;
		if (tag == T_END)
			break;
		if (len > (uint32_t)(stop - at - 5))
			die(125, "read the jail config: a record of %u bytes", len);
		// Each record's bytes move forward over its header, which leaves
		// room for the NUL that ends its last field.
		char *p = at;
		memmove(p, at + 5, len);
		p[len] = 0;
		at += 5 + len;
		char *cur = p, *end = p + len;
		switch (tag) {
		case T_ARG:
			c->argv = grow(c->argv, c->argc, &c->argcap, sizeof(char *));
			c->argv[c->argc++] = p;
			c->argv[c->argc] = NULL;
			break;
		case T_ENV:
			c->envp = grow(c->envp, c->envc, &c->envcap, sizeof(char *));
			c->envp[c->envc++] = p;
			c->envp[c->envc] = NULL;
			break;
		case T_WORKDIR:
			c->workdir = p;
			break;
		case T_TMPSIZE:
			c->tmpsize = atoll(p);
			break;
		case T_MOUNT: {
			c->mounts = grow(c->mounts, c->nmounts, &c->mountcap, sizeof(struct mnt));
			struct mnt *m = &c->mounts[c->nmounts++];
			m->fd = fd_at(fds, nfds, atoi(field(&cur, end)));
			m->flags = atoi(field(&cur, end));
			m->src = field(&cur, end);
			m->dest = field(&cur, end);
			break;
		}
		case T_SYMLINK: {
			c->links = grow(c->links, c->nlinks, &c->linkcap, sizeof(struct lnk));
			struct lnk *l = &c->links[c->nlinks++];
			l->name = field(&cur, end);
			l->target = field(&cur, end);
			break;
		}
		case T_FILTER:
			c->filter = (unsigned char *)p;
			c->filter_len = len;
			break;
		case T_NOTIFY:
			c->notify = 1;
			break;
		case T_RLIMIT: {
			c->rl = grow(c->rl, c->nrl, &c->rlcap, sizeof(struct rljail_rlimit));
			struct rljail_rlimit *r = &c->rl[c->nrl++];
			r->resource = atoi(field(&cur, end));
			r->soft = strtoull(field(&cur, end), NULL, 10);
			r->hard = strtoull(field(&cur, end), NULL, 10);
			break;
		}
		case T_UNSHARE_CGROUP:
			c->unshare_cgroup = 1;
			break;
		case T_NICE:
			c->nice = atoi(p);
			break;
		case T_CHANNEL:
			c->channel = fd_at(fds, nfds, atoi(p));
			break;
		case T_CGROUP_TASKS:
			if (c->ntasks == (int)(sizeof c->tasks / sizeof c->tasks[0]))
				die(125, "read the jail config: too many cgroups");
			c->tasks[c->ntasks++] = fd_at(fds, nfds, atoi(p));
			break;
		case T_LISTEN: {
			c->listens = grow(c->listens, c->nlistens, &c->listencap, sizeof(struct listen_req));
			struct listen_req *l = &c->listens[c->nlistens++];
			l->datagram = strcmp(field(&cur, end), "udp") == 0;
			l->addr = field(&cur, end);
			l->port = atoi(field(&cur, end));
			break;
		}
		case T_ETC_FILE: {
			c->etc_files = grow(c->etc_files, c->netc, &c->etccap, sizeof(struct lnk));
			struct lnk *f = &c->etc_files[c->netc++];
			f->name = field(&cur, end);
			f->target = field(&cur, end);
			break;
		}
		default:
			die(125, "read the jail config: unknown record %d", tag);
		}
	}
}

// ---- mounts (the new mount API; see mount.go for the design)

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{
	return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static int sys_move_mount(int from, const char *fp, int to, const char *tp, unsigned flags)
{
	return (int)syscall(SYS_move_mount, from, fp, to, tp, flags);
}

static int sys_mount_setattr(int dfd, const char *path, unsigned flags, uint64_t set)
{
	struct mount_attr a;
	memset(&a, 0, sizeof a);
	a.attr_set = set;
	return (int)syscall(SYS_mount_setattr, dfd, path, flags, &a, sizeof a);
}

// sys_mount_setattr_private sets attrs on the detached mount fd and makes
// it private.
static int sys_mount_setattr_private(int fd, uint64_t attrs)
{
	struct mount_attr a;
	memset(&a, 0, sizeof a);
	a.attr_set = attrs;
	a.propagation = MS_PRIVATE;
	return (int)syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof a);
}

static int sys_openat2(int dfd, const char *path, uint64_t flags, uint64_t resolve)
{
	struct open_how how;
	memset(&how, 0, sizeof how);
	how.flags = flags;
	how.resolve = resolve;
	return (int)syscall(SYS_openat2, dfd, path, &how, sizeof how);
}

static int clone_tree(int dfd, const char *path, const char *name, uint64_t attrs)
{
	unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
	if (path[0] == 0)
		flags |= AT_EMPTY_PATH;
	int fd = sys_open_tree(dfd, path, flags);
	if (fd < 0) {
		if (errno == EINVAL)
			die(125, "clone mount of %s: invalid argument (a directory with other filesystems mounted below it cannot be granted rootless; grant a path below it)", name);
		die(125, "clone mount of %s: %s", name, errstr(errno));
	}
	// Private: a clone of a shared mount (systemd makes / shared) would
	// otherwise be a peer of the host's, and what init mounts below it (a
	// nested volume) would appear, and stay, on the host.
	struct mount_attr a;
	memset(&a, 0, sizeof a);
	a.attr_set = attrs;
	a.propagation = MS_PRIVATE;
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
		die(125, "set mount flags on %s: %s", name, errstr(errno));
	return fd;
}

// clone_host_path: see cloneHostPath in mount.go; path is resolved from
// dfd, name is what errors call it.
static int clone_host_path(int dfd, const char *path, const char *name, uint64_t attrs)
{
	int fd = path[0] ? sys_openat2(dfd, path, O_PATH | O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
			 : (int)fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == ELOOP)
			die(125, "open %s: a component became a symlink after it was checked", name);
		die(125, "open %s: %s", name, errstr(errno));
	}
	int t = clone_tree(fd, "", name, attrs);
	close(fd);
	return t;
}

static int new_fs(const char *type, const char *mode, long long size, uint64_t attrs)
{
	int fs = (int)syscall(SYS_fsopen, type, FSOPEN_CLOEXEC);
	if (fs < 0)
		die(125, "fsopen %s: %s", type, errstr(errno));
	char sz[32];
	if (mode && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0)
		die(125, "%s option mode=%s: %s", type, mode, errstr(errno));
	if (size >= 0) {
		snprintf(sz, sizeof sz, "%lld", size);
		if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", sz, 0) < 0)
			die(125, "%s option size=%s: %s", type, sz, errstr(errno));
	}
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		die(125, "create %s: %s", type, errstr(errno));
	int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
	if (m < 0)
		die(125, "fsmount %s: %s", type, errstr(errno));
	close(fs);
	// The same flags again, and private, as clone_tree gives a clone: it
	// changes nothing the mount has, but runs measured cheaper with it
	// (docs/performance.md, "The jail's mounts"; why was not found).
	if (sys_mount_setattr_private(m, attrs) < 0)
		die(125, "set mount flags on the %s: %s", type, errstr(errno));
	return m;
}

static void attach(int fd, int target, const char *what);

// overlay_of presents the read-only directory tree `tree` through a
// read-only overlayfs whose one real layer is that tree, for the reason in
// mount.go ("Hiding host paths"): the jail's mountinfo then shows an
// overlay with root "/", source "rljail" and layers named
// /proc/self/fd/N, instead of the tree's path within the host's
// filesystem and the host's device. overlayfs needs two layers when it
// has no upper one; the second is `empty`, the empty read-only tmpfs
// mounted in the stage.
//
// overlayfs takes private clones of its layers (clone_private_mount),
// which before Linux 6.15 must be attached in the caller's mount
// namespace. So the tree is first attached in `stage`, a tmpfs that
// prepare_root mounted in the old root, below the skeleton: it leaves with
// the old root in the one detach after pivot_root, so staging costs no
// unmount (each of which waits for an RCU grace period) and leaves
// nothing in the jail. Returns the overlay's mount fd, or -1 with errno
// set when overlayfs refused (the caller then attaches *tree, a fresh
// detached copy, as it is).
static int overlay_of(int stage, int empty, int *tree, int idx)
{
	char name[32];
	snprintf(name, sizeof name, "%d", idx);
	if (mkdirat(stage, name, 0700) < 0)
		die(125, "create a staging directory: %s", errstr(errno));
	int at = openat(stage, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (at < 0)
		die(125, "open a staging directory: %s", errstr(errno));
	// After the move, *tree names the attached mount.
	if (sys_move_mount(*tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(125, "stage a read-only tree: %s", errstr(errno));
	close(at);
	char lower[96];
	snprintf(lower, sizeof lower, "/proc/self/fd/%d:/proc/self/fd/%d", *tree, empty);
	int m = -1;
	int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
	if (fs >= 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "rljail", 0) == 0 &&
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir", lower, 0) == 0 &&
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	int saved = errno;
	if (fs >= 0)
		close(fs);
	if (m < 0) {
		// A detached copy of the staged tree, to be attached as it is.
		int t = sys_open_tree(*tree, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
		if (t < 0)
			die(125, "unstage a read-only tree: %s", errstr(errno));
		close(*tree);
		*tree = t;
	}
	errno = saved;
	return m;
}

static int resolve_in_root(int root, const char *path, uint64_t flags)
{
	const char *rel = path[0] == '/' ? path + 1 : path;
	if (rel[0] == 0)
		rel = ".";
	return sys_openat2(root, rel, flags | O_CLOEXEC, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
}

// mountpoint returns an O_PATH fd of dest inside root, creating it (a
// directory, or an empty file) and its parents where missing.
static int mountpoint(int root, const char *dest, int dir)
{
	int fd = resolve_in_root(root, dest, O_PATH);
	if (fd >= 0)
		return fd;
	if (errno != ENOENT)
		die(125, "open mountpoint %s: %s", dest, errstr(errno));
	char parent[4096];
	snprintf(parent, sizeof parent, "%s", dest);
	char *slash = strrchr(parent, '/');
	const char *name = dest + (slash - parent) + 1;
	if (slash == parent)
		parent[1] = 0;
	else
		*slash = 0;
	int pfd = mountpoint(root, parent, 1);
	int dfd = openat(pfd, ".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	close(pfd);
	if (dfd < 0)
		die(125, "open %s: %s", parent, errstr(errno));
	int made = dir ? mkdirat(dfd, name, 0755) : openat(dfd, name, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (made < 0 && errno == EROFS)
		die(125, "volume destination %s does not exist in the jail, and %s is in the read-only root filesystem: choose an existing directory, or a new one such as /data/%s", dest, parent, name);
	if (made < 0 && !(dir && errno == EEXIST))
		die(125, "create mountpoint %s: %s", dest, errstr(errno));
	if (!dir)
		close(made);
	close(dfd);
	fd = resolve_in_root(root, dest, O_PATH);
	if (fd < 0)
		die(125, "open mountpoint %s: %s", dest, errstr(errno));
	return fd;
}

static void attach(int fd, int target, const char *what)
{
	if (sys_move_mount(fd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(125, "attach %s: %s", what, errstr(errno));
	close(fd);
}

static void attach_at(int root, int fd, const char *dest, int dir)
{
	int t = mountpoint(root, dest, dir);
	struct stat st;
	if (fstat(t, &st) == 0 && (S_ISDIR(st.st_mode) != 0) != (dir != 0))
		die(125, "volume destination %s is a %s in the jail, and its source a %s: a mount needs the same kind", dest,
		    S_ISDIR(st.st_mode) ? "directory" : "file", dir ? "directory" : "file");
	attach(fd, t, dest);
	close(t);
}

static void tmpfs_at(int root, const char *dest, const char *mode, long long size, uint64_t attrs)
{
	attach_at(root, new_fs("tmpfs", mode, size, attrs), dest, 1);
}

static void write_file_at(int dir, const char *name, const char *content)
{
	int fd = openat(dir, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		die(125, "create /etc/%s: %s", name, errstr(errno));
	size_t len = strlen(content);
	if (write(fd, content, len) != (ssize_t)len)
		die(125, "write /etc/%s: %s", name, errstr(errno));
	close(fd);
}

// write_etc writes the jail's minimal /etc (see docs/jail.md: user rljail 1000).
static void write_etc(int root)
{
	if (mkdirat(root, "etc", 0755) < 0)
		die(125, "create /etc: %s", errstr(errno));
	int etc = openat(root, "etc", O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (etc < 0)
		die(125, "open /etc: %s", errstr(errno));
	write_file_at(etc, "passwd",
		      "root:x:0:0:root:/root:/usr/sbin/nologin\n"
		      "rljail:x:1000:1000:rljail:/tmp:/usr/sbin/nologin\n"
		      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
	write_file_at(etc, "group", "root:x:0:\nrljail:x:1000:\nnogroup:x:65534:\n");
	write_file_at(etc, "hosts", "127.0.0.1\tlocalhost " JAIL_HOSTNAME "\n::1\tlocalhost ip6-localhost ip6-loopback\n");
	write_file_at(etc, "hostname", JAIL_HOSTNAME "\n");
	write_file_at(etc, "nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n");
	close(etc);
}

// The /proc masks; docs/jail.md lists them and says why.
static const char *proc_masked_files[] = {
	"kcore", "kallsyms", "keys", "key-users", "timer_list", "sched_debug",
	"latency_stats", "config.gz", "kmsg", "kpagecount", "kpageflags", "kpagecgroup",
	"vmallocinfo", "pagetypeinfo", "slabinfo", "sysrq-trigger",
	// Files of the host's identity: the boot's unique id and the kernel's
	// command line (which names the host's root device, and often more)
	// would let a payload tell the host it runs on, and match runs on one
	// host to each other.
	"sys/kernel/random/boot_id", "cmdline", NULL,
};
static const char *proc_masked_dirs[] = {"acpi", "asound", "scsi", "firmware", "driver", "tty", "dynamic_debug", NULL};

// mask_all mounts a clone of the mount at dfd and path (as open_tree takes
// them), with the flags attrs, on each name of names below /proc (`proc`,
// the fd of the jail's procfs mount), and skips a name this kernel's build
// has not. The target is looked up from the fresh procfs, which no process
// of the jail has touched yet, without following a trailing symlink
// (move_mount's default). A name is looked up before its clone is made: a
// clone closed unattached is a detached mount's unmount, which waits for an
// RCU grace period. (The clone's mount_setattr changes none of the flags it
// has from its source, but a run without it cost some 0.6 ms more CPU,
// measured: docs/performance.md.)
static void mask_all(int proc, int dfd, const char *path, const char **names, const char *what, uint64_t attrs)
{
	for (const char **n = names; *n; n++) {
		struct stat st;
		if (fstatat(proc, *n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue; // not in this kernel's build
			die(125, "look up /proc/%s: %s", *n, errstr(errno));
		}
		int m = clone_tree(dfd, path, what, attrs);
		if (sys_move_mount(m, "", proc, *n, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			die(125, "mask /proc/%s: %s", *n, errstr(errno));
		close(m);
	}
}

// mount_proc mounts /proc with its masks; empty is an empty read-only tmpfs.
// The whole /proc is read-only (so are sys, bus, fs and irq, which
// therefore need no read-only binds of their own): nothing CPython needs
// writes there, and a write to /proc/self/comm (or task/TID/comm) would
// set a process name, which the host's kernel log prints raw when the
// process crashes ("NAME[pid]: segfault at ..."): a newline in it forges a
// line there (seccomp denies prctl(PR_SET_NAME), but cannot see a path).
static void mount_proc(int root, int empty)
{
	const uint64_t noexec = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
	int proc = new_fs("proc", NULL, -1, noexec | MOUNT_ATTR_RDONLY);
	int t = mountpoint(root, "/proc", 1);
	// After the move, proc names the attached mount.
	if (sys_move_mount(proc, "", t, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(125, "attach /proc: %s", errstr(errno));
	close(t);
	mask_all(proc, root, "dev/null", proc_masked_files, "/dev/null", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
	// Each masked directory gets a clone of `empty`.
	mask_all(proc, empty, "", proc_masked_dirs, "the empty layer", MOUNT_ATTR_RDONLY | noexec);
	close(proc);
}

// The jail's own pseudo-terminals (pty.openpty, os.forkpty): a devpts
// instance of the jail's (newinstance is implied since Linux 4.7, and
// devpts may be mounted in a user namespace), so that the jail's ptys are
// numbered from 0 in it and the host's /dev/pts entries are not there at
// all: a payload cannot open, or even list, a terminal of the host.
// ptmxmode=0666 lets the jail's user open pts/ptmx, which /dev/ptmx leads
// to; mode=620 is the mode of each new slave (its owner the opener).
// max bounds this instance's ptys: all non-initial devpts instances share
// the host's kernel.pty.max less kernel.pty.reserve (3072 by default), and
// a jail may not take them from other containers. 64 is far more than a
// program uses (CPython's test_pty opens a few at a time). TIOCSTI and
// TIOCLINUX stay denied by seccomp (seccomp/compile.go), TIOCCONS and
// TIOCSETD (line disciplines) are in no profile's ioctl list.
#define DEVPTS_MAX "64"

static void mount_devpts(int root)
{
	static const char *opts[][2] = {{"ptmxmode", "0666"}, {"mode", "0620"}, {"max", DEVPTS_MAX}};
	const char *step = "fsopen";
	int m = -1;
	int fs = (int)syscall(SYS_fsopen, "devpts", FSOPEN_CLOEXEC);
	if (fs >= 0) {
		step = "newinstance";
		int ok = syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "newinstance", NULL, 0) == 0;
		for (size_t i = 0; ok && i < sizeof opts / sizeof opts[0]; i++) {
			step = opts[i][0];
			ok = syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, opts[i][0], opts[i][1], 0) == 0;
		}
		if (ok) {
			step = "create";
			ok = syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0;
		}
		if (ok) {
			step = "fsmount";
			m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
		}
		int saved = errno;
		close(fs);
		errno = saved;
	}
	if (m < 0) {
		// A kernel or a security module (an AppArmor or SELinux policy
		// without devpts mounts) that refuses it costs the jail its
		// ptys only: said, and the run goes on.
		warn("no pseudo-terminals in the jail (pty.openpty fails): devpts %s: %s", step, errstr(errno));
		return;
	}
	attach_at(root, m, "/dev/pts", 1);
	int dev = resolve_in_root(root, "/dev", O_DIRECTORY | O_RDONLY);
	if (dev < 0)
		die(125, "open /dev: %s", errstr(errno));
	if (symlinkat("pts/ptmx", dev, "ptmx") < 0)
		die(125, "create /dev/ptmx: %s", errstr(errno));
	close(dev);
}

// skeleton is the jail's root while init builds it.
struct skeleton {
	int host_tmp; // the host's SKELETON, opened before the stage covered it
	int stage;    // overlay_of's tmpfs, at SKELETON
	int empty;    // an empty read-only tmpfs in the stage: every overlay's second layer, the masks of /proc
	int root;     // the jail's root tmpfs, stacked on the stage
};

// prepare_root does the part of the jail's root that no config decides,
// while the supervisor still prepares that config (the cgroup, the mount
// trees): the skeleton with /etc, /dev and its device nodes, and /proc
// with its masks. The stage and the skeleton cover the host's SKELETON in
// this mount namespace; granted paths below it are found through
// host_tmp, opened first (clone_granted).
static void prepare_root(struct skeleton *s)
{
	// Nothing mounted from now on may propagate to the host, and nothing
	// the host mounts later may appear here.
	if (syscall(SYS_mount, "", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die(125, "make the mount tree private: %s", errstr(errno));
	s->host_tmp = open(SKELETON, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->host_tmp < 0)
		die(125, "open the host's %s: %s", SKELETON, errstr(errno));
	// The stage of overlay_of: a tmpfs at SKELETON, then covered by the
	// skeleton. On its directory "empty" goes an empty read-only tmpfs:
	// the second layer of every overlay, and, in clones, the mask of each
	// masked directory of /proc (one tmpfs for all: each costs its
	// creation and, at the jail's end, its teardown).
	s->stage = new_fs("tmpfs", "0700", 64 << 10, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (sys_move_mount(s->stage, "", AT_FDCWD, SKELETON, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die(125, "attach the staging tmpfs at %s: %s", SKELETON, errstr(errno));
	if (mkdirat(s->stage, "empty", 0700) < 0)
		die(125, "create the empty layer: %s", errstr(errno));
	int at = openat(s->stage, "empty", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (at < 0)
		die(125, "open the empty layer: %s", errstr(errno));
	s->empty = new_fs("tmpfs", "0555", 4096, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (sys_move_mount(s->empty, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(125, "attach the empty layer: %s", errstr(errno));
	close(at);
	s->root = new_fs("tmpfs", "0755", 1 << 20, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (sys_move_mount(s->root, "", s->stage, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(125, "attach the root skeleton: %s", errstr(errno));
	write_etc(s->root);
	// /dev is a directory of the skeleton (not a tmpfs of its own), and
	// read-only with it. The only devices are bind-mounted from the host's
	// /dev (a user namespace cannot mknod): read-only so that they cannot
	// be chmod-ed, and not nodev.
	if (mkdirat(s->root, "dev", 0755) < 0)
		die(125, "create /dev: %s", errstr(errno));
	static const char *devices[] = {"null", "zero", "full", "random", "urandom", NULL};
	char path[64];
	for (const char **d = devices; *d; d++) {
		snprintf(path, sizeof path, "/dev/%s", *d);
		attach_at(s->root, clone_host_path(AT_FDCWD, path, path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC), path, 0);
	}
	int dev = resolve_in_root(s->root, "/dev", O_DIRECTORY | O_RDONLY);
	if (dev < 0)
		die(125, "open /dev: %s", errstr(errno));
	const char *links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
	for (int i = 0; i < 4; i++) {
		if (symlinkat(links[i][0], dev, links[i][1]) < 0)
			die(125, "create /dev/%s: %s", links[i][1], errstr(errno));
	}
	close(dev);
	mount_devpts(s->root);
	mount_proc(s->root, s->empty);
}

// clone_granted clones a granted host path (rootless: the supervisor
// passes none) in this mount namespace, where the stage covers SKELETON:
// a path below it is resolved from the host's, opened before.
static int clone_granted(struct skeleton *s, const char *path, uint64_t attrs)
{
	size_t n = strlen(SKELETON);
	if (strncmp(path, SKELETON, n) == 0 && (path[n] == 0 || path[n] == '/')) {
		const char *rel = path + n;
		while (*rel == '/')
			rel++;
		return clone_host_path(s->host_tmp, *rel ? rel : "", path, attrs);
	}
	return clone_host_path(AT_FDCWD, path, path, attrs);
}

// finish_root mounts what the config asks for into the skeleton and pivots
// into it: the root is then read-only and the host's tree detached.
static void finish_root(struct config *c, struct skeleton *s)
{
	// Every granted tree is opened before anything is mounted in the jail.
	int *trees = xrealloc(NULL, sizeof(int) * (size_t)(c->nmounts + 1));
	for (int i = 0; i < c->nmounts; i++) {
		struct mnt *m = &c->mounts[i];
		if (m->fd >= 0) {
			trees[i] = m->fd;
			continue;
		}
		uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | ((m->flags & M_WRITABLE) ? 0 : MOUNT_ATTR_RDONLY);
		trees[i] = clone_granted(s, m->src, attrs);
	}
	int root = s->root;
	for (int i = 0; i < c->nlinks; i++) {
		if (symlinkat(c->links[i].target, root, c->links[i].name) < 0)
			die(125, "create /%s -> %s: %s", c->links[i].name, c->links[i].target, errstr(errno));
	}
	tmpfs_at(root, "/tmp", "1777", c->tmpsize, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	int staged = 0;
	for (int i = 0; i < c->nmounts; i++) {
		struct mnt *m = &c->mounts[i];
		int fd = trees[i];
		if ((m->flags & (M_DIR | M_WRITABLE)) == M_DIR) {
			int o = overlay_of(s->stage, s->empty, &trees[i], staged++);
			if (o >= 0)
				fd = o;
			else {
				warn("%s is mounted as a plain bind, so the jail's /proc/self/mountinfo shows its path on the host: overlayfs refused it (%s)", m->dest, errstr(errno));
				fd = trees[i];
				trees[i] = -1;
			}
		}
		attach_at(root, fd, m->dest, m->flags & M_DIR);
	}
	for (int i = 0; i < c->nmounts; i++) {
		if (trees[i] >= 0 && (c->mounts[i].flags & (M_DIR | M_WRITABLE)) == M_DIR)
			close(trees[i]);
	}
	free(trees);
	tmpfs_at(root, "/dev/shm", "1777", c->tmpsize, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);

	// pivot_root(".", ".") stacks the old root on the new one; the lazy
	// unmount then drops it with every host mount below it, the stage
	// among them (pivot_root(2)): staging costs no unmount of its own.
	if (fchdir(root) < 0)
		die(125, "chdir into the new root: %s", errstr(errno));
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		die(125, "pivot_root: %s", errstr(errno));
	if (syscall(SYS_umount2, ".", MNT_DETACH) < 0)
		die(125, "detach the old root: %s", errstr(errno));
	if (chdir("/") < 0)
		die(125, "chdir /: %s", errstr(errno));
	// The skeleton itself becomes read-only; /tmp, /dev/shm and rw volumes
	// are mounts of their own and keep their flags.
	if (sys_mount_setattr(AT_FDCWD, "/", 0, MOUNT_ATTR_RDONLY) < 0)
		die(125, "make / read-only: %s", errstr(errno));
	close(s->root);
	close(s->empty);
	close(s->stage);
	close(s->host_tmp);
}

// ---- namespaces without a filesystem

// The jail's own TCP buffer sizes, written in its network namespace (they
// are per namespace since Linux 4.15; /proc/sys/net follows the writer's
// namespace, whatever procfs it opens). TCP and UDP buffers are counted
// host-wide against net.ipv4.tcp_mem and udp_mem, and a payload that held
// loopback connections it never read took some 300 MB of the host's TCP
// memory under -m 64m: at tcp_mem's limit every TCP socket of the host
// stalls. The cgroup bounds the jail's sum where there is one (on v1
// memory.kmem.tcp.limit_in_bytes, cgroup/v1.go); these bound what
// autotuning gives each socket, which is all there is without a cgroup.
// A socket's own SO_RCVBUF or SO_SNDBUF still reaches twice net.core's
// rmem_max or wmem_max, which a namespace not owned by the host's user
// namespace cannot lower (SECURITY.md). The middle value is the kernel's
// default. The cap is a compromise measured on the development VM: 120
// unread loopback connections held 455 MB of TCP memory under this host's
// 32 MiB tcp_rmem, 245 MB under 2 MiB and 130 MB under 1 MiB, and a bulk
// transfer of 1 GiB over lo took 1.3 times as long under 2 MiB, twice as
// long under 1 MiB.
static const struct {
	const char *path, *value;
} socket_sysctls[] = {
	{"/proc/sys/net/ipv4/tcp_rmem", "4096 131072 2097152"},
	{"/proc/sys/net/ipv4/tcp_wmem", "4096 16384 2097152"},
};

static void limit_socket_buffers(void)
{
	for (size_t i = 0; i < sizeof socket_sysctls / sizeof socket_sysctls[0]; i++) {
		int fd = open(socket_sysctls[i].path, O_WRONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			continue; // host-wide before Linux 4.15: not the jail's to set
		size_t len = strlen(socket_sysctls[i].value);
		if (fd < 0 || write(fd, socket_sysctls[i].value, len) != (ssize_t)len)
			die(125, "limit the jail's socket buffers: write %s: %s", socket_sysctls[i].path, errstr(errno));
		close(fd);
	}
}

static void setup_namespaces(void)
{
	if (sethostname(JAIL_HOSTNAME, strlen(JAIL_HOSTNAME)) < 0)
		die(125, "set the hostname: %s", errstr(errno));
	if (setdomainname("(none)", 6) < 0)
		die(125, "set the domain name: %s", errstr(errno));
	// lo, the only interface of the empty network namespace, comes up.
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		die(125, "bring up lo: socket: %s", errstr(errno));
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		die(125, "bring up lo: read flags: %s", errstr(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		die(125, "bring up lo: %s", errstr(errno));
	close(s);
	limit_socket_buffers();
}

// ---- the payload

// look_path finds the command on the payload's PATH, inside the jail.
static char *look_path(const char *name, char **envp, int *code)
{
	if (strchr(name, '/'))
		return strdup(name);
	const char *path = DEFAULT_PATH;
	for (char **e = envp; e && *e; e++) {
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	}
	int not_exec = 0;
	const char *p = path;
	for (;;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		char full[4096];
		if (len == 0)
			snprintf(full, sizeof full, "./%s", name);
		else
			snprintf(full, sizeof full, "%.*s/%s", (int)len, p, name);
		struct stat st;
		if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (st.st_mode & 0111)
				return strdup(full);
			not_exec = 1;
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	if (not_exec) {
		*code = 126;
		die(126, "%s: found on PATH but not executable", name);
	}
	*code = 127;
	die(127, "%s: command not found in the jail (PATH=%s)", name, path);
}

static const char *step_name(int step)
{
	switch (step) {
	case RLJAIL_STEP_SETSID: return "setsid";
	case RLJAIL_STEP_CLOSE_FDS: return "close inherited descriptors";
	case RLJAIL_STEP_CHDIR: return "chdir to the working directory";
	case RLJAIL_STEP_RLIMIT: return "set the resource limits";
	case RLJAIL_STEP_NICE: return "lower the payload's priority";
	case RLJAIL_STEP_SECUREBITS: return "lock securebits";
	case RLJAIL_STEP_AMBIENT: return "clear ambient capabilities";
	case RLJAIL_STEP_CAPSET: return "drop capabilities";
	case RLJAIL_STEP_NO_NEW_PRIVS: return "set no_new_privs";
	case RLJAIL_STEP_SECCOMP: return "load the seccomp filter";
	case RLJAIL_STEP_NOTIFY_SEND: return "send the seccomp listener to the supervisor";
	case RLJAIL_STEP_EXECVE: return "execve";
	case RLJAIL_STEP_CHANNEL: return "pass the session channel as descriptor 3";
	}
	return "start the payload";
}

static int cap_last(void)
{
	char buf[16] = {0};
	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0)
		die(125, "read cap_last_cap: %s", errstr(errno));
	close(fd);
	return atoi(buf);
}

static pid_t start_payload(struct config *c, const char *exe)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		die(125, "create the exec error pipe: %s", errstr(errno));
	struct sock_fprog prog = {(unsigned short)(c->filter_len / 8), (struct sock_filter *)c->filter};
	struct rljail_spawn s = {
		.path = exe,
		.argv = c->argv,
		.envp = c->envp,
		.workdir = c->workdir,
		.errfd = p[1],
		.filter = c->filter_len ? &prog : NULL,
		.notify_sock = c->notify ? FD_NOTIFY : -1,
		.nrlimits = c->nrl,
		.rlimits = c->rl,
		.nice = c->nice,
		.channel = c->channel,
	};
	int pid = rljail_spawn(&s);
	close(p[1]);
	// Only the payload keeps its channel: the supervisor sees its end
	// when the payload's last holder is gone.
	if (c->channel > 3) {
		close(c->channel);
		c->channel = 0;
	}
	if (pid < 0)
		die(125, "fork the payload: %s", errstr(-pid));
	struct rljail_spawn_error e;
	ssize_t n;
	do {
		n = read(p[0], &e, sizeof e);
	} while (n < 0 && errno == EINTR);
	close(p[0]);
	if (n == (ssize_t)sizeof e) {
		int st;
		waitpid(pid, &st, 0);
		if (e.step == RLJAIL_STEP_EXECVE)
			die(e.err == ENOENT ? 127 : 126, "cannot run %s: %s", c->argv[0], errstr(e.err));
		if (e.step == RLJAIL_STEP_CHDIR)
			die(125, "working directory %s: %s", c->workdir, errstr(e.err));
		die(125, "start the payload: %s: %s", step_name(e.step), errstr(e.err));
	}
	return pid;
}

// reap_all kills every process of the jail's PID namespace but init and
// reaps them all, so that their resource usage adds to init's (getrusage's
// RUSAGE_CHILDREN, and so the rusage the supervisor reads when it reaps
// init). kill(-1) reaches every one of them; a fork that races it fails,
// as its parent has SIGKILL pending. __WALL: a child cloned with another
// exit signal than SIGCHLD is reaped too.
static void reap_all(void)
{
	int st;
	for (;;) {
		kill(-1, SIGKILL);
		if (waitpid(-1, &st, __WALL) < 0 && errno == ECHILD)
			break;
	}
}

// serve forwards the supervisor's signal requests and reaps every child
// until the payload ends; it never returns.
__attribute__((noreturn)) static void serve(pid_t payload, int sfd)
{
	char buf[256];
	size_t have = 0;
	for (;;) {
		struct pollfd fds[2] = {{FD_CONTROL, POLLIN, 0}, {sfd, POLLIN, 0}};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(125);
		}
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			ssize_t r = read(sfd, &si, sizeof si);
			(void)r;
			int st;
			pid_t got;
			while ((got = waitpid(-1, &st, WNOHANG | __WALL)) > 0) {
				if (got != payload)
					continue;
				char line[128];
				if (WIFSIGNALED(st))
					snprintf(line, sizeof line, "{\"exited\":true,\"signal\":%d}", WTERMSIG(st));
				else
					snprintf(line, sizeof line, "{\"exited\":true,\"code\":%d}", WEXITSTATUS(st));
				// Whatever the payload left running ends before the report,
				// so that the cgroup's statistics, read on it, count the
				// jail's last processes.
				reap_all();
				report(line);
				_exit(0);
			}
		}
		if (fds[0].revents & (POLLIN | POLLHUP)) {
			ssize_t r = read(FD_CONTROL, buf + have, sizeof buf - 1 - have);
			if (r <= 0)
				_exit(125); // the supervisor is gone; the kernel ends the jail
			have += (size_t)r;
			buf[have] = 0;
			char *nl;
			while ((nl = memchr(buf, '\n', have)) != NULL) {
				*nl = 0;
				char *end;
				long sig = strncmp(buf, "signal ", 7) == 0 ? strtol(buf + 7, &end, 10) : 0;
				if (sig > 0 && sig < NSIG && end != buf + 7)
					kill(payload, (int)sig);
				if (strcmp(buf, "kill") == 0) {
					// The supervisor ends the jail (its kill timer, where
					// no cgroup measures the CPU time: jailRun.kill). Reaped
					// here, every process's CPU time counts in the rusage
					// the supervisor reads from init; killed with init, the
					// kernel would release them unreaped.
					reap_all();
					_exit(128 + SIGKILL);
				}
				size_t used = (size_t)(nl - buf) + 1;
				memmove(buf, nl + 1, have - used);
				have -= used;
			}
			if (have == sizeof buf - 1)
				have = 0; // a line too long for any request: drop it
		}
	}
}

// The CPU set rljail was started with, when the first step keeps off the
// supervisor's CPU (keep_off_cpu); the init gives it back to the payload.
static unsigned char caller_cpus[RLJAIL_CPUSET_BYTES];
static int caller_cpus_saved;

// keep_off_cpu moves the first step, and so the init it clones, off the
// CPU the supervisor is pinned to (prestart.c says why): avoid is that
// CPU's number, or "-" for none. The first step's own set is the
// caller's, inherited by fork, or the caller's without that CPU if the
// entry has moved it off already; the caller's set holds the CPU either
// way (the entry passes it only then).
static void keep_off_cpu(const char *avoid)
{
	if (avoid[0] < '0' || avoid[0] > '9')
		return;
	unsigned long cpu = strtoul(avoid, NULL, 10);
	unsigned char set[RLJAIL_CPUSET_BYTES];
	memset(set, 0, sizeof set);
	if (cpu / 8 >= sizeof set || syscall(SYS_sched_getaffinity, 0, sizeof set, set) <= 0)
		return;
	unsigned char bit = (unsigned char)(1u << (cpu % 8));
	int off = !(set[cpu / 8] & bit); // moved off by the entry already
	set[cpu / 8] |= bit;
	memcpy(caller_cpus, set, sizeof set);
	unsigned char others[RLJAIL_CPUSET_BYTES];
	if (rljail_cpuset_without(others, set, cpu) && (off || syscall(SYS_sched_setaffinity, 0, sizeof others, others) == 0))
		caller_cpus_saved = 1;
}

static void setup_egress(struct config *c, int root);

static int init_main(void)
{
	// Die with the supervisor, even when it is SIGKILLed. The race (the
	// supervisor dying before this line) is closed by read_message: its
	// control pipe then reads as EOF and init exits.
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	// Non-dumpable: the payload, though it runs with the same uid, cannot
	// ptrace init, read its memory or open /proc/1/exe (the host binary,
	// CVE-2019-5736).
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	// Every signal is blocked, with its default handler: one the payload
	// sends to PID 1 is dropped by the kernel (a namespace's init gets no
	// signal it has no handler for from inside), one from the host stays
	// pending; SIGCHLD is read from a signalfd. Signals for the payload
	// arrive as control lines from the supervisor. The payload's child
	// inherits the default handlers (none that rljail's caller ignored
	// stays ignored) and only clears the mask before execve.
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	}
	sigset_t all, chld;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC);
	if (getpid() != 1 || fcntl(FD_STATUS, F_GETFD) < 0) {
		static const char msg[] = "rljail: the init stage only runs inside a jail started by rljail\n";
		ssize_t w = write(2, msg, sizeof msg - 1);
		(void)w;
		return 125;
	}
	if (sfd < 0)
		die(125, "signalfd: %s", errstr(errno));

	// What no config decides is done while the supervisor makes it.
	// The payload can gain no capability at execve: the bounding set is
	// emptied here, beside the supervisor's work, rather than in the
	// payload's child; init keeps the capabilities it holds.
	if (rljail_drop_bounding(cap_last()) < 0)
		die(125, "drop the capability bounding set: %s", errstr(errno));
	setup_namespaces();
	struct skeleton sk;
	prepare_root(&sk);

	struct config c;
	memset(&c, 0, sizeof c);
	c.tmpsize = 64 << 20;
	read_message(&c);
	if (c.nlistens > 0 || c.netc > 0)
		setup_egress(&c, sk.root);
	// The root is built while the supervisor makes the cgroup (cgroup v1),
	// then the limits come.
	finish_root(&c, &sk);
	read_message(&c);
	// The command and the working directory come with the config, or, for
	// a jail made ahead of its payload (jail/prepared.go), with the limits.
	if (c.argc == 0 || c.workdir == NULL)
		die(125, "read the jail config: no command or working directory");
	// The pending-signal limit holds for init too: what the payload sends
	// to PID 1 is blocked here and stays queued, and every queued signal
	// of the jail counts against its host user's as well (the user
	// namespace's owner: root, or the invoking user).
	for (int i = 0; i < c.nrl; i++) {
		if (c.rl[i].resource != RLIMIT_SIGPENDING)
			continue;
		struct rlimit lim = {c.rl[i].soft, c.rl[i].hard};
		if (setrlimit(RLIMIT_SIGPENDING, &lim) < 0)
			die(125, "limit init's pending signals: %s", errstr(errno));
	}
	// cgroup v1: init joins the jail's cgroups itself, before the payload,
	// so that the payload and all it does are counted (what init did
	// before is a fixed few pages of mounts), and init is counted in
	// pids.max as on cgroup v2, where it is born in the cgroup. It is
	// single-threaded (no Go runtime has started), so writing "0" to
	// "tasks" moves it without the global lock whose RCU grace period makes
	// a move by pid cost several ms (cgroup.Cgroup.TaskFiles). (Having the
	// payload's child join instead, and removing the cgroup while init
	// exits, was measured: no faster, and the pids limit would then count
	// one task fewer on v1 than on v2.)
	for (int i = 0; i < c.ntasks; i++) {
		if (write(c.tasks[i], "0", 1) != 1)
			die(125, "join the jail's cgroup: %s", errstr(errno));
		close(c.tasks[i]);
	}
	if (c.unshare_cgroup && unshare(CLONE_NEWCGROUP) < 0)
		die(125, "enter a new cgroup namespace: %s", errstr(errno));
	int code = 0;
	char *exe = look_path(c.argv[0], c.envp, &code);
	// The payload runs on the CPUs rljail was started with. Should the
	// kernel refuse them now (none of them left in this cpuset), it keeps
	// the ones it has, a part of them: no reason to fail the run.
	if (caller_cpus_saved)
		syscall(SYS_sched_setaffinity, 0, sizeof caller_cpus, caller_cpus);
	pid_t pid = start_payload(&c, exe);
	report("{\"started\":true}");
	serve(pid, sfd);
}

// ---- stage 1: making the jail's init


// write_proc writes a short value to /proc/PID/NAME.
static int write_proc(pid_t pid, const char *name, const char *value)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, value, strlen(value));
	int saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)strlen(value) ? 0 : -1;
}

// write_id_maps writes the user namespace of process pid a map of one uid
// and one gid inside (uid, gid) to the host ids hostuid and hostgid, with
// setgroups (allow or deny) in between, as the kernel wants. NULL, or the
// name of the map that could not be written, with errno set.
static const char *write_id_maps(pid_t pid, unsigned uid, unsigned gid, const char *hostuid, const char *hostgid,
				 const char *setgroups)
{
	char map[64];
	snprintf(map, sizeof map, "%u %s 1\n", uid, hostuid);
	if (write_proc(pid, "uid_map", map) < 0)
		return "uid map";
	if (write_proc(pid, "setgroups", setgroups) < 0)
		return "setgroups";
	snprintf(map, sizeof map, "%u %s 1\n", gid, hostgid);
	if (write_proc(pid, "gid_map", map) < 0)
		return "gid map";
	return NULL;
}

// send_msg sends the supervisor one message on the control socket: data,
// with the descriptor fd (SCM_RIGHTS) unless it is -1. 0, or -1 when the
// supervisor is gone.
static int send_msg(const void *data, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof u.buf;
		struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &fd, sizeof(int));
	}
	return sendmsg(FD_CONTROL, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

// send_pidfd hands the init's pidfd to the supervisor (receivePidfd in
// run.go): a 4-byte message "pid!" with the descriptor.
static void send_pidfd(int pidfd)
{
	if (send_msg("pid!", 4, pidfd) < 0)
		_exit(125); // the supervisor is gone; the init dies with it
}

// send_ids sends the supervisor (receivePidfd in run.go) the host ids the
// first step reserved for a root-run jail (hostids.c): "ids!", the uid, the
// gid and whether a marked id was passed over (little-endian 32-bit), and
// the locked lock file, which the supervisor holds too until it has given
// back what the jail left in its writable volumes (jail.hostIDs).
static void send_ids(const struct rljail_ids *ids)
{
	unsigned char data[16] = {'i', 'd', 's', '!'};
	for (int i = 0; i < 4; i++) {
		data[4 + i] = (unsigned char)(ids->uid >> (8 * i));
		data[8 + i] = (unsigned char)(ids->gid >> (8 * i));
		data[12 + i] = (unsigned char)((unsigned)ids->marked >> (8 * i));
	}
	if (send_msg(data, sizeof data, ids->lock) < 0)
		_exit(125); // the supervisor is gone; the init dies with it
}

// clone_error is the one line a failed clone into the namespaces becomes,
// in the words of startError (run.go).
static void clone_error(int err)
{
	switch (err) {
	case EPERM:
	case EACCES:
		die(125, "cannot create the jail's namespaces: %s; see rljail check", errstr(err));
	case ENOSPC:
		die(125, "cannot create the jail's namespaces: the per-user namespace limit is reached (user.max_user_namespaces): %s", errstr(err));
	case EUSERS:
		die(125, "cannot create the jail's namespaces: too many nested user namespaces: %s", errstr(err));
	}
	die(125, "start the jail: clone: %s", errstr(err));
}

// receive_cgroup reads the supervisor's "cgr!" message (sendCgroup in
// run.go): the jail's cgroup v2 directory to clone the init into, or no
// descriptor when the init joins its cgroups itself (or there are none).
static int receive_cgroup(int lock)
{
	char data[4];
	int fd, got;
	ssize_t r = recv_msg(data, sizeof data, &fd, 1, &got);
	if (r == 0 || r == -1)
		rljail_guardian(FD_GUARD, lock); // the supervisor gave up: guard what it made
	if (r != sizeof data || memcmp(data, "cgr!", 4) != 0)
		die(125, "start the jail: a malformed cgroup message");
	return got == 1 ? fd : -1;
}

// stage1_main is the process the supervisor starts cheaply (vfork and exec,
// in the host's namespaces: spawnInit in run.go) before anything else. It
// clones the jail's init into every namespace at once, as a child of the
// supervisor (CLONE_PARENT, so that the init's parent-death signal follows
// the supervisor), hands its pidfd to the supervisor, writes the init's id
// maps, and then stays as the guardian of the jail's cgroup
// (rljail_guardian). The init is a fork of this freshly executed process:
// nothing of the supervisor's memory is in the jail. argv: rljail-init
// HOSTUID HOSTGID allow|deny now|cgroup AVOID; with "cgroup" (cgroup v2)
// it first waits for the cgroup to be born in. As root HOSTUID and HOSTGID
// are "-": the step reserves the jail's own (hostids.c) and hands them to
// the supervisor with the init's pidfd.
static int stage1_main(int argc, char **argv)
{
	if (argc != 6 || fcntl(FD_STATUS, F_GETFD) < 0 || fcntl(FD_CONTROL, F_GETFD) < 0 || fcntl(FD_GUARD, F_GETFD) < 0) {
		static const char msg[] = "rljail: the init stage only runs inside a jail started by rljail\n";
		ssize_t w = write(2, msg, sizeof msg - 1);
		(void)w;
		return 125;
	}
	const char *uid = argv[1], *gid = argv[2], *setgroups = argv[3];
	keep_off_cpu(argv[5]);
	// As root, a host uid and gid of the jail's own, reserved before
	// anything is made (and while the supervisor makes the cgroup); the
	// lock goes to FD_IDLOCK, which the guard keeps until it ends.
	struct rljail_ids ids = {0, 0, -1, 0};
	char uids[16], gids[16];
	if (strcmp(uid, "-") == 0) {
		const char *failed = rljail_reserve_ids(&ids);
		if (failed && errno == 0)
			die(125, "reserve a host uid for the jail: %s", failed);
		if (failed)
			die(125, "reserve a host uid for the jail: %s: %s", failed, errstr(errno));
		if (ids.lock != FD_IDLOCK) {
			if (dup2(ids.lock, FD_IDLOCK) < 0)
				die(125, "reserve a host uid for the jail: %s", errstr(errno));
			close(ids.lock);
			ids.lock = FD_IDLOCK;
		}
		snprintf(uids, sizeof uids, "%u", ids.uid);
		snprintf(gids, sizeof gids, "%u", ids.gid);
		uid = uids;
		gid = gids;
	}
	int cgroupfd = strcmp(argv[4], "cgroup") == 0 ? receive_cgroup(ids.lock) : -1;
	int mapped[2];
	if (pipe2(mapped, O_CLOEXEC) < 0)
		die(125, "start the jail: pipe: %s", errstr(errno));
	int pidfd = -1;
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET |
		     CLONE_PARENT | CLONE_PIDFD;
	args.pidfd = (uint64_t)(uintptr_t)&pidfd;
	if (cgroupfd >= 0) {
		// Born in its cgroup, with a cgroup namespace rooted there.
		args.flags |= CLONE_INTO_CGROUP | CLONE_NEWCGROUP;
		args.cgroup = (uint64_t)cgroupfd;
	}
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (pid < 0)
		clone_error(errno);
	if (pid == 0) {
		// The init. Its user id is the jail's once the maps are written.
		close(mapped[1]);
		close(FD_GUARD);
		// The id lock stays with the host's processes: a jail that held it
		// could unlock it (flock LOCK_UN) and let another jail share its ids.
		if (ids.lock >= 0)
			close(ids.lock);
		char b;
		if (read(mapped[0], &b, 1) != 1)
			_exit(125); // stage 1 failed and says why
		close(mapped[0]);
		if (cgroupfd >= 0)
			close(cgroupfd);
		if (strcmp(setgroups, "allow") == 0 && syscall(SYS_setgroups, 0, NULL) < 0)
			die(125, "clear the supplementary groups: %s", errstr(errno));
		if (syscall(SYS_setresgid, 1000, 1000, 1000) < 0 || syscall(SYS_setresuid, 1000, 1000, 1000) < 0)
			die(125, "become the jail's user: %s", errstr(errno));
		// The jail's uid 0 is unmapped, so the change of user keeps the
		// capabilities (in the jail's user namespace only) that init
		// needs to build the jail; it drops them before the payload.
		if (setsid() < 0)
			die(125, "setsid: %s", errstr(errno));
		_exit(init_main());
	}
	close(mapped[0]);
	if (cgroupfd >= 0)
		close(cgroupfd);
	// The pidfd goes first: should the maps fail, the supervisor can
	// still reap the init, which then ends without its maps.
	send_pidfd(pidfd);
	close(pidfd);
	if (ids.lock >= 0)
		send_ids(&ids);
	const char *failed = write_id_maps(pid, 1000, 1000, uid, gid, setgroups);
	if (failed)
		die(125, "write the jail's %s: %s", failed, errstr(errno));
	if (write(mapped[1], "m", 1) != 1)
		die(125, "start the jail: %s", errstr(errno));
	close(mapped[1]);
	// From here on this process is the cgroup's guard, not an init: it says
	// so in ps (/proc/PID/cmdline is the argv memory, rewritten in place).
	char *end = argv[argc - 1] + strlen(argv[argc - 1]);
	memset(argv[0], 0, (size_t)(end - argv[0]));
	snprintf(argv[0], (size_t)(end - argv[0]) + 1, "rljail-guard");
	prctl(PR_SET_NAME, "rljail-guard", 0, 0, 0);
	rljail_guardian(FD_GUARD, ids.lock);
}

void rljail_prestart(int argc, char **argv); // prestart.c
const char *rljail_entry_env(void);           // prestart.c

// rljail_stage_select is called by the binary's entry point (entry_amd64.s)
// before libc's start: in the init stage it runs the stage and never
// returns; otherwise it starts the first step of a run's init stage
// (prestart.c) when the command line asks for a run, and returns for libc
// and Go to start as usual: with an environment entry to add for Go's
// runtime (rljail_entry_env), or NULL.
const char *rljail_stage_select(int argc, char **argv);
const char *rljail_stage_select(int argc, char **argv)
{
	if (argc >= 1 && argv[0] && strcmp(argv[0], "rljail-init") == 0)
		_exit(stage1_main(argc, argv));
	rljail_prestart(argc, argv);
	return rljail_entry_env();
}

// ---- egress (--allow-host; jail/egress.go)

// parse_ipv4 reads a dotted quad into network byte order; -1 if it is not one.
static int parse_ipv4(const char *s, uint32_t *out)
{
	uint32_t ip = 0;
	for (int i = 0; i < 4; i++) {
		char *e;
		unsigned long v = strtoul(s, &e, 10);
		if (e == s || v > 255 || (i < 3 && *e != '.') || (i == 3 && *e != 0))
			return -1;
		ip = ip << 8 | (uint32_t)v;
		s = e + 1;
	}
	unsigned char *b = (unsigned char *)out;
	b[0] = (unsigned char)(ip >> 24), b[1] = (unsigned char)(ip >> 16), b[2] = (unsigned char)(ip >> 8), b[3] = (unsigned char)ip;
	return 0;
}

// setup_egress writes the /etc files egress asks for (the root is still
// writable) and makes its sockets on the jail's loopback, each sent to the
// supervisor ("lsn!" with the descriptor) and closed here: the supervisor
// serves them from the host, and nothing of them stays in the jail.
// Sockets are made before the payload exists, so that its connections
// wait in their backlog however late the supervisor accepts.
static void setup_egress(struct config *c, int root)
{
	if (c->netc > 0) {
		int etc = openat(root, "etc", O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (etc < 0)
			die(125, "open /etc: %s", errstr(errno));
		for (int i = 0; i < c->netc; i++) {
			const char *name = c->etc_files[i].name;
			if (strchr(name, '/') || name[0] == 0 || name[0] == '.')
				die(125, "write /etc: %s is not a plain name", name);
			int fd = openat(etc, name, O_CREAT | O_TRUNC | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
			if (fd < 0)
				die(125, "create /etc/%s: %s", name, errstr(errno));
			size_t len = strlen(c->etc_files[i].target);
			if (write(fd, c->etc_files[i].target, len) != (ssize_t)len)
				die(125, "write /etc/%s: %s", name, errstr(errno));
			close(fd);
		}
		close(etc);
	}
	for (int i = 0; i < c->nlistens; i++) {
		struct listen_req *l = &c->listens[i];
		struct sockaddr_in sa;
		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_port = (uint16_t)((l->port & 0xff) << 8 | ((l->port >> 8) & 0xff));
		if (l->port <= 0 || l->port > 65535 || parse_ipv4(l->addr, &sa.sin_addr.s_addr) < 0)
			die(125, "egress: a socket at %s:%d", l->addr, l->port);
		int fd = socket(AF_INET, (l->datagram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die(125, "egress: socket: %s", errstr(errno));
		int one = 1;
		if (syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
			die(125, "egress: SO_REUSEADDR: %s", errstr(errno));
		if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
			die(125, "egress: bind %s:%d in the jail: %s", l->addr, l->port, errstr(errno));
		if (!l->datagram && syscall(SYS_listen, fd, 512) < 0)
			die(125, "egress: listen on %s:%d: %s", l->addr, l->port, errstr(errno));
		if (send_msg("lsn!", 4, fd) < 0)
			_exit(125); // the supervisor is gone
		close(fd);
	}
}
