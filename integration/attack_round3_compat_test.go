package integration

// Attack round 3, what issue 23 opened for compatibility: the jail's own
// pseudo-terminals (a devpts instance of the jail's, TIOCSTI still
// denied) and the no-op identity calls (setreuid(-1, -1) and the like,
// allowed by the python profile with their arguments checked). Each case
// decides from the host: the bytes read from a host pty's master and
// left in its input queue, the jail's /dev/pts seen through
// /proc/PID/root, and the payload's ids in the host's /proc/PID/status.

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases,
		attackCase{name: "pty_tiocsti_host_terminal", group: groupProcesses,
			mechanism: "rljail's stdin is a host terminal; the payload opens a pty of its own and pushes input with TIOCSTI into it, into its stdin, stdout and stderr, /dev/tty and the host's /dev/pts/N, writes to what it can open, and looks for the host's terminals in /dev/pts",
			layer:     "seccomp denies TIOCSTI and TIOCLINUX whatever the descriptor; the jail's /dev/pts is a devpts instance of its own (newinstance) that holds none of the host's terminals; stdin reaches the payload through a pipe",
			run:       attackPtyTIOCSTI},
		attackCase{name: "pty_exhaustion", group: groupDoS,
			mechanism: "open pseudo-terminals until the kernel refuses, and hold them: all non-initial devpts instances share kernel.pty.max less kernel.pty.reserve (3072), so one jail could leave other containers none",
			layer:     "the jail's devpts instance is mounted with max=64",
			run:       attackPtyExhaustion},
		attackCase{name: "identity_calls_change_ids", group: groupProcesses,
			mechanism: "after the no-op identity calls that now succeed (setuid(getuid()), setreuid(-1, -1), setresgid(-1, -1, -1)...), try every real change: setuid(0), setresuid(0, 0, 0), seteuid(0), setreuid(-1, 0), setgid(0), setresgid(-1, 0, -1), setgroups([0]), setgroups([]), and the host's nobody",
			layer:     "the python profile allows the set*id calls only with -1 or the jail's id 1000 in each place (any other value is EPERM before the kernel sees it), setgroups not at all; the payload has no capabilities, so the kernel would refuse a change too",
			run:       attackIdentityCalls},
	)
}

// ptyAttackCode runs in the jail: argv[1] the marker to inject, argv[2]
// the number of the host's pty that is rljail's stdin. It prints READY
// with a pty of its own open, waits for a line on stdin, then makes its
// attempts and prints what each did.
const ptyAttackCode = `
import errno, fcntl, json, os, sys, termios
marker, hostn = sys.argv[1], sys.argv[2]
listing = sorted(os.listdir("/dev/pts"))
m, s = os.openpty()
print("LISTING", json.dumps(listing), os.ttyname(s), flush=True)
print("READY", flush=True)
sys.stdin.readline()
res = {}
def sti(name, fd):
    n = 0
    for c in marker.encode():
        try:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
            n += 1
        except OSError as e:
            res[name] = errno.errorcode.get(e.errno, str(e.errno))
            return
    res[name] = "injected %d" % n
for name, fd in (("own slave", s), ("own master", m), ("stdin", 0), ("stdout", 1), ("stderr", 2)):
    sti(name, fd)
for path in ("/dev/tty", "/dev/console", "/dev/pts/" + hostn, "/dev/pts/" + str(int(hostn) + 1), "/proc/self/fd/0"):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        res["open " + path] = errno.errorcode.get(e.errno, str(e.errno))
        continue
    sti(path, fd)
    try:
        os.write(fd, ("WROTE-" + marker + "\n").encode())
        res["write " + path] = "wrote"
    except OSError as e:
        res["write " + path] = errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)
try:
    fcntl.ioctl(s, 0x541C, b"\x02")  # TIOCLINUX
    res["TIOCLINUX"] = "allowed"
except OSError as e:
    res["TIOCLINUX"] = errno.errorcode.get(e.errno, str(e.errno))
print("RESULTS", json.dumps(res, sort_keys=True), flush=True)
print("END", flush=True)
`

func attackPtyTIOCSTI(t *testing.T, m mode) {
	master, slave, err := openPty()
	if err != nil {
		t.Fatalf("no host pty for the test: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if m == asRootless {
		_ = os.Chown(slave.Name(), testUID, -1)
	}
	hostN := strings.TrimPrefix(slave.Name(), "/dev/pts/")
	// Everything the host's terminal shows: what is written to the slave,
	// and the echo of what enters its input queue (a fresh pty echoes).
	var screen syncBuffer
	readerDone := readTerminal(master, &screen, nil)
	marker := randomToken("STI")
	p := startJail(t, m, runOpts{stdinFile: slave}, attackPython(nil, ptyAttackCode, marker, marker, hostN)...)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			p.wait()
		}
	})
	pl, ok := findPayload(marker, p.cmd.Process.Pid, 15*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for ok && !strings.Contains(p.stdout.String(), "READY") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !ok || !strings.Contains(p.stdout.String(), "READY") {
		t.Fatalf("the payload did not get ready (seen: %v): stdout %q stderr %q", ok, p.stdout.String(), p.stderr.String())
	}
	// The jail's /dev/pts, from the host: a devpts of its own (another
	// device than the host's /dev/pts) holding ptmx and the payload's one
	// pty, 0, and nothing of the host's.
	jailPts := fmt.Sprintf("/proc/%d/root/dev/pts", pl.pid)
	var hostSt, jailSt unix.Stat_t
	if err := unix.Stat("/dev/pts", &hostSt); err != nil {
		t.Fatalf("stat the host's /dev/pts: %v", err)
	}
	if err := unix.Stat(jailPts, &jailSt); err != nil {
		t.Fatalf("stat the jail's /dev/pts from the host: %v", err)
	}
	if jailSt.Dev == hostSt.Dev {
		t.Errorf("the jail's /dev/pts is the host's devpts (device %d)", hostSt.Dev)
	}
	entries, err := os.ReadDir(jailPts)
	if err != nil {
		t.Fatalf("list the jail's /dev/pts from the host: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "0 ptmx" {
		t.Errorf("the jail's /dev/pts holds %v, want its own pty 0 and ptmx only", names)
	}
	if ptmx, err := os.Readlink(fmt.Sprintf("/proc/%d/root/dev/ptmx", pl.pid)); err != nil || ptmx != "pts/ptmx" {
		t.Errorf("the jail's /dev/ptmx leads to %q (%v), want pts/ptmx", ptmx, err)
	}
	if _, err := master.Write([]byte("GO\r")); err != nil {
		t.Fatalf("type on the host terminal: %v", err)
	}
	p.wait()
	time.Sleep(100 * time.Millisecond)
	// What is left in the host terminal's input queue: rljail's stdin pump
	// read what the test typed; anything else was pushed in.
	if err := unix.SetNonblock(int(slave.Fd()), true); err == nil {
		b := make([]byte, 4096)
		n, _ := unix.Read(int(slave.Fd()), b)
		if n > 0 && bytes.Contains(b[:n], []byte(marker[:6])) {
			t.Errorf("INJECTED: the host terminal's input queue holds %q", b[:n])
		}
	}
	slave.Close()
	select {
	case <-readerDone:
	case <-time.After(2 * time.Second):
	}
	out := p.stdout.String()
	t.Logf("%s\nhost terminal: %q", p, screen.String())
	if !strings.Contains(out, "END") {
		t.Fatalf("the payload did not finish: %s", p)
	}
	if s := screen.String(); strings.Contains(s, marker) || strings.Contains(s, "WROTE-") {
		t.Errorf("INJECTED: the host terminal shows the payload's bytes: %q", s)
	}
	// The payload's own account, for the log; the verdict above is the
	// host's. Its own pty must work, and TIOCSTI fail on it.
	res, _ := lineValue(out, "RESULTS ")
	if !strings.Contains(res, `"own slave": "EPERM"`) || !strings.Contains(res, `"TIOCLINUX": "EPERM"`) {
		t.Errorf("TIOCSTI or TIOCLINUX on the jail's own pty was not denied by seccomp: %s", res)
	}
}

// identityCode runs in the jail: the no-op identity calls, READY, a line
// from stdin, every real change, then DONE and another line from stdin.
const identityCode = `
import errno, json, os, sys
def attempt(calls):
    res = {}
    for c in calls:
        try:
            eval("os." + c)
            res[c] = "ok"
        except OSError as e:
            res[c] = errno.errorcode.get(e.errno, str(e.errno))
    return res
noops = attempt(["setuid(os.getuid())", "setgid(os.getgid())", "setreuid(-1, -1)", "setregid(-1, -1)",
                 "setresuid(-1, -1, -1)", "setresgid(-1, -1, -1)", "setresuid(*os.getresuid())",
                 "setresgid(*os.getresgid())", "seteuid(os.geteuid())", "setegid(os.getegid())",
                 "setreuid(os.getuid(), os.geteuid())", "setregid(-1, os.getegid())"])
print("NOOPS", json.dumps(noops, sort_keys=True), flush=True)
print("READY", flush=True)
sys.stdin.readline()
changes = attempt(["setuid(0)", "setuid(65534)", "setresuid(0, 0, 0)", "setresuid(-1, -1, 0)", "seteuid(0)",
                   "setreuid(-1, 0)", "setreuid(0, -1)", "setuid(1001)", "setgid(0)", "setresgid(-1, 0, -1)",
                   "setregid(65534, -1)", "setegid(0)", "setgroups([0])", "setgroups([])", "setgroups([1000])",
                   "setgroups(os.getgroups())"])
print("CHANGES", json.dumps(changes, sort_keys=True), flush=True)
print("DONE", flush=True)
sys.stdin.readline()
`

// idStatusFields are the lines of /proc/PID/status that a change of
// identity would alter.
var idStatusFields = []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"}

func attackIdentityCalls(t *testing.T, m mode) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var once sync.Once
	closeW := func() { once.Do(func() { w.Close() }) }
	defer closeW()
	p, pl := startWatched(t, m, runOpts{stdinFile: r}, "READY", identityCode)
	r.Close()
	uid, gid := checkJailHostIDs(t, m, pl)
	before := map[string]string{}
	for _, f := range idStatusFields {
		before[f] = attackProcStatus(pl.pid, f)
	}
	if before["CapEff"] != "0000000000000000" || before["NoNewPrivs"] != "1" {
		t.Errorf("the payload has capabilities or may gain them: %v", before)
	}
	if m == asRoot && before["Groups"] != "" {
		t.Errorf("a root-run jail's payload has supplementary groups %q", before["Groups"])
	}
	if _, err := w.Write([]byte("go\n")); err != nil {
		t.Fatalf("write the payload's stdin: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.stdout.String(), "DONE") && time.Now().Before(deadline) && p.cmd.ProcessState == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.stdout.String(), "DONE") {
		t.Fatalf("the payload did not make its attempts: %s", p)
	}
	if now, ok := readProc(pl.pid); !ok || now.start != pl.start {
		t.Fatalf("the payload is gone before the host could look at it again: %s", p)
	}
	for _, f := range idStatusFields {
		if now := attackProcStatus(pl.pid, f); now != before[f] {
			t.Errorf("CHANGED: the payload's %s is %q after its attempts, %q before", f, now, before[f])
		}
	}
	uids, gids, err := statusIDs(pl.pid)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uids {
		if uids[i] != strconv.Itoa(uid) || gids[i] != strconv.Itoa(gid) {
			t.Errorf("CHANGED: the payload's uids %v and gids %v, want all %d and %d", uids, gids, uid, gid)
			break
		}
	}
	closeW()
	p.wait()
	out := p.stdout.String()
	t.Logf("%s", out)
	// What the payload says of itself, beyond the host's verdict: the
	// no-op forms succeed (what a plain machine does for an unprivileged
	// user), and every change failed.
	noops, _ := lineValue(out, "NOOPS ")
	if strings.Contains(noops, "EPERM") || strings.Contains(noops, "EINVAL") {
		t.Errorf("a no-op identity call failed in the jail: %s", noops)
	}
	changes, _ := lineValue(out, "CHANGES ")
	if strings.Contains(changes, `"ok"`) {
		t.Errorf("an identity change was reported successful: %s", changes)
	}
	if p.exit != 0 {
		t.Errorf("the payload exited %d: %s", p.exit, p)
	}
}

// ptyNr is the host's count of allocated ptys, every devpts instance's.
func ptyNr(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pty/nr")
	if err != nil {
		t.Fatalf("read kernel.pty.nr: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("kernel.pty.nr %q: %v", b, err)
	}
	return n
}

func attackPtyExhaustion(t *testing.T, m mode) {
	// Other cases may open a few host ptys meanwhile: the slack allows
	// for them, far below what an unbounded jail takes (thousands).
	const jailMax, slack = 64, 16
	before := ptyNr(t)
	const code = `
import os, sys
fds = []
try:
    while len(fds) < 4000:
        fds.append(os.openpty())
except OSError as e:
    print("STOPPED", len(fds), e.errno, flush=True)
print("READY", flush=True)
sys.stdin.readline()
`
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p, _ := startWatched(t, m, runOpts{stdinFile: r}, "READY", code, "--nofile", "16384")
	r.Close()
	held := ptyNr(t) - before
	w.Close()
	p.wait()
	t.Logf("the payload: %s; kernel.pty.nr rose by %d while it held them", strings.TrimSpace(p.stdout.String()), held)
	if held > jailMax+slack {
		t.Errorf("EXHAUSTED: the jail held %d of the host's ptys (kernel.pty.nr), want at most %d", held, jailMax)
	}
	if held < jailMax/2 {
		t.Errorf("the jail held only %d ptys: its own devpts does not serve them (%s)", held, p.stdout.String())
	}
	deadline := time.Now().Add(5 * time.Second)
	for ptyNr(t) > before+slack && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if after := ptyNr(t); after > before+slack {
		t.Errorf("kernel.pty.nr is %d after the run, %d before: the jail's ptys outlived it", after, before)
	}
}
