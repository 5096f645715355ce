package jail

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The pipe that rljail_signal_handler (signals_amd64.s) writes each caught
// signal to. A signal handler can reach nothing but global memory, so the
// pipe is global, made once and never closed: a handler already running
// when Stop restores the previous handlers may still write to it, and a
// closed descriptor's number could by then name another file.
var (
	signalPipeFD   int32 = -1 // its write end, for the handler
	signalPipeOnce sync.Once
	signalPipeR    *os.File // its read end
	signalPipeRFD  int      // the same, for draining (os.File.Fd would make it blocking)
	signalPipeErr  error
	signalPipeBusy atomic.Bool // a SignalPipe is open
)

func signalHandlerPCs() (handler, restorer uintptr)

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on
// x86-64 (the kernel's layout, not libc's).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// The flags of rt_sigaction(2) the handler is installed with.
const (
	saRestorer = 0x04000000 // x86-64 Linux requires a restorer
	saOnStack  = 0x08000000 // the thread's signal stack: a goroutine's own may be small
	saRestart  = 0x10000000 // system calls go on, as under Go's own handler
)

// SignalPipe catches signals for the supervisor with a handler of its own
// that writes each one to a pipe (the self-pipe trick, D. J. Bernstein,
// https://cr.yp.to/docs/selfpipe.html), read by a goroutine in Go's
// poller. It stands in for os/signal, whose first Notify starts a thread
// to keep the signal mask and hands each signal to that thread and back:
// about 0.4 ms of CPU on every start of a jail, against a few system
// calls here. The handler replaces the Go runtime's for these signals
// only, until Stop; os/signal must not watch them meanwhile (it would see
// nothing). A child the Go runtime forks resets them to their default
// before its exec, as it does for every signal it handled at its start;
// one that rljail's caller had ignored keeps this handler until the exec,
// so that a signal in between reaches the pipe twice (the supervisor got
// it too): a duplicate, never a loss.
type SignalPipe struct {
	c    chan os.Signal
	sigs []syscall.Signal
	old  []kernelSigaction
	done chan struct{}
	stop sync.Once
}

// CatchSignals starts catching sigs. Their numbers arrive on C, in order;
// one SignalPipe may be open at a time in a process.
func CatchSignals(sigs ...syscall.Signal) (*SignalPipe, error) {
	signalPipeOnce.Do(func() {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			signalPipeErr = fmt.Errorf("make the signal pipe: %w", err)
			return
		}
		signalPipeR, signalPipeRFD = os.NewFile(uintptr(fds[0]), "signals"), fds[0]
		atomic.StoreInt32(&signalPipeFD, int32(fds[1]))
	})
	if signalPipeErr != nil {
		return nil, signalPipeErr
	}
	if !signalPipeBusy.CompareAndSwap(false, true) {
		return nil, errors.New("catch signals: another SignalPipe is open")
	}
	// What an earlier SignalPipe's handler wrote after its Stop is no
	// signal for this one.
	var stale [64]byte
	for {
		if n, err := unix.Read(signalPipeRFD, stale[:]); n <= 0 && err != unix.EINTR {
			break
		}
	}
	p := &SignalPipe{c: make(chan os.Signal, 8), done: make(chan struct{})}
	handler, restorer := signalHandlerPCs()
	act := kernelSigaction{handler: handler, flags: saOnStack | saRestart | saRestorer, restorer: restorer, mask: ^uint64(0)}
	for _, s := range sigs {
		if s <= 0 || s > 64 {
			p.restore()
			signalPipeBusy.Store(false)
			return nil, fmt.Errorf("catch signal %d: no such signal", int(s))
		}
		var old kernelSigaction
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); errno != 0 {
			p.restore()
			signalPipeBusy.Store(false)
			return nil, fmt.Errorf("catch %v: %w", s, errno)
		}
		p.sigs, p.old = append(p.sigs, s), append(p.old, old)
	}
	go p.relay()
	return p, nil
}

// C delivers the caught signals.
func (p *SignalPipe) C() <-chan os.Signal { return p.c }

// relay passes what the handler wrote on to C, until Stop writes a zero
// (no signal's number). A signal that finds C full is dropped, as one
// that finds the pipe full is.
func (p *SignalPipe) relay() {
	defer close(p.done)
	var buf [64]byte
	for {
		n, err := signalPipeR.Read(buf[:])
		for _, b := range buf[:n] {
			if b == 0 {
				return
			}
			select {
			case p.c <- syscall.Signal(b):
			default:
			}
		}
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

// restore puts the previous handlers back.
func (p *SignalPipe) restore() {
	for i := len(p.sigs) - 1; i >= 0; i-- {
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(p.sigs[i]), uintptr(unsafe.Pointer(&p.old[i])), 0, 8, 0, 0)
	}
	p.sigs, p.old = nil, nil
}

// Stop restores the handlers that were in place before CatchSignals; C
// delivers nothing more once it returns.
func (p *SignalPipe) Stop() {
	p.stop.Do(func() {
		p.restore()
		// A zero ends the relay; a signal caught before it is delivered
		// first, or dropped if nobody reads C.
		for {
			_, err := unix.Write(int(atomic.LoadInt32(&signalPipeFD)), []byte{0})
			if err != unix.EINTR && err != unix.EAGAIN {
				break
			}
		}
		<-p.done
		signalPipeBusy.Store(false)
	})
}
