// The payload's last steps before execve, in C: Go cannot run code between
// fork and exec, and these must happen in the child only.
#ifndef RLJAIL_SPAWN_H
#define RLJAIL_SPAWN_H

#include <linux/filter.h>

// A resource limit for the payload: soft and hard, each lowered to the
// current hard limit when above it (raising needs host privileges).
struct rljail_rlimit {
	int resource;
	unsigned long long soft, hard;
};

struct rljail_spawn {
	const char *path;          // resolved executable inside the jail
	char *const *argv;
	char *const *envp;
	const char *workdir;
	int errfd;                 // O_CLOEXEC pipe: the child writes a failure here
	struct sock_fprog *filter; // seccomp filter, or NULL
	int notify_sock;           // >= 0: install the filter with a user-notification
	                           // listener and send the listener over this socket
	int nrlimits;              // resource limits to set (lowered only)
	struct rljail_rlimit *rlimits;
	int nice;                  // > 0: lower the payload's priority by this much
	int channel;               // > 3: a socket the payload gets as descriptor 3
	                           // (Spec.Channel); 0: none
};


// What the child writes to errfd when a step fails: which step, and errno.
struct rljail_spawn_error {
	int step;
	int err;
};

enum {
	RLJAIL_STEP_SIGNALS = 1,
	RLJAIL_STEP_SETSID,
	RLJAIL_STEP_CLOSE_FDS,
	RLJAIL_STEP_CHDIR,
	RLJAIL_STEP_RLIMIT,
	RLJAIL_STEP_NICE,
	RLJAIL_STEP_SECUREBITS,
	RLJAIL_STEP_AMBIENT,
	RLJAIL_STEP_CAPSET,
	RLJAIL_STEP_NO_NEW_PRIVS,
	RLJAIL_STEP_SECCOMP,
	RLJAIL_STEP_NOTIFY_SEND,
	RLJAIL_STEP_EXECVE,
	RLJAIL_STEP_CHANNEL,
};

// rljail_spawn forks; the child confines itself and execs s->path. It
// returns the child's pid, or -errno when fork failed. The caller has
// emptied its capability bounding set (rljail_drop_bounding), set every
// signal's handler to the default and blocked every signal.
int rljail_spawn(const struct rljail_spawn *s);

// rljail_drop_bounding empties this process's capability bounding set
// (capabilities 0 to cap_last), which its children inherit; -1 on failure.
// It takes nothing from the capabilities the process holds.
int rljail_drop_bounding(int cap_last);


// rljail_guardian is the guardian of the jail's cgroup, run by the init
// stage's first step once the init is made: it reads lines from pipe_rd,
// "dir PATH" before each cgroup directory is created and "done" when the
// supervisor removed them itself, and otherwise waits for the supervisor's
// death (EOF, even by SIGKILL): it then kills what is left in each
// announced cgroup and removes it. It never returns. It keeps lock (the
// lock of the jail's host ids, or -1) open until it ends, so that no other
// jail takes those ids while a process of this one may live.
__attribute__((noreturn)) void rljail_guardian(int pipe_rd, int lock);

#endif
