package jail

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The report's text of a stream: whole when it fits the cap, else its
// head and tail with the bytes between counted, whatever the sizes of the
// writes that brought it; a cut never splits a character.
func TestOutputCapture(t *testing.T) {
	stream := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return b
	}
	for _, tc := range []struct {
		capBytes, n int
	}{{10, 0}, {10, 1}, {10, 9}, {10, 10}, {10, 11}, {10, 100}, {11, 100}, {1, 5}, {64, 1000}} {
		for _, chunk := range []int{1, 3, 7, 1000} {
			src := stream(tc.n)
			c := newOutputCapture(int64(tc.capBytes))
			for p := src; len(p) > 0; {
				k := min(chunk, len(p))
				c.add(p[:k])
				p = p[k:]
			}
			whole, tail, omitted := c.text()
			if tc.n <= tc.capBytes {
				if whole != string(src) || tail != "" || omitted != 0 {
					t.Errorf("cap %d, %d bytes in writes of %d: %q, %q, %d; want the whole stream", tc.capBytes, tc.n, chunk, whole, tail, omitted)
				}
				continue
			}
			h := tc.capBytes / 2
			wantHead, wantTail := string(src[:h]), string(src[tc.n-(tc.capBytes-h):])
			if whole != wantHead || tail != wantTail || omitted != int64(tc.n-tc.capBytes) {
				t.Errorf("cap %d, %d bytes in writes of %d: %q, %q, %d; want %q, %q, %d", tc.capBytes, tc.n, chunk, whole, tail, omitted, wantHead, wantTail, tc.n-tc.capBytes)
			}
		}
	}
	if c := newOutputCapture(0); c != nil {
		t.Errorf("a capture of 0 bytes keeps something")
	}
	var none *outputCapture
	none.add([]byte("x")) // a stream without a capture
	if w, tl, o := none.text(); w != "" || tl != "" || o != 0 {
		t.Errorf("no capture gave %q, %q, %d", w, tl, o)
	}
}

func TestOutputCaptureCutsAtCharacters(t *testing.T) {
	// 'é' is two bytes, '日' three, the emoji four: every cut position
	// falls inside one of them at some offset.
	for _, r := range []string{"é", "日", "\U0001F600"} {
		for pad := 0; pad < 4; pad++ {
			src := strings.Repeat("x", pad) + strings.Repeat(r, 20)
			c := newOutputCapture(16)
			c.add([]byte(src))
			head, tail, omitted := c.text()
			if !utf8.ValidString(head) || !utf8.ValidString(tail) {
				t.Errorf("%q: the cut split a character: head %q, tail %q", src, head, tail)
			}
			if int64(len(head)+len(tail))+omitted != int64(len(src)) {
				t.Errorf("%q: head %d + tail %d + omitted %d bytes is not the %d written", src, len(head), len(tail), omitted, len(src))
			}
			if !strings.HasPrefix(src, head) || !strings.HasSuffix(src, tail) {
				t.Errorf("%q: head %q or tail %q is not the stream's", src, head, tail)
			}
		}
	}
	// Bytes that are no UTF-8 at all are kept as they came (the report
	// writes them as U+FFFD).
	c := newOutputCapture(8)
	c.add([]byte("\xff\xfe\xfd"))
	if w, _, _ := c.text(); !bytes.Equal([]byte(w), []byte("\xff\xfe\xfd")) {
		t.Errorf("invalid UTF-8 kept as %q", w)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1: "1 byte", 1023: "1023 bytes", 1024: "1k", 64 << 10: "64k",
		104857600: "100m", 512 << 20: "512m", 1 << 30: "1g", 3 << 40: "3t",
		1536: "1.5k (1536 bytes)", 100000: "97.7k (100000 bytes)", (1 << 30) + 1: "1.0g (1073741825 bytes)",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
