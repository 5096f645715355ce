package jail

import (
	"os"

	"github.com/rljail/rljail/cgroup"
)

// Early is an init stage started before its Spec is known. A CLI starts it
// first thing, so that the init stage's exec, libc start and clone into
// the namespaces (about 2 ms) run while the CLI reads its flags and Run
// makes the cgroup and the mount trees. Run takes it over through
// Spec.Early; Close ends it when no Run did. Its seccomp listener socket
// is made whether or not the profile will want one.
type Early struct {
	root    bool
	unified bool
	ready   chan struct{} // closed when the start below returned
	j       *jailRun
	err     error
	used    bool
}

// StartEarly starts an init stage for a Run by this process, as this
// process's user. A failure is kept: Run then starts its own and reports
// why that one failed.
//
// The binary's entry has usually started it already, before the Go
// runtime (stage/prestart.c); StartEarly then takes that one over.
// Otherwise the start runs in a goroutine: the fork blocks its thread
// until the init stage's exec is done (about half a millisecond), which
// the caller spends reading its flags instead.
func StartEarly() *Early {
	e := &Early{root: os.Geteuid() == 0, unified: cgroup.Unified(), ready: make(chan struct{})}
	if e.j = takePrestarted(e.root, e.unified); e.j != nil {
		close(e.ready)
		return e
	}
	go func() {
		defer close(e.ready)
		e.j, e.err = spawnInit(e.root, e.unified, true, OutputMerged(os.Stdout, os.Stderr))
	}()
	return e
}

// usable tells whether Run may take e over: started, not taken, and for
// the same user.
func (e *Early) usable(root bool) bool {
	if e == nil || e.used {
		return false
	}
	<-e.ready
	return e.err == nil && e.j != nil && e.root == root
}

// Close ends the init stage when no Run took it over: nothing of it is
// left when Close returns. Safe on nil and after Run.
func (e *Early) Close() {
	if e == nil || e.used {
		return
	}
	<-e.ready
	if e.j == nil {
		return
	}
	e.used = true
	e.j.drop()
}
