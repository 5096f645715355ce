package jail

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/termsafe"
)

// pumped is what one output pump saw.
type pumped struct {
	total     int64 // bytes the payload wrote
	truncated bool  // more than the limit: the rest was read and discarded
	writeErr  error // passing the output on failed: the pump stopped there
}

// pumpOutput copies src to dst up to limit bytes, then reads and discards
// the rest, so that a payload flooding its output never blocks and never
// costs the supervisor memory (one buffer). When a write fails (the reader
// of rljail's output went away, a full disk), the pump closes src and
// stops: the payload's next write fails as it would have outside the jail
// (EPIPE; Python raises BrokenPipeError), rather than its output being
// lost without a word.
//
// visible (dst is a terminal) makes the payload's control characters
// visible on their way (termsafe.Writer), so that its escape sequences
// cannot drive the caller's terminal. The limit and the counts are of the
// bytes the payload wrote either way; the terminal may show up to
// termsafe.MaxGrowth times as many.
//
// capture, when not nil, keeps the head and tail of what the payload
// wrote for the report (Spec.ReportOutput), before the limit and before
// the terminal's escaping.
func pumpOutput(dst io.Writer, src *os.File, limit int64, read *atomic.Int64, visible bool, capture *outputCapture) pumped {
	defer src.Close()
	if dst == nil {
		dst = io.Discard
	}
	var safe *termsafe.Writer
	if visible {
		safe = termsafe.NewWriter(dst)
		dst = safe
	}
	var p pumped
	buf := make([]byte, 32<<10)
	passed := int64(0)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.total += int64(n)
			read.Store(p.total)
			capture.add(buf[:n])
			if room := limit - passed; room > 0 {
				chunk := buf[:n]
				if int64(len(chunk)) > room {
					chunk = chunk[:room]
				}
				if _, werr := dst.Write(chunk); werr != nil {
					p.writeErr = werr
					return p
				}
				passed += int64(len(chunk))
			}
			if p.total > limit {
				p.truncated = true
			}
		}
		if err != nil {
			if safe != nil {
				// The start of a character the payload never finished:
				// shown as bytes, so that the terminal does not join it
				// with what rljail writes next.
				p.writeErr = safe.Flush()
			}
			return p
		}
	}
}

// pumpGrace is how long a run that the kill timer (or its caller) ended
// waits for its output to be passed on.
const pumpGrace = time.Second

// errReaderStalled is a pump's write error when rljail's reader did not
// take the output within pumpGrace of the run's end.
var errReaderStalled = errors.New("its reader did not read it")

// pumpRun is one stream's pump, running.
type pumpRun struct {
	done    chan pumped
	read    atomic.Int64   // bytes read from the jail so far
	capture *outputCapture // nil: none kept
}

// startPump starts a stream's pump; capture bytes of it (head and tail)
// are kept for the report, none for 0.
func startPump(dst io.Writer, src *os.File, limit int64, visible bool, capture int64) *pumpRun {
	r := &pumpRun{done: make(chan pumped, 1), capture: newOutputCapture(capture)}
	go func() { r.done <- pumpOutput(dst, src, limit, &r.read, visible, r.capture) }()
	return r
}

// IsTerminal tells whether w writes to a terminal: the file under it
// (through Unwrap() io.Writer) answers the terminal ioctl TCGETS. A writer
// may answer for itself with an IsTerminal() bool method (the CLI's
// wrappers do, so that one ioctl per file serves the whole process).
func IsTerminal(w io.Writer) bool {
	for i := 0; i < 8 && w != nil; i++ {
		if t, ok := w.(interface{ IsTerminal() bool }); ok {
			return t.IsTerminal()
		}
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	rc, err := f.SyscallConn() // not Fd(): that would make a shared descriptor blocking
	if err != nil {
		return false
	}
	tty := false
	_ = rc.Control(func(fd uintptr) {
		_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		tty = err == nil
	})
	return tty
}

// result waits for the pump to end, or until grace fires or giveUp is
// closed (nil: never); a pump given up on is left in its write, which the
// process's exit ends.
func (r *pumpRun) result(grace <-chan time.Time, giveUp <-chan struct{}) pumped {
	select {
	case p := <-r.done:
		return p
	case <-grace:
	case <-giveUp:
	}
	return pumped{total: r.read.Load(), writeErr: errReaderStalled}
}
