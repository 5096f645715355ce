package jail

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTreeCPUTime: the CPU time of a process tree is its root's own and
// reaped children's (utime, stime, cutime, cstime) and every live
// descendant's, each read by the test from /proc on its own; a process
// that is gone is an error.
func TestTreeCPUTime(t *testing.T) {
	// The root burns CPU itself, in a child it reaps, and in a grandchild
	// that stays (its own thread's child), then says ready and waits.
	const burn = `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`
	cmd := exec.Command("/bin/sh", "-c", burn+`; /bin/sh -c '`+burn+`'; /bin/sh -c '`+burn+`; echo ready; exec sleep 1000' & wait`)
	// Its own process group, so that the sleeper ends with the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the tree did not start: %q, %v", line, err)
	}
	root := cmd.Process.Pid
	kids, err := os.ReadFile("/proc/" + strconv.Itoa(root) + "/task/" + strconv.Itoa(root) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(kids))
	if len(f) != 1 {
		t.Fatalf("the root's children are %q, want the one sleeper", kids)
	}
	sleeper, _ := strconv.Atoi(f[0])
	// The fields after the command: utime, stime, cutime and cstime are
	// 14 to 17 of /proc/PID/stat.
	ticks := func(pid int, fields ...int) time.Duration {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		var d time.Duration
		for _, i := range fields {
			v, err := strconv.Atoi(f[i-3])
			if err != nil {
				t.Fatalf("field %d of %d's stat: %v", i, pid, err)
			}
			d += time.Duration(v) * 10 * time.Millisecond
		}
		return d
	}
	own, reaped, child := ticks(root, 14, 15), ticks(root, 16, 17), ticks(sleeper, 14, 15, 16, 17)
	if own == 0 || reaped == 0 || child == 0 {
		t.Fatalf("the burns took no CPU time to count: own %v, reaped %v, the live child %v", own, reaped, child)
	}
	want := own + reaped + child
	got, err := treeCPUTime(root)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("treeCPUTime = %v, want %v (own %v + reaped %v + the live child %v)", got, want, own, reaped, child)
	}
	// Through files kept open, as a Handle reads: the same, each time.
	var p procFiles
	defer p.close()
	for i := 0; i < 3; i++ {
		if got, err := p.treeCPUTime(root); err != nil || got != want {
			t.Errorf("reading %d through open files = %v, %v; want %v", i+1, got, err, want)
		}
	}
	if len(p.fds) == 0 {
		t.Error("no file kept open between readings")
	}
	// The processes of the last reading, through their stat files only.
	if got, err := p.knownCPUTime(root); err != nil || got != want {
		t.Errorf("knownCPUTime = %v, %v; want %v", got, err, want)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if d, err := treeCPUTime(root); err == nil {
		t.Errorf("treeCPUTime of a process reaped = %v, want an error", d)
	}
	if d, err := p.knownCPUTime(root); err == nil {
		t.Errorf("knownCPUTime of a process reaped = %v, want an error", d)
	}
	if d, err := p.treeCPUTime(root); err == nil {
		t.Errorf("a reading through open files of a process reaped = %v, want an error", d)
	}
	if len(p.fds) != 0 {
		t.Errorf("%d files of the processes gone are still open", len(p.fds))
	}
}
