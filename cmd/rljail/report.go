package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// stderr says what went wrong either way. stdout and stderr are rljail's
// own: `--result -`, or a file that is one of them, gets the report there.
func reportParseFailure(args []string, msg string, stdout, stderr io.Writer) {
	p := flagValuesInArgs(args, "result")
	if len(p) == 0 || p[len(p)-1] == "" {
		return
	}
	guard := hostfile.NewGuard(writableSources(flagValuesInArgs(args, "volume", "v")), jail.IsJailHostUID)
	f, _, err := openResult(guard, p[len(p)-1], stdout, stderr, true, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_ = f.write(setupErrorResult(jail.ExitSetupError, msg, 0))
}

// reportReserve is the room reserveSpace makes for a report or an audit
// record: far more than one takes (about 1 KB; a learn-mode report with
// many denied calls a few KB), and the text a report carries
// (--result-output) on top.
const reportReserve = 64 << 10

// reserveSpace allocates room (size bytes) for a report at offset off of
// a regular file without changing its size (fallocate
// FALLOC_FL_KEEP_SIZE), so that a full disk stops the run before the
// payload runs (exit 125, the payload not run) rather than after it, with
// its effects done and its exit status lost. The report's final write and
// cut to its length (reportFile.write) free what it did not use.
// Filesystems without fallocate are not checked.
func reserveSpace(f *os.File, off, size int64) error {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, size)
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

// openResult opens where --result's report goes. "-" is rljail's
// stdout; so is a path that names the very file rljail's stdout (or
// stderr) is, by device and inode: /dev/stdout, or log.txt of
// `rljail --result log.txt ... > log.txt`. Such a report is written on
// that stream after the payload's output has ended, on a line of its own,
// and nothing of the file is cut: opening it as a file of its own and
// clearing it (openReport) lost the payload's output, which the stream
// had written at the same offsets. stdoutOK false (a session, whose stdout
// carries the protocol) refuses a report there. reserve is the room
// reserved for the report in a regular file (reserveSpace). created names
// the file when this call made it (the caller removes it again when the
// report cannot be written).
func openResult(g *hostfile.Guard, p string, stdout, stderr io.Writer, stdoutOK bool, reserve int64) (f reportFile, created string, err error) {
	streams := []struct {
		w    io.Writer
		name string
	}{{stdout, "stdout"}, {stderr, "stderr"}}
	toStream := func(i int) (reportFile, string, error) {
		s := streams[i]
		if s.name == "stdout" && !stdoutOK {
			return reportFile{}, "", fmt.Errorf("--result %s is rljail's stdout, which carries the session's protocol: name another file", p)
		}
		if fd, ok := fdOf(s.w); ok {
			if err := g.CheckFDNamed("--result", p+" ("+s.name+")", fd); err != nil {
				return reportFile{}, "", err
			}
		}
		return reportFile{stream: s.w}, "", nil
	}
	if p == "-" {
		return toStream(0)
	}
	// Asked before the file is opened: a socket (/dev/stdout of a
	// service's stdout) cannot be opened again by its name.
	var st unix.Stat_t
	if unix.Stat(p, &st) == nil {
		for i, s := range streams {
			if sameFile(s.w, &st) {
				return toStream(i)
			}
		}
	}
	file, made, err := g.OpenWrite("--result", p, unix.O_WRONLY, 0o644)
	if err != nil {
		return reportFile{}, "", err
	}
	// And after: the name may have changed under the first look.
	if unix.Fstat(int(file.Fd()), &st) == nil {
		for i, s := range streams {
			if sameFile(s.w, &st) {
				file.Close()
				return toStream(i)
			}
		}
	}
	if made {
		created = p
	}
	fail := func(err error) (reportFile, string, error) {
		file.Close()
		if created != "" {
			_ = os.Remove(created) // ours, and empty
		}
		return reportFile{}, "", err
	}
	if err := clearReport(file); err != nil {
		return fail(err)
	}
	if err := reserveSpace(file, 0, reserve); err != nil {
		return fail(fmt.Errorf("no room for the result report in %s: %w", p, err))
	}
	return reportFile{File: file, ours: true}, created, nil
}

// clearReport clears a report that an earlier run left in f, --result's
// file. It is cut to a single newline, so that while this run lasts, or
// if it is killed, nobody reads that report as this one's. It is not
// truncated to zero: on ext4 (auto_da_alloc) a file truncated to zero is
// flushed to disk when it is closed, and the next truncation waits for
// that write, which cost each run with a reused report file about 0.4 ms
// (reportFile.write cuts to the report's length at the end, which is
// neither).
func clearReport(f *os.File) error {
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		if err := f.Truncate(1); err != nil {
			return err
		}
		if _, err := f.WriteAt([]byte{'\n'}, 0); err != nil {
			return err
		}
	}
	return nil
}

// fileOf returns the file under w (through Unwrap() io.Writer), or nil.
func fileOf(w io.Writer) *os.File {
	for i := 0; i < 8 && w != nil; i++ {
		if f, ok := w.(*os.File); ok {
			return f
		}
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// fdOf returns the descriptor of the file under w, without making it
// blocking (as os.File.Fd would).
func fdOf(w io.Writer) (int, bool) {
	f := fileOf(w)
	if f == nil {
		return 0, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	_ = rc.Control(func(d uintptr) { fd = int(d) })
	return fd, fd >= 0
}

// isDevNull reports whether w writes to the null device (1:3).
func isDevNull(w io.Writer) bool {
	fd, ok := fdOf(w)
	if !ok {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
}

// sameFile reports whether w writes to the file st describes.
func sameFile(w io.Writer, st *unix.Stat_t) bool {
	fd, ok := fdOf(w)
	if !ok {
		return false
	}
	var ws unix.Stat_t
	return unix.Fstat(fd, &ws) == nil && ws.Dev == st.Dev && ws.Ino == st.Ino
}

// resultFD is --result-fd's descriptor as a report's destination: when it
// is the very file of rljail's stdout or stderr (3>&1), the report goes
// through that stream, on a line of its own after the payload's output.
func resultFD(f *os.File, stdout, stderr io.Writer) reportFile {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		for _, w := range []io.Writer{stdout, stderr} {
			if sameFile(w, &st) {
				return reportFile{File: f, stream: w}
			}
		}
	}
	return reportFile{File: f}
}

// parseReportOutput reads --result-output: a size, at most
// jail.MaxReportOutput; 0 carries none.
func parseReportOutput(v string) (int64, error) {
	if strings.TrimSpace(v) == "0" {
		return 0, nil
	}
	n, err := parseSize("result-output", v)
	if err != nil {
		return 0, err
	}
	if n > jail.MaxReportOutput {
		return 0, fmt.Errorf("--result-output %s is more than the %s a report may carry of each stream", v, jail.FormatBytes(jail.MaxReportOutput))
	}
	return n, nil
}

// reportFile is where the report goes: --result's file, which openResult
// opened (ours), --result-fd's descriptor, or one of rljail's own
// streams (stream: `--result -`, or a file that is rljail's stdout or
// stderr).
type reportFile struct {
	*os.File
	ours   bool
	stream io.Writer
}

// Close closes the report's file; a stream is rljail's, and stays open.
func (f reportFile) Close() error {
	if f.File == nil {
		return nil
	}
	return f.File.Close()
}

// write writes the run's report, one JSON line. Ours, a regular file is
// then cut to the report's length, should anything have been written to
// it meanwhile. On a stream the report starts a line of its own: the
// payload's output before it may have ended in the middle of one.
func (f reportFile) write(res jail.Result) error {
	b := make([]byte, 0, 1024)
	if f.stream != nil && midLine(f.stream) {
		b = append(b, '\n')
	}
	b, err := res.AppendJSON(b)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if f.stream != nil {
		_, err := f.stream.Write(b)
		return err
	}
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

// midLine reports whether the last byte written to w (a trackedWriter)
// did not end a line.
func midLine(w io.Writer) bool {
	t, ok := w.(*trackedWriter)
	if !ok {
		return false
	}
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	return t.st.mid
}

func writeJSON(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}
