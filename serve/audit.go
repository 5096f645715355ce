package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rljail/rljail/jail"
)

// maxAuditCode bounds the text of a request's files that the audit log
// carries: larger files are named by size and sha256 only.
const maxAuditCode = 256 << 10

// auditLog appends one JSON line per jail to --audit-log, in the shape of
// the CLI's (docs/flags.md: time, run id, argv, the code, stdin's hash,
// the result) with what a server adds: the route, the client and the
// files put in. Each record is one write to a file opened O_APPEND, so
// that records of concurrent runs never interleave.
type auditLog struct {
	mu sync.Mutex
	w  io.Writer
}

// auditRecord is one line of the server's audit log.
type auditRecord struct {
	Time        string      `json:"time"`
	RunID       string      `json:"run_id"`
	Route       string      `json:"route"`
	Client      string      `json:"client"`
	Language    string      `json:"language,omitempty"`
	Argv        []string    `json:"argv"`
	Files       []auditFile `json:"files,omitempty"`
	StdinSHA256 string      `json:"stdin_sha256,omitempty"`
	StdinBytes  int         `json:"stdin_bytes"`
	Fetch       []string    `json:"fetch,omitempty"`
	// Volumes and Egress are what the request was granted of the
	// server's policy (the profile is the result's seccomp.profile):
	// which host paths and hosts a run could reach is evidence too.
	Volumes []auditVolume `json:"volumes,omitempty"`
	Egress  []string      `json:"egress,omitempty"`
	Result  jail.Result   `json:"result"`
	Error   string        `json:"error,omitempty"`
}

// auditFile is a file the request put into the jail: its hash always,
// its text when it is valid UTF-8 of at most maxAuditCode bytes (the code
// that ran is the evidence when a run goes wrong).
type auditFile struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
	Text   string `json:"text,omitempty"`
}

// auditVolume is a volume granted to the jail: the host path, where the
// jail saw it, and whether it could write it.
type auditVolume struct {
	Source string `json:"source"`
	Target string `json:"target"`
	RW     bool   `json:"rw"`
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// record writes j's line; a failed write is logged, never the request's
// failure (the run happened; its answer is owed).
func (a *auditLog) record(r *http.Request, client string, j *job, o outcome) error {
	rec := auditRecord{
		Time:     time.Now().UTC().Format(time.RFC3339Nano),
		RunID:    o.result.RunID,
		Route:    r.URL.Path,
		Client:   client,
		Language: j.language,
		Argv:     j.command,
		Fetch:    j.asked,
		Egress:   j.egress,
		Result:   o.result,
	}
	for _, v := range j.volumes {
		rec.Volumes = append(rec.Volumes, auditVolume{Source: v.Source, Target: v.Dest, RW: v.Writable})
	}
	if o.err != nil {
		rec.Error = o.err.Error()
	}
	if len(j.stdin) > 0 {
		rec.StdinSHA256, rec.StdinBytes = sha256Hex([]byte(j.stdin)), len(j.stdin)
	}
	for _, f := range j.files {
		af := auditFile{Path: f.path, Bytes: len(f.data), SHA256: sha256Hex(f.data)}
		if len(f.data) <= maxAuditCode && utf8.Valid(f.data) {
			af.Text = string(f.data)
		}
		rec.Files = append(rec.Files, af)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the audit record: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write the audit log: %w", err)
	}
	return nil
}

// auditClient names who sent r: its peer address on TCP, "unix" on the
// Unix socket (whose file mode is the access control).
func auditClient(r *http.Request) string {
	peer := r.RemoteAddr
	if peer == "" || peer == "@" {
		peer = "unix"
	}
	if c := requestClient(r); c != nil {
		return c.Name + "@" + peer
	}
	return peer
}

// sessionEndRecord is the audit log's line for a session the server
// ended of its own accord (a reload that revoked its client's token):
// runs have their records, and this says why a session's jail went.
type sessionEndRecord struct {
	Time    string `json:"time"`
	Event   string `json:"event"` // "session_ended"
	Session string `json:"session"`
	Client  string `json:"client"`
	Reason  string `json:"reason"`
}

func (a *auditLog) sessionEnded(id, owner, reason string) error {
	line, err := json.Marshal(sessionEndRecord{Time: time.Now().UTC().Format(time.RFC3339Nano), Event: "session_ended",
		Session: id, Client: strings.TrimPrefix(owner, "client:"), Reason: reason})
	if err != nil {
		return fmt.Errorf("encode the audit record: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write the audit log: %w", err)
	}
	return nil
}
