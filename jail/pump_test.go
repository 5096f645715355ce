package jail

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPumpOutput: output that goes to a terminal has its control
// characters made visible, the rest passes byte for byte; the limit and
// the counts are of what the payload wrote either way.
func TestPumpOutput(t *testing.T) {
	attack := "\x1b]0;title\x07\x1b[1A\x1b[2K\rrljail: fake\n\x9b2J\xc2"
	for _, tc := range []struct {
		name      string
		chunks    []string
		limit     int64
		visible   bool
		want      string
		truncated bool
	}{
		{"passed as written", []string{attack, "\x9bx"}, 1 << 20, false, attack + "\x9bx", false},
		{"made visible", []string{attack, "\x9bx"}, 1 << 20, true, "^[]0;title^G^[[1A^[[2K\rrljail: fake\n<9B>2J<U+009B>x", false},
		{"a character cut by the end of the output", []string{"ok\xe2\x82"}, 1 << 20, true, "ok<E2><82>", false},
		{"the limit counts the payload's bytes, raw", []string{"\x1b\x1b\x1b\x1b"}, 2, false, "\x1b\x1b", true},
		{"the limit counts the payload's bytes, visible", []string{"\x1b\x1b\x1b\x1b"}, 2, true, "^[^[", true},
		{"a character cut by the limit", []string{"a€b"}, 3, true, "a<E2><82>", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, c := range tc.chunks {
				total += len(c)
			}
			go func() {
				for _, c := range tc.chunks {
					_, _ = w.Write([]byte(c))
				}
				w.Close()
			}()
			var dst bytes.Buffer
			var read atomic.Int64
			p := pumpOutput(&dst, r, tc.limit, &read, tc.visible, nil)
			if p.writeErr != nil {
				t.Fatal(p.writeErr)
			}
			if got := dst.String(); got != tc.want {
				t.Errorf("passed on %q, want %q", got, tc.want)
			}
			if p.total != int64(total) || read.Load() != int64(total) || p.truncated != tc.truncated {
				t.Errorf("total %d (read %d), truncated %v; want %d, %v", p.total, read.Load(), p.truncated, total, tc.truncated)
			}
		})
	}
}

type terminalAnswer bool

func (a terminalAnswer) Write(p []byte) (int, error) { return len(p), nil }
func (a terminalAnswer) IsTerminal() bool            { return bool(a) }

type wrapped struct{ w io.Writer }

func (w wrapped) Write(p []byte) (int, error) { return w.w.Write(p) }
func (w wrapped) Unwrap() io.Writer           { return w.w }

func TestIsTerminal(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	devNull, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"a pty", master, true},
		{"a pty, wrapped", wrapped{master}, true},
		{"a pipe", w, false},
		{"a file", file, false},
		{"/dev/null", devNull, false},
		{"nil", nil, false},
		{"a buffer", &bytes.Buffer{}, false},
		{"a writer that says it is one", wrapped{terminalAnswer(true)}, true},
		{"a writer that says it is not one", terminalAnswer(false), false},
	} {
		if got := IsTerminal(tc.w); got != tc.want {
			t.Errorf("%s: IsTerminal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
