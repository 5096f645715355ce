package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The seccomp tests attack the payload's system call filter from inside
// the jail: every call issue 3 says must be denied in every profile, each
// argument class of the argument filters (socket families, clone flags,
// ioctl commands, personality, prctl options, setuid modes, device nodes),
// the foreign ABIs, the python-strict profile, --seccomp-add/-remove,
// learn mode and profile files. Calls are made raw, with ctypes and
// libc.syscall, so that no library wrapper decides for the kernel; each
// verdict comes from the errno, and from outside where the call would have
// had an effect (a file's mode on the host, a device node that must not
// exist, a terminal's input queue, the exit status of a killed payload).
//
// An EPERM alone cannot tell the filter from the kernel (the payload has
// no capabilities, so many of these calls would fail with EPERM anyway),
// so the same probe also runs in learn mode, where the supervisor records
// every call the filter stopped: each case must appear there by name.

// seccompProbeLib is the Python prelude of every probe: sc(nr, *args)
// (pySyscallLib) makes a raw system call and returns (rc, errno);
// run(name, fn) runs fn in a forked child (so that a call that got through
// cannot change the probe: a new namespace, a personality, a ptrace
// relation) and prints "CASE name RESULT", RESULT being OK or the errno's
// name.
const seccompProbeLib = pySyscallLib + `
AT_FDCWD = -100

def buf(n):
    return ctypes.create_string_buffer(n)

def clone(flags):
    # fork-like clone (no new stack); a child that got through leaves at once.
    rc, e = sc(56, flags | 17, 0, 0, 0, 0)
    if rc == 0:
        os._exit(0)
    if rc > 0:
        os.waitpid(rc, 0)
    return rc, e

def clone3(flags):
    # struct clone_args with flags and exit_signal SIGCHLD; no new stack.
    args = ctypes.create_string_buffer(flags.to_bytes(8, "little") + bytes(24) + (17).to_bytes(8, "little") + bytes(48), 88)
    rc, e = sc(435, args, 88)
    if rc == 0:
        os._exit(0)
    if rc > 0:
        os.waitpid(rc, 0)
    return rc, e

def pipe_fd():
    r, w = os.pipe()
    return r

def result(fn):
    try:
        rc, e = fn()
    except OSError as ex:
        return errno.errorcode.get(ex.errno, str(ex.errno))
    except BaseException as ex:
        return "EXCEPTION:" + type(ex).__name__
    if rc == -1:
        return errno.errorcode.get(e, str(e))
    return "OK"

def run(name, fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, result(fn).encode())
        os._exit(0)
    os.close(w)
    res = os.read(r, 200).decode()
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if not res:
        res = "DIED:%d" % os.waitstatus_to_exitcode(status)
    print("CASE", name, res, flush=True)

def inet_fd():
    rc, e = sc(41, 2, 1, 0)
    return rc

def sock(family, type_=1):
    import socket
    s = socket.socket(family, type_)
    s.close()
    return 0, 0
`

// seccompCase is one call the probe makes and what must come of it.
type seccompCase struct {
	name string
	// syscall is the call the filter must stop: learn mode must report it
	// by this name (with args, when set, among the recorded arguments).
	// Empty for the calls the filter lets through or answers with ENOSYS.
	syscall string
	args    map[string]uint64
	// call is a Python expression returning (rc, errno), using the
	// prelude's helpers.
	call string
	// want is OK or an errno name.
	want string
}

// sc formats a raw call for the probe: sc(nr, args...).
func sc(nr int, args ...any) string {
	parts := []string{strconv.Itoa(nr)}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			parts = append(parts, v) // a Python expression
		default:
			parts = append(parts, fmt.Sprint(v))
		}
	}
	return "sc(" + strings.Join(parts, ", ") + ")"
}

// deny is a case for a call that must fail with EPERM from the filter.
func deny(name, syscall, call string) seccompCase {
	return seccompCase{name: name, syscall: syscall, call: call, want: "EPERM"}
}

const (
	cloneNewNS     = unix.CLONE_NEWNS
	cloneNewCgroup = unix.CLONE_NEWCGROUP
	cloneNewUTS    = unix.CLONE_NEWUTS
	cloneNewIPC    = unix.CLONE_NEWIPC
	cloneNewUser   = unix.CLONE_NEWUSER
	cloneNewPID    = unix.CLONE_NEWPID
	cloneNewNet    = unix.CLONE_NEWNET

	// personality(2) values (linux/personality.h)
	perLinux        = 0x0000000
	perLinux32      = 0x0000008
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
)

// alwaysDeniedCases are issue 3's "must be denied in every profile" list.
// The arguments are chosen so that, where possible, the call would succeed
// or fail with another errno if it reached the kernel (noted per line); a
// call that cannot be told apart that way is still told apart by learn
// mode.
func alwaysDeniedCases() []seccompCase {
	return []seccompCase{
		// would succeed: the probe's child asks to be traced
		deny("ptrace_traceme", "ptrace", sc(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0)),
		deny("ptrace_attach_init", "ptrace", sc(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0, 0)),
		// would succeed: zero iovecs of its own memory
		deny("process_vm_readv", "process_vm_readv", sc(unix.SYS_PROCESS_VM_READV, "os.getpid()", 0, 0, 0, 0, 0)),
		deny("process_vm_writev", "process_vm_writev", sc(unix.SYS_PROCESS_VM_WRITEV, "os.getpid()", 0, 0, 0, 0, 0)),
		deny("mount", "mount", sc(unix.SYS_MOUNT, `b"none"`, `b"/tmp"`, `b"tmpfs"`, 0, 0)),
		deny("umount2", "umount2", sc(unix.SYS_UMOUNT2, `b"/tmp"`, unix.MNT_DETACH)),
		deny("pivot_root", "pivot_root", sc(unix.SYS_PIVOT_ROOT, `b"/tmp"`, `b"/tmp"`)),
		deny("chroot", "chroot", sc(unix.SYS_CHROOT, `b"/tmp"`)),
		// would succeed: an unprivileged user namespace
		deny("unshare_newuser", "unshare", sc(unix.SYS_UNSHARE, cloneNewUser)),
		deny("unshare_newns", "unshare", sc(unix.SYS_UNSHARE, cloneNewNS)),
		deny("unshare_newnet", "unshare", sc(unix.SYS_UNSHARE, cloneNewNet)),
		deny("setns", "setns", sc(unix.SYS_SETNS, `os.open("/proc/self/ns/uts", os.O_RDONLY)`, 0)),
		deny("fsopen", "fsopen", sc(unix.SYS_FSOPEN, `b"tmpfs"`, 0)),
		deny("fsconfig", "fsconfig", sc(unix.SYS_FSCONFIG, -1, 0, 0, 0, 0)),
		deny("fsmount", "fsmount", sc(unix.SYS_FSMOUNT, -1, 0, 0)),
		deny("fspick", "fspick", sc(unix.SYS_FSPICK, "AT_FDCWD", `b"/tmp"`, 0)),
		deny("move_mount", "move_mount", sc(unix.SYS_MOVE_MOUNT, -1, `b""`, "AT_FDCWD", `b"/tmp"`, 0)),
		// would succeed: open_tree without OPEN_TREE_CLONE is an O_PATH open
		deny("open_tree", "open_tree", sc(unix.SYS_OPEN_TREE, "AT_FDCWD", `b"/tmp"`, 0)),
		deny("mount_setattr", "mount_setattr", sc(unix.SYS_MOUNT_SETATTR, -1, `b""`, 0, 0, 0)),
		// would succeed: the session keyring's id
		deny("keyctl", "keyctl", sc(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0)),
		// would succeed: a user key in the process keyring
		deny("add_key", "add_key", sc(unix.SYS_ADD_KEY, `b"user"`, `b"rljail-it"`, `b"x"`, 1, unix.KEY_SPEC_PROCESS_KEYRING)),
		deny("request_key", "request_key", sc(unix.SYS_REQUEST_KEY, `b"user"`, `b"rljail-it-none"`, 0, 0)),
		deny("bpf", "bpf", sc(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)),
		deny("perf_event_open", "perf_event_open", sc(unix.SYS_PERF_EVENT_OPEN, "buf(128)", 0, -1, -1, 0)),
		deny("io_uring_setup", "io_uring_setup", sc(unix.SYS_IO_URING_SETUP, 1, "buf(120)")),
		deny("io_uring_enter", "io_uring_enter", sc(unix.SYS_IO_URING_ENTER, -1, 0, 0, 0, 0, 0)),
		deny("io_uring_register", "io_uring_register", sc(unix.SYS_IO_URING_REGISTER, -1, 0, 0, 0)),
		// would succeed: UFFD_USER_MODE_ONLY needs no privilege
		deny("userfaultfd", "userfaultfd", sc(unix.SYS_USERFAULTFD, 1)),
		deny("kexec_load", "kexec_load", sc(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)),
		deny("kexec_file_load", "kexec_file_load", sc(unix.SYS_KEXEC_FILE_LOAD, -1, -1, 0, 0, 0)),
		deny("init_module", "init_module", sc(unix.SYS_INIT_MODULE, 0, 0, `b""`)),
		deny("finit_module", "finit_module", sc(unix.SYS_FINIT_MODULE, -1, `b""`, 0)),
		deny("delete_module", "delete_module", sc(unix.SYS_DELETE_MODULE, `b"rljail_it_none"`, 0)),
		// bad magic numbers: EINVAL at worst, never a reboot
		deny("reboot", "reboot", sc(unix.SYS_REBOOT, 0, 0, 0, 0)),
		deny("swapon", "swapon", sc(unix.SYS_SWAPON, `b"/tmp/rljail-it-none"`, 0)),
		deny("swapoff", "swapoff", sc(unix.SYS_SWAPOFF, `b"/tmp/rljail-it-none"`)),
		deny("acct", "acct", sc(unix.SYS_ACCT, 0)),
		deny("quotactl", "quotactl", sc(unix.SYS_QUOTACTL, 0, 0, 0, 0)),
		deny("quotactl_fd", "quotactl_fd", sc(unix.SYS_QUOTACTL_FD, 0, 0, 0, 0)),
		// would succeed where kernel.dmesg_restrict is 0: the log's size
		deny("syslog", "syslog", sc(unix.SYS_SYSLOG, 10, 0, 0)),
		deny("open_by_handle_at", "open_by_handle_at", sc(unix.SYS_OPEN_BY_HANDLE_AT, "AT_FDCWD", "buf(128)", 0)),
		// would fail with EOVERFLOW (a zero-sized handle buffer)
		deny("name_to_handle_at", "name_to_handle_at", sc(unix.SYS_NAME_TO_HANDLE_AT, "AT_FDCWD", `b"/tmp"`, "buf(128)", "buf(8)", 0)),
		deny("fanotify_init", "fanotify_init", sc(unix.SYS_FANOTIFY_INIT, 0, 0)),
		deny("lookup_dcookie", "lookup_dcookie", sc(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0)),
		// would succeed: a copy of its own stdin
		deny("pidfd_getfd", "pidfd_getfd", sc(unix.SYS_PIDFD_GETFD, "os.pidfd_open(os.getpid())", 0, 0)),
		// would succeed: compare its own fd 0 with itself
		deny("kcmp", "kcmp", sc(unix.SYS_KCMP, "os.getpid()", "os.getpid()", 0, 0, 0)),
		deny("iopl", "iopl", sc(unix.SYS_IOPL, 0)),
		deny("ioperm", "ioperm", sc(unix.SYS_IOPERM, 0, 0, 0)),
		// would succeed: read an empty LDT
		deny("modify_ldt", "modify_ldt", sc(unix.SYS_MODIFY_LDT, 0, "buf(16)", 16)),
		deny("clock_settime", "clock_settime", sc(unix.SYS_CLOCK_SETTIME, 0, 0)),
		// would succeed: modes = 0 only reads the clock's state
		deny("clock_adjtime", "clock_adjtime", sc(unix.SYS_CLOCK_ADJTIME, 0, "buf(256)")),
		deny("adjtimex", "adjtimex", sc(unix.SYS_ADJTIMEX, "buf(256)")),
		deny("settimeofday", "settimeofday", sc(unix.SYS_SETTIMEOFDAY, 0, 0)),
		deny("sethostname", "sethostname", sc(unix.SYS_SETHOSTNAME, `b"pwned"`, 5)),
		deny("setdomainname", "setdomainname", sc(unix.SYS_SETDOMAINNAME, `b"pwned"`, 5)),
		deny("vhangup", "vhangup", sc(unix.SYS_VHANGUP)),
		deny("uselib", "uselib", sc(unix.SYS_USELIB, `b"/tmp/rljail-it-none"`)),
		deny("ustat", "ustat", sc(unix.SYS_USTAT, 0, "buf(64)")),
		// would succeed: the number of filesystem types
		deny("sysfs", "sysfs", sc(unix.SYS_SYSFS, 3)),
		// would fail with ENOSYS: both are gone from the kernel
		deny("_sysctl", "_sysctl", sc(unix.SYS__SYSCTL, 0)),
		deny("nfsservctl", "nfsservctl", sc(unix.SYS_NFSSERVCTL, 0, 0, 0)),
		// would succeed: a query that installs nothing
		deny("seccomp", "seccomp", sc(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, "buf(4)")),
		// mknod and mknodat for anything but a FIFO (the effect on a
		// volume is checked from outside in TestSeccompModesAndNodes)
		deny("mknod_char", "mknod", sc(unix.SYS_MKNOD, `b"/tmp/chr"`, unix.S_IFCHR|0o666, unix.Mkdev(1, 3))),
		deny("mknod_block", "mknod", sc(unix.SYS_MKNOD, `b"/tmp/blk"`, unix.S_IFBLK|0o666, unix.Mkdev(7, 0))),
		deny("mknodat_char", "mknodat", sc(unix.SYS_MKNODAT, "AT_FDCWD", `b"/tmp/chr"`, unix.S_IFCHR|0o666, unix.Mkdev(1, 3))),
		// would succeed: mknod of a regular file needs no privilege
		deny("mknod_regular", "mknod", sc(unix.SYS_MKNOD, `b"/tmp/reg"`, unix.S_IFREG|0o644, 0)),
		deny("mknod_socket", "mknod", sc(unix.SYS_MKNOD, `b"/tmp/sock"`, unix.S_IFSOCK|0o644, 0)),
		{name: "mknod_fifo_allowed", call: sc(unix.SYS_MKNOD, `b"/tmp/fifo"`, unix.S_IFIFO|0o644, 0), want: "OK"},
		{name: "mknodat_fifo_allowed", call: sc(unix.SYS_MKNODAT, "AT_FDCWD", `b"/tmp/fifo2"`, unix.S_IFIFO|0o644, 0), want: "OK"},
	}
}

// argumentCases are the argument filters: what a needed call may not do.
func argumentCases(maxKnown int) []seccompCase {
	const sigchld = 17
	withArg := func(c seccompCase, idx int, v uint64) seccompCase {
		c.args = map[string]uint64{fmt.Sprintf("arg%d", idx): v}
		return c
	}
	socketDenied := func(name string, family uint64, typ int) seccompCase {
		return withArg(deny(name, "socket", sc(unix.SYS_SOCKET, family, typ, 0)), 0, family)
	}
	cloneDenied := func(name string, flag uint64) seccompCase {
		return withArg(deny(name, "clone", fmt.Sprintf("clone(%#x)", flag)), 0, flag|sigchld)
	}
	personalityDenied := func(name string, v uint64) seccompCase {
		return withArg(deny(name, "personality", sc(unix.SYS_PERSONALITY, v)), 0, v)
	}
	prctlDenied := func(name string, option uint64, rest ...any) seccompCase {
		return withArg(deny(name, "prctl", sc(unix.SYS_PRCTL, append([]any{option}, rest...)...)), 0, option)
	}
	const tiocsti, tioclinux = unix.TIOCSTI, unix.TIOCLINUX
	cases := []seccompCase{
		// socket: AF_UNIX, AF_INET and AF_INET6 only
		socketDenied("socket_netlink", unix.AF_NETLINK, unix.SOCK_RAW),
		socketDenied("socket_packet", unix.AF_PACKET, unix.SOCK_RAW),
		socketDenied("socket_vsock", unix.AF_VSOCK, unix.SOCK_STREAM),
		// would succeed: AF_ALG needs no privilege
		socketDenied("socket_alg", unix.AF_ALG, unix.SOCK_SEQPACKET),
		socketDenied("socket_key", unix.AF_KEY, unix.SOCK_RAW),
		socketDenied("socket_xdp", unix.AF_XDP, unix.SOCK_RAW),
		socketDenied("socket_bluetooth", unix.AF_BLUETOOTH, unix.SOCK_RAW),
		// the kernel reads an int: netlink with high bits set is netlink
		socketDenied("socket_netlink_high_bits", 1<<32|unix.AF_NETLINK, unix.SOCK_RAW),
		{name: "socket_module_netlink", syscall: "socket", call: "sock(16, 3)", want: "EPERM"},
		{name: "socket_unix_allowed", call: sc(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), want: "OK"},
		{name: "socket_inet_allowed", call: sc(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0), want: "OK"},
		{name: "socket_inet6_allowed", call: sc(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 0), want: "OK"},

		// clone: no CLONE_NEW* flag; clone3 (flags in memory) ENOSYS
		cloneDenied("clone_newuser", cloneNewUser),
		cloneDenied("clone_newns", cloneNewNS),
		cloneDenied("clone_newpid", cloneNewPID),
		cloneDenied("clone_newnet", cloneNewNet),
		cloneDenied("clone_newuts", cloneNewUTS),
		cloneDenied("clone_newipc", cloneNewIPC),
		cloneDenied("clone_newcgroup", cloneNewCgroup),
		{name: "clone_fork_allowed", call: "clone(0)", want: "OK"},
		{name: "clone3_enosys", call: "clone3(0)", want: "ENOSYS"},
		// clone_args.flags = CLONE_NEWUSER: still ENOSYS, never run
		{name: "clone3_newuser_enosys", call: fmt.Sprintf("clone3(%#x)", cloneNewUser), want: "ENOSYS"},

		// ioctl: no TIOCSTI or TIOCLINUX, judged on the low 32 bits; on a
		// pipe the kernel would answer ENOTTY, the filter EPERM
		withArg(deny("ioctl_tiocsti", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", tiocsti, "buf(1)")), 1, tiocsti),
		withArg(deny("ioctl_tioclinux", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", tioclinux, "buf(1)")), 1, tioclinux),
		// (the recorded argument is above 2^53, past what the JSON report's
		// numbers hold exactly, so only the name is checked)
		deny("ioctl_tiocsti_high_bits", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", uint64(0xdead0000<<32|tiocsti), "buf(1)")),
		{name: "ioctl_tcgets_allowed", call: sc(unix.SYS_IOCTL, "pipe_fd()", unix.TCGETS, "buf(64)"), want: "ENOTTY"},
		{name: "ioctl_fionread_allowed", call: sc(unix.SYS_IOCTL, "pipe_fd()", unix.TIOCINQ, "buf(4)"), want: "OK"},

		// personality: query and PER_LINUX only
		personalityDenied("personality_linux32", perLinux32),
		personalityDenied("personality_addr_no_randomize", addrNoRandomize),
		personalityDenied("personality_read_implies_exec", readImpliesExec),
		{name: "personality_query_allowed", call: sc(unix.SYS_PERSONALITY, 0xffffffff), want: "OK"},
		{name: "personality_linux_allowed", call: sc(unix.SYS_PERSONALITY, perLinux), want: "OK"},

		// prctl: a safe list only
		prctlDenied("prctl_set_dumpable", unix.PR_SET_DUMPABLE, 1, 0, 0, 0),
		prctlDenied("prctl_set_mm", unix.PR_SET_MM, unix.PR_SET_MM_START_BRK, 0, 0, 0),
		prctlDenied("prctl_cap_ambient", unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, 0, 0, 0),
		prctlDenied("prctl_set_seccomp", unix.PR_SET_SECCOMP, 2, 0, 0, 0),
		prctlDenied("prctl_set_ptracer", unix.PR_SET_PTRACER, "-1", 0, 0, 0),
		prctlDenied("prctl_set_securebits", unix.PR_SET_SECUREBITS, 0, 0, 0, 0),
		// the kernel reads an int: this is PR_SET_DUMPABLE
		prctlDenied("prctl_set_dumpable_high_bits", 1<<32|unix.PR_SET_DUMPABLE, 1, 0, 0, 0),
		{name: "prctl_get_dumpable_allowed", call: sc(unix.SYS_PRCTL, unix.PR_GET_DUMPABLE, 0, 0, 0, 0), want: "OK"},
		// the name goes raw into the host's kernel log (a crash's line)
		prctlDenied("prctl_set_name", unix.PR_SET_NAME, `b"rljail-it"`, 0, 0, 0),

		// socket's type and protocol: stream and datagram of the default
		// protocols only, on the low 32 bits the kernel reads
		withArg(deny("socket_mptcp", "socket", sc(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 262)), 2, 262),
		withArg(deny("socket_udplite", "socket", sc(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 136)), 2, 136),
		withArg(deny("socket_sctp", "socket", sc(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_SEQPACKET, 132)), 1, unix.SOCK_SEQPACKET),
		withArg(deny("socket_raw", "socket", sc(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, 1)), 1, unix.SOCK_RAW),
		withArg(deny("socketpair_inet", "socketpair", sc(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, 0, "buf(8)")), 0, unix.AF_INET),
		{name: "socket_tcp_flags_allowed", call: sc(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP), want: "OK"},
		{name: "socket_unix_seqpacket_allowed", call: sc(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_SEQPACKET, 0), want: "OK"},
		{name: "socket_inet_high_bits_allowed", call: sc(unix.SYS_SOCKET, uint64(1<<32|unix.AF_INET), unix.SOCK_DGRAM, 0), want: "OK"},

		// ioctl: a list of commands, on the low 32 bits
		withArg(deny("ioctl_fs_setflags", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", unix.FS_IOC_SETFLAGS, "buf(8)")), 1, unix.FS_IOC_SETFLAGS),
		withArg(deny("ioctl_add_encryption_key", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", unix.FS_IOC_ADD_ENCRYPTION_KEY, "buf(80)")), 1, unix.FS_IOC_ADD_ENCRYPTION_KEY),
		deny("ioctl_add_encryption_key_high_bits", "ioctl", sc(unix.SYS_IOCTL, "pipe_fd()", uint64(0xffffffff00000000|unix.FS_IOC_ADD_ENCRYPTION_KEY), "buf(80)")),
		{name: "ioctl_fioclex_allowed", call: sc(unix.SYS_IOCTL, "pipe_fd()", 0x5451, 0), want: "OK"}, // FIOCLEX,
		{name: "ioctl_fionread_high_bits_allowed", call: sc(unix.SYS_IOCTL, "pipe_fd()", uint64(0xffffffff00000000|unix.TIOCINQ), "buf(4)"), want: "OK"},

		// fcntl: no leases, no directory notification
		withArg(deny("fcntl_setlease", "fcntl", sc(unix.SYS_FCNTL, "pipe_fd()", unix.F_SETLEASE, unix.F_RDLCK)), 1, unix.F_SETLEASE),
		withArg(deny("fcntl_notify", "fcntl", sc(unix.SYS_FCNTL, `os.open("/tmp", os.O_RDONLY)`, unix.F_NOTIFY, 0x4)), 1, unix.F_NOTIFY), // DN_CREATE,
		withArg(deny("fcntl_setpipe_sz_huge", "fcntl", sc(unix.SYS_FCNTL, "pipe_fd()", unix.F_SETPIPE_SZ, 256<<20)), 1, unix.F_SETPIPE_SZ),
		{name: "fcntl_getfl_allowed", call: sc(unix.SYS_FCNTL, "pipe_fd()", unix.F_GETFL), want: "OK"},
		{name: "fcntl_setpipe_sz_allowed", call: sc(unix.SYS_FCNTL, "pipe_fd()", unix.F_SETPIPE_SZ, 1<<20), want: "OK"},

		// setsockopt: a list of levels and options
		withArg(deny("setsockopt_attach_filter", "setsockopt", sc(unix.SYS_SETSOCKOPT, "inet_fd()", unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, "buf(16)", 16)), 2, unix.SO_ATTACH_FILTER),
		withArg(deny("setsockopt_bindtodevice", "setsockopt", sc(unix.SYS_SETSOCKOPT, "inet_fd()", unix.SOL_SOCKET, unix.SO_BINDTODEVICE, `b"lo"`, 3)), 2, unix.SO_BINDTODEVICE),
		withArg(deny("setsockopt_tcp_ulp", "setsockopt", sc(unix.SYS_SETSOCKOPT, "inet_fd()", unix.IPPROTO_TCP, unix.TCP_ULP, `b"tls"`, 3)), 2, unix.TCP_ULP),
		withArg(deny("setsockopt_multicast", "setsockopt", sc(unix.SYS_SETSOCKOPT, "inet_fd()", unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, "buf(8)", 8)), 2, unix.IP_ADD_MEMBERSHIP),
		{name: "setsockopt_nodelay_allowed", call: sc(unix.SYS_SETSOCKOPT, "inet_fd()", unix.IPPROTO_TCP, unix.TCP_NODELAY, "buf(4)", 4), want: "OK"},

		// sync and syncfs: success without running (syncfs of no
		// descriptor would be EBADF)
		{name: "sync_answered", call: sc(unix.SYS_SYNC), want: "OK"},
		{name: "syncfs_answered", call: sc(unix.SYS_SYNCFS, -1), want: "OK"},

		// numbers: a gap in the table is a known number (EPERM); above the
		// policy's table is "newer than the policy" (ENOSYS)
		{name: "number_in_table_gap", call: sc(400), want: "EPERM"},
		{name: "number_above_table", call: sc(maxKnown + 1), want: "ENOSYS"},
		{name: "number_far_above_table", call: sc(1000), want: "ENOSYS"},
		{name: "openat2", syscall: "openat2", call: sc(unix.SYS_OPENAT2, "AT_FDCWD", `b"/tmp"`, "buf(24)", 24), want: "EPERM"},
	}
	return cases
}

var (
	maxKnownOnce sync.Once
	maxKnownNr   int
	maxKnownErr  error
)

// policyMaxKnown reads N from `rljail profiles show python` ("calls newer
// than the policy (above #N): ENOSYS").
func policyMaxKnown(t *testing.T) int {
	t.Helper()
	maxKnownOnce.Do(func() {
		out, err := exec.Command(testBin, "profiles", "show", "python").CombinedOutput()
		if err != nil {
			maxKnownErr = fmt.Errorf("rljail profiles show python: %v\n%s", err, out)
			return
		}
		m := regexp.MustCompile(`above #(\d+)`).FindSubmatch(out)
		if m == nil {
			maxKnownErr = fmt.Errorf("rljail profiles show python does not say `above #N`:\n%s", out)
			return
		}
		maxKnownNr, _ = strconv.Atoi(string(m[1]))
	})
	if maxKnownErr != nil {
		t.Fatal(maxKnownErr)
	}
	return maxKnownNr
}

// probeProgram is the Python program that tries every case.
func probeProgram(cases []seccompCase) string {
	var b strings.Builder
	b.WriteString(seccompProbeLib)
	for _, c := range cases {
		fmt.Fprintf(&b, "run(%q, lambda: %s)\n", c.name, c.call)
	}
	b.WriteString("print('DONE', flush=True)\n")
	return b.String()
}

// parseCases reads "CASE name RESULT" lines.
func parseCases(out string) map[string]string {
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "CASE" {
			got[f[1]] = f[2]
		}
	}
	return got
}

// seccompReport returns the "seccomp" object of a --result report.
func seccompReport(res map[string]any) map[string]any {
	sc, _ := res["seccomp"].(map[string]any)
	return sc
}

// deniedEntry is one element of seccomp.denied in the result report.
type deniedEntry struct {
	syscall string
	args    map[string]uint64
	count   int
}

func deniedList(res map[string]any) []deniedEntry {
	var out []deniedEntry
	list, _ := seccompReport(res)["denied"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		d := deniedEntry{args: map[string]uint64{}}
		d.syscall, _ = m["syscall"].(string)
		if c, ok := m["count"].(float64); ok {
			d.count = int(c)
		}
		if a, ok := m["args"].(map[string]any); ok {
			for k, v := range a {
				if f, ok := v.(float64); ok {
					d.args[k] = uint64(f)
				}
			}
		}
		out = append(out, d)
	}
	return out
}

// findDenied returns the entry for call with (at least) args.
func findDenied(list []deniedEntry, call string, args map[string]uint64) (deniedEntry, bool) {
	for _, d := range list {
		if d.syscall != call {
			continue
		}
		match := true
		for k, v := range args {
			if d.args[k] != v {
				match = false
			}
		}
		if match {
			return d, true
		}
	}
	return deniedEntry{}, false
}

// TestSeccompDenied makes every always-denied call and every argument
// class from inside the jail under the default profile, checks each errno,
// then repeats the probe in learn mode: the output must be the same (learn
// mode allows nothing) and the supervisor must have seen every call the
// filter denied, which proves the EPERM came from the filter.
func TestSeccompDenied(t *testing.T) {
	t.Parallel()
	cases := append(alwaysDeniedCases(), argumentCases(policyMaxKnown(t))...)
	code := probeProgram(cases)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			errnoOut, errnoErr, exit, res := runJail(t, m, runOpts{}, python(code)...)
			if exit != 0 || !strings.Contains(errnoOut, "DONE") {
				t.Fatalf("the probe failed: exit %d\nstdout:\n%s\nstderr:\n%s", exit, errnoOut, errnoErr)
			}
			if sc := seccompReport(res); sc["profile"] != "python" || sc["mode"] != "errno" {
				t.Errorf("result seccomp = %v, want profile python, mode errno", sc)
			}
			learnOut, learnErr, exit, learnRes := runJail(t, m, runOpts{}, append([]string{"--seccomp=learn"}, python(code)...)...)
			if exit != 0 || !strings.Contains(learnOut, "DONE") {
				t.Fatalf("the probe failed in learn mode: exit %d\nstdout:\n%s\nstderr:\n%s", exit, learnOut, learnErr)
			}
			got, learned := parseCases(errnoOut), parseCases(learnOut)
			denied := deniedList(learnRes)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					r, ok := got[c.name]
					if !ok {
						t.Fatalf("%s: no result line for %s\nstdout:\n%s", c.name, c.call, errnoOut)
					}
					if r != c.want {
						t.Errorf("%s = %s, want %s", c.call, r, c.want)
					}
					if learned[c.name] != r {
						t.Errorf("%s = %s in learn mode but %s without: learn mode must deny the same calls", c.call, learned[c.name], r)
					}
					if c.syscall == "" {
						return
					}
					if _, ok := findDenied(denied, c.syscall, c.args); !ok {
						t.Errorf("%s: learn mode does not report %s %v as denied, so the %s did not come from the filter; seccomp.denied = %v",
							c.call, c.syscall, c.args, r, denied)
					}
				})
			}
		})
	}
}

// TestSeccompModesAndNodes tries, on a read-write volume, to plant what
// the filter forbids: setuid and setgid bits (chmod, fchmod, fchmodat,
// fchmodat2, and open/openat/creat creating the file so), device nodes and
// other non-FIFO nodes, file capabilities (setxattr), openat2 (its mode
// lies in memory, where no filter can read it); the host's view of the
// volume decides.
func TestSeccompModesAndNodes(t *testing.T) {
	t.Parallel()
	type nodeCase struct {
		name string
		// exists: the payload creates the file (mode 0755) before the call
		exists bool
		call   string // a Python expression returning (rc, errno); p(name) is the path in /out
		want   string
		// host checks the file in the volume, from outside; st is nil
		// when it does not exist. It returns what is wrong, or "".
		host func(path string, st *unix.Stat_t) string
	}
	const suidBits = unix.S_ISUID | unix.S_ISGID
	unchanged := func(_ string, st *unix.Stat_t) string {
		if st == nil {
			return "the file is gone"
		}
		if st.Mode&suidBits != 0 || st.Mode&0o7777 != 0o755 {
			return fmt.Sprintf("mode %#o, want 0755 (the setuid/setgid change went through)", st.Mode&0o7777)
		}
		return ""
	}
	absent := func(_ string, st *unix.Stat_t) string {
		if st != nil {
			return fmt.Sprintf("exists on the host: mode %#o, type %#o, rdev %d:%d", st.Mode&0o7777, st.Mode&unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		return ""
	}
	cases := []nodeCase{
		{"chmod_0755_allowed", true, sc(unix.SYS_CHMOD, `p("chmod_0755_allowed")`, 0o755), "OK", unchanged},
		{"chmod_setuid", true, sc(unix.SYS_CHMOD, `p("chmod_setuid")`, 0o4755), "EPERM", unchanged},
		{"chmod_setgid", true, sc(unix.SYS_CHMOD, `p("chmod_setgid")`, 0o2755), "EPERM", unchanged},
		{"chmod_setuid_high_bits", true, sc(unix.SYS_CHMOD, `p("chmod_setuid_high_bits")`, uint64(1<<32|0o4755)), "EPERM", unchanged},
		{"fchmod_setuid", true, sc(unix.SYS_FCHMOD, `os.open(p("fchmod_setuid"), os.O_RDONLY)`, 0o4755), "EPERM", unchanged},
		{"fchmodat_setuid_setgid", true, sc(unix.SYS_FCHMODAT, "AT_FDCWD", `p("fchmodat_setuid_setgid")`, 0o6755), "EPERM", unchanged},
		{"fchmodat2_setuid", true, sc(unix.SYS_FCHMODAT2, "AT_FDCWD", `p("fchmodat2_setuid")`, 0o4755, 0), "EPERM", unchanged},
		{"open_create_setuid", false, sc(unix.SYS_OPEN, `p("open_create_setuid")`, unix.O_CREAT|unix.O_WRONLY, 0o4755), "EPERM", absent},
		{"openat_create_setuid", false, sc(unix.SYS_OPENAT, "AT_FDCWD", `p("openat_create_setuid")`, unix.O_CREAT|unix.O_WRONLY, 0o4755), "EPERM", absent},
		{"creat_setgid", false, sc(unix.SYS_CREAT, `p("creat_setgid")`, 0o2755), "EPERM", absent},
		{"openat2_create_setuid", false, sc(unix.SYS_OPENAT2, "AT_FDCWD", `p("openat2_create_setuid")`, "how(0o4755)", 24), "EPERM", absent},
		{"mknod_char_null", false, sc(unix.SYS_MKNOD, `p("mknod_char_null")`, unix.S_IFCHR|0o666, unix.Mkdev(1, 3)), "EPERM", absent},
		{"mknod_block_loop", false, sc(unix.SYS_MKNOD, `p("mknod_block_loop")`, unix.S_IFBLK|0o666, unix.Mkdev(7, 0)), "EPERM", absent},
		{"mknodat_char_mem", false, sc(unix.SYS_MKNODAT, "AT_FDCWD", `p("mknodat_char_mem")`, unix.S_IFCHR|0o666, unix.Mkdev(1, 1)), "EPERM", absent},
		// a mode without a type is a regular file; the kernel would create it
		{"mknod_untyped", false, sc(unix.SYS_MKNOD, `p("mknod_untyped")`, 0o644, 0), "EPERM", absent},
		{"mknod_socket", false, sc(unix.SYS_MKNOD, `p("mknod_socket")`, unix.S_IFSOCK|0o644, 0), "EPERM", absent},
		{"mknod_fifo_allowed", false, sc(unix.SYS_MKNOD, `p("mknod_fifo_allowed")`, unix.S_IFIFO|0o644, 0), "OK", func(_ string, st *unix.Stat_t) string {
			if st == nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
				return "no FIFO on the host"
			}
			return ""
		}},
		{"setxattr_file_capability", true, sc(unix.SYS_SETXATTR, `p("setxattr_file_capability")`, `b"security.capability"`, "capdata()", 20, 0), "EPERM", func(path string, st *unix.Stat_t) string {
			if msg := unchanged(path, st); msg != "" {
				return msg
			}
			if n, err := unix.Lgetxattr(path, "security.capability", make([]byte, 64)); err == nil {
				return fmt.Sprintf("it has a security.capability xattr (%d bytes): the payload planted file capabilities", n)
			}
			return ""
		}},
	}
	code := seccompProbeLib + `
import struct
def p(name):
    return ("/out/" + name).encode()
def how(mode):
    # struct open_how {u64 flags; u64 mode; u64 resolve}
    return ctypes.create_string_buffer(struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, mode, 0), 24)
def capdata():
    # VFS_CAP_REVISION_2, effective, CAP_SYS_ADMIN permitted
    return ctypes.create_string_buffer(struct.pack("<IIIII", 0x02000001, 1 << 21, 0, 0, 0), 20)
for name in sys.argv[1:]:
    fd = os.open("/out/" + name, os.O_CREAT | os.O_WRONLY, 0o755)
    os.close(fd)
    os.chmod("/out/" + name, 0o755)
`
	var precreate []string
	for _, c := range cases {
		if c.exists {
			precreate = append(precreate, c.name)
		}
		code += fmt.Sprintf("run(%q, lambda: %s)\n", c.name, c.call)
	}
	code += "print('DONE', flush=True)\n"
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			vol := newOpenDir(t)
			stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{"-v", vol + ":/out:rw"}, python(code, precreate...)...)...)
			if exit != 0 || !strings.Contains(stdout, "DONE") {
				t.Fatalf("the probe failed: exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
			}
			got := parseCases(stdout)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if got[c.name] != c.want {
						t.Errorf("%s = %q, want %s", c.call, got[c.name], c.want)
					}
					path := filepath.Join(vol, c.name)
					var st unix.Stat_t
					stp := &st
					if err := unix.Lstat(path, &st); err != nil {
						stp = nil
					}
					if msg := c.host(path, stp); msg != "" {
						t.Errorf("%s: on the host, %s: %s", c.call, path, msg)
					}
				})
			}
		})
	}
}

// TestSeccompForeignABIKills makes an i386 call (int 0x80 from a machine
// code stub) and an x32 call (a syscall number with bit 30 set): both must
// kill the payload with SIGSYS before the call runs, seen from outside as
// rljail's exit status 159 (128+31).
func TestSeccompForeignABIKills(t *testing.T) {
	t.Parallel()
	// mov eax, 20 (i386 getpid); int 0x80; ret
	const i386Stub = `
import ctypes, mmap, os
code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("BEFORE", flush=True)
print("I386 GETPID", f() == os.getpid(), flush=True)
`
	x32Call := fmt.Sprintf(`
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("BEFORE", flush=True)
rc = libc.syscall(ctypes.c_long(%#x))
print("X32 GETPID", rc, ctypes.get_errno(), flush=True)
`, 0x40000000|unix.SYS_GETPID)
	// Outside the jail, the i386 stub must work (IA32 emulation on),
	// or the test would prove nothing.
	out, err := exec.Command("/usr/bin/python3", "-c", i386Stub).CombinedOutput()
	i386OK := err == nil && strings.Contains(string(out), "I386 GETPID True")
	for _, c := range []struct{ name, code, after string }{
		{"i386_int80", i386Stub, "I386 GETPID"},
		{"x32_syscall", x32Call, "X32 GETPID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.name == "i386_int80" && !i386OK {
				t.Skipf("outside the jail the i386 stub does not run (no IA32 emulation?): %v\n%s", err, out)
			}
			for _, m := range bothModes {
				t.Run(string(m), func(t *testing.T) {
					stdout, stderr, exit, res := runJail(t, m, runOpts{}, python(c.code)...)
					if !strings.Contains(stdout, "BEFORE") {
						t.Fatalf("the payload did not get as far as the call: exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
					}
					if strings.Contains(stdout, c.after) {
						t.Errorf("the %s call returned to the payload: %q", c.name, stdout)
					}
					if exit != 128+int(unix.SIGSYS) {
						t.Errorf("exit status %d, want %d (killed by SIGSYS)\nstdout:\n%s\nstderr:\n%s", exit, 128+int(unix.SIGSYS), stdout, stderr)
					}
					if s, _ := jsonInt(res, "signal"); s != int64(unix.SIGSYS) {
						t.Errorf("result signal = %v, want %d (report %v)", res["signal"], unix.SIGSYS, res)
					}
				})
			}
		})
	}
}

// TestSeccompStrict checks python-strict: a new process or an AF_INET
// socket ends the jail (exit 159, status seccomp_violation, the call named),
// threads and AF_UNIX socket pairs still work.
func TestSeccompStrict(t *testing.T) {
	t.Parallel()
	type strictCase struct {
		name       string
		code       string
		violations []string // acceptable seccomp.violation values; none: must succeed
		after      string   // must not be printed when the jail is ended
	}
	cases := []strictCase{
		{name: "fork", code: `
import os
print("BEFORE", flush=True)
pid = os.fork()
if pid == 0:
    os._exit(0)
print("AFTER FORK", flush=True)
`, violations: []string{"clone", "fork"}, after: "AFTER"},
		{name: "subprocess", code: `
import subprocess, sys
print("BEFORE", flush=True)
subprocess.run([sys.executable, "-c", "pass"])
print("AFTER SUBPROCESS", flush=True)
`, violations: []string{"clone", "vfork", "fork"}, after: "AFTER"},
		{name: "socket_inet", code: `
import socket
print("BEFORE", flush=True)
socket.socket(socket.AF_INET, socket.SOCK_STREAM)
print("AFTER SOCKET", flush=True)
`, violations: []string{"socket"}, after: "AFTER"},
		{name: "socket_inet6", code: `
import socket
print("BEFORE", flush=True)
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
print("AFTER SOCKET", flush=True)
`, violations: []string{"socket"}, after: "AFTER"},
		{name: "always_denied_ptrace", code: `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("BEFORE", flush=True)
libc.syscall(ctypes.c_long(101), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
print("AFTER PTRACE", flush=True)
`, violations: []string{"ptrace"}, after: "AFTER"},
		{name: "threads_work", code: `
import threading, queue
q = queue.Queue()
ts = [threading.Thread(target=lambda i=i: q.put(i * i)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(4) as ex:
    s = sum(ex.map(lambda x: x + 1, range(100)))
print("THREADS", sorted(q.get() for _ in ts) == [i * i for i in range(16)], s, flush=True)
`},
		{name: "socketpair_works", code: `
import socket
a, b = socket.socketpair()
a.sendall(b"ok")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
print("SOCKETPAIR", b.recv(2).decode(), flush=True)
`},
	}
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--profile", "python-strict"}, python(c.code)...)...)
					sc := seccompReport(res)
					if sc["profile"] != "python-strict" || sc["mode"] != "kill" {
						t.Errorf("result seccomp = %v, want profile python-strict, mode kill", sc)
					}
					if len(c.violations) == 0 {
						if exit != 0 {
							t.Fatalf("exit %d, want 0: python-strict must allow this\nstdout:\n%s\nstderr:\n%s\nresult: %v", exit, stdout, stderr, res)
						}
						if !strings.Contains(stdout, " True") && !strings.Contains(stdout, "SOCKETPAIR ok") {
							t.Errorf("unexpected output:\n%s", stdout)
						}
						return
					}
					if !strings.Contains(stdout, "BEFORE") {
						t.Fatalf("the payload did not get as far as the call: exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
					}
					if strings.Contains(stdout, c.after) {
						t.Errorf("the payload went on after the violation:\n%s", stdout)
					}
					checkResult(t, c.name, res, "seccomp_violation", 128+int(unix.SIGSYS))
					if exit != 128+int(unix.SIGSYS) {
						t.Errorf("exit status %d, want %d\nstderr:\n%s", exit, 128+int(unix.SIGSYS), stderr)
					}
					v, _ := sc["violation"].(string)
					if !slices.Contains(c.violations, v) {
						t.Errorf("result seccomp.violation = %q, want one of %v (report %v)", v, c.violations, sc)
					}
					if v != "" && !strings.Contains(stderr, v) {
						t.Errorf("stderr does not name the call %s: %q", v, stderr)
					}
				})
			}
		})
	}
}

// TestSeccompAddRemove checks the one-off flags: --seccomp-remove denies a
// call the profile allows (removing read breaks the payload), --seccomp-add
// allows one it denies and leaves the others allowed, both are echoed in
// the result report, and neither can allow an always-denied call.
func TestSeccompAddRemove(t *testing.T) {
	t.Parallel()
	probe := seccompProbeLib + `
print("SETFSUID", result(lambda: sc(122, os.getuid())))
print("GETPPID", result(lambda: sc(110)))
print("READ", len(open("/proc/self/stat").read()) > 0)
print("GETTID", result(lambda: sc(186)))
print("NETLINK", result(lambda: sock(16, 3)))
print("UNIX", result(lambda: sock(1, 1)))
`
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			t.Run("default", func(t *testing.T) {
				out := jailOK(t, m, runOpts{}, nil, probe)
				for _, want := range []string{"SETFSUID EPERM", "GETPPID OK", "READ True", "GETTID OK", "NETLINK EPERM", "UNIX OK"} {
					if !strings.Contains(out, want) {
						t.Errorf("the default profile: want %q in\n%s", want, out)
					}
				}
			})
			t.Run("add_setfsuid", func(t *testing.T) {
				stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--seccomp-add", "setfsuid"}, python(probe)...)...)
				if exit != 0 {
					t.Fatalf("exit %d\n%s%s", exit, stdout, stderr)
				}
				for _, want := range []string{"SETFSUID OK", "GETPPID OK", "READ True", "GETTID OK", "NETLINK EPERM", "UNIX OK"} {
					if !strings.Contains(stdout, want) {
						t.Errorf("--seccomp-add setfsuid: want %q in\n%s", want, stdout)
					}
				}
				if got := fmt.Sprint(seccompReport(res)["added"]); got != "[setfsuid]" {
					t.Errorf("result seccomp.added = %s, want [setfsuid] (report %v)", got, seccompReport(res))
				}
			})
			// Adding a call the profile allows already changes nothing: the
			// other calls and the argument rules of socket stay as they were.
			t.Run("add_already_allowed_getppid", func(t *testing.T) {
				stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--seccomp-add", "getppid"}, python(probe)...)...)
				if exit != 0 {
					t.Fatalf("exit %d\n%s%s", exit, stdout, stderr)
				}
				for _, want := range []string{"SETFSUID EPERM", "GETPPID OK", "READ True", "GETTID OK", "NETLINK EPERM", "UNIX OK"} {
					if !strings.Contains(stdout, want) {
						t.Errorf("--seccomp-add getppid: want %q in\n%s", want, stdout)
					}
				}
				if got := fmt.Sprint(seccompReport(res)["added"]); got != "[getppid]" {
					t.Errorf("result seccomp.added = %s, want [getppid]", got)
				}
			})
			t.Run("remove_getppid", func(t *testing.T) {
				stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--seccomp-remove", "getppid"}, python(probe)...)...)
				if exit != 0 {
					t.Fatalf("exit %d\n%s%s", exit, stdout, stderr)
				}
				for _, want := range []string{"SETFSUID EPERM", "GETPPID EPERM", "READ True", "GETTID OK", "NETLINK EPERM", "UNIX OK"} {
					if !strings.Contains(stdout, want) {
						t.Errorf("--seccomp-remove getppid: want %q in\n%s", want, stdout)
					}
				}
				if got := fmt.Sprint(seccompReport(res)["removed"]); got != "[getppid]" {
					t.Errorf("result seccomp.removed = %s, want [getppid]", got)
				}
			})
			t.Run("remove_read_breaks_payload", func(t *testing.T) {
				stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--seccomp-remove", "read"}, python("print('RAN')")...)...)
				if exit == 0 || strings.Contains(stdout, "RAN") {
					t.Errorf("--seccomp-remove read: the payload ran (exit %d)\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
				}
				if !strings.Contains(stderr, "Operation not permitted") {
					t.Errorf("--seccomp-remove read: stderr does not show an EPERM:\n%s", stderr)
				}
				if got := fmt.Sprint(seccompReport(res)["removed"]); got != "[read]" {
					t.Errorf("result seccomp.removed = %s, want [read] (report %v)", got, res)
				}
				t.Logf("--seccomp-remove read: exit %d, %s", exit, strings.TrimSpace(stderr))
			})
			for _, bad := range []struct{ name, flag, value string }{
				{"add_always_denied_ptrace", "--seccomp-add", "ptrace"},
				{"add_always_denied_mount", "--seccomp-add", "mount"},
				{"add_unknown", "--seccomp-add", "no_such_syscall"},
				{"remove_unknown", "--seccomp-remove", "no_such_syscall"},
				{"seccomp_mode_unknown", "--seccomp", "allow-all"},
			} {
				t.Run(bad.name, func(t *testing.T) {
					stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{bad.flag, bad.value}, python("print('RAN')")...)...)
					if strings.Contains(stdout, "RAN") {
						t.Errorf("%s %s: the payload ran", bad.flag, bad.value)
					}
					checkSetupError(t, bad.flag+" "+bad.value, stderr, exit)
					if !strings.Contains(stderr, bad.value) {
						t.Errorf("%s %s: the error does not name %s: %q", bad.flag, bad.value, bad.value, stderr)
					}
				})
			}
		})
	}
}

// learnSnippet returns the profile learn mode printed on stderr: the lines
// after "rljail: learn: a profile that would allow them".
func learnSnippet(stderr string) (string, bool) {
	const head = "rljail: learn: a profile that would allow them"
	i := strings.Index(stderr, head)
	if i < 0 {
		return "", false
	}
	rest := stderr[i:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		return "", false
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(rest[nl+1:], "\n") {
		if strings.HasPrefix(l, "rljail: ") {
			break
		}
		b.WriteString(l)
	}
	return b.String(), true
}

// TestSeccompLearn runs a program that needs calls the python profile
// denies in learn mode: the calls still fail, stderr lists each with its
// count, and the snippet it prints, used as --profile, lets the same
// program run with nothing denied but the always-denied calls and the
// netlink socket (a family the profile's checks keep out), which the
// snippet leaves out.
func TestSeccompLearn(t *testing.T) {
	t.Parallel()
	program := seccompProbeLib + `
for i in range(3):
    print("SETFSUID", result(lambda: sc(122, os.getuid())))
print("NETLINK", result(lambda: sock(16, 3)))
for i in range(2):
    print("PTRACE", result(lambda: sc(101, 0, 0, 0, 0)))
print("GETPID", result(lambda: sc(39)))
`
	denied := []string{"SETFSUID EPERM", "SETFSUID EPERM", "SETFSUID EPERM", "NETLINK EPERM", "PTRACE EPERM", "PTRACE EPERM", "GETPID OK"}
	// netlink breaks an invariant of the profile (its socket families):
	// the snippet says it stays denied, as ptrace does.
	allowed := []string{"SETFSUID OK", "SETFSUID OK", "SETFSUID OK", "NETLINK EPERM", "PTRACE EPERM", "PTRACE EPERM", "GETPID OK"}
	lines := func(out string) string { return strings.TrimSpace(out) }
	want := func(l []string) string { return strings.Join(l, "\n") }
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, exit, res := runJail(t, m, runOpts{}, append([]string{"--seccomp=learn"}, python(program)...)...)
			if exit != 0 {
				t.Fatalf("learn run: exit %d\n%s%s", exit, stdout, stderr)
			}
			if lines(stdout) != want(denied) {
				t.Errorf("learn mode must deny what the profile denies: stdout\n%s\nwant\n%s", stdout, strings.Join(denied, "\n"))
			}
			if !strings.Contains(stderr, "rljail: learn: the profile python denied:") {
				t.Errorf("stderr lacks the learn header:\n%s", stderr)
			}
			for _, re := range []string{`(?m)^\s+3\s+setfsuid\s*$`, `(?m)^\s+1\s+socket arg0=0x10 `, `(?m)^\s+2\s+ptrace\s*$`} {
				if !regexp.MustCompile(re).MatchString(stderr) {
					t.Errorf("learn output does not match %s:\n%s", re, stderr)
				}
			}
			if regexp.MustCompile(`(?m)^\s+\d+\s+getpid`).MatchString(stderr) {
				t.Errorf("learn output lists getpid, which the profile allows:\n%s", stderr)
			}
			sc := seccompReport(res)
			if sc["mode"] != "learn" {
				t.Errorf("result seccomp.mode = %v, want learn", sc["mode"])
			}
			list := deniedList(res)
			for _, w := range []deniedEntry{{syscall: "setfsuid", count: 3}, {syscall: "socket", args: map[string]uint64{"arg0": 16}, count: 1}, {syscall: "ptrace", count: 2}} {
				d, ok := findDenied(list, w.syscall, w.args)
				if !ok || d.count != w.count {
					t.Errorf("result seccomp.denied lacks %s %v x%d: %v", w.syscall, w.args, w.count, list)
				}
			}
			snippet, ok := learnSnippet(stderr)
			if !ok {
				t.Fatalf("learn mode printed no profile snippet:\n%s", stderr)
			}
			t.Logf("snippet:\n%s", snippet)
			if regexp.MustCompile(`(?m)^[^#\n]*"ptrace"`).MatchString(snippet) {
				t.Errorf("the snippet allows ptrace, which is denied in every profile:\n%s", snippet)
			}
			if regexp.MustCompile(`(?m)^[^#\n]*"socket"`).MatchString(snippet) {
				t.Errorf("the snippet allows a socket family the profile denies:\n%s", snippet)
			}
			dir := newDir(t)
			prof := filepath.Join(dir, "learned.toml")
			writeFile(t, prof, snippet, 0o644)

			stdout, stderr, exit, res = runJail(t, m, runOpts{}, append([]string{"--profile", prof}, python(program)...)...)
			if exit != 0 {
				t.Fatalf("--profile %s: exit %d\n%s%s", prof, exit, stdout, stderr)
			}
			if lines(stdout) != want(allowed) {
				t.Errorf("with the learned profile: stdout\n%s\nwant\n%s", stdout, strings.Join(allowed, "\n"))
			}
			if got := seccompReport(res)["profile"]; got != prof {
				t.Logf("result seccomp.profile = %v (the file was %s)", got, prof)
			}
			// Learn again with the learned profile: only the always-denied
			// call and the netlink socket are left.
			_, stderr, exit, res = runJail(t, m, runOpts{}, append([]string{"--profile", prof, "--seccomp=learn"}, python(program)...)...)
			if exit != 0 {
				t.Fatalf("--profile %s --seccomp=learn: exit %d\n%s", prof, exit, stderr)
			}
			var names []string
			for _, d := range deniedList(res) {
				names = append(names, d.syscall)
			}
			if fmt.Sprint(names) != "[socket ptrace]" {
				t.Errorf("with the learned profile, learn mode still sees %v denied, want only [socket ptrace]\n%s", names, stderr)
			}
		})
	}
}

// TestSeccompProfileFileErrors: a profile file with an unknown key, an
// unknown syscall, or an always-denied call is refused before anything
// runs: exit 125, one line naming the file and the line.
func TestSeccompProfileFileErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, content string
		line          int
		mention       string
	}{
		{"unknown_key", "base = \"python\"\n\n[seccomp]\nallow = [\"setuid\"]\nallow_everything = true\n", 5, "allow_everything"},
		{"unknown_top_level_key", "base = \"python\"\nfrobnicate = 1\n", 2, "frobnicate"},
		{"unknown_syscall", "base = \"python\"\n[seccomp]\nallow = [\n  \"getpid\",\n  \"no_such_syscall\",\n]\n", 5, "no_such_syscall"},
		{"unknown_syscall_in_rule", "base = \"python\"\n[seccomp]\n\n[[seccomp.rule]]\nsyscall = \"frob\"\n", 5, "frob"},
		{"always_denied_allowed", "base = \"python\"\n[seccomp]\nallow = [\"ptrace\"]\n", 3, "ptrace"},
		{"wrong_type", "base = \"python\"\n[seccomp]\nallow = \"setuid\"\n", 3, "allow"},
	}
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					prof := filepath.Join(newDir(t), c.name+".toml")
					writeFile(t, prof, c.content, 0o644)
					stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{"--profile", prof}, python("print('RAN')")...)...)
					if strings.Contains(stdout, "RAN") {
						t.Errorf("the payload ran with the bad profile")
					}
					checkSetupError(t, "--profile "+c.name, stderr, exit)
					for _, want := range []string{prof, fmt.Sprintf("line %d", c.line), c.mention} {
						if !strings.Contains(stderr, want) {
							t.Errorf("the error does not say %q: %q", want, stderr)
						}
					}
				})
			}
		})
	}
}

// TestSeccompTIOCSTIUnderPty runs rljail on a real terminal (a pty whose
// slave is rljail's stdin, stdout, stderr and controlling terminal) and
// lets the payload try to push a command into the terminal's input with
// TIOCSTI on every descriptor it has. The injected characters must never
// reach the terminal: not echoed on the master side, not waiting in the
// slave's input queue.
func TestSeccompTIOCSTIUnderPty(t *testing.T) {
	t.Parallel()
	const code = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
marker = sys.argv[1] + "\n"
for fd in (0, 1, 2):
    res = []
    for ch in marker.encode():
        c = ctypes.c_char(ch)
        ctypes.set_errno(0)
        rc = libc.ioctl(fd, ctypes.c_ulong(0x5412), ctypes.byref(c))
        res.append("ok" if rc == 0 else os.strerror(ctypes.get_errno()))
    print("fd", fd, "isatty", os.isatty(fd), "tiocsti", sorted(set(res)), flush=True)
try:
    os.open("/dev/tty", os.O_RDWR)
    print("devtty opened", flush=True)
except OSError as e:
    print("devtty", e.strerror, flush=True)
print("END", flush=True)
`
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			marker := randomToken("INJ")
			r := runOnPty(t, m, append([]string{"--rootfs", rootfsDir}, python(code, marker)...)...)
			r.checkNoInjection(t, marker)
			for _, fd := range []string{"0", "1", "2"} {
				line, _ := lineValue(r.out, "fd "+fd+" ")
				if strings.Contains(line, "'ok'") {
					t.Errorf("TIOCSTI on fd %s succeeded: %s", fd, line)
				}
				if !strings.Contains(line, "Operation not permitted") {
					t.Errorf("TIOCSTI on fd %s: want EPERM from the filter, got %q", fd, line)
				}
			}
			if strings.Contains(r.out, "devtty opened") {
				t.Errorf("the payload opened /dev/tty")
			}
		})
	}
}
