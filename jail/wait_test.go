package jail

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitPidfd reaps children that end in each way, and checks from
// /proc that no thread of this process sits in waitid meanwhile: the
// wait is in Go's poller (awaitExit), so that no thread is held in a
// system call for a whole run.
func TestWaitPidfd(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		kill    bool
		wantErr string
	}{
		{"exit 0", "sleep 0.3", false, ""},
		{"exit 3", "sleep 0.3; exit 3", false, "exit status 3"},
		{"killed", "exec sleep 5", true, "signal: SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidfd := -1
			_, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", tt.script}, &syscall.ProcAttr{
				Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{PidFD: &pidfd}})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(pidfd)
			type result struct{ err error }
			done := make(chan result, 1)
			go func() {
				_, err := waitPidfd(pidfd)
				done <- result{err}
			}()
			time.Sleep(100 * time.Millisecond)
			if tids := threadsIn(t, unix.SYS_WAITID); len(tids) > 0 {
				t.Errorf("threads %v wait in waitid: the wait is not in the poller", tids)
			}
			if tt.kill {
				if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-done:
				got := ""
				if r.err != nil {
					got = r.err.Error()
				}
				if got != tt.wantErr {
					t.Errorf("waitPidfd: %q, want %q", got, tt.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("waitPidfd did not return")
			}
		})
	}
}

// threadsIn lists this process's threads blocked in system call nr
// (/proc/self/task/TID/syscall starts with the call's number).
func threadsIn(t *testing.T, nr int) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/syscall")
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread is gone
		}
		if fields := strings.Fields(string(b)); len(fields) > 0 && fields[0] == strconv.Itoa(nr) {
			in = append(in, filepath.Base(filepath.Dir(f)))
		}
	}
	return in
}
