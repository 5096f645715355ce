// The payload's confinement between fork and execve, run by the init stage
// (init.c) in the child it forks for the payload, and the cgroup guardian
// of the first step.
#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static void fail(const struct rljail_spawn *s, int step)
{
	struct rljail_spawn_error e = {step, errno};
	// Best effort: the parent treats a short or missing report as success
	// followed by an exit status, so there is nothing more to do on error.
	ssize_t n = write(s->errfd, &e, sizeof e);
	(void)n;
	_exit(127);
}

// send_fd sends one descriptor over a Unix socket (SCM_RIGHTS).
static int send_fd(int sock, int fd)
{
	char byte = 'L';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof u.buf,
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

static void child(const struct rljail_spawn *s)
{
	// Every handler is the default already, and every signal blocked, as
	// init keeps them (init_main); the mask is cleared just before execve.

	// Its own session: no controlling terminal, and the payload cannot
	// signal init's process group.
	if (setsid() < 0)
		fail(s, RLJAIL_STEP_SETSID);

	// Close every inherited descriptor but 0, 1, 2 at execve (the error pipe
	// must stay open until then). Descriptors leaked into a container were
	// CVE-2024-21626.
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		fail(s, RLJAIL_STEP_CLOSE_FDS);
	// The one descriptor beyond 0, 1, 2 a payload may get: its channel to
	// the supervisor (a session's worker). dup2 clears close-on-exec on 3
	// only; the received copy still closes at execve.
	if (s->channel > 3 && dup2(s->channel, 3) < 0)
		fail(s, RLJAIL_STEP_CHANNEL);

	if (chdir(s->workdir) < 0)
		fail(s, RLJAIL_STEP_CHDIR);

	if (s->nice > 0 && setpriority(PRIO_PROCESS, 0, s->nice) < 0)
		fail(s, RLJAIL_STEP_NICE);

	for (int i = 0; i < s->nrlimits; i++) {
		const struct rljail_rlimit *r = &s->rlimits[i];
		struct rlimit cur;
		if (getrlimit(r->resource, &cur) < 0)
			fail(s, RLJAIL_STEP_RLIMIT);
		struct rlimit lim = {r->soft, r->hard};
		if (lim.rlim_max > cur.rlim_max)
			lim.rlim_max = cur.rlim_max;
		if (lim.rlim_cur > lim.rlim_max)
			lim.rlim_cur = lim.rlim_max;
		if (setrlimit(r->resource, &lim) < 0)
			fail(s, RLJAIL_STEP_RLIMIT);
	}

	// Lock the capability rules so that uid changes can never give
	// capabilities back (the payload is not uid 0, but lock it anyway).
	if (prctl(PR_SET_SECUREBITS,
		  SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
		  SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
		  SECBIT_KEEP_CAPS_LOCKED |
		  SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
		  0, 0, 0) < 0)
		fail(s, RLJAIL_STEP_SECUREBITS);

	// Drop every capability: the bounding set is empty already (init
	// emptied its own, which the child inherits: rljail_drop_bounding),
	// then ambient, inheritable, permitted and effective.
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail(s, RLJAIL_STEP_AMBIENT);
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail(s, RLJAIL_STEP_CAPSET);

	// No execve may ever grant privileges again (setuid files, file caps).
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail(s, RLJAIL_STEP_NO_NEW_PRIVS);

	// The seccomp filter goes last, so that it only has to allow what the
	// payload needs and execve.
	if (s->filter != NULL) {
		unsigned int flags = s->notify_sock >= 0 ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
		long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, s->filter);
		if (listener < 0)
			fail(s, RLJAIL_STEP_SECCOMP);
		if (s->notify_sock >= 0) {
			// Hand the listener to the supervisor, which answers every
			// call the policy does not allow; then close it here, so the
			// payload never holds it.
			if (send_fd(s->notify_sock, (int)listener) < 0)
				fail(s, RLJAIL_STEP_NOTIFY_SEND);
			close((int)listener);
		}
	}

	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	execve(s->path, s->argv, s->envp);
	fail(s, RLJAIL_STEP_EXECVE);
}

int rljail_drop_bounding(int cap_last)
{
	for (int cap = 0; cap <= cap_last; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	}
	return 0;
}

int rljail_spawn(const struct rljail_spawn *s)
{
	// Block every signal across fork so that none is delivered to the
	// child before its handlers are reset.
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (pid == 0)
		child(s);
	int saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return -saved;
	return pid;
}

// write_str writes a short string to a file; errors are ignored (the
// guardian does what it can).
static void write_str(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = write(fd, v, strlen(v));
	(void)n;
	close(fd);
}

// kill_procs sends SIGKILL to every pid listed in a cgroup.procs file.
static void kill_procs(const char *path)
{
	char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	for (char *p = buf; *p;) {
		long pid = strtol(p, &p, 10);
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
		while (*p == '\n')
			p++;
		if (*p && (*p < '0' || *p > '9'))
			break;
	}
}

void rljail_guardian(int pipe_rd, int lock)
{
	// Nothing of the supervisor's but the pipe, no terminal signals.
	for (int fd = 0; fd < 3; fd++) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null >= 0) {
			dup2(null, fd);
			if (null > 2)
				close(null);
		}
	}
	// Every signal blocked: none but SIGKILL can end the guard, and one
	// call does what a handler per signal would.
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	setsid();
	int keep = pipe_rd;
	if (lock >= 0 && lock != keep + 1) {
		// The id lock next to the pipe, so that two ranges close the rest.
		if (dup2(lock, keep + 1) < 0)
			_exit(125);
		lock = keep + 1;
	}
	int last = lock >= 0 ? lock : keep;
	syscall(SYS_close_range, 3, keep > 3 ? keep - 1 : 2, 0);
	syscall(SYS_close_range, last + 1, ~0U, 0);

	// Read every line until "done" or EOF; keep the announced directories.
	enum { MAXDIRS = 16, MAXLINE = 4096 };
	static char dirs[MAXDIRS][MAXLINE];
	int ndirs = 0;
	static char buf[MAXLINE * 2];
	size_t have = 0;
	for (;;) {
		ssize_t n = read(keep, buf + have, sizeof buf - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; // EOF: the supervisor is gone
		have += (size_t)n;
		char *nl;
		while ((nl = memchr(buf, '\n', have)) != NULL) {
			*nl = 0;
			if (strcmp(buf, "done") == 0)
				_exit(0); // the supervisor finished its own teardown
			if (strncmp(buf, "dir ", 4) == 0 && ndirs < MAXDIRS)
				snprintf(dirs[ndirs++], MAXLINE, "%s", buf + 4);
			size_t used = (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, have - used);
			have -= used;
		}
		if (have == sizeof buf - 1)
			have = 0;
	}

	// The supervisor died. Its jail's init died with it (parent-death
	// signal), but make sure, then remove the directories, retrying while
	// the kernel finishes the last exits (up to about 5 s).
	char path[MAXLINE + 32];
	for (int round = 0; round < 500; round++) {
		int left = 0;
		for (int i = 0; i < ndirs; i++) {
			if (rmdir(dirs[i]) == 0 || errno == ENOENT)
				continue;
			left++;
			snprintf(path, sizeof path, "%s/cgroup.kill", dirs[i]);
			write_str(path, "1");
			snprintf(path, sizeof path, "%s/cgroup.procs", dirs[i]);
			kill_procs(path);
		}
		if (!left)
			break;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	_exit(0);
}
