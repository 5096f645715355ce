package integration

// Second red-team round, the seccomp items of issue 18: learn mode's
// advice steered by the payload, ioctl, socket, setsockopt and fcntl
// commands that choose what a needed call does, sync and syncfs on the
// host's filesystems, and a process name that forges lines of the host's
// kernel log. Each case decides from the host: a file's mode and flags,
// the host user's key quota, the jail's sockets and multicast groups as
// the host's /proc shows them, a lease seen by a host open, the write
// counter of a loop device, the host's kernel log.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "learn_snippet_steered", group: groupProcesses,
			mechanism: "run 1 in --seccomp learn makes setuid chmod, clone(CLONE_NEWUSER), personality(ADDR_NO_RANDOMIZE) and an MPTCP socket, directly and after 300 distinct prctl options that fill learn's 256 entries; run 2 uses the printed snippet as --profile and makes them again",
			layer:     "learn mode never turns a call whose arguments rljail's profiles check into a rule or an unconditional allow: the snippet says they stay denied",
			run:       attackLearnSnippetSteered},
		{name: "ioctl_outside_allowlist", group: groupFilesystem,
			mechanism: "on a file of a granted ext4 filesystem with encryption: FS_IOC_ADD_ENCRYPTION_KEY 20 times (the host user's key quota) and FS_IOC_SETFLAGS, plain and with the command's high 32 bits set",
			layer:     "ioctl is allowed only for a list of terminal and descriptor commands, compared on the low 32 bits the kernel reads",
			run:       attackIoctlAllowlist},
		{name: "socket_protocols_and_options", group: groupNetwork,
			mechanism: "open MPTCP and UDP-Lite sockets (protocol 262 and 136, also with high bits set) and join a multicast group on lo with IP_ADD_MEMBERSHIP",
			layer:     "socket's type and protocol and setsockopt's level and option are checked against lists, on their low 32 bits",
			run:       attackSocketProtocols},
		{name: "lease_on_granted_file", group: groupDoS,
			mechanism: "take a read lease (fcntl F_SETLEASE) on a read-only granted host file and hold it: a host open for writing stalls for lease-break-time",
			layer:     "fcntl is allowed only for a list of commands, without leases or F_NOTIFY",
			run:       attackLeaseOnGrant},
		{name: "sync_host_filesystems", group: groupDoS, serial: true,
			mechanism: "syncfs() on a file of a writable volume, and sync(): write back the host's dirty data of the volume's whole filesystem, or of every filesystem",
			layer:     "seccomp answers sync and syncfs with success without running them",
			run:       attackSyncHostFilesystems},
		{name: "comm_newline_kernel_log", group: groupProcesses,
			mechanism: "prctl(PR_SET_NAME) and a write to /proc/self/comm, each with a name that holds a newline, then a segfault: the kernel logs the name raw, and the newline forges a line in the host's kernel log",
			layer:     "seccomp denies PR_SET_NAME; the jail's /proc is read-only, so /proc/self/comm cannot be written (a program file's own name remains: SECURITY.md)",
			run:       attackCommNewline},
	}...)
}

// attackLoopFS makes an ext4 filesystem with encryption support and no
// journal (nothing writes to it but the page cache's writeback) on a loop
// device, mounted noatime on a fresh directory that everyone may write;
// it is unmounted when the test ends. It returns the mount point and the
// loop device's name (loop3).
func attackLoopFS(t *testing.T) (dir, dev string) {
	t.Helper()
	img := filepath.Join(newDir(t), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Env = []string{"PATH=" + hostPath}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Skipf("%s %s: %v: %s (a loop-mounted ext4 is needed)", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("mkfs.ext4", "-q", "-F", "-O", "encrypt,^has_journal", "-E", "lazy_itable_init=0", img)
	dir = newOpenDir(t)
	run("mount", "-o", "loop,noatime", img, dir)
	t.Cleanup(func() {
		for i := 0; i < 50; i++ {
			if exec.Command("umount", dir).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = exec.Command("umount", "-l", dir).Run()
	})
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Base(run("findmnt", "-n", "-o", "SOURCE", "--target", dir))
}

// attackLoopWriteSectors is the sectors written to a block device so far
// (field 7 of /sys/block/DEV/stat).
func attackLoopWriteSectors(t *testing.T, dev string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		t.Fatalf("/sys/block/%s/stat: %q", dev, b)
	}
	n, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// attackKeyQuota is the number of keys charged to uid's quota
// (/proc/key-users: "uid: usage nkeys/nikeys qnkeys/maxkeys ...").
func attackKeyQuota(t *testing.T, uid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/key-users")
	if err != nil {
		t.Skipf("no /proc/key-users: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == strconv.Itoa(uid)+":" {
			n, _ := strconv.Atoi(strings.SplitN(f[3], "/", 2)[0])
			return n
		}
	}
	return 0
}

// attackProtocolSockets reads the sockets column of each protocol in the
// network namespace of pid, from the host's /proc/PID/net/protocols.
func attackProtocolSockets(pid int) (map[string]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/protocols", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) >= 3 {
			out[f[0]], _ = strconv.Atoi(f[2])
		}
	}
	return out, nil
}

// attackHostUID is the host uid of a process.
func attackHostUID(pid int) int {
	f := strings.Fields(attackProcStatus(pid, "Uid"))
	if len(f) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// attackSteeredPayload makes the calls learn mode must never advise
// allowing; argv[1] is "flood" to fill learn's report first.
const attackSteeredPayload = attackPyLib + `
import time
flood = sys.argv[1] == "flood"
open("/out/prog", "w").close()
if flood:
    for i in range(300):
        sc(157, 0x5200 + i, 0, 0, 0, 0)  # prctl options no profile allows
import socket
held = []
def mptcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.bind(("127.0.0.1", 0))
    s.listen()  # the kernel counts a socket in /proc/net/protocols once bound
    held.append(s)
def newuser():
    rc, e = sc(56, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER, fork-like
    if rc == 0:
        time.sleep(6)
        os._exit(0)
    return rc, e
attempt("chmod_setuid", lambda: sc(90, b"/out/prog", 0o4755))
attempt("personality", lambda: sc(135, 0x0040000))
attempt("socket_mptcp", mptcp)
attempt("clone_newuser", newuser)
print("READY", flush=True)
time.sleep(2)
`

func attackLearnSnippetSteered(t *testing.T, m mode) {
	for _, variant := range []string{"direct", "flood"} {
		t.Run(variant, func(t *testing.T) {
			vol := newOpenDir(t)
			flags := []string{"-v", vol + ":/out:rw", "--timeout", "40s"}
			r := attackPy(t, m, runOpts{}, append([]string{"--seccomp=learn"}, flags...), attackSteeredPayload, variant)
			if r.exit != 0 {
				t.Fatalf("run 1 (learn) failed:\n%s", r)
			}
			snippet, ok := learnSnippet(r.stderr)
			if !ok {
				t.Fatalf("learn mode printed no snippet:\n%s", r)
			}
			// rljail's own output on the host: no line but a comment may
			// name a call whose arguments the profile checks.
			if re := regexp.MustCompile(`(?m)^[^#\n]*"(chmod|clone|personality|socket|prctl)"`); re.MatchString(snippet) {
				t.Errorf("the learned snippet allows a checked call: %q", re.FindAllString(snippet, -1))
			}
			prof := filepath.Join(newDir(t), "learned.toml")
			writeFile(t, prof, snippet, 0o644)
			_ = os.Remove(filepath.Join(vol, "prog")) // run 2 makes it again

			marker := randomToken("atk")
			var setuidDuring bool
			var personality string
			var mptcpSockets int
			var newUserNS []string
			r2 := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
				if fi, err := os.Stat(filepath.Join(vol, "prog")); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					setuidDuring = true
				}
				if pl.pid == 0 {
					return
				}
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/personality", pl.pid))
				personality = strings.TrimSpace(string(b))
				if socks, err := attackProtocolSockets(pl.pid); err == nil {
					mptcpSockets = socks["MPTCP"] + socks["MPTCPv6"]
				}
				own, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pl.pid))
				for _, q := range descendants(pl.pid) {
					if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", q.pid)); err == nil && ns != own {
						newUserNS = append(newUserNS, ns)
					}
				}
			}}, attackPython(append([]string{"--profile", prof}, flags...), attackSteeredPayload, marker, variant)...)
			if r2.exit != 0 {
				t.Fatalf("run 2 (--profile learned) failed:\nsnippet:\n%s\n%s", snippet, r2)
			}
			fi, err := os.Stat(filepath.Join(vol, "prog"))
			if err != nil {
				t.Fatalf("run 2 made no /out/prog: %v\n%s", err, r2)
			}
			if setuidDuring || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("the learned profile let a setuid chmod through: the host file is %v", fi.Mode())
			}
			if p, err := strconv.ParseUint(personality, 16, 32); err != nil {
				t.Errorf("could not read the payload's personality from the host (%q): %v", personality, err)
			} else if p&0x0040000 != 0 {
				t.Errorf("the learned profile let personality(ADDR_NO_RANDOMIZE) through: the host sees %s", personality)
			}
			if mptcpSockets != 0 {
				t.Errorf("the learned profile let %d MPTCP sockets open (the jail's /proc/PID/net/protocols, read on the host)", mptcpSockets)
			}
			if len(newUserNS) != 0 {
				t.Errorf("the learned profile let clone(CLONE_NEWUSER) through: the host sees children in %v", newUserNS)
			}
			if t.Failed() {
				t.Logf("snippet:\n%s", snippet)
			}
		})
	}
}

func attackIoctlAllowlist(t *testing.T, m mode) {
	dir, _ := attackLoopFS(t)
	marker := randomToken("atk")
	uid := -1
	before := -1
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		if pl.pid != 0 {
			uid = attackHostUID(pl.pid)
			before = attackKeyQuota(t, uid)
		}
	}}, attackPython([]string{"-v", dir + ":/out:rw"}, attackPyLib+`
import struct, time
fds = [os.open("/out/f%d" % i, os.O_RDONLY | os.O_CREAT, 0o644) for i in (1, 2)]
print("READY", flush=True)
time.sleep(1)  # the host counts the keys of the jail's uid meanwhile
flags = ctypes.c_int(0x80 | 0x40)  # FS_NOATIME_FL | FS_NODUMP_FL
FS_IOC_SETFLAGS, FS_IOC_ADD_ENCRYPTION_KEY = 0x40086602, 0xc0506617
attempt("setflags", lambda: sc(16, fds[0], FS_IOC_SETFLAGS, ctypes.byref(flags)))
attempt("setflags_high_bits", lambda: sc(16, fds[1], 0xffffffff00000000 | FS_IOC_SETFLAGS, ctypes.byref(flags)))
for i in range(20):
    # struct fscrypt_add_key_arg: an identifier key spec, a 64-byte raw key
    arg = ctypes.create_string_buffer(struct.pack("II32sII32s", 2, 0, bytes(32), 64, 0, bytes(32)) + os.urandom(64), 144)
    cmd = FS_IOC_ADD_ENCRYPTION_KEY if i % 2 == 0 else 0xffffffff00000000 | FS_IOC_ADD_ENCRYPTION_KEY
    attempt("add_key_%d" % i, lambda: sc(16, fds[0], cmd, arg))
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the payload failed:\n%s", r)
	}
	if uid < 0 {
		t.Fatalf("the payload was never seen on the host:\n%s", r)
	}
	if after := attackKeyQuota(t, uid); after != before {
		t.Errorf("the host uid %d's key quota went from %d to %d keys: FS_IOC_ADD_ENCRYPTION_KEY got through", uid, before, after)
	}
	for _, name := range []string{"f1", "f2"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		f.Close()
		if err != nil {
			t.Fatalf("FS_IOC_GETFLAGS %s: %v", name, err)
		}
		if got&(0x80|0x40) != 0 {
			t.Errorf("the host file %s has flags %#x: FS_IOC_SETFLAGS got through", name, got)
		}
	}
	if t.Failed() {
		t.Logf("payload: %s", attackClip(r.stdout))
	}
}

func attackSocketProtocols(t *testing.T, m mode) {
	marker := randomToken("atk")
	var socks map[string]int
	var igmp string
	var readErr error
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		if pl.pid == 0 {
			readErr = errors.New("payload not seen")
			return
		}
		socks, readErr = attackProtocolSockets(pl.pid)
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/igmp", pl.pid))
		igmp = string(b)
	}}, attackPython([]string{"--timeout", "30s"}, attackPyLib+`
import socket, struct, time
held = []
def opener(fam, typ, proto):
    # bound (and listening for a stream): the kernel counts a socket in
    # /proc/net/protocols once it is bound
    def f():
        rc, e = sc(41, fam, typ, proto)
        if rc < 0:
            return rc, e
        s = socket.socket(fileno=rc)
        s.bind(("127.0.0.1" if fam == 2 else "::1", 0))
        if typ & 0xf == 1:
            s.listen()
        held.append(s)
    return f
attempt("mptcp4", opener(2, 1, 262))
attempt("mptcp6", opener(10, 1 | 0x80000, 262))
attempt("mptcp4_high_bits", opener(2, 1, 0xffffffff00000000 | 262))
attempt("udplite4", opener(2, 2, 136))
attempt("udplite6", opener(10, 2, 136))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
mreq = struct.pack("4s4s", socket.inet_aton("239.7.7.7"), socket.inet_aton("127.0.0.1"))
attempt("ip_add_membership", lambda: s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq))
mreq2 = struct.pack("4s4s", socket.inet_aton("239.7.7.8"), socket.inet_aton("127.0.0.1"))
attempt("ip_add_membership_high_bits", lambda: sc(54, s.fileno(), 0xffffffff00000000, 0xffffffff00000000 | 35, mreq2, 8))
print("READY", flush=True)
time.sleep(2)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the payload failed:\n%s", r)
	}
	if readErr != nil {
		t.Fatalf("the jail's protocols from the host: %v", readErr)
	}
	for _, p := range []string{"MPTCP", "MPTCPv6", "UDP-Lite", "UDPLITEv6"} {
		// (the lines are those of the jail's own network namespace)
		if n, ok := socks[p]; !ok {
			t.Logf("this kernel has no %s", p)
		} else if n != 0 {
			t.Errorf("the jail holds %d %s sockets (its /proc/PID/net/protocols, read on the host)", n, p)
		}
	}
	for _, g := range []string{"070707EF", "080707EF"} { // 239.7.7.7, 239.7.7.8
		if strings.Contains(igmp, g) {
			t.Errorf("the jail joined multicast group %s on lo (its /proc/PID/net/igmp on the host):\n%s", g, igmp)
		}
	}
	if t.Failed() {
		t.Logf("payload: %s", attackClip(r.stdout))
	}
}

func attackLeaseOnGrant(t *testing.T, m mode) {
	dir, vol := newOpenDir(t), newOpenDir(t)
	file := filepath.Join(dir, "grant.txt")
	writeFile(t, file, "granted\n", 0o644)
	// Owned by the uid the jail's user maps to as root, so that the
	// kernel itself would grant the lease (the owner may lease a file it
	// reads); rootless, the file the payload makes in its writable
	// volume is its own.
	if err := os.Chown(file, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	marker := randomToken("atk")
	openErrs := map[string]error{}
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(proc) {
		for _, p := range []string{file, filepath.Join(vol, "own.txt")} {
			f, err := os.OpenFile(p, os.O_WRONLY|unix.O_NONBLOCK, 0)
			openErrs[p] = err
			if err == nil {
				f.Close()
			}
		}
	}}, attackPython([]string{"-v", file + ":/in/grant.txt:ro", "-v", vol + ":/out:rw", "--timeout", "30s"}, attackPyLib+`
import signal, time
signal.signal(signal.SIGIO, signal.SIG_IGN)  # a lease break signals the holder
open("/out/own.txt", "w").close()
fd = os.open("/in/grant.txt", os.O_RDONLY)
own = os.open("/out/own.txt", os.O_RDONLY)
attempt("setlease_grant", lambda: sc(72, fd, 1024, 0))  # F_SETLEASE F_RDLCK
attempt("setlease_own", lambda: sc(72, own, 1024, 0))
attempt("setlease_own_high_bits", lambda: sc(72, own, 0xffffffff00000000 | 1024, 0))
attempt("notify", lambda: sc(72, os.open("/out", os.O_RDONLY), 1026, 0x80000004))  # F_NOTIFY DN_CREATE|DN_MULTISHOT
print("READY", flush=True)
time.sleep(2)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the payload failed:\n%s", r)
	}
	if len(openErrs) != 2 {
		t.Fatalf("the host never tried its opens:\n%s", r)
	}
	for p, err := range openErrs {
		if errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("a host open of %s for writing met a lease the jail holds (%v): it would stall for lease-break-time", p, err)
		} else if err != nil {
			t.Fatalf("the host open of %s: %v", p, err)
		}
	}
	if t.Failed() {
		t.Logf("payload: %s", attackClip(r.stdout))
	}
}

func attackSyncHostFilesystems(t *testing.T, m mode) {
	dir, dev := attackLoopFS(t)
	writeFile(t, filepath.Join(dir, "grant.txt"), "granted\n", 0o644)
	// Write back what making the files dirtied, then dirty 4 MiB that only
	// a sync, a syncfs or writeback after 30 s would write.
	if f, err := os.Open(dir); err == nil {
		_ = unix.Syncfs(int(f.Fd()))
		f.Close()
	}
	dirty := make([]byte, 4<<20)
	for i := range dirty {
		dirty[i] = byte(i)
	}
	// Held open until the end: ext4 may start writing back at close.
	df, err := os.OpenFile(filepath.Join(dir, "dirty.bin"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	if _, err := df.Write(dirty); err != nil {
		t.Fatal(err)
	}
	before := attackLoopWriteSectors(t, dev)
	// A writable volume is a bind of the host's filesystem (a read-only
	// grant is an overlay, whose syncfs stops at the overlay).
	r := attackPy(t, m, runOpts{}, []string{"-v", dir + ":/out:rw"}, attackPyLib+`
fd = os.open("/out/grant.txt", os.O_RDONLY)
attempt("syncfs", lambda: sc(306, fd))
attempt("sync", lambda: sc(162))
`)
	after := attackLoopWriteSectors(t, dev)
	if r.exit != 0 {
		t.Fatalf("the payload failed:\n%s", r)
	}
	// CPython's os.sync() and a raw syncfs must not fail: the answer is
	// success.
	attackExpectErrno(t, r.stdout, "OK", "syncfs", "sync")
	if after != before {
		t.Errorf("the loop device of the granted filesystem wrote %d sectors while the jail ran: sync or syncfs wrote back the host's dirty data", after-before)
	}
	// The probe's own check: the data was still dirty, so that a sync
	// would have shown (else the case proves nothing).
	if err := unix.Syncfs(int(df.Fd())); err != nil {
		t.Fatal(err)
	}
	if after == before && attackLoopWriteSectors(t, dev) == after {
		t.Fatalf("the host's own syncfs wrote nothing: the dirty data was gone before the jail ran, the probe is broken")
	}
}

func attackCommNewline(t *testing.T, m mode) {
	// "x\n" and 11 characters: within the 15 bytes of a task's name.
	token := "RLJ" + randomToken("")[:8]
	before := attackDmesgCount(token)
	if before < 0 {
		t.Fatal("the host's kernel log cannot be read (dmesg): the case cannot decide")
	}
	r := attackPy(t, m, runOpts{}, nil, attackPyLib+`
name = b"x\n" + sys.argv[1].encode()
attempt("pr_set_name", lambda: sc(157, 15, name, 0, 0, 0))
def write_comm():
    with open("/proc/self/comm", "wb") as f:
        f.write(name)
attempt("proc_self_comm", write_comm)
ctypes.string_at(0)  # SIGSEGV: the kernel logs "NAME[pid]: segfault at 0 ..."
`, token)
	if r.exit != 128+int(unix.SIGSEGV) {
		t.Fatalf("the payload did not crash with SIGSEGV:\n%s", r)
	}
	// The kernel's line is written as the process dies, before rljail
	// reports; look for a moment in case the log is slow.
	after := before
	for i := 0; i < 5 && after == before; i++ {
		time.Sleep(100 * time.Millisecond)
		after = attackDmesgCount(token)
	}
	if after != before {
		t.Errorf("the host's kernel log has %d new lines with the payload's chosen process name %q (a newline in it forges a line)", after-before, token)
	}
}
