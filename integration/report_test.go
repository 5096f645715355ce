package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readAuditLog parses the JSON lines of an --audit-log file.
func readAuditLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the audit log: %v", err)
	}
	var recs []map[string]any
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit log line %d is not JSON: %v: %q", i+1, err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestResultAndAuditLog checks the --result report and the --audit-log
// lines of a script run and a -c run.
func TestResultAndAuditLog(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			ws := newDir(t)
			script := "import sys\nprint('main ran', sys.argv[1:])\nsys.exit(5)\n"
			writeFile(t, filepath.Join(ws, "main.py"), script, 0o644)
			logDir := newOpenDir(t)
			auditLog := filepath.Join(logDir, "audit.jsonl")

			// 1. A script from the workspace that exits 5.
			start := time.Now()
			stdout, stderr, exit, res1 := runJail(t, m, runOpts{dir: ws},
				"--timeout", "7s", "--audit-log", auditLog, "--", "python3", "main.py", "x", "y")
			wall := time.Since(start)
			if exit != 5 || !strings.Contains(stdout, "main ran ['x', 'y']") {
				t.Fatalf("rljail -- python3 main.py x y: exit %d, stdout %q, stderr %q; want 5 and the script's output", exit, stdout, stderr)
			}
			checkResult(t, "script run", res1, "exit_nonzero", 5)
			if res1 == nil {
				t.FailNow()
			}
			runID1, _ := res1["run_id"].(string)
			if runID1 == "" {
				t.Errorf("--result has no run_id: %v", res1)
			}
			if ms, ok := jsonInt(res1, "wall_ms"); !ok || ms <= 0 || ms > wall.Milliseconds()+1 {
				t.Errorf("--result wall_ms = %v, want > 0 and at most the measured %v", res1["wall_ms"], wall)
			}
			if _, ok := res1["signal"]; ok && res1["signal"] != float64(0) {
				t.Errorf("--result signal = %v for a normal exit", res1["signal"])
			}
			limits, _ := res1["limits"].(map[string]any)
			if limits == nil {
				t.Errorf("--result has no limits: %v", res1)
			} else {
				if v, _ := jsonInt(limits, "timeout_ms"); v != 7000 {
					t.Errorf("--result limits.timeout_ms = %v, want 7000", limits["timeout_ms"])
				}
				if v, _ := jsonInt(limits, "tmp_size_bytes"); v != 64<<20 {
					t.Errorf("--result limits.tmp_size_bytes = %v, want %d", limits["tmp_size_bytes"], 64<<20)
				}
				if limits["network"] != "none" {
					t.Errorf("--result limits.network = %v, want none", limits["network"])
				}
			}

			// 2. A -c run that reads stdin, appended to the same log.
			code := "import sys; d = sys.stdin.read(); print('read', len(d))"
			input := "hello audit\n"
			stdout, stderr, exit, res2 := runJail(t, m, runOpts{dir: ws, stdin: input}, "--audit-log", auditLog, "--", "python3", "-c", code)
			if exit != 0 || stdout != "read 12\n" {
				t.Fatalf("rljail -- python3 -c CODE: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
			}
			checkResult(t, "-c run", res2, "ok", 0)
			runID2, _ := res2["run_id"].(string)
			if runID2 == "" || runID2 == runID1 {
				t.Errorf("run ids of two runs: %q and %q, want two different non-empty ids", runID1, runID2)
			}

			recs := readAuditLog(t, auditLog)
			if len(recs) != 2 {
				t.Fatalf("the audit log has %d lines after two runs, want 2: %v", len(recs), recs)
			}
			r1, r2 := recs[0], recs[1]
			if ts, _ := r1["time"].(string); ts == "" {
				t.Errorf("audit line 1 has no time: %v", r1)
			} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("audit line 1 time %q is not RFC 3339: %v", ts, err)
			}
			if r1["run_id"] != runID1 {
				t.Errorf("audit line 1 run_id = %v, want the --result run_id %q", r1["run_id"], runID1)
			}
			if want := []any{"python3", "main.py", "x", "y"}; !reflect.DeepEqual(r1["argv"], want) {
				t.Errorf("audit line 1 argv = %v, want %v", r1["argv"], want)
			}
			if r1["script"] != "main.py" {
				t.Errorf("audit line 1 script = %v, want main.py", r1["script"])
			}
			if want := sha256Hex([]byte(script)); r1["script_sha256"] != want {
				t.Errorf("audit line 1 script_sha256 = %v, want %s (sha256 of the workspace's main.py)", r1["script_sha256"], want)
			}
			if res, _ := r1["result"].(map[string]any); res == nil || res["status"] != "exit_nonzero" || res["exit_code"] != float64(5) {
				t.Errorf("audit line 1 result = %v, want status exit_nonzero, exit_code 5", r1["result"])
			}
			if r2["run_id"] != runID2 {
				t.Errorf("audit line 2 run_id = %v, want %q", r2["run_id"], runID2)
			}
			if r2["code"] != code {
				t.Errorf("audit line 2 code = %v, want %q", r2["code"], code)
			}
			if want := sha256Hex([]byte(input)); r2["stdin_sha256"] != want {
				t.Errorf("audit line 2 stdin_sha256 = %v, want %s", r2["stdin_sha256"], want)
			}
			if r2["stdin_bytes"] != float64(len(input)) {
				t.Errorf("audit line 2 stdin_bytes = %v, want %d", r2["stdin_bytes"], len(input))
			}
			if res, _ := r2["result"].(map[string]any); res == nil || res["status"] != "ok" {
				t.Errorf("audit line 2 result = %v, want status ok", r2["result"])
			}
		})
	}
}

// TestAuditLogUnwritableStopsTheRun: a log that cannot be opened stops the
// run before it starts (125), proven by a rw volume the command would
// have written to.
func TestAuditLogUnwritableStopsTheRun(t *testing.T) {
	t.Parallel()
	const code = "open('/out/ran', 'w').write('ran')"
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			// Control: with a writable log the command writes /out/ran.
			out := newOpenDir(t)
			logDir := newOpenDir(t)
			stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{"--audit-log", filepath.Join(logDir, "ok.jsonl"), "-v", out + ":/out:rw"}, python(code)...)...)
			if _, err := os.Stat(filepath.Join(out, "ran")); exit != 0 || err != nil {
				t.Fatalf("control run: exit %d, /out/ran on the host: %v (stdout %q stderr %q)", exit, err, stdout, stderr)
			}

			aFile := filepath.Join(newDir(t), "a-file")
			writeFile(t, aFile, "", 0o644)
			rootOnly := newDir(t) // 0755, owned by root
			unwritable := map[string]string{
				"parent_is_a_file":   filepath.Join(aFile, "audit.jsonl"),
				"parent_missing":     "/nonexistent-rljail-it/audit.jsonl",
				"path_is_a_dir":      newDir(t),
				"proc_not_creatable": "/proc/rljail-it-audit.jsonl",
			}
			if m == asRootless {
				unwritable["root_owned_dir"] = filepath.Join(rootOnly, "audit.jsonl")
			}
			for name, logPath := range unwritable {
				out := newOpenDir(t)
				args := append([]string{"--audit-log", logPath, "-v", out + ":/out:rw"}, python(code)...)
				stdout, stderr, exit, _ := runJail(t, m, runOpts{}, args...)
				what := name + ": rljail " + shellQuote(args)
				checkSetupError(t, what, stderr, exit)
				if _, err := os.Stat(filepath.Join(out, "ran")); err == nil {
					t.Errorf("%s: the command ran (it wrote /out/ran) although the audit log cannot be opened; stdout %q", what, stdout)
				}
			}
		})
	}
}

// TestResultFileReused runs twice with a --result file that holds an
// earlier report (longer than a new one, over several blocks): while the
// run lasts, and after rljail is killed, the file must hold no report (a
// reader must not take the old one for this run's); after a normal end it
// must hold exactly the new report and nothing after it, in the same file
// (its inode, and so its links and owner, kept).
func TestResultFileReused(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(newOpenDir(t), "r.json")
			stale := randomToken("stale-report-")
			plant := func() uint64 {
				t.Helper()
				old := `{"status":"ok","exit_code":0,"run_id":"` + stale + `","padding":"` + strings.Repeat("x", 20000) + `"}` + "\n"
				writeFile(t, p, old, 0o666)
				if err := os.Chmod(p, 0o666); err != nil {
					t.Fatal(err)
				}
				var st syscall.Stat_t
				if err := syscall.Stat(p, &st); err != nil {
					t.Fatal(err)
				}
				return st.Ino
			}
			noReport := func(when string) {
				t.Helper()
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatalf("%s: read %s: %v", when, p, err)
				}
				if s := strings.TrimSpace(string(b)); s != "" {
					t.Errorf("%s: the --result file holds %d bytes (%.80q...), want no report", when, len(s), s)
				}
			}
			code := "import sys, time; print('started', flush=True); time.sleep(%s)"

			// 1. A run that ends normally.
			ino := plant()
			j := startJail(t, m, runOpts{noResult: true}, "--result", p, "--", "python3", "-c", fmt.Sprintf(code, "0.7"))
			if !j.stdout.waitFor("started", 20*time.Second) {
				t.Fatalf("%s: the payload did not start: %q", j, j.stderr.String())
			}
			noReport("while the run lasts")
			j.wait()
			if j.exit != 0 {
				t.Fatalf("%s: exit %d, stderr %q", j, j.exit, j.stderr.String())
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var r map[string]any
			if err := json.Unmarshal(b, &r); err != nil { // fails on anything after the object
				t.Fatalf("the --result file is not one JSON object: %v: %.200q", err, b)
			}
			if strings.Contains(string(b), stale) || !strings.HasSuffix(string(b), "}\n") || strings.Count(string(b), "\n") != 1 {
				t.Errorf("the --result file is not exactly the new report and a newline: %.300q", b)
			}
			checkResult(t, "reused --result file", r, "ok", 0)
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Ino != ino {
				t.Errorf("the --result file was replaced (inode %d, was %d; %v), want it written in place", st.Ino, ino, err)
			}

			// 2. A run whose rljail is killed.
			plant()
			j = startJail(t, m, runOpts{noResult: true}, "--result", p, "--", "python3", "-c", fmt.Sprintf(code, "30"))
			if !j.stdout.waitFor("started", 20*time.Second) {
				t.Fatalf("%s: the payload did not start: %q", j, j.stderr.String())
			}
			_ = j.cmd.Process.Kill()
			j.wait()
			noReport("after rljail was killed")
		})
	}
}

// TestAuditHashIsOfWhatRan: a script in a read-write volume that rewrites
// itself before it exits must not leave the hash of its new content in
// the audit log: the hash is of what Python started.
func TestAuditHashIsOfWhatRan(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			vol := newOpenDir(t)
			script := "open('/job/run.py', 'w').write('print(\"benign\")\\n')\nprint('done')\n"
			writeFile(t, filepath.Join(vol, "run.py"), script, 0o666)
			logPath := filepath.Join(newOpenDir(t), "audit.log")
			stdout, stderr, exit, _ := runJail(t, m, runOpts{}, "-v", vol+":/job:rw", "--audit-log", logPath, "--", "python3", "/job/run.py")
			if exit != 0 || !strings.Contains(stdout, "done") {
				t.Fatalf("exit %d, stdout %q, stderr %q", exit, stdout, stderr)
			}
			if now, _ := os.ReadFile(filepath.Join(vol, "run.py")); !strings.Contains(string(now), "benign") {
				t.Fatalf("the script did not rewrite itself: %q", now)
			}
			recs := readAuditLog(t, logPath)
			if len(recs) != 1 {
				t.Fatalf("%d audit records, want 1", len(recs))
			}
			if got, want := recs[0]["script_sha256"], sha256Hex([]byte(script)); got != want {
				t.Errorf("script_sha256 = %v, want %s, the hash of the script that ran (not of what it left)", got, want)
			}
		})
	}
}
