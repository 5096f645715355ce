// The one piece of C the supervisor calls (idmap.go); the init stage's C
// is in stage/, built apart from cgo.
#define _GNU_SOURCE
#include "userns.h"
#include "stage/prestart.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>

static int exit_at_once(void *arg)
{
	(void)arg;
	return 0;
}

int rljail_userns_child(void)
{
	// CLONE_VM | CLONE_VFORK: no copy of the supervisor's page tables, and
	// the supervisor waits, suspended, until the child is gone, so the
	// child can run on a stack taken from this frame. The child does
	// nothing but return (glibc's clone then calls exit): it touches no
	// memory the Go runtime uses. Every signal stays blocked meanwhile, so
	// no Go handler runs on that stack. (posix_spawn runs its child the
	// same way.)
	_Alignas(16) char stack[8192];
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(exit_at_once, stack + sizeof stack, CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | SIGCHLD, NULL);
	int saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return -saved;
	return pid;
}


// The first step the binary's entry started (stage/prestart.c): defined
// there, absent (weak, NULL) from a binary linked without the init stage.
extern struct rljail_prestart rljail_prestarted __attribute__((weak));

int rljail_take_prestart(struct rljail_prestart *out)
{
	if (&rljail_prestarted == NULL || !rljail_prestarted.ok)
		return 0;
	*out = rljail_prestarted;
	rljail_prestarted.ok = 0;
	return 1;
}
