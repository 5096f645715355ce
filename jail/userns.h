#ifndef RLJAIL_USERNS_H
#define RLJAIL_USERNS_H

// rljail_userns_child creates a user namespace that no process stays in:
// a child made in it exits at once and is left unreaped, so that the caller
// can still write the namespace's id maps and open it through
// /proc/PID/uid_map, gid_map and ns/user (a zombie keeps its credentials
// until reaped), then reap it. Returns the pid, or -errno.
int rljail_userns_child(void);

struct rljail_prestart;

// rljail_take_prestart copies out the init stage's first step that the
// binary's entry started, once: 1 when there was one, else 0.
int rljail_take_prestart(struct rljail_prestart *out);

#endif
