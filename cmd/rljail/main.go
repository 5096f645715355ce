// Command rljail runs untrusted code, such as model-written Python, in a
// throwaway Linux jail: no network, no host files but the ones granted, no
// secrets, and a time limit. See README.md, docs/ and the man page
// (rljail man: generated from this command's own flags).
//
//	rljail [flags] -- CMD [ARG...]
//	rljail docker run [DOCKER FLAGS] IMAGE CMD [ARG...] (also as "docker")
//	rljail session [flags]
//	rljail rootfs build|info
//	rljail check
//	rljail version
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/spelling"
	"github.com/rljail/rljail/termsafe"
)

// version is set by the Makefile (-ldflags -X main.version=...).
var version = "dev"

// exitError carries the exit status a command wants, with an optional
// message for stderr.
type exitError struct {
	code int
	msg  string
	// usage: the command line did not parse (usageError).
	usage bool
}

func (e *exitError) Error() string { return e.msg }

func main() {
	if jail.IsInit() {
		jail.InitMain()
		return
	}
	jail.DropEntryEnv()
	// The process exits at once: the signals stay caught until then
	// (restoring them costs a hand-over to Go's signal thread per signal).
	os.Exit(runCLI(os.Args, os.Stdin, os.Stdout, os.Stderr, false))
}

// subcommands are the words that select a subcommand in argv[1]; anything
// else is a run (`rljail [flags] -- CMD` is `rljail run [flags] -- CMD`).
var subcommands = map[string]bool{
	"run": true, "session": true, "serve": true, "rootfs": true, "check": true, "version": true, "help": true, "profiles": true,
	"man": true,
	"-h":  true, "--help": true, "-v": false,
}

// run runs the CLI as main does, and restores the signals' handling after
// a run (tests call it in turn).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runCLI(args, stdin, stdout, stderr, true)
}

// runOptions are what a front end (runDocker) changes in a run.
type runOptions struct {
	// timeoutExit, when not 0, is the exit status of a run that the kill
	// timer ended, instead of 124.
	timeoutExit int
	// notice, when not "", is a line for stderr once the command line has
	// been read and the run starts (not with --quiet).
	notice string
}

func runCLI(args []string, stdin io.Reader, stdout, stderr io.Writer, restoreSignals bool) int {
	if len(args) >= 1 {
		if d, ok := dockerArgs(args); ok {
			return runDocker(d, stdin, stdout, stderr, restoreSignals)
		}
	}
	return runCLIWith(args, stdin, stdout, stderr, restoreSignals, runOptions{})
}

func runCLIWith(args []string, stdin io.Reader, stdout, stderr io.Writer, restoreSignals bool, opts runOptions) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "rljail: no command given: usage: rljail [flags] -- CMD [ARG...] (see rljail --help)")
		return jail.ExitSetupError
	}
	if args[1] == "--version" {
		args = append([]string{args[0], "version"}, args[2:]...)
	}
	if !subcommands[args[1]] {
		args = append([]string{args[0], "run"}, args[1:]...)
	}
	if args[1] == "run" {
		// Go's runtime ends a process that gets EPIPE writing to its
		// descriptor 1 or 2 with SIGPIPE (os.File's epipecheck), which
		// would end rljail without a report when its reader goes away
		// (rljail ... | head). Copies above 2 fail with EPIPE instead, and
		// the output pump then stops as a pipe would (jail.pumpOutput).
		stdout, stderr = trackLines(aboveTwo(stdout), aboveTwo(stderr))
	}
	app := newApp(stdin, stdout, stderr)
	if args[1] == "session" {
		// A session's jail takes over the init stage the entry started,
		// as a run's does (its signals are the session's own).
		early := jail.StartEarly()
		defer early.Close()
		app.Metadata = map[string]any{earlyKey: early, rootfsCheckKey: startRootfsCheckEarly(args[2:])}
	} else if args[1] != "run" {
		// The binary's entry starts an init stage for what it takes for
		// a run, before Go starts; none is needed here.
		jail.DiscardPrestarted()
	} else {
		// The signals are caught first, so that one meant for the payload
		// ends it rather than rljail (see jail.SignalPipe).
		sigs, err := catchSignals()
		if err != nil {
			jail.DiscardPrestarted()
			fmt.Fprintln(stderr, "rljail: "+err.Error())
			return jail.ExitSetupError
		}
		if restoreSignals {
			defer sigs.Stop()
		}
		// The jail's init stage starts now, while the flags are read
		// (jail.Early); whatever happens next, nothing of it outlives run.
		early := jail.StartEarly()
		defer early.Close()
		app.Metadata = map[string]any{earlyKey: early, signalsKey: sigs, optionsKey: opts, rootfsCheckKey: startRootfsCheckEarly(args[2:])}
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.usage && args[1] == "run" {
			// A runner that reads --result's file after exit 125 must not
			// find an earlier run's report there.
			reportParseFailure(args[2:], ee.msg, stdout, stderr)
		}
		// A path or name the user typed may hold control characters
		// (--rootfs $'a\x1b[2J'): the line shows them, never passes them.
		if ee.msg != "" {
			fmt.Fprintln(ownLines(stderr), "rljail: "+safeText(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintln(ownLines(stderr), "rljail: "+safeText(oneLine(err.Error())))
	return jail.ExitSetupError
}

// aboveTwo returns w, or, when w is this process's descriptor 1 or 2, a
// copy of it above 2 (close-on-exec; it lives as long as the process).
func aboveTwo(w io.Writer) io.Writer {
	var fd uintptr
	switch w {
	case os.Stdout:
		fd = 1
	case os.Stderr:
		fd = 2
	default:
		return w // (os.File.Fd would also make a shared descriptor blocking)
	}
	d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return w
	}
	return os.NewFile(uintptr(d), w.(*os.File).Name())
}

// oneLine keeps an error to the single line the CLI promises.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func usageError(c *cli.Context, err error, _ bool) error {
	msg := longFlagNames(oneLine(err.Error()))
	hint := "see rljail --help"
	if c != nil && c.Command != nil {
		if s := suggestFlag(msg, c.Command.Flags); s != "" {
			hint = "did you mean " + s + "? " + hint
		}
	}
	return &exitError{code: jail.ExitSetupError, msg: msg + " (" + hint + ")", usage: true}
}

// suggestFlag returns the flag (as --name) that the unknown one of a
// "flag provided but not defined" message was likely meant to be, or "".
func suggestFlag(msg string, flags []cli.Flag) string {
	const lead = "not defined: "
	i := strings.Index(msg, lead)
	if i < 0 {
		return ""
	}
	typed := strings.TrimLeft(strings.Fields(msg[i+len(lead):] + " ")[0], "-")
	typed, _, _ = strings.Cut(typed, "=")
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	if s := closestName(typed, names); s != "" {
		return "--" + s
	}
	return ""
}

// closestName is the name among names that typed was likely meant to be,
// or "" (package spelling).
func closestName(typed string, names []string) string { return spelling.Closest(typed, names) }

// subcommandNames are the words of argv[1] that name a subcommand, for
// the "did you mean" of a command not found.
func subcommandNames() []string {
	return []string{"run", "session", "rootfs", "check", "version", "help", "profiles", dockerName}
}

// longFlagNames writes the flag names in Go's flag errors ("flag provided
// but not defined: -bogus", "invalid value ... for flag -cpus") as the
// help spells them: two dashes for a long name.
func longFlagNames(msg string) string {
	for _, lead := range []string{"not defined: -", "for flag -", "an argument: -"} {
		i := strings.Index(msg, lead)
		if i < 0 {
			continue
		}
		rest := msg[i+len(lead):]
		name := rest
		if j := strings.IndexAny(rest, ": "); j >= 0 {
			name = rest[:j]
		}
		if len(name) > 1 && !strings.HasPrefix(name, "-") {
			msg = msg[:i+len(lead)] + "-" + rest
		}
	}
	return msg
}

// unknownSubcommand is the action of a command that has subcommands:
// reached, no subcommand matched.
func unknownSubcommand(known string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.Args().Present() {
			typed := c.Args().First()
			hint := ""
			var names []string
			for _, k := range strings.Split(known, ", ") {
				names = append(names, strings.Fields(k)[0]) // "show NAME" is show
			}
			if s := closestName(typed, names); s != "" {
				hint = fmt.Sprintf("did you mean %s? ", s)
			}
			return &exitError{code: jail.ExitSetupError, msg: fmt.Sprintf("%s has no command %q (%sit has: %s)", c.Command.Name, typed, hint, known)}
		}
		return cli.ShowSubcommandHelp(c)
	}
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:            "rljail",
		Usage:           "run untrusted code in a throwaway Linux jail",
		UsageText:       "rljail [flags] -- CMD [ARG...]\nrljail docker run [DOCKER FLAGS] IMAGE CMD [ARG...]\nrljail session [flags]\nrljail rootfs build|info\nrljail check\nrljail version",
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideVersion:     true,
		OnUsageError:    usageError,
		ExitErrHandler:  func(*cli.Context, error) {},
		CommandNotFound: func(c *cli.Context, name string) {},
		Commands: []*cli.Command{
			runCommand(stdin, stdout, stderr),
			dockerCommand(),
			sessionCommand(stdin, stdout, stderr),
			serveCommand(),
			rootfsCommand(),
			checkCommand(),
			profilesCommand(),
			manCommand(),
			{
				Name:  "version",
				Usage: "print rljail's version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "rljail", version)
					return nil
				},
			},
		},
	}
}

// lineState says whether the last byte written to one file ended a line.
// rljail's stdout and stderr share one when they are one file.
type lineState struct {
	mu    sync.Mutex
	mid   bool
	stuck bool // one of rljail's own writes blocked (ownWriter)
}

// trackedWriter is a destination of the payload's output (or of rljail's
// own lines) that keeps its lineState.
type trackedWriter struct {
	w  io.Writer
	st *lineState
	// Whether w is a terminal, asked once (by the jail for the payload's
	// output, by ownWriter for rljail's own lines).
	termOnce sync.Once
	term     bool
}

// Unwrap returns the destination (jail.OutputMerged looks through it).
func (t *trackedWriter) Unwrap() io.Writer { return t.w }

// IsTerminal tells whether the destination is a terminal (jail.IsTerminal
// asks it).
func (t *trackedWriter) IsTerminal() bool {
	t.termOnce.Do(func() { t.term = jail.IsTerminal(t.w) })
	return t.term
}

func (t *trackedWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.st.mu.Lock()
		t.st.mid = p[n-1] != '\n'
		t.st.mu.Unlock()
	}
	return n, err
}

// trackLines wraps rljail's stdout and stderr so that its own lines can
// start on a line of their own (ownLines); one state when both are one
// file.
func trackLines(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	out, errs := &lineState{}, &lineState{}
	if jail.OutputMerged(stdout, stderr) {
		errs = out
	}
	return &trackedWriter{w: stdout, st: out}, &trackedWriter{w: stderr, st: errs}
}

// ownLines is the writer for rljail's own lines on w: when the payload's
// output to the same file stopped in the middle of a line, a line break
// comes first, so that "rljail: ..." starts a line (a runner may look for
// it there). On a terminal, "rljail:" is marked (markOwn), so that a line
// the payload forges can be told from rljail's own.
func ownLines(w io.Writer) io.Writer {
	if t, ok := w.(*trackedWriter); ok {
		return ownWriter{t}
	}
	return w
}

type ownWriter struct{ t *trackedWriter }

// ownWriteWait bounds one of rljail's own writes: its stderr may be a pipe
// that nobody reads (the payload's output filled it), and rljail must
// still end at its timeout. A write given up on stays blocked in its
// goroutine until the process exits; later own lines are dropped.
const ownWriteWait = 500 * time.Millisecond

func (o ownWriter) Write(p []byte) (int, error) {
	o.t.st.mu.Lock()
	mid, stuck := o.t.st.mid, o.t.st.stuck
	o.t.st.mu.Unlock()
	if stuck {
		return 0, errors.New("an earlier write is still blocked")
	}
	n := len(p)
	var out []byte
	if mid && n > 0 {
		out = append(out, '\n')
	}
	if o.t.IsTerminal() {
		out = markOwn(out, p)
	} else {
		out = append(out, p...)
	}
	p = out
	done := make(chan error, 1)
	go func() {
		_, err := o.t.Write(p)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
		return n, nil
	case <-time.After(ownWriteWait):
		o.t.st.mu.Lock()
		o.t.st.stuck = true
		o.t.st.mu.Unlock()
		return 0, errors.New("the write blocked")
	}
}

// ownMarkStart and ownMarkEnd surround "rljail:" at the start of each of
// rljail's own lines on a terminal: reverse video, after a reset of what
// the payload's output may have left set (with --tty-passthrough). The
// payload cannot write that mark to a terminal, since its ESC shows as ^[
// there (jail.Spec.TTYPassthrough): a line it forges reads "rljail:"
// unmarked, after the erased lines and cursor moves it tried.
const (
	ownMarkStart = "\x1b[0;7m"
	ownMarkEnd   = "\x1b[27m"
	ownPrefix    = "rljail:"
)

// markOwn appends p, rljail's own lines for a terminal, to dst: "rljail:"
// marked where a line starts with it, and any control character in the
// text made visible (a file name or a command given to rljail may hold
// one).
func markOwn(dst, p []byte) []byte {
	for len(p) > 0 {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line = p[:i+1]
		}
		p = p[len(line):]
		if rest, ok := bytes.CutPrefix(line, []byte(ownPrefix)); ok {
			dst = append(dst, ownMarkStart+ownPrefix+ownMarkEnd...)
			line = rest
		}
		dst = termsafe.Append(dst, line)
	}
	return dst
}
