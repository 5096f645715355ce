// The init stage's own C runtime: the few libc functions init.c and
// spawn.c call, written over raw system calls, so that the stage runs
// without libc's start. A static glibc's start costs about a millisecond
// of CPU on every run in a VM (it identifies the CPU with some hundred
// CPUID instructions, each of which traps to the hypervisor), and the init
// stage runs on the path of every jail's start.
//
// The declarations are glibc's headers (its types and constants, which on
// x86-64 match the kernel's where they meet it); the definitions are here,
// and build.sh checks that the stage links against nothing else. No
// thread-local storage and no stack protector: the stage starts before
// anything would set them up (jail/entry_amd64.s).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---- system calls

static int rt_errno;

int *__errno_location(void)
{
	return &rt_errno;
}

static long raw6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

// sys makes a system call the libc way: -1 and errno on failure.
static long sys(long n, long a, long b, long c, long d, long e, long f)
{
	long r = raw6(n, a, b, c, d, e, f);
	if (r < 0 && r > -4096) {
		rt_errno = (int)-r;
		return -1;
	}
	return r;
}

#define S0(n) sys(n, 0, 0, 0, 0, 0, 0)
#define S1(n, a) sys(n, (long)(a), 0, 0, 0, 0, 0)
#define S2(n, a, b) sys(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define S3(n, a, b, c) sys(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define S4(n, a, b, c, d) sys(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define S5(n, a, b, c, d, e) sys(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

long syscall(long n, ...)
{
	va_list ap;
	va_start(ap, n);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
	long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	return sys(n, a, b, c, d, e, f);
}

__attribute__((noreturn)) void _exit(int code)
{
	for (;;)
		raw6(SYS_exit_group, code, 0, 0, 0, 0, 0);
}

ssize_t read(int fd, void *buf, size_t n) { return S3(SYS_read, fd, buf, n); }
ssize_t write(int fd, const void *buf, size_t n) { return S3(SYS_write, fd, buf, n); }
int close(int fd) { return (int)S1(SYS_close, fd); }
int chdir(const char *p) { return (int)S1(SYS_chdir, p); }
int fchdir(int fd) { return (int)S1(SYS_fchdir, fd); }
pid_t getpid(void) { return (pid_t)S0(SYS_getpid); }
pid_t setsid(void) { return (pid_t)S0(SYS_setsid); }
int kill(pid_t pid, int sig) { return (int)S2(SYS_kill, pid, sig); }
int mkdirat(int dfd, const char *p, mode_t m) { return (int)S3(SYS_mkdirat, dfd, p, m); }
int rmdir(const char *p) { return (int)S3(SYS_unlinkat, AT_FDCWD, p, AT_REMOVEDIR); }
int symlinkat(const char *t, int dfd, const char *p) { return (int)S3(SYS_symlinkat, t, dfd, p); }
int pipe2(int fds[2], int flags) { return (int)S2(SYS_pipe2, fds, flags); }
int poll(struct pollfd *f, nfds_t n, int ms) { return (int)S3(SYS_poll, f, n, ms); }
int socket(int d, int t, int p) { return (int)S3(SYS_socket, d, t, p); }
int bind(int fd, const struct sockaddr *a, socklen_t l) { return (int)S3(SYS_bind, fd, a, l); }
int socketpair(int d, int t, int p, int sv[2]) { return (int)S4(SYS_socketpair, d, t, p, sv); }
int statfs(const char *p, struct statfs *st) { return (int)S2(SYS_statfs, p, st); }
ssize_t recvmsg(int fd, struct msghdr *m, int fl) { return S3(SYS_recvmsg, fd, m, fl); }
ssize_t sendmsg(int fd, const struct msghdr *m, int fl) { return S3(SYS_sendmsg, fd, m, fl); }
int sethostname(const char *n, size_t l) { return (int)S2(SYS_sethostname, n, l); }
int setdomainname(const char *n, size_t l) { return (int)S2(SYS_setdomainname, n, l); }
int unshare(int flags) { return (int)S1(SYS_unshare, flags); }
int dup2(int a, int b) { return (int)S2(SYS_dup2, a, b); }
int execve(const char *p, char *const argv[], char *const envp[]) { return (int)S3(SYS_execve, p, argv, envp); }
int nanosleep(const struct timespec *a, struct timespec *b) { return (int)S2(SYS_nanosleep, a, b); }
int setpriority(__priority_which_t w, id_t who, int prio) { return (int)S3(SYS_setpriority, w, who, prio); }
int stat(const char *restrict p, struct stat *restrict st) { return (int)S4(SYS_newfstatat, AT_FDCWD, p, st, 0); }
int fstat(int fd, struct stat *st) { return (int)S4(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH); }
int fstatat(int fd, const char *restrict p, struct stat *restrict st, int flags) { return (int)S4(SYS_newfstatat, fd, p, st, flags); }
pid_t waitpid(pid_t pid, int *st, int opt) { return (pid_t)S4(SYS_wait4, pid, st, opt, 0); }
int getrlimit(__rlimit_resource_t r, struct rlimit *l) { return (int)S4(SYS_prlimit64, 0, r, 0, l); }
int setrlimit(__rlimit_resource_t r, const struct rlimit *l) { return (int)S4(SYS_prlimit64, 0, r, l, 0); }

int open(const char *p, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_arg(ap, mode_t);
	va_end(ap);
	return (int)S4(SYS_openat, AT_FDCWD, p, flags, m);
}

int openat(int dfd, const char *p, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_arg(ap, mode_t);
	va_end(ap);
	return (int)S4(SYS_openat, dfd, p, flags, m);
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return (int)S3(SYS_fcntl, fd, cmd, arg);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return (int)S3(SYS_ioctl, fd, req, arg);
}

int prctl(int op, ...)
{
	va_list ap;
	va_start(ap, op);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long), d = va_arg(ap, long);
	va_end(ap);
	return (int)S5(SYS_prctl, op, a, b, c, d);
}

// ---- signals: the kernel's sigset is the first 64 bits of glibc's.

#define KSIGSET 8

int sigemptyset(sigset_t *s)
{
	memset(s, 0, sizeof *s);
	return 0;
}

int sigfillset(sigset_t *s)
{
	memset(s, 0xff, sizeof *s);
	return 0;
}

int sigaddset(sigset_t *s, int sig)
{
	if (sig < 1 || sig > 64) {
		rt_errno = EINVAL;
		return -1;
	}
	((unsigned long *)s)[0] |= 1UL << (sig - 1);
	return 0;
}

int sigprocmask(int how, const sigset_t *restrict set, sigset_t *restrict old)
{
	if (old)
		memset(old, 0, sizeof *old);
	return (int)S4(SYS_rt_sigprocmask, how, set, old, KSIGSET);
}

int pthread_sigmask(int how, const sigset_t *restrict set, sigset_t *restrict old)
{
	return sigprocmask(how, set, old) < 0 ? errno : 0;
}

int signalfd(int fd, const sigset_t *mask, int flags)
{
	return (int)S4(SYS_signalfd4, fd, mask, KSIGSET, flags);
}

// The kernel's struct sigaction on x86-64. Only SIG_DFL and SIG_IGN are
// ever installed here: a handler would need a restorer.
struct ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	unsigned long mask;
};

int sigaction(int sig, const struct sigaction *restrict act, struct sigaction *restrict old)
{
	struct ksigaction k, ko;
	if (act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN) {
		rt_errno = EINVAL;
		return -1;
	}
	if (act) {
		k.handler = (void *)act->sa_handler;
		k.flags = (unsigned long)act->sa_flags & ~0x04000000UL; // no SA_RESTORER
		k.restorer = NULL;
		memcpy(&k.mask, &act->sa_mask, sizeof k.mask);
	}
	if (S4(SYS_rt_sigaction, sig, act ? &k : NULL, old ? &ko : NULL, KSIGSET) < 0)
		return -1;
	if (old) {
		memset(old, 0, sizeof *old);
		old->sa_handler = (__sighandler_t)ko.handler;
		old->sa_flags = (int)ko.flags;
		memcpy(&old->sa_mask, &ko.mask, sizeof ko.mask);
	}
	return 0;
}

__sighandler_t signal(int sig, __sighandler_t h)
{
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = h;
	sa.sa_flags = SA_RESTART;
	if (sigaction(sig, &sa, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

// ---- memory and strings

void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
	return d;
}

void *memmove(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	if (dp < sp || dp >= sp + n) {
		while (n--)
			*dp++ = *sp++;
	} else {
		while (n--)
			dp[n] = sp[n];
	}
	return d;
}

void *memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
	return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}

void *memchr(const void *s, int c, size_t n)
{
	const unsigned char *p = s;
	for (; n; n--, p++)
		if (*p == (unsigned char)c)
			return (void *)p;
	return NULL;
}

size_t strlen(const char *s)
{
	const char *p = s;
	while (*p)
		p++;
	return (size_t)(p - s);
}

int strcmp(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return (unsigned char)*a - (unsigned char)*b;
}

int strncmp(const char *a, const char *b, size_t n)
{
	for (; n; n--, a++, b++) {
		if (*a != *b)
			return (unsigned char)*a - (unsigned char)*b;
		if (!*a)
			return 0;
	}
	return 0;
}

char *strchr(const char *s, int c)
{
	for (;; s++) {
		if (*s == (char)c)
			return (char *)s;
		if (!*s)
			return NULL;
	}
}

char *strrchr(const char *s, int c)
{
	const char *last = NULL;
	for (;; s++) {
		if (*s == (char)c)
			last = s;
		if (!*s)
			return (char *)last;
	}
}

// ---- memory: a bump allocator over anonymous mappings. The stage is
// short-lived and allocates a few kilobytes; free only gives back the
// last block.

struct block {
	size_t size;
	size_t pad;
};

static char *arena, *arena_end, *last;

void *malloc(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	size_t need = n + sizeof(struct block);
	if (need < n)
		return NULL;
	if (!arena || (size_t)(arena_end - arena) < need) {
		size_t sz = need > (1 << 20) ? (need + 4095) & ~(size_t)4095 : (1 << 20);
		long p = raw6(SYS_mmap, 0, (long)sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p < 0 && p > -4096) {
			rt_errno = ENOMEM;
			return NULL;
		}
		arena = (char *)p;
		arena_end = arena + sz;
	}
	struct block *b = (struct block *)arena;
	b->size = n;
	last = arena;
	arena += need;
	return b + 1;
}

void free(void *p)
{
	if (!p)
		return;
	struct block *b = (struct block *)p - 1;
	if ((char *)b == last) {
		arena = last;
		last = NULL;
	}
}

void *realloc(void *p, size_t n)
{
	if (!p)
		return malloc(n);
	struct block *b = (struct block *)p - 1;
	if (n <= b->size)
		return p;
	void *q = malloc(n);
	if (q) {
		memcpy(q, p, b->size);
		free(p);
	}
	return q;
}

char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	return d ? memcpy(d, s, n) : NULL;
}

// ---- numbers

static unsigned long long parse_unsigned(const char *s, char **end, int base, int *neg)
{
	const char *p = s;
	while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
		p++;
	*neg = 0;
	if (*p == '-' || *p == '+')
		*neg = *p++ == '-';
	if ((base == 0 || base == 16) && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		p += 2, base = 16;
	else if (base == 0)
		base = p[0] == '0' ? 8 : 10;
	unsigned long long v = 0;
	const char *digits = p;
	for (;; p++) {
		int d;
		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'z')
			d = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'Z')
			d = *p - 'A' + 10;
		else
			break;
		if (d >= base)
			break;
		unsigned long long nv = v * (unsigned)base + (unsigned)d;
		if (nv / (unsigned)base != v) {
			rt_errno = ERANGE;
			v = ~0ULL;
		} else {
			v = nv;
		}
	}
	if (end)
		*end = (char *)(p == digits ? s : p);
	return v;
}

unsigned long long strtoull(const char *restrict s, char **restrict end, int base)
{
	int neg;
	unsigned long long v = parse_unsigned(s, end, base, &neg);
	return neg ? -v : v;
}

unsigned long strtoul(const char *restrict s, char **restrict end, int base)
{
	return (unsigned long)strtoull(s, end, base);
}

long long strtoll(const char *restrict s, char **restrict end, int base)
{
	int neg;
	unsigned long long v = parse_unsigned(s, end, base, &neg);
	if (!neg && v > (unsigned long long)INT64_MAX) {
		rt_errno = ERANGE;
		return INT64_MAX;
	}
	if (neg && v > (unsigned long long)INT64_MAX + 1) {
		rt_errno = ERANGE;
		return INT64_MIN;
	}
	return neg ? (long long)(0 - v) : (long long)v;
}

long strtol(const char *restrict s, char **restrict end, int base)
{
	return (long)strtoll(s, end, base);
}

int atoi(const char *s)
{
	return (int)strtol(s, NULL, 10);
}

// ---- formatting: %d %i %u %x %c %s %% with l, ll, z, a width, '0' and
// '-' flags and a precision (".N" or ".*").

struct out {
	char *buf;
	size_t cap, n;
};

static void put(struct out *o, char c)
{
	if (o->n + 1 < o->cap)
		o->buf[o->n] = c;
	o->n++;
}

static void put_padded(struct out *o, const char *s, size_t len, int width, int left, char pad)
{
	int fill = width > (int)len ? width - (int)len : 0;
	if (!left)
		while (fill-- > 0)
			put(o, pad);
	for (size_t i = 0; i < len; i++)
		put(o, s[i]);
	if (left)
		while (fill-- > 0)
			put(o, ' ');
}

int vsnprintf(char *restrict buf, size_t cap, const char *restrict fmt, va_list ap)
{
	struct out o = {buf, cap, 0};
	for (const char *f = fmt; *f; f++) {
		if (*f != '%') {
			put(&o, *f);
			continue;
		}
		f++;
		int left = 0;
		char pad = ' ';
		for (;; f++) {
			if (*f == '-')
				left = 1;
			else if (*f == '0')
				pad = '0';
			else
				break;
		}
		int width = 0;
		if (*f == '*') {
			width = va_arg(ap, int);
			f++;
		} else {
			while (*f >= '0' && *f <= '9')
				width = width * 10 + (*f++ - '0');
		}
		int prec = -1;
		if (*f == '.') {
			f++;
			prec = 0;
			if (*f == '*') {
				prec = va_arg(ap, int);
				f++;
			} else {
				while (*f >= '0' && *f <= '9')
					prec = prec * 10 + (*f++ - '0');
			}
		}
		int lng = 0;
		while (*f == 'l' || *f == 'z') {
			lng += *f == 'z' ? 2 : 1;
			f++;
		}
		char num[24];
		size_t len = 0;
		switch (*f) {
		case 'd':
		case 'i': {
			long long v = lng >= 2 ? va_arg(ap, long long) : lng ? va_arg(ap, long) : va_arg(ap, int);
			unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
			do
				num[sizeof num - 1 - len++] = (char)('0' + u % 10);
			while (u /= 10);
			if (v < 0)
				num[sizeof num - 1 - len++] = '-';
			put_padded(&o, num + sizeof num - len, len, width, left, pad);
			break;
		}
		case 'u':
		case 'x': {
			unsigned long long u = lng >= 2 ? va_arg(ap, unsigned long long)
					       : lng ? va_arg(ap, unsigned long)
						     : va_arg(ap, unsigned int);
			unsigned base = *f == 'x' ? 16 : 10;
			do
				num[sizeof num - 1 - len++] = "0123456789abcdef"[u % base];
			while (u /= base);
			put_padded(&o, num + sizeof num - len, len, width, left, pad);
			break;
		}
		case 'c':
			num[0] = (char)va_arg(ap, int);
			put_padded(&o, num, 1, width, left, ' ');
			break;
		case 's': {
			const char *s = va_arg(ap, const char *);
			if (!s)
				s = "(null)";
			len = 0;
			while ((prec < 0 || (int)len < prec) && s[len])
				len++;
			put_padded(&o, s, len, width, left, ' ');
			break;
		}
		case '%':
			put(&o, '%');
			break;
		default: // not supported: shown as it is
			put(&o, '%');
			if (*f)
				put(&o, *f);
			else
				f--;
		}
	}
	if (cap)
		buf[o.n < cap ? o.n : cap - 1] = 0;
	return (int)o.n;
}

int snprintf(char *restrict buf, size_t cap, const char *restrict fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return n;
}

// ---- strerror: glibc's wording for the errors a start can meet.

static const struct {
	int code;
	const char *msg;
} errors[] = {
	{EPERM, "Operation not permitted"},
	{ENOENT, "No such file or directory"},
	{ESRCH, "No such process"},
	{EINTR, "Interrupted system call"},
	{EIO, "Input/output error"},
	{ENXIO, "No such device or address"},
	{E2BIG, "Argument list too long"},
	{ENOEXEC, "Exec format error"},
	{EBADF, "Bad file descriptor"},
	{ECHILD, "No child processes"},
	{EAGAIN, "Resource temporarily unavailable"},
	{ENOMEM, "Cannot allocate memory"},
	{EACCES, "Permission denied"},
	{EFAULT, "Bad address"},
	{ENOTBLK, "Block device required"},
	{EBUSY, "Device or resource busy"},
	{EEXIST, "File exists"},
	{EXDEV, "Invalid cross-device link"},
	{ENODEV, "No such device"},
	{ENOTDIR, "Not a directory"},
	{EISDIR, "Is a directory"},
	{EINVAL, "Invalid argument"},
	{ENFILE, "Too many open files in system"},
	{EMFILE, "Too many open files"},
	{ENOTTY, "Inappropriate ioctl for device"},
	{ETXTBSY, "Text file busy"},
	{EFBIG, "File too large"},
	{ENOSPC, "No space left on device"},
	{ESPIPE, "Illegal seek"},
	{EROFS, "Read-only file system"},
	{EMLINK, "Too many links"},
	{EPIPE, "Broken pipe"},
	{ERANGE, "Numerical result out of range"},
	{ENAMETOOLONG, "File name too long"},
	{ENOSYS, "Function not implemented"},
	{ENOTEMPTY, "Directory not empty"},
	{ELOOP, "Too many levels of symbolic links"},
	{EOVERFLOW, "Value too large for defined data type"},
	{EUSERS, "Too many users"},
	{ENOTSOCK, "Socket operation on non-socket"},
	{EOPNOTSUPP, "Operation not supported"},
	{ECONNREFUSED, "Connection refused"},
	{ECONNRESET, "Connection reset by peer"},
	{ESTALE, "Stale file handle"},
	{EDQUOT, "Disk quota exceeded"},
	{ECANCELED, "Operation canceled"},
};

char *strerror(int code)
{
	static char unknown[32];
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == code)
			return (char *)errors[i].msg;
	snprintf(unknown, sizeof unknown, "Unknown error %d", code);
	return unknown;
}
