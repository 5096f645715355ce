// Package termsafe makes a hostile program's output safe to show on a
// terminal: every control character is replaced by a visible form, so that
// the bytes can no longer drive the terminal. A payload that reaches the
// caller's terminal with escape sequences can set its title, erase lines and
// print a forged line in their place, set the clipboard (OSC 52), or query
// the terminal and read its reply (the clipboard, with OSC 52 and a terminal
// in raw mode) from its own stdin.
//
// What passes unchanged: printable ASCII, line feed, tab and carriage
// return, and valid UTF-8 outside the C1 range. Carriage return stays
// because progress bars rely on it; it moves the cursor within the current
// line only, so it cannot reach a line above (one of rljail's own, which
// always ends with a line feed). Backspace does not stay: where a terminal
// has reverse wrap-around on, it climbs into the line above.
//
// The visible forms are those of less(1) and cat -v:
//
//	^@ .. ^_   a C0 control (ESC is ^[, backspace ^H)
//	^?         DEL
//	<9B>       a byte that is not part of valid UTF-8 (an 8-bit C1
//	           control, which some terminals take as CSI, included)
//	<U+009B>   a C1 control written as UTF-8
//
// (less's defaults for binary bytes and for Unicode non-printables, its
// LESSBINFMT and LESSUTFBINFMT.)
package termsafe

import (
	"io"
	"unicode/utf8"
)

// Writer passes what is written to it on to an io.Writer with every
// control character made visible. It is stateful: a UTF-8 sequence split
// between two writes is held back until its end arrives (at most three
// bytes), so that it is judged whole. Flush gives up what is held when the
// stream ends. A Writer is not safe for concurrent use.
type Writer struct {
	w     io.Writer
	held  [utf8.UTFMax - 1]byte
	nheld int
	out   []byte // reused for each write's visible form
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// MaxGrowth is the most bytes one byte written becomes: a byte not part of
// valid UTF-8 shows as four (<9B>), and a C1 control in UTF-8, two bytes,
// as eight.
const MaxGrowth = 4

// Write writes the visible form of p to the underlying writer, in one
// write when there is anything to write. It reports len(p) when that write
// succeeds, and 0 with its error otherwise.
func (s *Writer) Write(p []byte) (int, error) {
	n := len(p)
	out := s.out[:0]
	if s.nheld > 0 {
		// The held start of a sequence, completed by p's first bytes.
		var join [2*utf8.UTFMax - 2]byte
		j := copy(join[:], s.held[:s.nheld])
		j += copy(join[j:], p[:min(len(p), utf8.UTFMax-1)])
		i := 0
		for i < s.nheld {
			if !utf8.FullRune(join[i:j]) {
				break // p was too short to end it
			}
			out, i = appendRune(out, join[:j], i)
		}
		if i < s.nheld {
			// Still incomplete: all of p is in join[i:j].
			s.nheld = copy(s.held[:], join[i:j])
			p = nil
		} else {
			p = p[i-s.nheld:]
			s.nheld = 0
		}
	}
	i := 0
	for i < len(p) {
		// A run of bytes that pass as they are.
		start := i
		for i < len(p) && passes(p[i]) {
			i++
		}
		out = append(out, p[start:i]...)
		if i == len(p) {
			break
		}
		if p[i] >= utf8.RuneSelf && !utf8.FullRune(p[i:]) {
			s.nheld = copy(s.held[:], p[i:]) // the rest comes in the next write
			break
		}
		out, i = appendRune(out, p, i)
	}
	s.out = out[:0]
	if len(out) == 0 {
		return n, nil
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// Flush writes out, made visible byte by byte, the start of a UTF-8
// sequence that the last write left incomplete: the stream ends there, and
// a terminal could otherwise join it with what is written next.
func (s *Writer) Flush() error {
	if s.nheld == 0 {
		return nil
	}
	var out []byte
	for _, b := range s.held[:s.nheld] {
		out = appendByte(out, b)
	}
	s.nheld = 0
	_, err := s.w.Write(out)
	return err
}

// Append appends the visible form of p, a whole text (an incomplete
// sequence at its end is shown byte by byte), to dst.
func Append(dst, p []byte) []byte {
	for i := 0; i < len(p); {
		if passes(p[i]) {
			dst = append(dst, p[i])
			i++
			continue
		}
		dst, i = appendRune(dst, p, i)
	}
	return dst
}

// passes tells whether b, an ASCII byte, passes unchanged.
func passes(b byte) bool {
	return (b >= 0x20 && b < 0x7f) || b == '\n' || b == '\t' || b == '\r'
}

// appendRune appends the visible form of the character at p[i] (a control,
// or anything from 0x80 on) and returns the index after it.
func appendRune(dst, p []byte, i int) ([]byte, int) {
	b := p[i]
	if b < utf8.RuneSelf {
		if passes(b) {
			return append(dst, b), i + 1
		}
		if b == 0x7f {
			return append(dst, '^', '?'), i + 1
		}
		return append(dst, '^', b+0x40), i + 1
	}
	r, size := utf8.DecodeRune(p[i:])
	switch {
	case r == utf8.RuneError && size == 1:
		// Invalid, overlong (C0 9B would be ESC to a lenient decoder) or
		// cut short: a raw byte, such as an 8-bit CSI.
		return appendByte(dst, b), i + 1
	case r >= 0x80 && r <= 0x9f:
		return append(dst, '<', 'U', '+', '0', '0', hexDigit(byte(r)>>4), hexDigit(byte(r)&15), '>'), i + size
	}
	return append(dst, p[i:i+size]...), i + size
}

// appendByte appends b as <XX>.
func appendByte(dst []byte, b byte) []byte {
	return append(dst, '<', hexDigit(b>>4), hexDigit(b&15), '>')
}

func hexDigit(n byte) byte { return "0123456789ABCDEF"[n] }
