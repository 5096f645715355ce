package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPollableStdin: a pipe or a character device is opened a second time,
// non-blocking, and the first open stays blocking (other processes share
// it); a pipe that may not be opened again (another user's) is read
// through an epoll descriptor, and stays blocking too; anything else is
// passed through. What is written to the pipe must come out of the second
// open, up to the end.
func TestPollableStdin(t *testing.T) {
	blockingPipe := func(t *testing.T) (r, w *os.File) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	}
	tests := []struct {
		name       string
		in         func(t *testing.T) (in io.Reader, feed func())
		wantReopen bool
		want       string
		// reopen, unless nil, makes the second open (reopenFD if nil).
		reopen     func(fd int) (int, error)
		wantPolled bool
	}{
		{"a reader that is no file", func(t *testing.T) (io.Reader, func()) {
			return strings.NewReader("x"), func() {}
		}, false, "x", nil, false},
		{"a regular file", func(t *testing.T) (io.Reader, func()) {
			f, err := os.CreateTemp(t.TempDir(), "in")
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("file")
			f.Seek(0, io.SeekStart)
			return f, func() {}
		}, false, "file", nil, false},
		{"a pipe", func(t *testing.T) (io.Reader, func()) {
			r, w := blockingPipe(t)
			return r, func() { w.WriteString("piped"); w.Close() }
		}, true, "piped", nil, false},
		{"a pipe it may not open again", func(t *testing.T) (io.Reader, func()) {
			r, w := blockingPipe(t)
			return r, func() { w.WriteString("polled"); w.Close() }
		}, true, "polled", func(int) (int, error) { return -1, unix.EACCES }, true},
		{"a non-blocking pipe it may not open again", func(t *testing.T) (io.Reader, func()) {
			r, w := blockingPipe(t)
			if err := unix.SetNonblock(int(r.Fd()), true); err != nil {
				t.Fatal(err)
			}
			return r, func() { w.WriteString("polled"); w.Close() }
		}, true, "polled", func(int) (int, error) { return -1, unix.EACCES }, true},
		{"/dev/null, a device but no terminal", func(t *testing.T) (io.Reader, func()) {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			return f, func() {}
		}, false, "", nil, false},
		{"a terminal", func(t *testing.T) (io.Reader, func()) {
			master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { master.Close() })
			mfd := int(master.Fd())
			if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
				t.Fatal(err)
			}
			n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
			if err != nil {
				t.Fatal(err)
			}
			// Opened raw: os.OpenFile would make it non-blocking itself.
			sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			slave := os.NewFile(uintptr(sfd), "tty")
			t.Cleanup(func() { slave.Close() })
			return slave, func() { master.WriteString("tty\n") }
		}, true, "tty\n", nil, false},
		{"a socket", func(t *testing.T) (io.Reader, func()) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			w := os.NewFile(uintptr(fds[1]), "w")
			return os.NewFile(uintptr(fds[0]), "r"), func() { w.WriteString("sock"); w.Close() }
		}, false, "sock", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, feed := tt.in(t)
			reopen := tt.reopen
			if reopen == nil {
				reopen = reopenFD
			}
			got, closeGot := pollableStdinWith(in, reopen)
			defer closeGot()
			if _, polled := got.(*polledStdin); polled != tt.wantPolled {
				t.Fatalf("read through epoll: %v, want %v", polled, tt.wantPolled)
			}
			if reopened := got != in; reopened != tt.wantReopen {
				t.Fatalf("opened again: %v, want %v", reopened, tt.wantReopen)
			}
			if f, ok := in.(*os.File); ok && !strings.HasPrefix(tt.name, "a non-blocking") {
				flags, err := fileFlags(f)
				if err != nil || flags&unix.O_NONBLOCK != 0 {
					t.Errorf("the caller's open file became non-blocking (flags %#x, %v)", flags, err)
				}
			}
			if g, ok := got.(*os.File); ok && tt.wantReopen {
				flags, err := fileFlags(g)
				if err != nil || flags&unix.O_NONBLOCK == 0 {
					t.Errorf("the second open is blocking (flags %#x, %v)", flags, err)
				}
			}
			feed()
			var b []byte
			var err error
			if strings.HasSuffix(tt.want, "\n") {
				// A terminal gives a line and no end.
				b = make([]byte, 64)
				var n int
				n, err = got.Read(b)
				b = b[:n]
			} else {
				b, err = io.ReadAll(got)
			}
			if err != nil || string(b) != tt.want {
				t.Errorf("read %q, %v; want %q", b, err, tt.want)
			}
		})
	}
}

// fileFlags reads f's status flags without Fd (which may make f blocking).
func fileFlags(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		return 0, err
	}
	return flags, ferr
}

// TestPolledStdinWaits: a read through the epoll descriptor that starts
// before the input waits for it (in the poller) and gets every write, up to
// the end.
func TestPolledStdinWaits(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer r.Close()
	got, closeGot := pollableStdinWith(r, func(int) (int, error) { return -1, unix.EACCES })
	defer closeGot()
	if _, ok := got.(*polledStdin); !ok {
		t.Fatalf("got %T, want a *polledStdin", got)
	}
	read := make(chan string)
	go func() {
		b, err := io.ReadAll(got)
		if err != nil {
			b = append(b, " error: "+err.Error()...)
		}
		read <- string(b)
	}()
	for _, s := range []string{"one\n", "two\n"} {
		if _, err := w.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if s := <-read; s != "one\ntwo\n" {
		t.Errorf("read %q, want %q", s, "one\ntwo\n")
	}
}
