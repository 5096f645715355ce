package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/bridge"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/session"
)

// defaultSessionTimeout is a session's --timeout: a trajectory, not a
// command.
const defaultSessionTimeout = "30m"

// sessionCommand is `rljail session`: one jail holding a persistent Python
// worker, driven over JSON lines on stdin and stdout
// (docs/session-protocol.md). It takes every flag of run, and its own.
func sessionCommand(stdin io.Reader, stdout, stderr io.Writer) *cli.Command {
	var flags []cli.Flag
	for _, f := range runCommand(nil, nil, nil).Flags {
		// A session's cells carry their own output (exec's reply).
		if f.Names()[0] != "result-output" {
			flags = append(flags, f)
		}
	}
	for _, f := range flags {
		if sf, ok := f.(stringFlag); ok && sf.Name == "timeout" {
			sf.Value = defaultSessionTimeout
			sf.Usage = "the whole session's wall-clock limit; at it the jail is killed and every request gets SessionLost"
		}
	}
	own := []cli.Flag{
		&cli.StringFlag{Name: "cell-timeout", Value: "30s", Usage: "one cell's wall-clock limit: the cell gets a KeyboardInterrupt (state kept, error CellTimeout)"},
		&cli.StringFlag{Name: "cell-grace", Value: "1s", Usage: "how long a cell interrupted at --cell-timeout has to stop before the jail is killed (SessionLost)"},
		&cli.IntFlag{Name: "max-output-chars", Value: session.DefaultMaxOutputChars, Usage: "each cell's stdout and stderr cap (bytes of UTF-8), head and tail kept"},
		&cli.IntFlag{Name: "max-cells", Usage: "most cells a session runs (0: no limit); exec then gets CellLimit"},
		&cli.StringFlag{Name: "idle-timeout", Usage: "end the session when no request came for this long (default: never)"},
	}
	own = append(own, llmFlags("the runner, as call events")...)
	own = append(own, []cli.Flag{
		&cli.IntFlag{Name: "max-llm-calls", Value: bridge.DefaultMaxLLMCalls, Usage: "most model calls a session makes (each prompt of a batch counts); then LLMBudgetExceeded in the cell"},
		&cli.IntFlag{Name: "max-llm-prompt-chars", Value: bridge.DefaultMaxPromptChars, Usage: "longest prompt, in characters"},
		&cli.IntFlag{Name: "max-tool-calls", Value: bridge.DefaultMaxToolCalls, Usage: "most tool calls a session makes; then ToolBudgetExceeded in the cell"},
		&cli.StringFlag{Name: "call-timeout", Value: "120s", Usage: "one call's wall-clock limit; then CallTimeout in the cell"},
		&cli.GenericFlag{Name: "tool", Value: &toolList{}, Usage: "declare a host tool the jail may call: NAME or NAME:param1,param2 (answered by the runner as call events)"},
		&cli.BoolFlag{Name: "audit-prompts", Usage: "put the prompt texts into the audit log's call records (sizes and sha256 always)"},
	}...)
	flags = append(flags, withFixedNames(own)...)
	return &cli.Command{
		Name:         "session",
		Usage:        "start one jail holding a persistent Python and serve it over JSON lines on stdin/stdout (docs/session-protocol.md)",
		UsageText:    "rljail session [flags]",
		OnUsageError: usageError,
		Flags:        flags,
		Action: func(c *cli.Context) error {
			return sessionAction(c, stdin, stdout, stderr)
		},
	}
}

func sessionAction(c *cli.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	if c.NArg() > 0 {
		return setupError("rljail session takes no command (%q): the jail runs rljail's worker; send code with exec", c.Args().First())
	}
	quiet := c.Bool("quiet")
	own := ownLines(stderr)
	notice := func(format string, a ...any) {
		if !quiet {
			fmt.Fprintf(own, "rljail: "+format+"\n", a...)
		}
	}
	set := flagsSet(c)
	cfg := session.Config{Version: version}
	var err error
	if cfg.CellTimeout, err = parseDuration("cell-timeout", c.String("cell-timeout")); err != nil {
		return setupError("%v", err)
	}
	if cfg.CellGrace, err = parseDuration("cell-grace", c.String("cell-grace")); err != nil {
		return setupError("%v", err)
	}
	if set["idle-timeout"] {
		if cfg.IdleTimeout, err = parseDuration("idle-timeout", c.String("idle-timeout")); err != nil {
			return setupError("%v", err)
		}
	}
	if cfg.MaxOutputChars = c.Int("max-output-chars"); cfg.MaxOutputChars < 2 {
		return setupError("--max-output-chars %d must be 2 at least (head and tail)", cfg.MaxOutputChars)
	}
	if cfg.MaxCells = c.Int("max-cells"); cfg.MaxCells < 0 {
		return setupError("--max-cells %d is negative", cfg.MaxCells)
	}
	llmKey, err := bridgeConfig(c, &cfg)
	if err != nil {
		return setupError("%v", err)
	}
	if set["output-limit"] {
		notice("--output-limit does not apply to a session: each cell's output is capped by --max-output-chars")
	}
	// The files rljail reads and writes for the caller go through the
	// run's Guard (hostfile): the profile first, whose volumes join the
	// flags' in the writable-volume rule.
	guard, prof, err := loadProfile(c)
	if err != nil {
		return setupError("%v", err)
	}
	// The jail's report (a run's, for the whole session) goes to
	// --result's file and --result-fd's descriptor when the session ends.
	// Room for the report is made now, as a run makes it: a full disk
	// refuses the session before its jail starts, not at its end.
	start := time.Now()
	var resultFiles []reportFile
	var createdResult string
	if p := c.String("result"); p != "" {
		f, created, err := openResult(guard, p, stdout, stderr, false, reportReserve)
		if err != nil {
			return setupError("open the result file: %v", err)
		}
		defer f.Close()
		createdResult = created
		resultFiles = append(resultFiles, f)
	}
	// From here a setup error leaves its report in the files opened so
	// far, as a run's does (a report rljail made and cannot write is
	// removed).
	failEarly := func(err error) error {
		var ee *exitError
		if errors.As(err, &ee) {
			for _, f := range resultFiles {
				if werr := f.write(setupErrorResult(ee.code, ee.msg, time.Since(start))); werr != nil && f.ours && createdResult != "" {
					_ = os.Remove(createdResult)
				}
			}
		}
		return err
	}
	switch fd := c.Int("result-fd"); {
	case fd < -1 || (fd >= 0 && fd <= 2):
		return failEarly(setupError("--result-fd %d: use a descriptor above 2 (stdin and stdout carry the protocol)", fd))
	case fd >= 0:
		if err := checkResultFD(fd); err != nil {
			return failEarly(setupError("%v", err))
		}
		if err := guard.CheckFD("--result-fd", fd); err != nil {
			return failEarly(setupError("%v", err))
		}
		f := os.NewFile(uintptr(fd), "result-fd")
		defer f.Close()
		resultFiles = append(resultFiles, reportFile{File: f})
	}
	if p := c.String("audit-log"); p != "" {
		f, created, err := guard.OpenWrite("--audit-log", p, unix.O_WRONLY|unix.O_APPEND, 0o600)
		if err != nil {
			return failEarly(setupError("open the audit log: %v", err))
		}
		defer f.Close()
		var end int64
		if st, err := f.Stat(); err == nil {
			end = st.Size()
		}
		if err := reserveSpace(f, end, reportReserve); err != nil {
			if created {
				_ = os.Remove(p) // ours, and empty
			}
			return failEarly(setupError("no room for the audit log's records in %s: %v", p, err))
		}
		cfg.Audit = f
	}
	if cfg.Spec, err = buildJailSpec(c, set, prof, guard, notice); err != nil {
		return failEarly(setupError("%v", err))
	}
	if err = prepareRootfs(c, prof, guard, notice, &cfg.Spec); err != nil {
		return failEarly(setupError("%v", err))
	}
	for _, kv := range cfg.Spec.Env {
		// -e KEY, an env file or a profile would hand the jail the very
		// key the bridge keeps on the host.
		if llmKey != "" && strings.Contains(kv, llmKey) {
			return failEarly(setupError("--llm openai: the jail's environment would hold the model's key (%s); the bridge keeps it on the host", strings.SplitN(kv, "=", 2)[0]))
		}
	}
	cfg.Spec.Early, _ = c.App.Metadata[earlyKey].(*jail.Early)
	cfg.Spec.Warn = func(msg string) { fmt.Fprintln(own, "rljail: warning: "+msg) }
	level := slog.LevelWarn
	if c.Bool("verbose") {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// SIGTERM, SIGHUP and SIGQUIT end the session (nothing is left); a
	// SIGINT interrupts the running cell, as the interrupt request does.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGINT)
	defer signal.Stop(sigs)

	// A signal that ends the session ends its start too: the worker may
	// take until the session's timeout to be ready (a rootfs package that
	// hangs in its .pth), and nothing of the jail is left once New has
	// returned.
	ctx, cancel := context.WithTimeout(context.Background(), max(cfg.Spec.Timeout, 10*time.Second))
	var stopped os.Signal
	starting := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-starting:
				return
			case sig := <-sigs:
				if sig != syscall.SIGINT {
					stopped = sig
					cancel()
					return
				}
			}
		}
	}()
	sess, err := session.New(ctx, cfg)
	close(starting)
	<-watched
	cancel()
	if stopped != nil {
		if err == nil {
			if werr := finishSession(sess, resultFiles, createdResult); werr != nil {
				fmt.Fprintln(own, "rljail: "+werr.Error())
			}
		}
		return &exitError{code: 128 + int(stopped.(syscall.Signal))}
	}
	if err != nil {
		return failEarly(setupError("%v", err))
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if sig == syscall.SIGINT {
					sess.Interrupt()
					continue
				}
				stopped = sig
				sess.Close()
				// Serve is blocked on stdin: the process ends here.
				if err := finishSession(sess, resultFiles, createdResult); err != nil {
					fmt.Fprintln(own, "rljail: "+err.Error())
				}
				os.Exit(128 + int(sig.(syscall.Signal)))
			}
		}
	}()
	// Requests wait in Go's poller, not in a thread blocked in read: a
	// blocked reader's wake-up cost about a millisecond a request.
	in, closeIn := pollableStdin(stdin)
	defer closeIn()
	err = sess.Serve(in, aboveTwo(stdout))
	close(done)
	werr := finishSession(sess, resultFiles, createdResult)
	if stopped != nil {
		if werr != nil {
			fmt.Fprintln(own, "rljail: "+werr.Error())
		}
		return &exitError{code: 128 + int(stopped.(syscall.Signal))}
	}
	if err != nil {
		notice("the session's output failed: %v", err)
	}
	return werr
}

// finishSession ends the session and writes the jail's report. A report
// that cannot be written is the error (as a run's: exit 125), and its
// file, when rljail made it, is removed: an empty one would read as a
// report.
func finishSession(sess *session.Session, files []reportFile, created string) error {
	res := sess.Close()
	var first error
	for _, f := range files {
		if err := f.write(res); err != nil {
			if f.ours && created != "" {
				_ = os.Remove(created)
			}
			if first == nil {
				first = setupError("write the result report: %v", err)
			}
		}
	}
	return first
}

// bridgeConfig reads the bridge's flags into cfg: the budgets, the tools,
// and who answers the model calls. With --llm openai the key is read here,
// from rljail's own environment, and goes nowhere but the endpoint's
// Authorization header: the jail's environment is built from its own
// allowlist, never from rljail's.
func bridgeConfig(c *cli.Context, cfg *session.Config) (key string, err error) {
	b := bridge.Config{MaxLLMCalls: c.Int("max-llm-calls"), MaxToolCalls: c.Int("max-tool-calls"), MaxPromptChars: c.Int("max-llm-prompt-chars")}
	for name, v := range map[string]int{"max-llm-calls": b.MaxLLMCalls, "max-tool-calls": b.MaxToolCalls, "max-llm-prompt-chars": b.MaxPromptChars} {
		if v < 0 {
			return "", fmt.Errorf("--%s %d is negative", name, v)
		}
	}
	// 0 means none may be made (bridge.Config takes a negative for it).
	if b.MaxLLMCalls == 0 {
		b.MaxLLMCalls = -1
	}
	if b.MaxToolCalls == 0 {
		b.MaxToolCalls = -1
	}
	if b.MaxPromptChars == 0 {
		return "", fmt.Errorf("--max-llm-prompt-chars 0 leaves no prompt possible: use --max-llm-calls 0")
	}
	if b.CallTimeout, err = parseDuration("call-timeout", c.String("call-timeout")); err != nil {
		return "", err
	}
	seen := map[string]bool{}
	tl, _ := c.Generic("tool").(*toolList)
	for _, v := range tl.list() {
		t, err := bridge.ParseTool(v)
		if err != nil {
			return "", err
		}
		if seen[t.Name] {
			return "", fmt.Errorf("--tool %s is declared twice", t.Name)
		}
		seen[t.Name] = true
		b.Tools = append(b.Tools, t)
	}
	cfg.Bridge, cfg.AuditPrompts = b, c.Bool("audit-prompts")
	a, mode, key, err := llmFromFlags(c)
	if err != nil {
		return "", err
	}
	cfg.LLMMode = mode
	if a != nil {
		cfg.LLM = a
	}
	return key, nil
}

// toolList holds the --tool values, each whole: a StringSliceFlag would
// split NAME:a,b at its commas.
type toolList struct{ values []string }

func (t *toolList) Set(v string) error { t.values = append(t.values, v); return nil }
func (t *toolList) String() string {
	if t == nil {
		return ""
	}
	return strings.Join(t.values, " ")
}

func (t *toolList) list() []string {
	if t == nil {
		return nil
	}
	return t.values
}
