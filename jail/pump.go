package jail

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"
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
func pumpOutput(dst io.Writer, src *os.File, limit int64, read *atomic.Int64) pumped {
	defer src.Close()
	if dst == nil {
		dst = io.Discard
	}
	var p pumped
	buf := make([]byte, 32<<10)
	passed := int64(0)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.total += int64(n)
			read.Store(p.total)
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
	done chan pumped
	read atomic.Int64 // bytes read from the jail so far
}

func startPump(dst io.Writer, src *os.File, limit int64) *pumpRun {
	r := &pumpRun{done: make(chan pumped, 1)}
	go func() { r.done <- pumpOutput(dst, src, limit, &r.read) }()
	return r
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
