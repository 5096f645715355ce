package termsafe

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// visible runs chunks through a Writer, flushes it and returns what came
// out, and how many writes reached the destination.
func visible(t *testing.T, chunks ...string) (string, int) {
	t.Helper()
	var dst countingWriter
	w := NewWriter(&dst)
	for _, c := range chunks {
		n, err := w.Write([]byte(c))
		if err != nil || n != len(c) {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return dst.String(), dst.writes
}

type countingWriter struct {
	bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.Buffer.Write(p)
}

func TestVisibleForms(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"plain text", []string{"hello, world\n"}, "hello, world\n"},
		{"tab, line feed, carriage return (progress bars)", []string{"a\tb\n 10%\r 20%\r"}, "a\tb\n 10%\r 20%\r"},
		{"backspace", []string{"ab\bc"}, "ab^Hc"},
		{"every other C0", []string{"\x00\x01\x07\x0b\x0c\x0e\x0f\x1b\x1f"}, "^@^A^G^K^L^N^O^[^_"},
		{"DEL", []string{"x\x7fy"}, "x^?y"},
		{"OSC 0 title", []string{"\x1b]0;owned\x07"}, "^[]0;owned^G"},
		{"OSC 52 clipboard query", []string{"\x1b]52;c;?\x1b\\"}, `^[]52;c;?^[\`},
		{"erase line, cursor up", []string{"\x1b[1A\x1b[2K\rrljail: fake\n"}, "^[[1A^[[2K\rrljail: fake\n"},
		{"ESC split from its sequence", []string{"a\x1b", "[2Kb"}, "a^[[2Kb"},
		{"8-bit CSI, raw", []string{"\x9b2J"}, "<9B>2J"},
		{"8-bit OSC and ST, raw", []string{"\x9d0;t\x9c"}, "<9D>0;t<9C>"},
		{"C1 CSI in UTF-8", []string{"\u009b2J"}, "<U+009B>2J"},
		{"first and last C1 in UTF-8", []string{"\u0080\u009f\u00a0"}, "<U+0080><U+009F>\u00a0"},
		{"C1 in UTF-8 split between writes", []string{"x\xc2", "\x9by"}, "x<U+009B>y"},
		{"valid UTF-8", []string{"é ü € 😀 \ufffd \u00a0"}, "é ü € 😀 \ufffd \u00a0"},
		{"a 4-byte character split three ways", []string{"\xf0", "\x9f\x98", "\x80!"}, "😀!"},
		{"a 4-byte character one byte at a time", []string{"\xf0", "\x9f", "\x98", "\x80"}, "😀"},
		{"a 3-byte character split after two", []string{"\xe2\x82", "\xac"}, "€"},
		{"a cut sequence then ASCII", []string{"\xe2\x82", "A"}, "<E2><82>A"},
		{"a cut sequence then ESC", []string{"\xe2", "\x1b[m"}, "<E2>^[[m"},
		{"a cut sequence at the end of the stream", []string{"ok\xe2\x82"}, "ok<E2><82>"},
		{"a lone continuation byte", []string{"\x80"}, "<80>"},
		{"overlong ESC", []string{"\xc0\x9b"}, "<C0><9B>"},
		{"overlong C1", []string{"\xe0\x82\x9b"}, "<E0><82><9B>"},
		{"surrogate", []string{"\xed\xa0\x80"}, "<ED><A0><80>"},
		{"beyond U+10FFFF", []string{"\xf4\x90\x80\x80"}, "<F4><90><80><80>"},
		{"invalid lead bytes", []string{"\xff\xfe\xf8"}, "<FF><FE><F8>"},
		{"empty writes", []string{"", "a", "", "\xc2", "", "\x85"}, "a<U+0085>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := visible(t, tc.chunks...)
			if got != tc.want {
				t.Errorf("%q became %q, want %q", tc.chunks, got, tc.want)
			}
			// However the same bytes are split, the result is the same.
			whole := strings.Join(tc.chunks, "")
			if one, _ := visible(t, whole); one != tc.want {
				t.Errorf("%q in one write became %q, want %q", whole, one, tc.want)
			}
			var bytewise []string
			for i := 0; i < len(whole); i++ {
				bytewise = append(bytewise, whole[i:i+1])
			}
			if b, _ := visible(t, bytewise...); b != tc.want {
				t.Errorf("%q byte by byte became %q, want %q", whole, b, tc.want)
			}
			if a := string(Append(nil, []byte(whole))); a != tc.want {
				t.Errorf("Append(%q) = %q, want %q", whole, a, tc.want)
			}
		})
	}
}

// TestOneWritePerWrite: a write becomes one write of the destination (a
// terminal gets it as the payload wrote it), or none while a sequence is
// held.
func TestOneWritePerWrite(t *testing.T) {
	if _, n := visible(t, "a\x1b[31mred\x1b[m\n"); n != 1 {
		t.Errorf("one write became %d", n)
	}
	if _, n := visible(t, "\xf0", "\x9f", "\x98\x80"); n != 1 {
		t.Errorf("a character in three writes became %d writes", n)
	}
}

func TestWriteError(t *testing.T) {
	boom := errors.New("boom")
	w := NewWriter(failingWriter{boom})
	if n, err := w.Write([]byte("x")); n != 0 || !errors.Is(err, boom) {
		t.Errorf("Write = %d, %v; want 0, %v", n, err, boom)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// FuzzWriter holds every output to the promise: nothing a terminal would
// act on (no C0 but line feed, tab and carriage return, no DEL, no C1 in
// any form), valid UTF-8, at most MaxGrowth times the input, and the same
// wherever the input is split.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("\x1b]52;c;?\x07\x9b\xc2\x9b\xf0\x9f\x98\x80"), 3)
	f.Add([]byte("plain\r\n"), 1)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		var whole, split bytes.Buffer
		w := NewWriter(&whole)
		_, _ = w.Write(in)
		_ = w.Flush()
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		s := NewWriter(&split)
		_, _ = s.Write(in[:cut])
		_, _ = s.Write(in[cut:])
		_ = s.Flush()
		out := whole.Bytes()
		if !bytes.Equal(out, split.Bytes()) {
			t.Fatalf("%q: whole %q, split at %d %q", in, out, cut, split.Bytes())
		}
		if len(out) > MaxGrowth*len(in) {
			t.Fatalf("%q grew to %d bytes", in, len(out))
		}
		if !utf8.Valid(out) {
			t.Fatalf("%q: output not UTF-8: %q", in, out)
		}
		for _, r := range string(out) {
			if (r < 0x20 && r != '\n' && r != '\t' && r != '\r') || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("%q: control %U in the output %q", in, r, out)
			}
		}
	})
}
