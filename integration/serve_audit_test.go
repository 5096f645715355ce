package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeAuditLog: `rljail serve --audit-log FILE` appends one JSON line
// per jail, whichever route ran it: the run id of the response, the
// route, the code's text and sha256, stdin's sha256, the result. Read
// from the host after the server stopped.
func TestServeAuditLog(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			dir := newDir(t)
			if m == asRootless {
				if err := os.Chown(dir, testUID, testGID); err != nil {
					t.Fatal(err)
				}
			}
			logPath := filepath.Join(dir, "audit.jsonl")
			s := startServer(t, m, serveOpts{maxConc: 2, extraArgs: []string{"--audit-log", logPath}})
			code := "import sys\nprint(sys.stdin.read()[::-1])\n"
			var r v1Response
			if c := s.postJSON(t, "/v1/run", map[string]any{"code": code, "stdin": "secret-stdin"}, &r); c != 200 || r.Stdout.Text != "nidts-terces\n" {
				t.Fatalf("/v1/run: %d %+v", c, r)
			}
			var sf map[string]any
			if c := s.postJSON(t, "/run_code", map[string]any{"code": "print(6*7)", "language": "python"}, &sf); c != 200 {
				t.Fatalf("/run_code: %d %v", c, sf)
			}
			s.stop(t)
			st, err := os.Stat(logPath)
			if err != nil {
				t.Fatalf("no audit log: %v", err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("audit log mode %v, want 0600", st.Mode().Perm())
			}
			f, err := os.Open(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			type rec struct {
				RunID       string           `json:"run_id"`
				Route       string           `json:"route"`
				Client      string           `json:"client"`
				Argv        []string         `json:"argv"`
				StdinSHA256 string           `json:"stdin_sha256"`
				Files       []map[string]any `json:"files"`
				Result      map[string]any   `json:"result"`
			}
			var recs []rec
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var x rec
				if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
					t.Fatalf("audit line is not JSON: %v: %q", err, sc.Text())
				}
				recs = append(recs, x)
			}
			if len(recs) != 2 {
				t.Fatalf("%d audit records, want 2 (one per jail)", len(recs))
			}
			a, b := recs[0], recs[1]
			if a.Route != "/v1/run" || b.Route != "/run_code" {
				t.Errorf("routes %q %q", a.Route, b.Route)
			}
			if a.RunID == "" || a.RunID != r.Result["run_id"] || a.Result["run_id"] != a.RunID {
				t.Errorf("run id %q, the response's %v", a.RunID, r.Result["run_id"])
			}
			sum := sha256.Sum256([]byte("secret-stdin"))
			if a.StdinSHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("stdin_sha256 %q", a.StdinSHA256)
			}
			cs := sha256.Sum256([]byte(code))
			if len(a.Files) != 1 || a.Files[0]["text"] != code || a.Files[0]["sha256"] != hex.EncodeToString(cs[:]) {
				t.Errorf("the code's record: %v", a.Files)
			}
			if len(b.Files) != 1 || !strings.Contains(b.Files[0]["text"].(string), "print(6*7)") || b.Result["status"] != "ok" {
				t.Errorf("/run_code's record: %+v", b)
			}
			if a.Client != "unix" || len(a.Argv) == 0 || a.Argv[0] != "python3" {
				t.Errorf("client %q argv %q", a.Client, a.Argv)
			}
		})
	}
}
