// The init stage's first step, started at the binary's entry for a command
// line that asks for a run, before libc and the Go runtime start (about
// 2.5 ms in a VM, a third of what a jail costs): its exec and the jail's
// clone then run beside the supervisor's own start instead of after it.
// The supervisor takes it over (jail.StartEarly) when its own reading of
// the command line agrees, and otherwise ends it; when anything fails
// here it starts one itself, and that one reports the failure. The
// descriptors match what spawnInit (run.go) passes.
#define _GNU_SOURCE
#include "prestart.h"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CGROUP2_MAGIC 0x63677270

struct rljail_prestart rljail_prestarted;

// docker_run tells whether argv[i], docker's subcommand, is run (or
// container run): the only one of cmd/rljail's runDocker that runs a jail.
static int docker_run(int argc, char **argv, int i)
{
	if (i >= argc || !argv[i])
		return 0;
	if (strcmp(argv[i], "container") == 0)
		i++;
	return i < argc && argv[i] && strcmp(argv[i], "run") == 0;
}

// is_run mirrors cmd/rljail's main: anything but a subcommand is a run,
// except in the probe of `rljail check` (jail.probeArg0); under the name
// docker (argv[0]'s base name) or as `rljail docker`, only docker's run is
// (*docker is then set: its flags are docker's, with no --result-fd).
static int is_run(int argc, char **argv, int *docker)
{
	static const char *const others[] = {"rootfs", "check", "version", "--version", "help", "profiles", "serve", "-h", "--help", NULL};
	*docker = 0;
	if (argc < 2 || !argv[1] || !argv[0] || strcmp(argv[0], "rljail-probe") == 0)
		return 0;
	const char *slash = strrchr(argv[0], '/');
	if (strcmp(slash ? slash + 1 : argv[0], "docker") == 0)
		return (*docker = 1) && docker_run(argc, argv, 1);
	if (strcmp(argv[1], "docker") == 0)
		return (*docker = 1) && docker_run(argc, argv, 2);
	for (const char *const *o = others; *o; o++)
		if (strcmp(argv[1], *o) == 0)
			return 0;
	return 1;
}

// parse_fd reads a descriptor number in decimal, or returns -1.
static int parse_fd(const char *s)
{
	long n = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || n > 1 << 24)
			return -1;
		n = n * 10 + (*s - '0');
	}
	return (int)n;
}

// record_result_fds notes, for each --result-fd among the flags (up to
// "--"), whether its descriptor is open now, before this process makes
// any (struct rljail_prestart says why).
static void record_result_fds(int argc, char **argv, struct rljail_prestart *p)
{
	p->looked = 1;
	for (int i = 1; i < argc && argv[i] && strcmp(argv[i], "--") != 0; i++) {
		const char *a = argv[i], *v = NULL;
		if (a[0] != '-')
			continue;
		a += a[1] == '-' ? 2 : 1;
		if (strcmp(a, "result-fd") == 0 && i + 1 < argc)
			v = argv[++i];
		else if (strncmp(a, "result-fd=", 10) == 0)
			v = a + 10;
		if (!v || p->result_fds >= RLJAIL_RESULT_FDS)
			continue;
		int fd = parse_fd(v);
		if (fd < 0)
			continue;
		p->result_fd[p->result_fds] = fd;
		p->result_fd_flags[p->result_fds] = fcntl(fd, F_GETFL);
		p->result_fds++;
	}
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

void rljail_prestart(int argc, char **argv);
void rljail_prestart(int argc, char **argv)
{
	int docker;
	if (!is_run(argc, argv, &docker))
		return;
	if (!docker)
		record_result_fds(argc, argv, &rljail_prestarted);
	// With 0, 1 or 2 closed, a pipe made here would take its number, and
	// the supervisor would write its own output into the jail: the
	// supervisor's own start copes with that case.
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0)
			return;
	// rljail's stdout and stderr as one file (2>&1): the payload gets one
	// pipe for both, so that what it writes to each keeps its order.
	// A regular file counts only as one open file (>f 2>&1, kcmp), as
	// jail.OutputMerged decides: >f 2>f has two offsets.
	struct stat o, e;
	int merged = fstat(1, &o) == 0 && fstat(2, &e) == 0 && o.st_dev == e.st_dev && o.st_ino == e.st_ino;
	if (merged && S_ISREG(o.st_mode)) {
		long self = syscall(SYS_getpid);
		merged = syscall(SYS_kcmp, self, self, 0 /* KCMP_FILE */, 1, 2) == 0;
	}
	// Pairs: [0] is read or the supervisor's socket end, [1] write or the jail's.
	enum { CTL, STATUS, IN, OUT, ERR, NOTIFY, GUARD, NPAIRS };
	int fd[NPAIRS][2];
	memset(fd, -1, sizeof fd);
	int ok = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd[CTL]) == 0 &&
		 pipe2(fd[STATUS], O_CLOEXEC) == 0 && pipe2(fd[IN], O_CLOEXEC) == 0 &&
		 pipe2(fd[OUT], O_CLOEXEC) == 0 && pipe2(fd[ERR], O_CLOEXEC) == 0 &&
		 socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fd[NOTIFY]) == 0 &&
		 pipe2(fd[GUARD], O_CLOEXEC) == 0;
	if (!ok) {
		close_all(&fd[0][0], 2 * NPAIRS);
		return;
	}
	struct statfs st;
	int root = syscall(SYS_geteuid) == 0;
	int unified = statfs("/sys/fs/cgroup", &st) == 0 && st.f_type == CGROUP2_MAGIC;
	// As root the first step reserves the jail's own host ids ("-":
	// hostids.c), off this process's path; rootless the jail is the user.
	int uid = root ? -1 : (int)syscall(SYS_getuid);
	int gid = root ? -1 : (int)syscall(SYS_getgid);
	char uids[16] = "-", gids[16] = "-";
	if (!root) {
		snprintf(uids, sizeof uids, "%d", uid);
		snprintf(gids, sizeof gids, "%d", gid);
	}
	// The supervisor stays on the CPU it started on, and the first step
	// (with the jail's init, until the payload starts) keeps off it, when
	// the caller allows more than one CPU. This VM's scheduler packs tasks
	// on one vCPU, so the two halves of a start, each waiting for the
	// other's messages, otherwise take turns on it (interleaved A/B: 0.6 to
	// 1.0 ms less wall time, 0.3 ms less CPU per run). The first step gets
	// the CPU to avoid in argv (keep_off_cpu in init.c) and the caller's
	// set, unpinned, by fork; the payload gets the caller's set back, and
	// the supervisor returns to it once it has sent the limits
	// (jail.unpinSupervisor).
	unsigned cpu = 0;
	unsigned char set[RLJAIL_CPUSET_BYTES];
	memset(set, 0, sizeof set);
	long setlen = syscall(SYS_sched_getaffinity, 0, sizeof set, set);
	int spread = setlen > 0 && syscall(SYS_getcpu, &cpu, 0, 0) == 0 && cpu / 8 < (unsigned long)setlen &&
		     (set[cpu / 8] >> (cpu % 8) & 1);
	unsigned char others[RLJAIL_CPUSET_BYTES];
	spread = spread && rljail_cpuset_without(others, set, cpu); // another CPU is allowed
	int lock = -1;
	if (spread) {
		// Only one run of this user's at a time spreads: an abstract
		// socket name, bound until the supervisor exits or 100 ms into its
		// run (jail.releaseStartLock), says one is under way. Runs at once
		// are left to the scheduler (placed, they filled two CPUs worse:
		// 8 at once lost 2-5% of their throughput, 2 at once 10%); a long
		// run (a persistent REPL) does not keep later starts from being
		// placed.
		lock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		struct sockaddr_un a;
		memset(&a, 0, sizeof a);
		a.sun_family = AF_UNIX;
		int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "rljail-start-%d", (int)syscall(SYS_getuid));
		spread = lock >= 0 && bind(lock, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) == 0;
		if (!spread && lock >= 0) {
			close(lock);
			lock = -1;
		}
	}
	char avoid[16] = "-";
	if (spread)
		snprintf(avoid, sizeof avoid, "%u", cpu);
	char *args[] = {"rljail-init", uids, gids, root ? "allow" : "deny", unified ? "cgroup" : "now", avoid, NULL};
	char *env[] = {NULL};

	int pidfd = -1;
	long pid = syscall(SYS_clone, SIGCHLD | CLONE_PIDFD, 0, &pidfd, 0, 0);
	if (pid == 0) {
		// The first step's descriptors 0-6, as spawnInit lays them out;
		// nothing else of this process's.
		int src[7] = {fd[IN][0], fd[OUT][1], merged ? fd[OUT][1] : fd[ERR][1], fd[CTL][1], fd[STATUS][1], fd[NOTIFY][1], fd[GUARD][0]};
		int hi[7];
		for (int i = 0; i < 7; i++)
			if ((hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16)) < 0)
				_exit(125);
		for (int i = 0; i < 7; i++)
			if (dup2(hi[i], i) < 0)
				_exit(125);
		syscall(SYS_close_range, 7, ~0U, 0);
		execve("/proc/self/exe", args, env);
		_exit(125);
	}
	if (pid < 0) {
		close_all(&fd[0][0], 2 * NPAIRS);
		if (lock >= 0)
			close(lock);
		return;
	}
	int child_ends[] = {fd[IN][0], fd[OUT][1], fd[ERR][1], fd[CTL][1], fd[STATUS][1], fd[NOTIFY][1], fd[GUARD][0]};
	close_all(child_ends, 7);
	struct rljail_prestart *p = &rljail_prestarted;
	if (spread) {
		// The first step off this CPU now, rather than when it first runs:
		// forked, it waits on this CPU's queue behind this process
		// (keep_off_cpu then finds the caller's set without cpu).
		syscall(SYS_sched_setaffinity, (int)pid, sizeof others, others);
		// Every thread the Go runtime starts inherits this.
		memcpy(p->caller_cpus, set, sizeof set);
		unsigned char one[RLJAIL_CPUSET_BYTES];
		memset(one, 0, sizeof one);
		one[cpu / 8] = (unsigned char)(1u << (cpu % 8));
		p->pinned = syscall(SYS_sched_setaffinity, 0, sizeof one, one) == 0;
	}
	p->start_lock = lock;
	p->pid = (int)pid;
	p->pidfd = pidfd;
	p->uid = uid;
	p->gid = gid;
	p->root = root;
	p->unified = unified;
	p->ctl = fd[CTL][0];
	p->status_r = fd[STATUS][0];
	p->stdin_w = fd[IN][1];
	p->stdout_r = fd[OUT][0];
	p->stderr_r = fd[ERR][0];
	p->notify_r = fd[NOTIFY][0];
	p->guard_w = fd[GUARD][1];
	p->merged = merged;
	// Every thread the Go runtime starts inherits this slack; the first
	// step, forked above, keeps the caller's, and so do the jail and its
	// payload. The supervisor gives the caller's to any init it starts
	// itself (jail.callerTimerSlack).
	long slack = syscall(SYS_prctl, PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (slack > 0 && syscall(SYS_prctl, PR_SET_TIMERSLACK, RLJAIL_SUPERVISOR_SLACK_NS, 0, 0, 0) == 0)
		p->caller_slack = slack;
	// The supervisor runs with one P unless the caller chose GOMAXPROCS
	// (entry_amd64.s says why).
	p->one_proc = 1;
	for (char **e = argv + argc + 1; *e; e++)
		if (strncmp(*e, "GOMAXPROCS=", 11) == 0)
			p->one_proc = 0;
	p->ok = 1;
}

// rljail_entry_env is the environment entry the binary's entry adds for
// Go's runtime (entry_amd64.s), or NULL.
const char *rljail_entry_env(void);
const char *rljail_entry_env(void)
{
	return rljail_prestarted.ok && rljail_prestarted.one_proc ? "GOMAXPROCS=1" : NULL;
}
