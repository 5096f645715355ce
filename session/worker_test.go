package session

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostWorker starts worker.py with the host's python3 (no jail: the test
// is the supervisor) and returns its channel, read line by line.
func hostWorker(t *testing.T) (net.Conn, *bufio.Reader, *os.Process) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "worker")
	defer theirs.Close()
	cmd := exec.Command("python3", workerCommand("python3", nil, 1<<20)[1:]...)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	if line := readWorkerLine(t, conn, r); !strings.Contains(line, `"t":"ready"`) {
		t.Fatalf("the worker's first line: %s", line)
	}
	return conn, r, cmd.Process
}

func readWorkerLine(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read the worker's next line: %v", err)
	}
	return line
}

func sendWorker(t *testing.T, conn net.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerRequestWhileACallWaits: a cell ends with a call of one of its
// threads still waiting for its result, so the worker's call reader holds
// the channel when the next request comes; the main loop must take that
// request from it and answer, not wait on the channel for a line that the
// supervisor sends only after the answer.
func TestWorkerRequestWhileACallWaits(t *testing.T) {
	conn, r, _ := hostWorker(t)
	code := "import threading, time\nseen = []\nthreading.Thread(target=lambda: seen.append(llm_query('x'))).start()\ntime.sleep(0.3)\n"
	sendWorker(t, conn, map[string]any{"op": "exec", "code": code, "t": "t1"})
	var call struct {
		C string `json:"c"`
		N int    `json:"n"`
	}
	for got := 0; got < 2; got++ {
		line := readWorkerLine(t, conn, r)
		switch {
		case strings.HasPrefix(line, `{"c":"call"`):
			if err := json.Unmarshal([]byte(line), &call); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(line, `"t":"t1"`):
		default:
			t.Fatalf("the worker wrote %s", line)
		}
	}
	if call.N == 0 {
		t.Fatal("no call from the cell's thread")
	}
	// The call is not answered yet: the next request.
	sendWorker(t, conn, map[string]any{"op": "exec", "code": "x = len(seen)", "t": "t2"})
	if line := readWorkerLine(t, conn, r); !strings.Contains(line, `"t":"t2"`) || !strings.Contains(line, `"ok":true`) {
		t.Fatalf("the reply to the request sent while a call waited: %s", line)
	}
	sendWorker(t, conn, map[string]any{"c": "result", "n": call.N, "value": "answer"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		sendWorker(t, conn, map[string]any{"op": "get", "name": "seen", "t": "t3"})
		line := readWorkerLine(t, conn, r)
		if strings.Contains(line, `"answer"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late result never reached its thread: %s", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWorkerLateInterrupt: a cell that set SIGINT's handler of its own
// (Python's, which raises KeyboardInterrupt) leaves the worker's behind it,
// so that an interrupt arriving after the cell ended (a cell timeout's
// SIGINT as the cell returns) raises nothing where the main loop waits for
// the next request: the worker answers it.
func TestWorkerLateInterrupt(t *testing.T) {
	conn, r, proc := hostWorker(t)
	sendWorker(t, conn, map[string]any{"op": "exec", "code": "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)", "t": "t1"})
	if line := readWorkerLine(t, conn, r); !strings.Contains(line, `"t":"t1"`) || !strings.Contains(line, `"error":null`) {
		t.Fatalf("the cell's reply: %s", line)
	}
	time.Sleep(50 * time.Millisecond) // the main loop waits on the channel
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	sendWorker(t, conn, map[string]any{"op": "exec", "code": "x = 1", "t": "t2"})
	if line := readWorkerLine(t, conn, r); !strings.Contains(line, `"t":"t2"`) || !strings.Contains(line, `"ok":true`) {
		t.Fatalf("the request after a late interrupt: %s", line)
	}
}
