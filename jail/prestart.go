package jail

/*
#include "userns.h"
#include "stage/prestart.h"
*/
import "C"

import (
	"os"

	"github.com/rljail/rljail/cgroup"
	"golang.org/x/sys/unix"
)

// takePrestarted returns the init stage's first step that the binary's
// entry started (stage/prestart.c) before the Go runtime, if there is one,
// as a jailRun for a Run by this process. One started for another user or
// cgroup layout than Run would use (which the entry and Go decide alike,
// so this should not happen) is ended, and nil returned.
func takePrestarted(root, unified bool) *jailRun {
	var p C.struct_rljail_prestart
	if C.rljail_take_prestart(&p) == 0 {
		return nil
	}
	file := func(fd C.int, name string) *os.File { return os.NewFile(uintptr(fd), name) }
	ends := stage1Ends{
		ctl:     file(p.ctl, "control"),
		statusR: file(p.status_r, "status"),
		stdinW:  file(p.stdin_w, "stdin"),
		stdoutR: file(p.stdout_r, "stdout"),
		stderrR: file(p.stderr_r, "stderr"),
		notifyR: file(p.notify_r, "notify"),
		guardW:  file(p.guard_w, "guard"),
	}
	uid, gid, _ := jailHostIDs(root)
	if (p.root != 0) != root || (p.unified != 0) != unified || int(p.uid) != uid || int(p.gid) != gid {
		_ = unix.PidfdSendSignal(int(p.pidfd), unix.SIGKILL, nil, 0)
		_, _ = waitPidfd(int(p.pidfd))
		unix.Close(int(p.pidfd))
		closeFiles([]*os.File{ends.ctl, ends.statusR, ends.stdinW, ends.stdoutR, ends.stderrR, ends.notifyR, ends.guardW})
		return nil
	}
	return newJailRun(ends, unified, int(p.pid), int(p.pidfd))
}

// DiscardPrestarted ends the init stage's first step that the binary's
// entry started for a command line that asked for a run, when the CLI
// does not run one after all; nothing of it is left when it returns.
func DiscardPrestarted() {
	if j := takePrestarted(os.Geteuid() == 0, cgroup.Unified()); j != nil {
		j.discard()
	}
}
