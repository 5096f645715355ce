package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Since Linux 5.14 the kernel counts RLIMIT_SIGPENDING, like RLIMIT_NPROC,
// per user namespace (kernel/ucount.c, UCOUNT_RLIMIT_SIGPENDING): in the
// jail's own namespace only the jail's queued signals count against the
// jail's limit of 256, and each of them is also charged, once, to the host
// user who owns the namespace (root as root), whose own limit bounds the
// total. So the jail's limit is the jail's alone in both directions: a host
// user with more signals queued than 256 does not starve the jail, and the
// jail takes at most 256 of the host user's. Decided from the host: the
// kernel's own counts in /proc/PID/status (SigQ: queued for that process's
// user in its user namespace, and its limit).

// sigqCode queues real-time signals to itself with SIGRTMIN blocked
// (pthread_kill: tgkill, which the kernel refuses with EAGAIN at the limit
// rather than dropping silently as it does kill's), says how many, and
// waits for stdin to close.
const sigqCode = `
import signal, sys, threading
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
n = 0
for _ in range(int(sys.argv[1])):
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        n += 1
    except OSError:
        pass
print("queued", n, flush=True)
sys.stdin.read()
`

// sigQ reads the SigQ line of /proc/pid/status: queued, limit.
func sigQ(pid int) (queued, limit int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigQ:"); ok {
			q, lim, _ := strings.Cut(strings.TrimSpace(v), "/")
			queued, err1 := strconv.Atoi(q)
			limit, err2 := strconv.Atoi(lim)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("SigQ %q", v)
			}
			return queued, limit, nil
		}
	}
	return 0, 0, fmt.Errorf("/proc/%d/status has no SigQ", pid)
}

// jailProcWith finds the process of the jail below rljail's pid whose
// command line holds marker, in a PID namespace other than the test's.
func jailProcWith(rljail int, marker string, within time.Duration) (int, error) {
	own, _ := os.Readlink("/proc/self/ns/pid")
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/pid"))
			if err != nil || ns == own {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.Contains(string(cmdline), marker) && strings.Contains(string(cmdline), "python3") {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process of rljail %d's jail with %q in its command line", rljail, marker)
}

func TestSigpendingPerUserNamespace(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { testSigpending(t, m) })
	}
}

func testSigpending(t *testing.T, m mode) {
	// The host user queues 300 signals first: more than the jail's 256.
	host := exec.Command("/usr/bin/python3", "-c", sigqCode, "300")
	runAsMode(host, m)
	hostIn, err := host.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	hostOut, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatalf("the host's own python3: %v", err)
	}
	defer func() { hostIn.Close(); _ = host.Wait() }()
	if line, err := bufio.NewReader(hostOut).ReadString('\n'); err != nil || line != "queued 300\n" {
		t.Fatalf("the host process queued: %q, %v; want 300", line, err)
	}
	before, hostLimit, err := sigQ(host.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if before < 300 {
		t.Fatalf("the host user's SigQ is %d/%d with 300 queued by the host process", before, hostLimit)
	}

	// The jail queues as many as it can, and holds them while the host
	// reads the counts.
	mark := fmt.Sprintf("sigq-mark-%d-%s", os.Getpid(), m)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := startJail(t, m, runOpts{stdinFile: stdinR}, append([]string{"--no-workspace", "--timeout", "30s"}, python(sigqCode, "1000", mark)...)...)
	stdinR.Close()
	defer stdinW.Close()
	if !p.stdout.waitFor("queued ", 20*time.Second) {
		t.Fatalf("%s: no 'queued' line: stdout %q stderr %q", p, p.stdout.String(), p.stderr.String())
	}
	pid, err := jailProcWith(p.cmd.Process.Pid, mark, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	jailQ, jailLimit, err := sigQ(pid)
	if err != nil {
		t.Fatal(err)
	}
	during, _, err := sigQ(host.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stdinW.Close()
	p.wait()
	after, _, _ := sigQ(host.Process.Pid)
	t.Logf("%s: host user SigQ %d/%d before, %d during, %d after; the jail's payload SigQ %d/%d; its own words %q",
		m, before, hostLimit, during, after, jailQ, jailLimit, strings.TrimSpace(p.stdout.String()))

	// The jail's count is its own: 256 queued although the host user had
	// 300 already (counted per user, before 5.14, it would be 300 and the
	// jail could queue none).
	if jailLimit != 256 || jailQ != 256 {
		t.Errorf("the jail's payload SigQ is %d/%d, want 256/256: its own queue, full at its own limit", jailQ, jailLimit)
	}
	// And charged to the host user, at most 256 of it.
	if m == asRootless && (during-before < 256 || during-before > 256+32) {
		t.Errorf("the host user's SigQ went from %d to %d while the jail held 256: want the jail's 256 charged to it, no more", before, during)
	}
	if p.exit != 0 {
		t.Errorf("%s: exit %d, stderr %q", p, p.exit, p.stderr.String())
	}
}
