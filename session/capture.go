package session

import (
	"bytes"
	"fmt"
	"sync"
	"unicode/utf8"
)

// capture is one of the worker's output streams (stdout or stderr) as the
// jail's pump delivers it: it attributes bytes to the cell in flight and
// keeps, of each cell's output, a head and a tail within the cap.
//
// A cell's window opens when its request is sent (open) and closes at the
// worker's end marker carrying the cell's token, or when the supervisor
// gives up waiting for it (finish). What arrives while no window is open
// (a subprocess still writing after its cell ended, or what a cell wrote
// after forging its own marker) belongs to no cell: it is counted and
// dropped, so that a cell cannot put words in a later cell's output.
// Output a lingering process writes while a later cell runs is that
// cell's: it is the same jail, and it counts against that cell's cap.
type capture struct {
	mu     sync.Mutex
	cap    int // bytes kept per cell: head and tail, each half
	marker []byte
	open   bool
	seen   bool // the marker arrived
	carry  []byte
	head   []byte
	tail   []byte // a ring of the last bytes, tail[tailAt:] then tail[:tailAt]
	tailAt int
	full   bool // tail is a full ring
	total  int64
	// between counts bytes that arrived while no window was open, since
	// the last take.
	between int64
	signal  chan struct{} // closed when the marker arrives
	// stale is the marker of a window that closed before it came (the
	// worker's reply was a cell's forgery, or its stream lagged): what
	// arrives up to it is still that cell's, late, and belongs to no
	// cell. It is dropped once it, or a later window's own marker, comes.
	stale []byte
}

func newCapture(limit int) *capture {
	return &capture{cap: limit}
}

// openWindow starts a cell's window, ended by marker.
func (c *capture) openWindow(marker []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marker = marker
	c.open, c.seen = true, false
	if c.stale == nil {
		c.carry = c.carry[:0]
	}
	c.head, c.tail, c.tailAt, c.full, c.total = c.head[:0], c.tail[:0], 0, false, 0
	c.signal = make(chan struct{})
}

// done is closed when the window's marker has arrived.
func (c *capture) done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signal
}

// Write takes what the pump read; it never blocks and never fails, so that
// the pump goes on draining the jail's pipe.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.write(p)
	return len(p), nil
}

// write is Write under c.mu.
func (c *capture) write(p []byte) {
	if !c.open && c.stale == nil {
		c.between += int64(len(p))
		return
	}
	// A marker may be split across reads: its last len(marker)-1 bytes
	// wait in carry until the next read decides.
	buf := append(c.carry, p...)
	if c.stale != nil {
		i := bytes.Index(buf, c.stale)
		j := -1
		if c.open {
			j = bytes.Index(buf, c.marker)
		}
		switch {
		case i >= 0 && (j < 0 || i < j):
			// The late output ends here; the rest is as any write's.
			c.between += int64(i + len(c.stale))
			rest := append([]byte(nil), buf[i+len(c.stale):]...)
			c.carry, c.stale = c.carry[:0], nil
			if len(rest) > 0 {
				c.write(rest)
			}
			return
		case j >= 0:
			// The window's own marker came first: the stale one never
			// will (the worker is past it).
			c.stale = nil
		default:
			hold := min(max(len(c.stale), len(c.marker))-1, len(buf))
			c.between += int64(len(buf) - hold)
			c.carry = append(c.carry[:0], buf[len(buf)-hold:]...)
			return
		}
	}
	if !c.open {
		c.between += int64(len(buf))
		c.carry = c.carry[:0]
		return
	}
	if i := bytes.Index(buf, c.marker); i >= 0 {
		c.keep(buf[:i])
		c.between += int64(len(buf) - i - len(c.marker))
		c.carry = c.carry[:0]
		c.open, c.seen = false, true
		close(c.signal)
		return
	}
	hold := len(c.marker) - 1
	if hold > len(buf) {
		hold = len(buf)
	}
	c.keep(buf[:len(buf)-hold])
	c.carry = append(c.carry[:0], buf[len(buf)-hold:]...)
}

// keep adds b to the cell's output: the head until it holds half the cap,
// then the ring of the tail.
func (c *capture) keep(b []byte) {
	c.total += int64(len(b))
	half := c.cap / 2
	if room := half - len(c.head); room > 0 {
		k := min(room, len(b))
		c.head = append(c.head, b[:k]...)
		b = b[k:]
	}
	tailCap := c.cap - half
	if tailCap <= 0 {
		return
	}
	if len(b) >= tailCap {
		c.tail = append(c.tail[:0], b[len(b)-tailCap:]...)
		c.tailAt, c.full = 0, true
		return
	}
	for len(b) > 0 {
		if !c.full {
			k := min(tailCap-len(c.tail), len(b))
			c.tail = append(c.tail, b[:k]...)
			b = b[k:]
			if len(c.tail) == tailCap {
				c.full, c.tailAt = true, 0
			}
			continue
		}
		k := copy(c.tail[c.tailAt:], b)
		b = b[k:]
		c.tailAt = (c.tailAt + k) % tailCap
	}
}

// cellOutput is one stream's output of one cell, as the reply gives it.
type cellOutput struct {
	Text      string // head, a line saying how much was cut, tail
	Bytes     int64  // what the cell wrote
	Truncated bool
	CutBytes  int64
	// MarkerSeen: the worker's end marker arrived; without it the window
	// was closed by the supervisor's wait (the cell closed or redirected
	// its descriptor, or is still writing).
	MarkerSeen bool
}

// finish closes the window (if the marker has not) and returns the cell's
// output.
func (c *capture) finish() cellOutput {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		if c.stale == nil {
			c.keep(c.carry)
		} else {
			c.between += int64(len(c.carry))
		}
		c.carry = c.carry[:0]
		c.open = false
		// Its marker may still come, after more of this cell's output.
		c.stale = append([]byte(nil), c.marker...)
	}
	tail := c.tail
	if c.full {
		tail = append(append([]byte(nil), c.tail[c.tailAt:]...), c.tail[:c.tailAt]...)
	}
	out := cellOutput{Bytes: c.total, MarkerSeen: c.seen}
	kept := int64(len(c.head) + len(tail))
	if c.total > kept {
		out.Truncated, out.CutBytes = true, c.total-kept
		out.Text = validText(c.head) + fmt.Sprintf("\n[... %d bytes cut by rljail ...]\n", out.CutBytes) + validText(tail)
	} else {
		out.Text = validText(append(append([]byte(nil), c.head...), tail...))
	}
	return out
}

// takeBetween returns and resets the count of bytes that arrived while no
// window was open.
func (c *capture) takeBetween() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.between
	c.between = 0
	return n
}

// validText is b as a string with every invalid UTF-8 sequence (a
// character cut at the head or tail's edge, or bytes that are not text)
// replaced by U+FFFD, so that every reply is valid JSON text.
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}
