package jail

import (
	"sync"
	"unicode/utf8"
)

// MaxReportOutput is the most bytes of each output stream a report may
// carry (Spec.ReportOutput): the report is one JSON line that a runner
// reads whole, and the supervisor holds what it carries until the end.
const MaxReportOutput = 16 << 20

// Output is the payload's output text carried in the report
// (Spec.ReportOutput), for a caller that wants one object per run (as an
// E2B execution or a Jupyter cell gives) rather than the output on
// rljail's stdout and stderr beside a report. A stream that fit in the
// cap is whole in Stdout or Stderr; a longer one has its head there and
// its tail in StdoutTail or StderrTail, with the bytes between them
// counted in StdoutOmittedBytes or StderrOmittedBytes (both left out when
// nothing was). The text is of everything the payload wrote, before the
// output limit and before a terminal's control characters are made
// visible; invalid UTF-8 reads as U+FFFD, and a cut never splits a
// character. When stdout and stderr are one file (2>&1), both streams
// are in Stdout, in the order written, and Stderr is empty.
type Output struct {
	Stdout             string `json:"stdout"`
	StdoutTail         string `json:"stdout_tail,omitempty"`
	StdoutOmittedBytes int64  `json:"stdout_omitted_bytes,omitempty"`
	Stderr             string `json:"stderr"`
	StderrTail         string `json:"stderr_tail,omitempty"`
	StderrOmittedBytes int64  `json:"stderr_omitted_bytes,omitempty"`
}

// outputCapture keeps the head and the tail of one stream, for the
// report: the first half of the cap as it comes, the rest of the cap as a
// ring of the latest bytes. A stream no longer than the cap is so kept
// whole (head, then the ring in order). It is safe for a pump writing and
// a reader taking a snapshot (a pump given up on may still write).
type outputCapture struct {
	mu    sync.Mutex
	head  []byte
	ring  []byte // cap(ring) bytes at most
	next  int    // where the ring's next byte goes, once it is full
	total int64
}

func newOutputCapture(capBytes int64) *outputCapture {
	if capBytes <= 0 {
		return nil
	}
	h := capBytes / 2
	return &outputCapture{head: make([]byte, 0, h), ring: make([]byte, 0, capBytes-h)}
}

func (c *outputCapture) add(p []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if room := cap(c.head) - len(c.head); room > 0 {
		n := min(room, len(p))
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	size := cap(c.ring)
	if size == 0 || len(p) == 0 {
		return
	}
	if len(p) >= size { // only its last bytes stay
		c.ring = append(c.ring[:0], p[len(p)-size:]...)
		c.next = 0
		return
	}
	if room := size - len(c.ring); room > 0 {
		n := min(room, len(p))
		c.ring = append(c.ring, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 {
		n := copy(c.ring[c.next:], p)
		p = p[n:]
		c.next = (c.next + n) % size
	}
}

// text returns what was kept: the whole stream, or its head and tail and
// the bytes left out between them. The cut moves to character boundaries:
// an incomplete character at the head's end or the tail's start counts
// as omitted.
func (c *outputCapture) text() (whole, tail string, omitted int64) {
	if c == nil {
		return "", "", 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ordered := append(append([]byte(nil), c.ring[c.next:]...), c.ring[:c.next]...)
	omitted = c.total - int64(len(c.head)) - int64(len(ordered))
	if omitted == 0 {
		return string(c.head) + string(ordered), "", 0
	}
	head := c.head
	if cut := incompleteEnd(head); cut > 0 {
		head = head[:len(head)-cut]
		omitted += int64(cut)
	}
	for i := 0; i < utf8.UTFMax-1 && len(ordered) > 0 && !utf8.RuneStart(ordered[0]); i++ {
		ordered = ordered[1:]
		omitted++
	}
	return string(head), string(ordered), omitted
}

// incompleteEnd returns how many bytes at the end of b are the start of a
// UTF-8 character that b does not finish.
func incompleteEnd(b []byte) int {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if !utf8.RuneStart(c) {
			continue
		}
		if c < utf8.RuneSelf || utf8.FullRune(b[len(b)-i:]) {
			return 0
		}
		return i
	}
	return 0
}
