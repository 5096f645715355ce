package jail

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// cgroupGuard removes the jail's cgroup even if the supervisor is killed
// with SIGKILL, which leaves it no chance to: a small forked process (no
// Go runtime, see rljail_guard in spawn.c) holds the read end of a pipe and
// waits. Done sends it home; the supervisor's death (EOF) makes it kill
// what is left and remove the directories.
type cgroupGuard struct {
	w   *os.File
	pid int
}

// startGuard forks the guardian for dirs; with no dirs it does nothing.
func startGuard(dirs []string) (*cgroupGuard, error) {
	if len(dirs) == 0 {
		return &cgroupGuard{pid: -1}, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("create the cgroup guard's pipe: %w", err)
	}
	cdirs := cStrings(dirs)
	defer freeCStrings(cdirs, len(dirs))
	pid := int(C.rljail_guard(C.int(p[0]), cdirs))
	unix.Close(p[0])
	if pid < 0 {
		unix.Close(p[1])
		return nil, fmt.Errorf("start the cgroup guard: %w", unix.Errno(-pid))
	}
	return &cgroupGuard{w: os.NewFile(uintptr(p[1]), "cgroup-guard"), pid: pid}, nil
}

// done tells the guardian that the supervisor removed the cgroup itself,
// and reaps it.
func (g *cgroupGuard) done() {
	if g.pid < 0 {
		return
	}
	_, _ = g.w.Write([]byte{1})
	g.w.Close()
	var ws unix.WaitStatus
	_, _ = unix.Wait4(g.pid, &ws, 0, nil)
}
