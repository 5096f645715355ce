package jail

import (
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultStopGrace is how long a payload has to end after rljail passed
// it a SIGTERM, SIGHUP or SIGQUIT, before the jail is killed (Spec.StopGrace).
const DefaultStopGrace = 5 * time.Second

// stopper passes the caller's signals on to the payload (a request on the
// init's control pipe) and kills the payload when it does not end as
// asked (Spec.Signals says when). Its methods run on one goroutine, but
// killedWhy and stopAsked, read after the run.
type stopper struct {
	grace  time.Duration
	timer  *time.Timer
	mu     sync.Mutex
	asked  string // the first SIGTERM, SIGHUP or SIGQUIT passed on
	killed string // why the payload was killed, once it was
}

// isStopRequest tells the signals that ask the payload to end (SIGINT only
// interrupts it).
func isStopRequest(sig syscall.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT
}

// expired fires when the grace after a SIGTERM, SIGHUP or SIGQUIT is over.
func (s *stopper) expired() <-chan time.Time {
	if s.timer == nil {
		return nil
	}
	return s.timer.C
}

func (s *stopper) cancel() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// signal passes sig on, or kills the payload when sig repeats a request
// to stop that it has not heeded.
func (s *stopper) signal(control io.Writer, sig syscall.Signal) {
	// SIGINT is never a reason to kill on its own: an interactive payload
	// (a REPL, which a runner interrupts cell after cell) takes it as an
	// interrupt and goes on. After a request to stop, it insists.
	if asked := s.stopAsked(); asked != "" && (isStopRequest(sig) || sig == syscall.SIGINT) {
		s.kill(control, fmt.Sprintf("%s came after %s", unix.SignalName(sig), asked))
		return
	}
	if isStopRequest(sig) {
		s.mu.Lock()
		s.asked = unix.SignalName(sig)
		s.mu.Unlock()
		s.timer = time.NewTimer(s.grace)
	}
	_, _ = fmt.Fprintf(control, "signal %d\n", int(sig))
}

// stopAsked names the first stop request passed on, or "".
func (s *stopper) stopAsked() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// kill asks the init for SIGKILL to the payload: the init then ends
// every other process of the jail and reports the payload's end.
func (s *stopper) kill(control io.Writer, why string) {
	s.mu.Lock()
	if s.killed == "" {
		s.killed = why
	}
	s.mu.Unlock()
	s.cancel()
	_, _ = fmt.Fprintf(control, "signal %d\n", int(syscall.SIGKILL))
}

// killedWhy says why the payload was killed, or "".
func (s *stopper) killedWhy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}
