package serve

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"strconv"
	"syscall"

	"github.com/rljail/rljail/jail"
)

// launcherSource (launcher.py) is the program that puts a request's files
// into its jail and takes files out after the command, run as the jail's
// payload. It talks to the server over descriptor 3, the jail's channel
// (jail.Spec.Channel): a socket pair, so that no host directory is ever
// shared with the jail (no staging dir a payload could race, nothing
// left behind on the host). It runs in one of two ways:
//
//   - cold, `python3 -I -S -c launcherSource ARGV...` in a one-shot jail
//     of a request with files or fetch_files: init gave it the request's
//     environment and limits;
//   - ahead, `python3 -c launcherSource`, started in every jail of the
//     warm pool before its request (jail.PrepareStarted): the request's
//     argv, environment, working directory, rlimits and nice value
//     (jail.Handover) come on the channel with the files, and where the
//     command is the jail's python3 running a -c program or a script,
//     with nothing changed that Python reads as it starts, the launcher
//     runs the program itself, as a fresh interpreter would (in its own
//     process, or in a child where files are to be fetched afterwards); so
//     a warm request does not wait for an interpreter's start. Anything
//     else is execed.
//
// In, records of one line each (a tag and decimal numbers), some followed
// by the bytes the numbers announce, until ".": "f PATHLEN SIZE MODE" and
// the path (a file to write; the files' bytes follow the "." in the same
// order), "g PATHLEN" and the path (a file to fetch), "m N" (the most
// bytes to fetch in all), and ahead only "a LEN" (one argument), "e LEN"
// (one environment entry), "w LEN" (the working directory), "r RESOURCE
// SOFT HARD" (an rlimit), "n NICE". The launcher writes the files
// (directories made as needed) and starts the command with descriptor 3
// closed and SIGPIPE and SIGXFSZ at their defaults: forked, and waited
// for, cold or where files are to be fetched; else in its own process. Out:
// "f PATHLEN SIZE" with the path and the bytes, or "x PATHLEN ERRLEN" with
// the path and why not, per file asked in order, at most fetch_max bytes
// in all, then "."; then it ends as the command did (its exit code, or
// the same signal). A command that init would refuse (look_path and the
// execve in init.c) is answered "E CODE ERRNO" before the records
// of the files: 127 or 126 and the execve's errno, or 0 where it is not
// on PATH (127) or not executable there (126).
//
// What the launcher sends back is the payload's to forge (the command
// runs as the same user in the same jail): the server reads it as
// hostile data, bounded (readFetched).
//
//go:embed launcher.py
var launcherSource string

// launcherColdArgv is the cold launcher's command before the request's:
// the rootfs's interpreter by its path (every rootfs rljail builds has
// it), as a request's PATH may leave /usr/bin out.
var launcherColdArgv = []string{"/usr/bin/python3", "-I", "-S", "-c"}

// launcherAheadCommand is the warm pool's payload started ahead.
func launcherAheadCommand() []string { return []string{"/usr/bin/python3", "-c", launcherSource} }

// writeHead sends the launcher its records and the files' bytes; ho, for
// a launcher started ahead, adds the request's command and what jail
// gives it.
func writeHead(w io.Writer, j *job, ho *jail.Handover) error {
	var b bytes.Buffer
	str := func(tag string, s string) {
		fmt.Fprintf(&b, "%s %d\n%s", tag, len(s), s)
	}
	for _, f := range j.files {
		fmt.Fprintf(&b, "f %d %d %d\n%s", len(f.path), len(f.data), f.mode, f.path)
	}
	for _, p := range j.fetch {
		str("g", p)
	}
	fmt.Fprintf(&b, "m %d\n", j.fetchMax)
	if ho != nil {
		for _, a := range j.command {
			str("a", a)
		}
		for _, e := range ho.Env {
			str("e", e)
		}
		str("w", ho.Workdir)
		for _, r := range ho.Rlimits {
			fmt.Fprintf(&b, "r %d %d %d\n", r.Resource, r.Soft, r.Hard)
		}
		fmt.Fprintf(&b, "n %d\n", ho.Nice)
	}
	b.WriteString(".\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	for _, f := range j.files {
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	return nil
}

type fetchResult struct {
	files []outFile
	// notFound is the launcher's "E" code (127, 126), 0 without one, and
	// errno the execve's error (0: look_path's refusal).
	notFound int
	errno    syscall.Errno
}

// maxFetchPath bounds a path in the launcher's answer (PATH_MAX).
const maxFetchPath = 4096

// readFetched reads the launcher's answer as hostile data: at most want
// records, paths of at most maxFetchPath bytes, at most max bytes of
// files in all; anything else ends the read with what was taken so far.
func readFetched(r io.Reader, want int, max int64) fetchResult {
	br := bufio.NewReaderSize(io.LimitReader(r, max+1<<20+int64(want)*(2*maxFetchPath)), 64<<10)
	var res fetchResult
	left := max
	for len(res.files) <= want {
		line, err := br.ReadSlice('\n')
		if err != nil || len(line) > 64 {
			return res
		}
		f := bytes.Fields(line)
		if len(f) == 1 && string(f[0]) == "." {
			return res
		}
		if len(f) == 3 && string(f[0]) == "E" && len(res.files) == 0 && res.notFound == 0 {
			e, err := strconv.ParseUint(string(f[2]), 10, 12)
			if c := string(f[1]); (c == "126" || c == "127") && err == nil {
				res.notFound, _ = strconv.Atoi(c)
				res.errno = syscall.Errno(e)
				continue
			}
			return res
		}
		if len(f) != 3 || len(res.files) == want || (string(f[0]) != "f" && string(f[0]) != "x") {
			return res
		}
		plen, err1 := strconv.ParseInt(string(f[1]), 10, 64)
		n, err2 := strconv.ParseInt(string(f[2]), 10, 64)
		if err1 != nil || err2 != nil || plen < 0 || plen > maxFetchPath || n < 0 {
			return res
		}
		path := make([]byte, plen)
		if _, err := io.ReadFull(br, path); err != nil {
			return res
		}
		o := outFile{Path: string(path)}
		if string(f[0]) == "x" {
			if n > 256 {
				return res
			}
			msg := make([]byte, n)
			if _, err := io.ReadFull(br, msg); err != nil {
				return res
			}
			o.Error = validText(msg)
			if o.Error == "" {
				o.Error = "not taken"
			}
		} else {
			if n > left {
				return res
			}
			o.Data = make([]byte, n)
			if _, err := io.ReadFull(br, o.Data); err != nil {
				return res
			}
			left -= n
		}
		res.files = append(res.files, o)
	}
	return res
}
