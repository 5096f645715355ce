package session

import (
	"strings"
	"testing"
)

// TestCapture feeds a stream in pieces, as a pump delivers it, and checks
// what each cell is given.
func TestCapture(t *testing.T) {
	marker := endMarker("0123456789abcdef0123456789abcdef")
	cases := []struct {
		name   string
		cap    int
		chunks []string // written in turn, with the marker appended to the last
		split  int      // the marker is cut after this many bytes (0: whole)
		want   string
		bytes  int64
		trunc  bool
		after  string // written after the marker: counted between cells
	}{
		{name: "small", cap: 100, chunks: []string{"hello ", "world\n"}, want: "hello world\n", bytes: 12},
		{name: "empty", cap: 100, want: "", bytes: 0},
		{name: "marker_split", cap: 100, chunks: []string{"abc"}, split: 7, want: "abc", bytes: 3},
		{name: "head_tail", cap: 10, chunks: []string{strings.Repeat("a", 50), strings.Repeat("b", 50)}, want: "aaaaa\n[... 90 bytes cut by rljail ...]\nbbbbb", bytes: 100, trunc: true},
		{name: "tail_ring", cap: 10, chunks: []string{"aaaaa", "x1", "x2", "x3", "yz"}, want: "aaaaa\n[... 3 bytes cut by rljail ...]\n2x3yz", bytes: 13, trunc: true},
		{name: "after_marker", cap: 100, chunks: []string{"cell"}, after: "late output", want: "cell", bytes: 4},
		{name: "invalid_utf8", cap: 100, chunks: []string{"a\xffb"}, want: "a\uFFFDb", bytes: 3},
		{name: "forged_marker_of_another_cell", cap: 100, chunks: []string{string(endMarker("ffffffffffffffffffffffffffffffff")), "x"}, want: string(endMarker("ffffffffffffffffffffffffffffffff")) + "x", bytes: 46},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := newCapture(c.cap)
			cp.Write([]byte("before"))
			cp.openWindow(marker)
			var stream []string
			stream = append(stream, c.chunks...)
			if c.split > 0 {
				stream = append(stream, string(marker[:c.split]), string(marker[c.split:])+c.after)
			} else {
				stream = append(stream, string(marker)+c.after)
			}
			for _, s := range stream {
				cp.Write([]byte(s))
			}
			select {
			case <-cp.done():
			default:
				t.Fatal("the marker was not seen")
			}
			out := cp.finish()
			if out.Text != c.want || out.Bytes != c.bytes || out.Truncated != c.trunc || !out.MarkerSeen {
				t.Errorf("got %q (%d bytes, truncated %v), want %q (%d, %v)", out.Text, out.Bytes, out.Truncated, c.want, c.bytes, c.trunc)
			}
			if got, want := cp.takeBetween(), int64(len("before")+len(c.after)); got != want {
				t.Errorf("between cells %d bytes, want %d", got, want)
			}
		})
	}
}

// TestCaptureNoMarker: a window the supervisor closes without the marker
// keeps what the carry held back.
func TestCaptureNoMarker(t *testing.T) {
	cp := newCapture(100)
	cp.openWindow(endMarker("0123456789abcdef0123456789abcdef"))
	cp.Write([]byte("partial output"))
	out := cp.finish()
	if out.Text != "partial output" || out.MarkerSeen {
		t.Errorf("got %+v", out)
	}
}

// TestCaptureStaleMarker: a window closed before its marker came (a
// forged reply, a lagging stream): what comes up to that marker is the
// old cell's, late, and goes to no cell; a later window's own marker ends
// the wait for it.
func TestCaptureStaleMarker(t *testing.T) {
	m1 := endMarker("11111111111111111111111111111111")
	m2 := endMarker("22222222222222222222222222222222")
	cp := newCapture(100)
	cp.openWindow(m1)
	cp.Write([]byte("one"))
	if got := cp.finish(); got.Text != "one" || got.MarkerSeen {
		t.Fatalf("the first cell: %+v", got)
	}
	cp.openWindow(m2)
	late := "late" + string(m1)
	cp.Write([]byte(late[:10]))
	cp.Write([]byte(late[10:] + "two" + string(m2[:5])))
	cp.Write(m2[5:])
	if got := cp.finish(); got.Text != "two" || !got.MarkerSeen {
		t.Errorf("the second cell got %q (marker %v), want two: the first cell's late output is no cell's", got.Text, got.MarkerSeen)
	}
	if b := cp.takeBetween(); b != int64(len(late)) {
		t.Errorf("between cells: %d bytes, want the %d of the late output", b, len(late))
	}
	// The old marker never comes (the cell closed its descriptor): the
	// next window's own marker ends the wait.
	m3 := endMarker("33333333333333333333333333333333")
	m4 := endMarker("44444444444444444444444444444444")
	cp.openWindow(m3)
	_ = cp.finish()
	cp.openWindow(m4)
	cp.Write([]byte("four" + string(m4)))
	if got := cp.finish(); got.Text != "four" || !got.MarkerSeen {
		t.Errorf("after a marker that never came: %q (marker %v), want four", got.Text, got.MarkerSeen)
	}
}
