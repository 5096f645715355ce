package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/jail"
)

// auditRecord is one line of --audit-log: the code that ran is the
// evidence when a run goes wrong.
type auditRecord struct {
	Time         string      `json:"time"`
	RunID        string      `json:"run_id"`
	Argv         []string    `json:"argv"`
	Code         string      `json:"code,omitempty"`          // the argument of -c
	Script       string      `json:"script,omitempty"`        // the script named on the command line
	ScriptSHA256 string      `json:"script_sha256,omitempty"` // its hash, read on the host
	StdinSHA256  string      `json:"stdin_sha256,omitempty"`  // hash of what was fed to stdin
	StdinBytes   int64       `json:"stdin_bytes"`
	Result       jail.Result `json:"result"`
}

func newAuditRecord(argv []string, scriptSum string, res jail.Result, stdin *hashingReader) auditRecord {
	rec := auditRecord{
		Time:   time.Now().UTC().Format(time.RFC3339Nano),
		RunID:  res.RunID,
		Argv:   argv,
		Result: res,
	}
	rec.Code, rec.Script = scriptOf(argv)
	rec.ScriptSHA256 = scriptSum
	if stdin != nil {
		rec.StdinSHA256, rec.StdinBytes = stdin.sum()
	}
	return rec
}

// pythonShortOptions are CPython's one-letter options; a colon follows
// those that take a value (Modules/main.c, Python/getopt.c).
const pythonShortOptions = "bBc:dEhiIJm:OPqRsStuvVW:xX:?"

// scriptOf finds what a python3 command line runs, parsing it as CPython
// does: the code of -c (also in a cluster such as -Ic CODE), nothing for
// -m, or the script (the first argument after the options, or after --;
// "-" for standard input).
func scriptOf(argv []string) (code, script string) {
	i := 1
options:
	for i < len(argv) {
		a := argv[i]
		if len(a) < 2 || a[0] != '-' {
			break
		}
		i++
		switch {
		case a == "--":
			break options
		case a == "--check-hash-based-pycs":
			i++
			continue
		case a[1] == '-':
			continue // other long options take no value
		}
		for k := 1; k < len(a); k++ {
			at := strings.IndexByte(pythonShortOptions, a[k])
			if at < 0 || at+1 >= len(pythonShortOptions) || pythonShortOptions[at+1] != ':' {
				continue
			}
			val := a[k+1:]
			if val == "" {
				if i >= len(argv) {
					return "", ""
				}
				val = argv[i]
				i++
			}
			switch a[k] {
			case 'c':
				return val, ""
			case 'm':
				return "", ""
			}
			break // W and X: the value took the rest of the cluster
		}
	}
	if i < len(argv) {
		return "", argv[i]
	}
	return "", ""
}

// grantOf finds the granted host tree that holds p, a path as the jail
// sees it: the deepest mount, since the jail stacks deeper mounts on top.
// It returns the host source and p's path below it; ok is false for the
// jail's own filesystem or a path outside every grant.
func grantOf(p string, spec jail.Spec) (src, rel string, ok bool) {
	if !path.IsAbs(p) {
		wd := spec.Workdir
		if wd == "" {
			if spec.Workspace == "" {
				return "", "", false
			}
			wd = jail.WorkspaceDir
		}
		p = path.Join(wd, p)
	}
	p = path.Clean(p) // "..", "." and "//" resolved before matching
	best := -1
	consider := func(dest, source string) {
		if r, in := under(p, dest); in && len(dest) > best {
			best, src, rel = len(dest), source, r
		}
	}
	if spec.Workspace != "" {
		consider(jail.WorkspaceDir, spec.Workspace)
	}
	for _, v := range spec.Volumes {
		consider(v.Dest, v.Source)
	}
	return src, rel, best >= 0
}

// hostPathOf maps a path as the jail sees it to the host path it names
// (see grantOf), or "".
func hostPathOf(p string, spec jail.Spec) string {
	src, rel, ok := grantOf(p, spec)
	if !ok {
		return ""
	}
	return filepath.Join(src, rel)
}

func under(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if strings.HasPrefix(p, dir+"/") {
		return p[len(dir)+1:], true
	}
	return "", false
}

// maxScriptBytes bounds what the audit log hashes of a script.
const maxScriptBytes = 64 << 20

// scriptSHA256 hashes the script p names inside the jail, read on the
// host from the grant that holds it. The file is opened below the grant
// without following any symlink (a payload with a writable volume could
// have swapped its script for a link to a host file), and only a regular
// file of at most maxScriptBytes is hashed (a FIFO or /dev/zero would
// hang the supervisor).
// auditScriptSum is the sha256 of the script argv runs, taken before the
// payload starts: a script in a writable volume could rewrite itself (or
// become a link) before it exits, and the log would then name a hash of
// what it left rather than of what ran. "" when there is none to take.
func auditScriptSum(argv []string, spec jail.Spec) string {
	_, script := scriptOf(argv)
	if script == "" || script == "-" {
		return ""
	}
	sum, err := scriptSHA256(script, spec)
	if err != nil {
		return ""
	}
	return sum
}

func scriptSHA256(p string, spec jail.Spec) (string, error) {
	src, rel, ok := grantOf(p, spec)
	if !ok {
		return "", errors.New("not in a granted path")
	}
	var fd int
	var err error
	if rel == "." {
		fd, err = unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	} else {
		var dir int
		if dir, err = unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return "", err
		}
		fd, err = unix.Openat2(dir, rel, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		unix.Close(dir)
	}
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Size() > maxScriptBytes {
		return "", errors.New("not a regular file of at most 64 MiB")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxScriptBytes)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashingReader hashes what the jail read from stdin.
type hashingReader struct {
	r  io.Reader
	mu sync.Mutex
	h  hash.Hash
	n  int64
}

func newHashingReader(r io.Reader) *hashingReader {
	return &hashingReader{r: r, h: sha256.New()}
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.mu.Lock()
	h.h.Write(p[:n])
	h.n += int64(n)
	h.mu.Unlock()
	return n, err
}

func (h *hashingReader) sum() (string, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return "", 0
	}
	return hex.EncodeToString(h.h.Sum(nil)), h.n
}
