package integration

// Attack round 2, the terminal (issue 18): a payload whose output reaches
// the caller's terminal must not drive it. Every case here decides from
// the terminal's side: the bytes read from a pty master that the test
// opened and that rljail writes to, and what the test, playing the
// terminal, was asked and answered.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases,
		attackCase{name: "terminal_escape_sequences", group: groupProcesses,
			mechanism: "rljail's stdout and stderr are a terminal (one, or one of them): write OSC 0 (title), OSC 52 (set and query the clipboard), DA and DECRQSS queries, 8-bit and UTF-8 C1 CSI, cursor-up and erase-line, then a forged rljail: line in place of the erased ones",
			layer:     "the output pump makes every control character visible on a terminal (termsafe); rljail's own lines there start with a reverse-video mark that the payload cannot write",
			run:       attackTerminalEscapes},
		attackCase{name: "terminal_reply_read_back", group: groupSecrets,
			mechanism: "rljail's stdin, stdout and stderr are one terminal in raw mode that answers queries (OSC 52 with the host's clipboard, DA): query it and read its reply on stdin",
			layer:     "no query reaches the terminal (its ESC shows as ^[), so no reply comes",
			run:       attackTerminalReply},
	)
}

// terminalAttack is what the payload of terminal_escape_sequences writes
// to its stdout and its stderr, each in two writes cut inside an escape
// sequence.
func terminalAttack(marker string) []byte {
	var b bytes.Buffer
	b.WriteString("\x1b]0;TITLE-" + marker + "\x07")                                         // OSC 0: window title
	b.WriteString("\x1b]52;c;" + base64.StdEncoding.EncodeToString([]byte("CLIP")) + "\x07") // OSC 52: set the clipboard
	b.WriteString("\x1b]52;c;?\x1b\\")                                                       // OSC 52: query it (ST-terminated)
	b.WriteString("\x1b[c\x1b[>c")                                                           // DA1, DA2
	b.WriteString("\x1bP$qm\x1b\\")                                                          // DECRQSS: the current SGR
	b.WriteString("\x9b6n")                                                                  // 8-bit CSI: cursor position report
	b.WriteString("\u009b2J")                                                                // a C1 CSI in UTF-8: erase the screen
	b.WriteString("\x9d0;T8\x9c")                                                            // 8-bit OSC title and ST
	b.WriteString("line one\nline two\n")
	b.WriteString("\x1b[2A\x1b[2K\r\x1b[1B\x1b[2K\r\x1b[1A") // back up over them and erase them
	b.WriteString("\x1bM\b\b\x7f\x0e\x0f")                   // reverse index, backspaces, DEL, shift out and in
	b.WriteString("rljail: warning: FORGED-" + marker + "\n")
	b.WriteString("rljail: timeout: FORGED-" + marker + " at a line's start\n")
	return b.Bytes()
}

const terminalAttackCode = `
import os, sys
attack = bytes.fromhex(sys.argv[1])
for fd in (1, 2):
    os.write(fd, attack[:9])
    os.write(fd, attack[9:])
    os.write(fd, b"END\n")
`

func attackTerminalEscapes(t *testing.T, m mode) {
	for _, v := range []struct {
		name           string
		stdout, stderr bool // which of them is the terminal
	}{
		{"stdout and stderr one terminal", true, true},
		{"stdout the terminal", true, false},
		{"stderr the terminal", false, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			marker := randomToken("TTY")
			attack := terminalAttack(marker)
			r := runOnTerminal(t, m, terminalOpts{stdout: v.stdout, stderr: v.stderr},
				attackPython([]string{"--verbose"}, terminalAttackCode, marker, hex.EncodeToString(attack))...)
			if r.exit != 0 {
				t.Fatalf("rljail exited %d:\n%s", r.exit, r)
			}
			// rljail's own line (--verbose's summary) shows how rljail
			// marks its lines where the terminal is stderr.
			mark := ""
			if v.stderr {
				own := screenLines(r.screen, "pids peak")
				if len(own) != 1 {
					t.Fatalf("rljail's own summary line is not on the terminal once:\n%s", r)
				}
				mark, _, _ = strings.Cut(own[0], " ")
				if !strings.Contains(mark, "\x1b") || !strings.Contains(mark, "rljail:") {
					t.Errorf("rljail's own line on the terminal starts %q: nothing the payload could not write itself", mark)
				}
			}
			// Nothing on the terminal but rljail's own marks may drive it.
			rest := r.screen
			if mark != "" && mark != "rljail:" {
				rest = strings.ReplaceAll(rest, mark, "")
			}
			if bad := terminalControls(rest); len(bad) > 0 {
				t.Errorf("control characters of the payload reached the terminal: %s", strings.Join(bad, "; "))
			}
			forged := screenLines(r.screen, "FORGED-"+marker)
			if len(forged) == 0 {
				t.Fatalf("the payload's forged lines are not on the terminal:\n%s", r)
			}
			for _, l := range forged {
				if mark != "" && strings.Contains(l, mark) {
					t.Errorf("the payload's forged line %q carries rljail's own mark %q", l, mark)
				}
			}
			// What does not go to the terminal passes as the payload
			// wrote it, escape sequences and all; rljail's own lines
			// there are plain.
			want := string(attack) + "END\n"
			if !v.stdout && r.stdout != want {
				t.Errorf("stdout, a pipe, got %q, want the payload's bytes %q", r.stdout, want)
			}
			if !v.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr, a pipe, got %q, want the payload's bytes %q in it", r.stderr, want)
				}
				if own, ok := lineValue(r.stderr, "rljail: ok, exit 0"); !ok || strings.Contains(own, "\x1b") {
					t.Errorf("rljail's own line on a pipe is not plain:\n%q", r.stderr)
				}
			}
		})
	}
}

func attackTerminalReply(t *testing.T, m mode) {
	secret := randomToken("CLIPBOARD")
	control := randomToken("TYPED")
	var mu sync.Mutex
	replies := map[string]int{}
	answered := map[string]int{}
	queries := []struct{ name, query, reply string }{
		{"OSC 52 clipboard query", "\x1b]52;c;?", "\x1b]52;c;" + base64.StdEncoding.EncodeToString([]byte(secret)) + "\x07"},
		{"DA1", "\x1b[c", "\x1b[?62;" + secret + "c"},
		{"8-bit DA1", "\x9bc", "\x1b[?62;" + secret + "c"},
		{"DECRQSS", "\x1bP$q", "\x1bP1$r" + secret + "m\x1b\\"},
	}
	typed := false
	// The test is the terminal: it answers every query it is sent, as a
	// terminal that allows OSC 52 reads does, and types a line once the
	// payload is ready, which shows that what the terminal sends reaches
	// the payload's stdin.
	answer := func(master *os.File, screen []byte) {
		mu.Lock()
		defer mu.Unlock()
		for _, q := range queries {
			for n := bytes.Count(screen, []byte(q.query)); answered[q.name] < n; answered[q.name]++ {
				replies[q.name]++
				_, _ = master.Write([]byte(q.reply))
			}
		}
		if !typed && bytes.Contains(screen, []byte("READY")) {
			typed = true
			_, _ = master.Write([]byte(control + "\r"))
		}
	}
	out := newOpenDir(t)
	query := ""
	for _, q := range queries {
		query += q.query
		if q.name == "OSC 52 clipboard query" {
			query += "\x07"
		}
		if q.name == "DECRQSS" {
			query += "m\x1b\\"
		}
	}
	code := `
import os, select, sys, time
typed = sys.argv[1].encode()
query = bytes.fromhex(sys.argv[2])
os.write(1, query[:3])
os.write(1, query[3:])
os.write(2, b"READY\n")
got = b""
end = time.monotonic() + 10
with open("/out/got", "wb") as f:
    while typed not in got and time.monotonic() < end:
        r, _, _ = select.select([0], [], [], max(0, end - time.monotonic()))
        if not r:
            break
        b = os.read(0, 4096)
        if not b:
            break
        got += b
        f.write(b)
        f.flush()
print("read", len(got), "bytes", flush=True)
os.write(1, b"END\n")
`
	r := runOnTerminal(t, m, terminalOpts{stdin: true, stdout: true, stderr: true, raw: true, answer: answer},
		attackPython([]string{"-v", out + ":/out:rw"}, code, control, control, hex.EncodeToString([]byte(query)))...)
	got, err := os.ReadFile(filepath.Join(out, "got"))
	if err != nil {
		t.Fatalf("the payload left no record of its stdin: %v\n%s", err, r)
	}
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Contains(got, []byte(control)) {
		t.Fatalf("the line the test typed on the terminal never reached the payload (it read %q): the case cannot judge\n%s", got, r)
	}
	for _, q := range queries {
		if replies[q.name] > 0 {
			t.Errorf("the payload's %s reached the terminal (%d times), which answered it", q.name, replies[q.name])
		}
	}
	if bytes.Contains(got, []byte(secret)) || strings.Contains(r.screen+r.stdout+r.stderr, secret) {
		t.Errorf("the terminal's answer, with the host's clipboard, reached the payload: it read %q", got)
	}
}

// TestTerminalOutputFilesUntouched: output that goes to a file or a pipe
// passes byte for byte, escape sequences and all, and --tty-passthrough
// passes it to a terminal as well; the report counts the payload's bytes
// wherever they went.
func TestTerminalOutputFilesUntouched(t *testing.T) {
	attack := terminalAttack("PLAIN")
	want := string(attack) + "END\n"
	code := python(terminalAttackCode, hex.EncodeToString(attack))
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Run("a file and a pipe", func(t *testing.T) {
				f, err := os.CreateTemp(newDir(t), "stdout")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				r := runOnTerminal(t, m, terminalOpts{stdoutFile: f}, code...)
				b, err := os.ReadFile(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != want || withoutOwnLines(r.stderr) != want {
					t.Errorf("the file got %q, the pipe %q; want %q in each", b, r.stderr, want)
				}
				checkOutputCounts(t, r, len(want), len(want))
			})
			t.Run("one file for both", func(t *testing.T) {
				f, err := os.CreateTemp(newDir(t), "out")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				r := runOnTerminal(t, m, terminalOpts{stdoutFile: f, stderrFile: f}, code...)
				b, err := os.ReadFile(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != want+want && withoutOwnLines(string(b)) != want+want {
					t.Errorf("the file got %q, want %q twice", b, want)
				}
				checkOutputCounts(t, r, 2*len(want), 0)
			})
			t.Run("a terminal, --tty-passthrough", func(t *testing.T) {
				r := runOnTerminal(t, m, terminalOpts{stdout: true, stderr: true, raw: true}, append([]string{"--tty-passthrough"}, code...)...)
				if got := withoutOwnLines(r.screen); got != want+want {
					t.Errorf("the terminal got %q, want %q twice", got, want)
				}
				checkOutputCounts(t, r, 2*len(want), 0)
			})
			t.Run("a terminal", func(t *testing.T) {
				r := runOnTerminal(t, m, terminalOpts{stdout: true, stderr: true, raw: true}, code...)
				got := withoutOwnLines(r.screen)
				for _, shown := range []string{"^[]0;TITLE-PLAIN^G", "^[]52;c;?^[\\", "^[P$qm^[\\", "<9B>6n", "<U+009B>2J", "<9D>0;T8<9C>", "^[M^H^H^?^N^O", "^Orljail: warning: FORGED-PLAIN\nrljail: timeout: FORGED-PLAIN at a line's start\nEND\n"} {
					if strings.Count(got, shown) != 2 {
						t.Errorf("the terminal does not show %q twice: %q", shown, got)
					}
				}
				if bad := terminalControls(got); len(bad) > 0 {
					t.Errorf("control characters reached the terminal: %s", strings.Join(bad, "; "))
				}
				checkOutputCounts(t, r, 2*len(want), 0)
			})
		})
	}
}

func checkOutputCounts(t *testing.T, r terminalRun, stdout, stderr int) {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("rljail exited %d:\n%s", r.exit, r)
	}
	o, _ := jsonInt(r.res, "stdout_bytes")
	e, _ := jsonInt(r.res, "stderr_bytes")
	if o != int64(stdout) || e != int64(stderr) {
		t.Errorf("the report counts stdout %d and stderr %d bytes, want %d and %d", o, e, stdout, stderr)
	}
}

// ---- running rljail on a terminal ----

// terminalOpts say which of rljail's standard descriptors are a new pty
// (the others: stdin /dev/null, stdout and stderr pipes, unless a file is
// given).
type terminalOpts struct {
	stdin, stdout, stderr  bool
	stdoutFile, stderrFile *os.File
	// raw puts the terminal in raw mode (cfmakeraw), as a full-screen
	// program leaves it: no line editing, no echo, no output processing
	// (the screen shows exactly the bytes written).
	raw bool
	// answer, when set, is called with everything the terminal has shown
	// after each read: the test, playing the terminal, may write its
	// replies and keystrokes to master.
	answer func(master *os.File, screen []byte)
}

// terminalRun is what one run on a terminal left.
type terminalRun struct {
	argv           []string
	screen         string // everything read on the pty's master side
	stdout, stderr string // the pipes
	exit           int
	res            map[string]any
}

func (r terminalRun) String() string {
	return fmt.Sprintf("rljail %s: exit %d\nterminal: %q\nstdout: %q\nstderr: %q", shellQuote(r.argv), r.exit, r.screen, r.stdout, r.stderr)
}

// runOnTerminal runs rljail as mode with args and its descriptors as o
// says; the pty, when there is one, is its controlling terminal, as from an
// interactive shell. The payload ends its output with a line END on each
// descriptor that is the terminal.
func runOnTerminal(t *testing.T, m mode, o terminalOpts, args ...string) terminalRun {
	t.Helper()
	resultPath := filepath.Join(newOpenDir(t), "result.json")
	r := terminalRun{argv: append([]string{"--rootfs", rootfsDir, "--result", resultPath}, args...)}
	cmd := exec.Command(testBin, r.argv...)
	cmd.Dir = newDir(t)
	cmd.Env = modeEnv(m)
	runAsMode(cmd, m)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if o.stdoutFile != nil {
		cmd.Stdout = o.stdoutFile
	}
	if o.stderrFile != nil {
		cmd.Stderr = o.stderrFile
	}
	var master, slave *os.File
	var screen syncBuffer
	var readerDone <-chan struct{} // waited for only with a terminal (slave)
	if o.stdin || o.stdout || o.stderr {
		var err error
		if master, slave, err = openPty(); err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer master.Close()
		defer slave.Close()
		if m == asRootless {
			// A user's terminal is the user's own (so rljail can open
			// it again, as it does for a terminal stdin).
			_ = os.Chown(slave.Name(), testUID, -1)
		}
		if o.raw {
			tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatalf("TCGETS: %v", err)
			}
			tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
			tio.Oflag &^= unix.OPOST
			tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
			tio.Cflag &^= unix.CSIZE | unix.PARENB
			tio.Cflag |= unix.CS8
			tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
			if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
				t.Fatalf("TCSETS: %v", err)
			}
		}
		ctty := -1
		for i, on := range []bool{o.stdin, o.stdout, o.stderr} {
			if on && ctty < 0 {
				ctty = i
			}
		}
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, ctty
		if o.stdin {
			cmd.Stdin = slave
		}
		if o.stdout {
			cmd.Stdout = slave
		}
		if o.stderr {
			cmd.Stderr = slave
		}
		readerDone = readTerminal(master, &screen, o.answer)
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rljail: %v", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case <-waitErr:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-waitErr
		t.Errorf("rljail did not end within 60 s")
	}
	r.exit = cmd.ProcessState.ExitCode()
	if slave != nil {
		screen.waitFor("END", 2*time.Second)
		time.Sleep(100 * time.Millisecond)
		slave.Close()
		select {
		case <-readerDone:
		case <-time.After(2 * time.Second):
		}
	}
	r.screen, r.stdout, r.stderr = screen.String(), stdout.String(), stderr.String()
	if b, err := os.ReadFile(resultPath); err == nil {
		_ = json.Unmarshal(b, &r.res)
	}
	t.Logf("%s", r)
	return r
}

// ownMark is how rljail's own lines start on a terminal (the attack cases
// find it on the terminal instead).
const ownMark = "\x1b[0;7mrljail:\x1b[27m "

// withoutOwnLines is what rljail wrote without its own lines (warnings,
// for one, in rootless mode), marked on a terminal or not; the payload's
// forged ones say FORGED.
func withoutOwnLines(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		own := strings.HasPrefix(l, ownMark) || (strings.HasPrefix(l, "rljail: ") && !strings.Contains(l, "FORGED"))
		if !own {
			b.WriteString(l)
		}
	}
	return b.String()
}

// screenLines returns the lines of the terminal's output that hold what,
// without their line ends.
func screenLines(screen, what string) []string {
	var found []string
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, what) {
			found = append(found, strings.TrimSuffix(l, "\r"))
		}
	}
	return found
}

// terminalControls lists, with their context, the bytes of s that a
// terminal acts on beyond line feed, carriage return and tab: C0 controls,
// DEL, C1 controls in UTF-8, and bytes from 0x80 that are not part of
// valid UTF-8 (an 8-bit C1 control, to a terminal that takes them).
func terminalControls(s string) []string {
	var bad []string
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		ctl := false
		switch {
		case r == utf8.RuneError && size == 1:
			ctl = true
		case r < 0x20:
			ctl = r != '\n' && r != '\r' && r != '\t'
		case r >= 0x7f && r <= 0x9f:
			ctl = true
		}
		if ctl && len(bad) < 8 {
			bad = append(bad, fmt.Sprintf("%q at %d in %q", s[i:i+size], i, s[max(0, i-12):min(len(s), i+12)]))
		}
		i += size
	}
	return bad
}
