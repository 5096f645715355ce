package jail

/*
#include "spawn.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupGuard removes the jail's cgroup even if the supervisor is killed
// with SIGKILL, which leaves it no chance to: a small forked process (no
// Go runtime, see rljail_guard in spawn.c) holds the read end of a pipe.
// Each cgroup directory is announced to it before it is created, so there
// is no moment at which a killed supervisor leaves one behind; done sends
// it home, and the supervisor's death (EOF) makes it kill what is left and
// remove the directories.
type cgroupGuard struct {
	w   *os.File
	pid int
}

// announce tells the guardian about a directory about to be created,
// starting the guardian at the first one.
func (g *cgroupGuard) announce(dir string) error {
	if strings.ContainsAny(dir, "\n\x00") {
		return fmt.Errorf("cgroup directory %q cannot be guarded", dir)
	}
	if g.w == nil {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("create the cgroup guard's pipe: %w", err)
		}
		pid := int(C.rljail_guard(C.int(p[0])))
		unix.Close(p[0])
		if pid < 0 {
			unix.Close(p[1])
			return fmt.Errorf("start the cgroup guard: %w", unix.Errno(-pid))
		}
		g.w, g.pid = os.NewFile(uintptr(p[1]), "cgroup-guard"), pid
	}
	if _, err := fmt.Fprintf(g.w, "dir %s\n", dir); err != nil {
		return fmt.Errorf("tell the cgroup guard: %w", err)
	}
	return nil
}

// done tells the guardian that the supervisor removed the cgroup itself,
// and reaps it.
func (g *cgroupGuard) done() {
	if g.w == nil {
		return
	}
	_, _ = g.w.WriteString("done\n")
	g.w.Close()
	var ws unix.WaitStatus
	_, _ = unix.Wait4(g.pid, &ws, 0, nil)
}
