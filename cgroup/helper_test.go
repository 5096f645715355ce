package cgroup

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the processes the tests put into cgroups: with
// RLJAIL_CGTEST_HELPER set, TestMain runs a helper instead of the tests.
//
//	sleep SECONDS     sleep
//	spin CPU_MS       burn CPU until the process has used CPU_MS of it
//	hog BYTES         read a line, allocate and touch BYTES of memory, sleep
//	write PATH        read a line, write 4 MiB to the file PATH, exit
//	create            Runs times: run create() with the options in
//	                  RLJAIL_CGTEST_OPTS, print a helperReport, start a
//	                  sleeping child in the jail's cgroup, print a second
//	                  report, wait for a line on stdin, Destroy, print a
//	                  third report
const helperEnv = "RLJAIL_CGTEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func runHelper(mode string, args []string) int {
	arg := func() int64 {
		if len(args) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(args[0], 10, 64)
		return n
	}
	switch mode {
	case "sleep":
		time.Sleep(time.Duration(arg()) * time.Second)
	case "spin":
		want := time.Duration(arg()) * time.Millisecond
		for {
			var ts unix.Timespec
			if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil || time.Duration(ts.Nano()) >= want {
				return 0
			}
			for i := 0; i < 1_000_000; i++ {
				spinSink += i
			}
		}
	case "hog":
		// Wait until the test has put this process into its cgroup.
		bufio.NewReader(os.Stdin).ReadString('\n')
		b := make([]byte, arg())
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated")
		time.Sleep(30 * time.Second)
		spinSink = int(b[len(b)-1])
	case "write":
		// Wait until the test has put this process into its cgroup, then
		// leave a file's pages in the page cache.
		// The pages are written back before the process ends: dirty pages
		// still under writeback when Destroy runs are not evicted yet
		// (force_empty retries for about half a second), which made the
		// test fail about one run in twenty on a busy disk. What a jail
		// leaves dirty is written back and evicted by the kernel later.
		bufio.NewReader(os.Stdin).ReadString('\n')
		f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err == nil {
			if _, err = f.Write(make([]byte, 4<<20)); err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "create":
		return helperCreate()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", mode)
		return 2
	}
	return 0
}

var spinSink int

// helperCommand returns a command that runs the test binary as a helper.
func helperCommand(mode string, args ...string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	return cmd
}

// helperReport is what the "create" helper prints, one JSON line at a time.
type helperReport struct {
	Err         string               `json:",omitempty"`
	Placement   Placement            `json:",omitempty"`
	Mechanisms  map[string]Mechanism `json:",omitempty"`
	Fallbacks   []string             `json:",omitempty"`
	Dirs        []string             `json:",omitempty"`
	CloneFD     bool                 `json:",omitempty"`
	SelfCgroup  string               `json:",omitempty"` // the helper's cgroup2 path after Create
	ChildPid    int                  `json:",omitempty"`
	ChildCgroup string               `json:",omitempty"` // the child's cgroup2 path
	Destroyed   bool                 `json:",omitempty"`
}

// helperRequest is what the "create" helper gets in RLJAIL_CGTEST_OPTS.
type helperRequest struct {
	Options Options
	V2Mount string
	TopName string
	Runs    int // how many times to create, default 1
}

func helperCreate() int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(helperReport{Err: err.Error()})
		return 1
	}
	var req helperRequest
	if err := json.Unmarshal([]byte(os.Getenv("RLJAIL_CGTEST_OPTS")), &req); err != nil {
		return fail(err)
	}
	stdin := bufio.NewReader(os.Stdin)
	for run := 0; run < max(req.Runs, 1); run++ {
		opts := req.Options
		if opts.Name != "" {
			opts.Name = fmt.Sprintf("%s-%d", opts.Name, run)
		}
		c, err := create(opts, layout{v2Mount: req.V2Mount, topName: req.TopName})
		if err != nil {
			return fail(err)
		}
		self, _ := os.ReadFile("/proc/self/cgroup")
		pc, _ := parseProcCgroup(string(self))
		_, hasFD := c.CloneFD()
		out.Encode(helperReport{Placement: c.Placement(), Mechanisms: c.Mechanisms(), Fallbacks: c.Fallbacks(),
			Dirs: c.Dirs(), CloneFD: hasFD, SelfCgroup: pc.unified})

		// A child in the jail's cgroup: born there through the clone fd
		// when there is one, else added.
		child := helperCommand("sleep", "60")
		if fd, ok := c.CloneFD(); ok {
			child.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
		if err := child.Start(); err != nil {
			c.Destroy()
			return fail(fmt.Errorf("start child: %w", err))
		}
		if !hasFD {
			if err := c.AddProc(child.Process.Pid); err != nil {
				return fail(err)
			}
		}
		waited := make(chan struct{})
		go func() { child.Wait(); close(waited) }()
		cb, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", child.Process.Pid))
		cpc, _ := parseProcCgroup(string(cb))
		out.Encode(helperReport{ChildPid: child.Process.Pid, ChildCgroup: cpc.unified})

		stdin.ReadString('\n')
		if err := c.Destroy(); err != nil {
			return fail(err)
		}
		if c.Placement() == PlacementNone {
			child.Process.Kill() // no cgroup: the caller kills its own
		}
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			return fail(fmt.Errorf("child %d still running after Destroy", child.Process.Pid))
		}
		out.Encode(helperReport{Destroyed: true})
	}
	return 0
}

// createHelper is a running "create" helper.
type createHelper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *json.Decoder
	report helperReport // the first report: what Create did
	child  helperReport // the second: the child in the jail's cgroup
}

// startCreateHelper starts a "create" helper, as uid (and gid) when uid is
// not 0, with the binary at exe, and reads the reports of its first run.
// With bornIn it is born into that cgroup2 directory (CLONE_INTO_CGROUP), so
// that it is the only process there when that cgroup is fresh.
func startCreateHelper(t *testing.T, exe, bornIn string, uid int, req helperRequest) *createHelper {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"=create", "RLJAIL_CGTEST_OPTS="+string(b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if bornIn != "" {
		fd, err := unix.Open(bornIn, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	h := &createHelper{cmd: cmd}
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the create helper in %s: %v", bornIn, err)
	}
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	})
	h.lines = json.NewDecoder(stdout)
	h.next(t)
	return h
}

// next reads the reports of the helper's next run.
func (h *createHelper) next(t *testing.T) {
	t.Helper()
	h.report, h.child = helperReport{}, helperReport{}
	if err := h.lines.Decode(&h.report); err != nil {
		t.Fatalf("helper report: %v", err)
	}
	if h.report.Err != "" {
		t.Fatalf("helper: Create: %s", h.report.Err)
	}
	if err := h.lines.Decode(&h.child); err != nil || h.child.Err != "" {
		t.Fatalf("helper child report: %v %s", err, h.child.Err)
	}
}

// destroy asks the helper to Destroy the cgroup of its current run.
func (h *createHelper) destroy(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "destroy\n"); err != nil {
		t.Fatal(err)
	}
	var r helperReport
	if err := h.lines.Decode(&r); err != nil || !r.Destroyed {
		t.Fatalf("helper Destroy: %v %s", err, r.Err)
	}
}

// wait waits for the helper to exit after its last run.
func (h *createHelper) wait(t *testing.T) {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper exit: %v", err)
	}
}

// publicCopy copies the test binary where an unprivileged user may run it.
func publicCopy(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rljail-cgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "cgroup.test")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// readTrim reads a small file, trimmed.
func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// testName returns a cgroup name unique to this test process.
func testName(t *testing.T) string {
	return fmt.Sprintf("rljail-test-%d-%d", os.Getpid(), nameSeq.Add(1))
}

// readWithin waits for the first read from r (data or EOF), at most d.
func readWithin(t *testing.T, r io.Reader, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.Read(make([]byte, 64)); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("nothing to read after %v", d)
	}
}

// waitExit waits for cmd and returns the signal that killed it, or 0.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) syscall.Signal {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(within):
		cmd.Process.Kill()
		<-done
		t.Fatalf("pid %d still running after %v", cmd.Process.Pid, within)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// residentPages counts the pages of the file at path in the page cache.
func residentPages(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// checkOOMStats checks c's statistics after the kernel OOM-killed a hog in it at limit
// bytes: at least one OOM kill counted, and a peak near the limit (at least half of it;
// the kernel may charge a few pages past it before it reclaims or kills).
func checkOOMStats(t *testing.T, c *Cgroup, limit int64) {
	t.Helper()
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", s)
	if s.OOMKills < 1 {
		t.Errorf("oom kills %d, want at least 1", s.OOMKills)
	}
	if s.MemoryPeakBytes < limit/2 || s.MemoryPeakBytes > limit+1<<20 {
		t.Errorf("memory peak %d, want near the limit %d", s.MemoryPeakBytes, limit)
	}
}

// decideCase runs decide for one case of a placement table. With wantErr it checks
// that decide fails with an error containing it and returns false (the case is
// done); otherwise it checks that decide succeeds and returns its plan.
func decideCase(t *testing.T, h host, parent, wantErr string) (plan, bool) {
	t.Helper()
	p, err := decide(h, parent)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("decide: error %v, want one containing %q", err, wantErr)
		}
		return p, false
	}
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return p, true
}

// checkForkStats checks c's statistics after a shell in it, limited to 8 tasks, tried
// 16 background forks: pids.max was hit at least once and the peak stayed within 2 to 8.
func checkForkStats(t *testing.T, c *Cgroup) {
	t.Helper()
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", s)
	if s.PidsMaxHits < 1 {
		t.Errorf("pids.max hits %d after 16 forks under a limit of 8", s.PidsMaxHits)
	}
	if s.PidsPeak < 2 || s.PidsPeak > 8 {
		t.Errorf("pids peak %d, want 2..8", s.PidsPeak)
	}
}
