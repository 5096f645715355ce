package jail

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// handlerOf returns the handler installed for sig.
func handlerOf(t *testing.T, sig syscall.Signal) uintptr {
	t.Helper()
	var act kernelSigaction
	if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&act)), 8, 0, 0); errno != 0 {
		t.Fatalf("rt_sigaction %v: %v", sig, errno)
	}
	return act.handler
}

func receive(t *testing.T, c <-chan os.Signal, want syscall.Signal) {
	t.Helper()
	select {
	case got := <-c:
		if got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%v did not arrive in 5 s", want)
	}
}

// TestSignalPipe sends signals to this process, to the process and to a
// chosen thread, and checks that each arrives, in order, that a second
// pipe is refused while one is open, and that Stop puts the Go runtime's
// handlers back and leaves nothing for the next pipe.
func TestSignalPipe(t *testing.T) {
	sigs := []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2}
	before := map[syscall.Signal]uintptr{}
	for _, s := range sigs {
		before[s] = handlerOf(t, s)
	}
	p, err := CatchSignals(sigs...)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := signalHandlerPCs()
	for _, s := range sigs {
		if h := handlerOf(t, s); h != own {
			t.Fatalf("%v: handler %#x, want the pipe's %#x", s, h, own)
		}
	}
	if _, err := CatchSignals(syscall.SIGUSR1); err == nil {
		t.Fatal("a second SignalPipe was allowed while one is open")
	}

	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGUSR1} {
		if err := unix.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		receive(t, p.C(), s)
	}
	// A signal directed at one thread, which runs the handler there on its
	// own signal stack, while it is busy in Go code.
	tid := make(chan int)
	var stop atomic.Bool
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		for !stop.Load() {
		}
	}()
	if err := unix.Tgkill(os.Getpid(), <-tid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	receive(t, p.C(), syscall.SIGUSR2)
	stop.Store(true)

	// Signals nobody reads are dropped, not queued without bound.
	for i := 0; i < 100; i++ {
		_ = unix.Kill(os.Getpid(), syscall.SIGUSR1)
	}
	time.Sleep(50 * time.Millisecond)
	// A SIGUSR1 still pending (a loaded machine may not have run its
	// handler yet) would reach the next pipe below: the kernel delivers
	// the lower-numbered of two pending signals first, so once a SIGUSR2
	// sent now is read, no SIGUSR1 of the flood is left pending. A
	// SIGUSR2 whose handler ran while the pipe was still full of the
	// flood is dropped by design, so one is sent again every 200 ms
	// until one arrives (on a loaded machine the reader may take longer
	// than the sleep above to drain the pipe).
	resend := time.NewTicker(200 * time.Millisecond)
	defer resend.Stop()
	for deadline := time.After(20 * time.Second); ; {
		if err := unix.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		got := false
	drain:
		for {
			select {
			case s := <-p.C():
				if s == syscall.SIGUSR2 {
					got = true
					break drain
				}
			case <-resend.C:
				break drain
			case <-deadline:
				t.Fatal("no SIGUSR2 sent after the flood arrived in 20 s")
			}
		}
		if got {
			break
		}
	}
	p.Stop()
	p.Stop() // a second Stop does nothing
	for _, s := range sigs {
		if h := handlerOf(t, s); h != before[s] {
			t.Errorf("%v: handler %#x after Stop, want the one before, %#x", s, h, before[s])
		}
	}

	// What a handler already running at Stop writes is no signal for the
	// next pipe.
	if _, err := unix.Write(int(signalPipeFD), []byte{byte(syscall.SIGUSR1)}); err != nil {
		t.Fatal(err)
	}
	q, err := CatchSignals(syscall.SIGUSR1)
	if err != nil {
		t.Fatalf("catch again after Stop: %v", err)
	}
	defer q.Stop()
	select {
	case s := <-q.C():
		t.Fatalf("the new pipe delivered %v, which nobody sent it", s)
	case <-time.After(50 * time.Millisecond):
	}
	if err := unix.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	receive(t, q.C(), syscall.SIGUSR1)
}

func TestCatchSignalsRefusesBadNumbers(t *testing.T) {
	for _, s := range []syscall.Signal{0, -1, 65, syscall.SIGKILL} {
		p, err := CatchSignals(s)
		if err == nil {
			p.Stop()
			t.Errorf("CatchSignals(%d) was allowed", int(s))
		}
	}
	// None of the refusals left the pipe taken.
	p, err := CatchSignals(syscall.SIGUSR1)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
}
