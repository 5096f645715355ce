package main

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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

func newAuditRecord(argv []string, spec jail.Spec, res jail.Result, stdin *hashingReader) auditRecord {
	rec := auditRecord{
		Time:   time.Now().UTC().Format(time.RFC3339Nano),
		RunID:  res.RunID,
		Argv:   argv,
		Result: res,
	}
	code, script := scriptOf(argv)
	rec.Code, rec.Script = code, script
	if script != "" && script != "-" {
		if host := hostPathOf(script, spec); host != "" {
			if sum, err := fileSHA256(host); err == nil {
				rec.ScriptSHA256 = sum
			}
		}
	}
	if stdin != nil {
		rec.StdinSHA256, rec.StdinBytes = stdin.sum()
	}
	return rec
}

// interpreterOptsWithValue are Python options that take a separate value.
var interpreterOptsWithValue = map[string]bool{"-W": true, "-X": true, "--check-hash-based-pycs": true}

// scriptOf finds the -c code or the script argument of an interpreter
// command line (python3 [options] (-c CODE | -m MOD | SCRIPT) ...).
func scriptOf(argv []string) (code, script string) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-c" && i+1 < len(argv):
			return argv[i+1], ""
		case strings.HasPrefix(a, "-c") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			return a[2:], ""
		case a == "-m":
			return "", ""
		case a == "-":
			return "", "-"
		case interpreterOptsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return "", a
		}
	}
	return "", ""
}

// hostPathOf maps a path as the jail sees it to the host file, through the
// workspace and the volumes.
func hostPathOf(p string, spec jail.Spec) string {
	if !filepath.IsAbs(p) {
		wd := spec.Workdir
		if wd == "" {
			wd = jail.WorkspaceDir
			if spec.Workspace == "" {
				return ""
			}
		}
		p = filepath.Join(wd, p)
	}
	if spec.Workspace != "" {
		if rel, ok := under(p, jail.WorkspaceDir); ok {
			return filepath.Join(spec.Workspace, rel)
		}
	}
	for _, v := range spec.Volumes {
		if rel, ok := under(p, v.Dest); ok {
			return filepath.Join(v.Source, rel)
		}
	}
	return ""
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

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
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
