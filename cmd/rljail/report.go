package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
)

// The files rljail reads or writes for its caller (--profile, --env-file,
// --result, --audit-log) are opened through hostfile.Guard, which holds
// the rules for all of them in one place: never inside a volume the jail
// may write (flags' and profile's alike), never through a planted link,
// never blocking without a bound.

// checkResultFD refuses a --result-fd that the caller did not pass open
// for writing. Whether it was open is what the binary's entry saw before
// rljail made descriptors of its own (jail.CallerFD); a test binary, whose
// entry did not look, checks it now.
func checkResultFD(fd int) error {
	flags, open, known, looked := jail.CallerFD(fd)
	switch {
	case !known && looked:
		return fmt.Errorf("--result-fd %d: give the descriptor as a decimal number", fd)
	case !known:
		f, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return fmt.Errorf("--result-fd %d is not open: %v", fd, err)
		}
		flags, open = f, true
	}
	if !open {
		return fmt.Errorf("--result-fd %d is not an open descriptor of rljail's caller (redirect one, as in 3>report.json)", fd)
	}
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		return fmt.Errorf("--result-fd %d is open for reading only", fd)
	}
	// A pipe whose reader is gone reports POLLERR: the report could never
	// be read, and finding that out after the payload ran would lose its
	// exit status.
	pfd := []unix.PollFd{{Fd: int32(fd), Events: 0}}
	if n, err := unix.Poll(pfd, 0); err == nil && n > 0 && pfd[0].Revents&unix.POLLERR != 0 {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			return fmt.Errorf("--result-fd %d is a pipe whose reader is gone", fd)
		}
	}
	return nil
}

// flagValuesInArgs finds the values of the flag named names in a run's
// arguments as Go's flag parsing reads them: flags up to "--" or the
// first argument that is not one (the payload's own arguments come
// after), in order (for --result the last one wins). A flag run does not
// know is taken to have no value.
func flagValuesInArgs(args []string, names ...string) []string {
	takesValue := map[string]bool{}
	for _, f := range runCommand(nil, nil, nil).Flags {
		if df, ok := f.(cli.DocGenerationFlag); ok && !df.TakesValue() {
			continue // a bool flag
		}
		for _, n := range f.Names() {
			takesValue[n] = true
		}
	}
	var values []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		name := strings.TrimLeft(a, "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		if !takesValue[name] {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		if slices.Contains(names, name) {
			values = append(values, value)
		}
	}
	return values
}

// resultPathInArgs finds --result's file in a run's arguments (the last
// one given wins), or "".
func resultPathInArgs(args []string) string {
	if v := flagValuesInArgs(args, "result"); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// reportParseFailure writes a setup_error report to --result's file when
// the command line did not parse, so that the file never holds an earlier
// run's report after this one's exit 125. Best effort: the error line on
// stderr says what went wrong either way.
func reportParseFailure(args []string, msg string) {
	p := flagValuesInArgs(args, "result")
	if len(p) == 0 {
		return
	}
	f, _, err := openReport(hostfile.NewGuard(writableSources(flagValuesInArgs(args, "volume", "v")), jail.IsJailHostUID), p[len(p)-1])
	if err != nil {
		return
	}
	defer f.Close()
	_ = reportFile{f, true}.write(setupErrorResult(jail.ExitSetupError, msg, 0))
}

// reportReserve is the room reserveSpace makes for a report or an audit
// record: far more than one takes (about 1 KB; a learn-mode report with
// many denied calls a few KB).
const reportReserve = 64 << 10

// reserveSpace allocates room for a report at offset off of a regular
// file without changing its size (fallocate FALLOC_FL_KEEP_SIZE), so that
// a full disk stops the run before the payload runs (exit 125, the
// payload not run) rather than after it, with its effects done and its
// exit status lost. The report's final write and cut to its length
// (reportFile.write) free what it did not use. Filesystems without
// fallocate are not checked.
func reserveSpace(f *os.File, off int64) error {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, reportReserve)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return err
	}
	return nil
}

// setupErrorResult is the report of a run that failed before its payload
// started.
func setupErrorResult(code int, msg string, wall time.Duration) jail.Result {
	return jail.Result{Status: jail.StatusSetupError, ExitCode: code, Error: msg, WallMS: wall.Milliseconds()}
}

func setupError(format string, a ...any) error {
	return &exitError{code: jail.ExitSetupError, msg: oneLine(fmt.Sprintf(format, a...))}
}

// openReport opens --result's file for writing, creating it. A report
// left in it by an earlier run is cut to a single newline, so that while
// this run lasts, or if it is killed, nobody reads that report as this
// one's. It is not truncated to zero: on ext4 (auto_da_alloc) a file
// truncated to zero is flushed to disk when it is closed, and the next
// truncation waits for that write, which cost each run with a reused
// report file about 0.4 ms (writeReport cuts to the report's length at
// the end, which is neither).
func openReport(g *hostfile.Guard, p string) (*os.File, bool, error) {
	f, created, err := g.OpenWrite("--result", p, unix.O_WRONLY, 0o644)
	if err != nil {
		return nil, false, err
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		if err := f.Truncate(1); err != nil {
			f.Close()
			return nil, false, err
		}
		if _, err := f.WriteAt([]byte{'\n'}, 0); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	return f, created, nil
}

// reportFile is where the report goes: --result's file, which openReport
// opened (ours), or --result-fd's descriptor.
type reportFile struct {
	*os.File
	ours bool
}

// write writes the run's report, one JSON line. Ours, a regular file is
// then cut to the report's length, should anything have been written to
// it meanwhile.
func (f reportFile) write(res jail.Result) error {
	b, err := res.AppendJSON(make([]byte, 0, 1024))
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.Write(b); err != nil {
		return err
	}
	// Cut even at the report's length: that frees the room reserveSpace
	// allocated beyond it.
	if st, err := f.Stat(); err == nil && f.ours && st.Mode().IsRegular() {
		return f.Truncate(int64(len(b)))
	}
	return nil
}

func writeJSON(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}
