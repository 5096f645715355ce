package jail

import (
	"io"
	"os"
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
func pumpOutput(dst io.Writer, src *os.File, limit int64) pumped {
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
