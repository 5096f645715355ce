package integration

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStdinWaitsInPoller gives rljail a stdin pipe that the test holds
// open while the payload sleeps, and looks at rljail's threads from
// outside: none may sit in read on descriptor 0 (the supervisor reads a
// second, non-blocking open of the pipe in Go's poller, so that no thread
// is held in a system call for the run). What the test then writes must
// still reach the payload, and its close must end the payload's input.
//
// The pipe is a FIFO that the jail's user may open, and, rootless, also a
// pipe the test made: root's, mode 0600, which rljail running as another
// user may not open again (it then waits for it through an epoll
// descriptor of its own, issue 33), as a harness running as root hands
// rljail its pipe.
func TestStdinWaitsInPoller(t *testing.T) {
	rootsPipe := func(t *testing.T) (r, w *os.File) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		// os.NewFile leaves a blocking descriptor blocking.
		return os.NewFile(uintptr(p[0]), "stdin"), os.NewFile(uintptr(p[1]), "stdin-w")
	}
	cases := []struct {
		name string
		m    mode
		pipe func(t *testing.T) (r, w *os.File)
	}{
		{string(asRoot), asRoot, openFIFO},
		{string(asRootless), asRootless, openFIFO},
		{"rootless, a pipe of root's", asRootless, rootsPipe},
	}
	for _, tc := range cases {
		m := tc.m
		t.Run(tc.name, func(t *testing.T) {
			r, w := tc.pipe(t)
			defer w.Close()
			p := startJail(t, m, runOpts{stdinFile: r},
				"--", "python3", "-c", "import sys, time; time.sleep(1.5); print('got', sys.stdin.read())")
			r.Close()
			time.Sleep(700 * time.Millisecond)
			var blocked []string
			tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/task/*/syscall")
			for _, f := range tasks {
				b, err := os.ReadFile(f)
				if err != nil {
					continue
				}
				// read(2) is call 0; its first argument the descriptor.
				if fields := strings.Fields(string(b)); len(fields) > 1 && fields[0] == "0" && fields[1] == "0x0" {
					blocked = append(blocked, filepath.Base(filepath.Dir(f)))
				}
			}
			if len(tasks) == 0 {
				t.Errorf("no threads of rljail (pid %d) found in /proc", p.cmd.Process.Pid)
			}
			if len(blocked) > 0 {
				t.Errorf("rljail's threads %v sit in read on its stdin", blocked)
			}
			if _, err := w.WriteString("hello"); err != nil {
				p.wait()
				t.Fatalf("write rljail's stdin: %v (rljail: exit %d, stderr %q)", err, p.exit, p.stderr.String())
			}
			w.Close()
			p.wait()
			if p.exit != 0 || p.stdout.String() != "got hello\n" {
				t.Errorf("exit %d, stdout %q, want 0 and \"got hello\\n\" (stderr %q)", p.exit, p.stdout.String(), p.stderr.String())
			}
		})
	}
}

// openFIFO makes a FIFO that any user may open and opens both its ends,
// the read end blocking, as a pipe's read end is.
func openFIFO(t *testing.T) (r, w *os.File) {
	fifo := filepath.Join(newOpenDir(t), "stdin")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	// Both ends without blocking, then the read end blocking again.
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err = os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var nbErr error
	if err := rc.Control(func(fd uintptr) { nbErr = unix.SetNonblock(int(fd), false) }); err != nil || nbErr != nil {
		t.Fatalf("make the read end blocking: %v %v", err, nbErr)
	}
	return r, w
}

// TestTimerSlack starts rljail with an unusual timer slack and looks from
// outside: the supervisor's threads run with a slack of 1 ms (its Go
// runtime's sysmon then wakes far less often beside the jail), and the
// payload gets the caller's slack, as it would outside rljail.
func TestTimerSlack(t *testing.T) {
	const callerSlack = 123457
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			// rljail is forked from this thread, and inherits its slack.
			p, w := startFromThread(t, m, func() func() {
				own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Prctl(unix.PR_SET_TIMERSLACK, callerSlack, 0, 0, 0); err != nil {
					t.Fatal(err)
				}
				return func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(own), 0, 0, 0) }
			}, "import sys; print(open('/proc/self/timerslack_ns').read().strip(), flush=True); sys.stdin.read()")
			tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/task/*")
			var wrong []string
			for _, task := range tasks {
				tid := filepath.Base(task)
				b, err := os.ReadFile("/proc/" + tid + "/timerslack_ns")
				if err != nil {
					continue // the thread ended
				}
				if s := strings.TrimSpace(string(b)); s != "1000000" {
					wrong = append(wrong, tid+": "+s)
				}
			}
			w.Close()
			p.wait()
			if len(tasks) == 0 {
				t.Errorf("no threads of rljail (pid %d) found in /proc", p.cmd.Process.Pid)
			}
			if len(wrong) > 0 {
				t.Errorf("rljail's threads have a timer slack other than 1000000 ns: %v", wrong)
			}
			if got := strings.TrimSpace(p.stdout.String()); got != strconv.Itoa(callerSlack) || p.exit != 0 {
				t.Errorf("payload's timer slack %q, exit %d; want %d and 0 (stderr %q)", got, p.exit, callerSlack, p.stderr.String())
			}
		})
	}
}

// TestSupervisorOneP: for a run, the supervisor's Go runtime has one P
// (GOMAXPROCS=1, which the binary's entry gives it) unless the caller set
// GOMAXPROCS, as the runtime's own scheduler trace on rljail's stderr says;
// and the variable the entry added is not in the supervisor's environment
// afterwards: `-e GOMAXPROCS` passes the caller's value, or nothing, and
// the variables beside it arrive intact.
func TestSupervisorOneP(t *testing.T) {
	t.Parallel()
	code := `import os, time; time.sleep(0.05); print(os.environ.get("GOMAXPROCS"), os.environ.get("RLJAIL_TEST_NEXT"))`
	tests := []struct {
		name      string
		env       []string
		wantProcs string // in the scheduler trace
		wantOut   string // what the payload sees
	}{
		{"default", nil, "gomaxprocs=1 ", "None next-value\n"},
		{"the caller's", []string{"GOMAXPROCS=2"}, "gomaxprocs=2 ", "2 next-value\n"},
	}
	for _, tt := range tests {
		for _, m := range bothModes {
			t.Run(tt.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				env := append([]string{"GODEBUG=schedtrace=1", "RLJAIL_TEST_NEXT=next-value"}, tt.env...)
				stdout, stderr, exit, _ := runJail(t, m, runOpts{env: env},
					"-e", "GOMAXPROCS", "-e", "RLJAIL_TEST_NEXT", "--", "python3", "-c", code)
				if exit != 0 {
					t.Fatalf("exit %d, stderr %q", exit, stderr)
				}
				if stdout != tt.wantOut {
					t.Errorf("the payload sees GOMAXPROCS and its neighbour as %q, want %q", stdout, tt.wantOut)
				}
				traces := strings.Count(stderr, "SCHED ")
				if traces == 0 || strings.Count(stderr, tt.wantProcs) != traces {
					t.Errorf("want every scheduler trace line of the supervisor to say %q; stderr:\n%s", tt.wantProcs, stderr)
				}
			})
		}
	}
}

// TestCallerCPUs starts rljail on a chosen CPU set (inherited from the
// thread that forks it) and reads from outside, in /proc, the CPU sets of
// the payload and of every thread of the supervisor while the payload
// runs: each must be the caller's. (The binary's entry pins the
// supervisor to one CPU, and the jail's first step off it, for the start
// only: the payload gets the caller's set back at once, the supervisor
// once it has sent the limits.) A single CPU is left as it is.
func TestCallerCPUs(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for i := 0; i < len(all)*64; i++ {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		t.Fatalf("this host lets the test use CPUs %v; it needs two", cpus)
	}
	sets := map[string][]int{"all": cpus, "the last": cpus[len(cpus)-1:], "the first": cpus[:1]}
	for name, set := range sets {
		for _, m := range bothModes {
			t.Run(name+"/"+string(m), func(t *testing.T) {
				var want unix.CPUSet
				for _, c := range set {
					want.Set(c)
				}
				wantList := cpuListOf(set)
				p, w := startFromThread(t, m, func() func() {
					if err := unix.SchedSetaffinity(0, &want); err != nil {
						t.Fatal(err)
					}
					return func() { _ = unix.SchedSetaffinity(0, &all) }
				}, "import os, sys; print(sorted(os.sched_getaffinity(0)), os.getpid(), flush=True); sys.stdin.read()")
				time.Sleep(200 * time.Millisecond) // the supervisor's unpinning is not awaited
				var wrong []string
				check := func(what string, pid int) {
					if got := cpusAllowed(pid); got != "" && got != wantList {
						wrong = append(wrong, what+" "+strconv.Itoa(pid)+": "+got)
					}
				}
				sup := p.cmd.Process.Pid
				tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(sup) + "/task/*")
				for _, task := range tasks {
					if tid, err := strconv.Atoi(filepath.Base(task)); err == nil {
						check("supervisor thread", tid)
					}
				}
				payloads, guardCPUs := 0, ""
				for _, d := range descendants(sup) {
					if strings.HasPrefix(d.cmdline, "python3") {
						payloads++
						check("payload", d.pid)
					}
					if strings.HasPrefix(d.cmdline, "rljail-guard") {
						guardCPUs = cpusAllowed(d.pid)
					}
				}
				// The guard, the jail's first step, stays off the
				// supervisor's CPU: that the start was placed at all
				// (no other rljail of this user starts meanwhile: this
				// test runs alone).
				if len(set) > 1 && (guardCPUs == "" || guardCPUs == wantList) {
					t.Errorf("the jail's first step (the guard) runs on CPUs %q, want a part of %s: the start was not placed", guardCPUs, wantList)
				}
				w.Close()
				p.wait()
				if len(tasks) == 0 || payloads != 1 {
					t.Errorf("found %d threads of rljail (pid %d) and %d payloads in /proc, want some and 1", len(tasks), sup, payloads)
				}
				if len(wrong) > 0 {
					t.Errorf("want every supervisor thread and the payload on CPUs %s, the caller's; found %v", wantList, wrong)
				}
				if got := strings.Fields(p.stdout.String()); p.exit != 0 || len(got) == 0 {
					t.Errorf("exit %d, stdout %q, stderr %q", p.exit, p.stdout.String(), p.stderr.String())
				}
			})
		}
	}
}

// TestPlacedWhileARunLasts starts a run that lasts and, 0.3 s into it, a
// second one of the same user: the second start must be placed too (its
// first step, the guard, off its supervisor's CPU), as a persistent REPL
// must not keep every later start from being placed (the first run lets
// go of the start lock 100 ms into its run).
func TestPlacedWhileARunLasts(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Fatalf("this host lets the test use %d CPU; it needs two", all.Count())
	}
	const code = "import sys; print('up', flush=True); sys.stdin.read()"
	none := func() func() { return func() {} }
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			first, w1 := startFromThread(t, m, none, code)
			time.Sleep(300 * time.Millisecond)
			second, w2 := startFromThread(t, m, none, code)
			guard := ""
			for _, d := range descendants(second.cmd.Process.Pid) {
				if strings.HasPrefix(d.cmdline, "rljail-guard") {
					guard = cpusAllowed(d.pid)
				}
			}
			w2.Close()
			second.wait()
			w1.Close()
			first.wait()
			if first.exit != 0 || second.exit != 0 {
				t.Fatalf("exits %d and %d; stderr %q, %q", first.exit, second.exit, first.stderr.String(), second.stderr.String())
			}
			var list []int
			for i := 0; i < len(all)*64; i++ {
				if all.IsSet(i) {
					list = append(list, i)
				}
			}
			if guard == "" || guard == cpuListOf(list) {
				t.Errorf("the second run's guard runs on CPUs %q, want a part of %s: a start during a lasting run was not placed", guard, cpuListOf(list))
			}
		})
	}
}

// startFromThread starts rljail as mode m with a python3 payload, code,
// forked from this goroutine's thread after set has changed what a child
// inherits from it (set returns how to undo that), and waits for the
// payload's first line. The payload's stdin is a pipe whose write end is
// returned: it runs until that is closed.
func startFromThread(t *testing.T, m mode, set func() (undo func()), code string) (*jailProc, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p := func() *jailProc {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer set()()
		return startJail(t, m, runOpts{stdinFile: r}, "--", "python3", "-c", code)
	}()
	r.Close()
	if !p.stdout.waitFor("\n", 10*time.Second) {
		w.Close()
		p.wait()
		t.Fatalf("the payload printed nothing: exit %d, stderr %q", p.exit, p.stderr.String())
	}
	return p, w
}

// cpusAllowed is the Cpus_allowed_list of pid, or "" when it has ended.
func cpusAllowed(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cpuListOf words sorted CPU numbers as /proc's Cpus_allowed_list does
// ("0", "0-1", "0,2").
func cpuListOf(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
