// The init stage's first step started at the binary's entry (prestart.c),
// as the supervisor (jail.StartEarly, through prestart.go) takes it over.
#ifndef RLJAIL_PRESTART_H
#define RLJAIL_PRESTART_H

// The CPU sets the stage reads and sets: 1024 CPUs, as Go's unix.CPUSet.
#define RLJAIL_CPUSET_BYTES 128

// rljail_cpuset_without copies the CPU set set into out, without cpu
// (below RLJAIL_CPUSET_BYTES * 8), and reports whether any CPU is left.
static inline int rljail_cpuset_without(unsigned char *out, const unsigned char *set, unsigned long cpu)
{
	int left = 0;
	for (unsigned long i = 0; i < RLJAIL_CPUSET_BYTES; i++) {
		out[i] = (unsigned char)(i == cpu / 8 ? set[i] & ~(1u << (cpu % 8)) : set[i]);
		left |= out[i];
	}
	return left != 0;
}

struct rljail_prestart {
	int ok;            // 1: a first step was started and not yet taken
	int pid, pidfd;    // the first step
	int uid, gid;      // the host ids the jail's user maps to; -1 as root, where the first step reserves them
	int root, unified; // as root; on a cgroup v2 host
	// The supervisor's ends: the control socket, the status pipe, the
	// payload's stdin, stdout and stderr, the seccomp listener socket and
	// the cgroup guard's pipe.
	int ctl, status_r, stdin_w, stdout_r, stderr_r, notify_r, guard_w;
	// The timer slack (ns) rljail was started with, once the supervisor's
	// own was raised to RLJAIL_SUPERVISOR_SLACK_NS; 0 when it was not.
	long caller_slack;
	// 1: the entry gave the Go runtime "GOMAXPROCS=1" as its first
	// environment entry (rljail_entry_env), which the supervisor drops
	// from its environment once the runtime has read it.
	int one_proc;
	// 1: the entry pinned the supervisor to the CPU it started on, and the
	// first step keeps off that CPU until the payload starts (prestart.c);
	// caller_cpus is then the CPU set rljail was started with, for the
	// supervisor to return to (jail.unpinSupervisor).
	int pinned;
	unsigned char caller_cpus[RLJAIL_CPUSET_BYTES];
	// The descriptor of the bound abstract socket that says a placed run
	// of this user's is under way (prestart.c), or -1.
	int start_lock;
	// 1: the entry read a command line that asks for a run, and recorded
	// below, before it made any descriptor of its own, each descriptor
	// that --result-fd names there (up to RLJAIL_RESULT_FDS of them) with
	// its status flags (fcntl F_GETFL), or -1 where it was not open. The
	// supervisor so tells the caller's descriptor from one of its own that
	// took a free number (jail.CallerFD).
	int looked;
	int result_fds;
	int result_fd[4], result_fd_flags[4];
	// 1: rljail's stdout and stderr are one file (2>&1), and the payload
	// gets one pipe for both, so that their order is kept (jail.OutputMerged).
	int merged;
};

#define RLJAIL_RESULT_FDS 4

// The supervisor's timer slack: 1 ms. Go's sysmon thread sleeps 20 us at
// a time while the supervisor works, and each wake-up is a timer interrupt
// and two context switches on the CPU where the jail's init runs; with a
// slack of 1 ms the kernel lets those wake-ups coalesce. Nothing in the
// supervisor needs its timers finer: its kill timer may fire up to 1 ms
// late.
#define RLJAIL_SUPERVISOR_SLACK_NS 1000000L

#endif
