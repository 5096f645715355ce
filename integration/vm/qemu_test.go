package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Lines the VM's init prints for the harness (see init.sh).
var (
	verdictRE = regexp.MustCompile(`RLJAIL-VM-VERDICT: (PASS|FAIL\b.*)$`)
	stage2RE  = regexp.MustCompile(`RLJAIL-VM-STAGE2`)
	runRE     = regexp.MustCompile(`^RLJAIL-VM-RUN (\S+)$`)
	exitRE    = regexp.MustCompile(`^RLJAIL-VM-EXIT (\S+) (\d+)$`)
	panicRE   = regexp.MustCompile(`Kernel panic - not syncing`)
)

// console follows the serial console and remembers what decides the run.
type console struct {
	mu       sync.Mutex
	start    time.Time
	verdicts []string      // every verdict line seen (exactly one is valid)
	panic    string        // the kernel panic line, if any
	first    time.Duration // when the kernel printed its first line
	stage2   time.Duration // when init reached its tmpfs root
	firstRun time.Duration // when the first test binary started
	verdict  time.Duration // when the verdict was printed
	runs     []string      // "name: exit rc after 12s"
	runStart time.Duration
	tail     []string // the last lines, for error messages
	// failed holds each "--- FAIL:" line of the guest's go test -v output
	// and up to failLines of the indented lines that follow it (the
	// test's errors), so that the verdict's message repeats them at the
	// end of the log, where a CI summary that keeps only the tail sees
	// them.
	failed    []string
	inFailure int
}

const failLines = 12

const tailLines = 40

// line takes one console line (without its line ending).
func (c *console) line(l string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := time.Since(c.start)
	if c.first == 0 {
		c.first = at
	}
	c.tail = append(c.tail, l)
	if len(c.tail) > tailLines {
		c.tail = c.tail[1:]
	}
	trimmed := strings.TrimPrefix(l, "vm| ")
	switch {
	case strings.Contains(trimmed, "--- FAIL:"):
		c.failed = append(c.failed, strings.TrimSpace(trimmed))
		c.inFailure = failLines
	case c.inFailure > 0 && strings.HasPrefix(trimmed, "    "):
		c.failed = append(c.failed, "  "+strings.TrimSpace(trimmed))
		c.inFailure--
	default:
		c.inFailure = 0
	}
	switch {
	case verdictRE.MatchString(l):
		c.verdicts = append(c.verdicts, verdictRE.FindStringSubmatch(l)[1])
		c.verdict = at
	case panicRE.MatchString(l):
		if c.panic == "" {
			c.panic = l
		}
	case stage2RE.MatchString(l):
		c.stage2 = at
	case runRE.MatchString(l):
		if c.firstRun == 0 {
			c.firstRun = at
		}
		c.runStart = at
	case exitRE.MatchString(l):
		m := exitRE.FindStringSubmatch(l)
		c.runs = append(c.runs, fmt.Sprintf("%s: exit %s after %v", m[1], m[2], (at-c.runStart).Round(100*time.Millisecond)))
	}
}

// judge says whether the run passed: exactly one verdict line, PASS, and no
// kernel panic.
func (c *console) judge() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := "last console lines:\n\t" + strings.Join(c.tail, "\n\t")
	switch {
	case c.panic != "":
		return fmt.Errorf("kernel panic in the VM: %s\n%s", c.panic, tail)
	case len(c.verdicts) == 0:
		return fmt.Errorf("the VM printed no verdict line\n%s", tail)
	case len(c.verdicts) > 1:
		// A test printing a verdict of its own must not decide the run.
		return fmt.Errorf("the VM printed %d verdict lines (%q); want exactly one\n%s", len(c.verdicts), c.verdicts, tail)
	case c.verdicts[0] != "PASS":
		if len(c.failed) == 0 {
			return fmt.Errorf("VM verdict: %s (the failing tests' output is above)", c.verdicts[0])
		}
		return fmt.Errorf("VM verdict: %s; the failing tests (their whole output is above):\n\t%s", c.verdicts[0], strings.Join(c.failed, "\n\t"))
	}
	return nil
}

// seen reports whether the decisive lines are in: a verdict or a panic.
func (c *console) seen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.verdicts) > 0 || c.panic != ""
}

// qemuRun is one boot.
type qemuRun struct {
	qemu    string // qemu-system-x86_64
	accel   string // tcg
	kernel  string
	initrd  string
	memMiB  int
	cpus    int
	cmdline string
	logf    func(format string, args ...any)
	// logLine gets every console line (the test log, a file).
	logLine func(string)
}

// run boots the VM and follows its console until qemu exits or ctx ends, in
// which case it kills qemu (the process it started, by PID).
func (q qemuRun) run(ctx context.Context, c *console) error {
	args := []string{
		"-accel", q.accel, "-cpu", "max",
		"-m", fmt.Sprint(q.memMiB), "-smp", fmt.Sprint(q.cpus),
		// No default devices (NIC, VGA, floppy, CD), no user config:
		// only the serial console on stdout.
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio",
		"-no-reboot",
		"-kernel", q.kernel, "-initrd", q.initrd, "-append", q.cmdline,
	}
	cmd := exec.Command(q.qemu, args...)
	// Should this test process die, qemu goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	q.logf("boot: %s %s", q.qemu, shellQuote(args))
	c.start = time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", q.qemu, err)
	}
	pid := cmd.Process.Pid

	readDone := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				l = strings.TrimRight(l, "\r\n")
				l = strings.ReplaceAll(l, "\r", "")
				q.logLine(l)
				c.line(l)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
		}
	}()

	waitDone := make(chan error, 1)
	go func() {
		<-readDone
		waitDone <- cmd.Wait()
	}()

	// After the verdict (or a panic) the VM should power off at once;
	// give it a short grace period, then kill it.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var decided time.Time
	for {
		select {
		case err := <-waitDone:
			if err != nil && !c.seen() {
				return fmt.Errorf("qemu (pid %d) failed: %v\n%s", pid, err, strings.TrimSpace(stderr.String()))
			}
			if s := strings.TrimSpace(stderr.String()); s != "" {
				q.logf("qemu stderr: %s", s)
			}
			return nil
		case <-ctx.Done():
			q.logf("VM run out of time: killing qemu (pid %d)", pid)
			cmd.Process.Kill()
			<-waitDone
			return fmt.Errorf("the VM did not finish in time (%v): qemu (pid %d) killed", context.Cause(ctx), pid)
		case <-ticker.C:
			if !c.seen() {
				continue
			}
			if decided.IsZero() {
				decided = time.Now()
			} else if time.Since(decided) > 30*time.Second {
				q.logf("the VM did not power off 30 s after its verdict: killing qemu (pid %d)", pid)
				cmd.Process.Kill()
				<-waitDone
				return nil
			}
		}
	}
}

// shellQuote renders args for a log line a human can paste into a shell.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// TestConsoleJudge checks the verdict rules on canned consoles.
func TestConsoleJudge(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		ok    bool
	}{
		{"pass", []string{"RLJAIL-VM-STAGE2 6.1.0", "RLJAIL-VM-RUN a", "--- PASS: TestX", "RLJAIL-VM-EXIT a 0", "RLJAIL-VM-VERDICT: PASS"}, true},
		{"pass with a kernel message before it", []string{"[   12.1] random: crng init done", "RLJAIL-VM-VERDICT: PASS"}, true},
		{"fail", []string{"RLJAIL-VM-EXIT a 1", "RLJAIL-VM-VERDICT: FAIL a"}, false},
		{"no verdict", []string{"RLJAIL-VM-RUN a", "panic: test timed out"}, false},
		{"two verdicts", []string{"RLJAIL-VM-VERDICT: PASS", "RLJAIL-VM-VERDICT: PASS"}, false},
		{"panic after pass", []string{"RLJAIL-VM-VERDICT: PASS", "Kernel panic - not syncing: Attempted to kill init!"}, false},
		{"verdict-like text", []string{"RLJAIL-VM-VERDICT: PASSED", "RLJAIL-VM-VERDICT: PASS"}, true},
	}
	for _, tc := range cases {
		c := &console{start: time.Now()}
		for _, l := range tc.lines {
			c.line(l)
		}
		if err := c.judge(); (err == nil) != tc.ok {
			t.Errorf("%s: judge() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestConsoleFailureSummary: a failing verdict's message repeats the
// guest's "--- FAIL" lines and their errors, and only those.
func TestConsoleFailureSummary(t *testing.T) {
	c := &console{start: time.Now()}
	for _, l := range []string{
		"=== RUN   TestA", "--- PASS: TestA (0.1s)", "    a_test.go:3: fine",
		"=== RUN   TestB", "--- FAIL: TestB (0.2s)", "    b_test.go:9: the scope is still there",
		"=== RUN   TestC", "FAIL", "RLJAIL-VM-EXIT x 1", "RLJAIL-VM-VERDICT: FAIL x",
	} {
		c.line(l)
	}
	err := c.judge()
	if err == nil {
		t.Fatal("judge() passed a failing verdict")
	}
	for _, want := range []string{"--- FAIL: TestB", "b_test.go:9: the scope is still there"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("judge() = %q, want it to hold %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "fine") || strings.Contains(err.Error(), "TestC") {
		t.Errorf("judge() = %q holds lines of tests that did not fail", err)
	}
}

// startVMTest bounds a VM test by its budget (runBudget: the context ends
// then, or with the test), starts its clock and finds the host's tools.
func startVMTest(t *testing.T) (context.Context, time.Duration, *vmClock, hostTools) {
	t.Helper()
	budget, err := runBudget(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), budget,
		fmt.Errorf("RLJAIL_VM_TIMEOUT/go test -timeout bound of %v", budget.Round(time.Second)))
	t.Cleanup(cancel)
	clock := newVMClock()
	h, err := findHostTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, budget, clock, h
}

// vmClock collects a VM test's phase timings from its start.
type vmClock struct {
	began   time.Time
	timings []string
}

func newVMClock() *vmClock { return &vmClock{began: time.Now()} }

// phase records how long the phase name took since since.
func (c *vmClock) phase(name string, since time.Time) {
	c.timings = append(c.timings, fmt.Sprintf("%s %v", name, time.Since(since).Round(10*time.Millisecond)))
}

// bootAndJudge boots q (the accelerator $RLJAIL_VM_ACCEL or tcg, every console
// line to the test log and to $RLJAIL_VM_LOG when set), follows the console
// until the VM ends, logs the timings (stage2 names the console's second
// landmark) and the guest's runs, and fails t unless the guest's verdict is a
// pass. Both VM tests end this way.
func bootAndJudge(ctx context.Context, t *testing.T, q qemuRun, stage2 string, clock *vmClock) {
	t.Helper()
	q.logf = t.Logf
	q.logLine = func(l string) { t.Log("vm| " + l) }
	if p := os.Getenv("RLJAIL_VM_LOG"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		q.logLine = func(l string) {
			t.Log("vm| " + l)
			fmt.Fprintln(f, l)
		}
	}
	q.accel = os.Getenv("RLJAIL_VM_ACCEL")
	if q.accel == "" {
		q.accel = "tcg"
	}
	c := &console{}
	start := time.Now()
	runErr := q.run(ctx, c)
	clock.phase("VM", start)
	c.mu.Lock()
	clock.timings = append(clock.timings, fmt.Sprintf("(first kernel line at %s, %s at %s, first test at %s, verdict at %s)",
		at(c.first), stage2, at(c.stage2), at(c.firstRun), at(c.verdict)))
	runs := c.runs
	c.mu.Unlock()
	clock.timings = append(clock.timings, fmt.Sprintf("total %v", time.Since(clock.began).Round(100*time.Millisecond)))
	t.Logf("timings: %s", strings.Join(clock.timings, ", "))
	for _, r := range runs {
		t.Logf("in the VM: %s", r)
	}
	if runErr != nil {
		t.Fatalf("%v\n%s", runErr, c.judgeOrTail())
	}
	if err := c.judge(); err != nil {
		t.Fatal(err)
	}
}
