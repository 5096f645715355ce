package integration

// The report on rljail's own stdout (issue 30): a new user's
// `rljail --result /dev/stdout -- python3 -c 'print(1)' > log.txt` lost
// the payload's output (the report's file, opened again by its name, was
// cut over it), and `--result -` wrote a file named "-". Each case is the
// user's shell line, run by /bin/sh as root and rootless, judged by the
// file the shell made.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shellLine runs a shell command line in dir as m, with rljail as $RLJAIL
// (the binary under test with the rootfs under test).
func shellLine(t *testing.T, m mode, dir, line string) hostRun {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(modeEnv(m), "RLJAIL="+testBin+" --rootfs "+rootfsDir)
	return runHost(t, m, cmd, 60*time.Second)
}

// lastReport splits a file into the lines before its last and its last
// line read as a report.
func lastReport(t *testing.T, path string) (before string, report map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	i := strings.LastIndexByte(s, '\n')
	before, last := "", s
	if i >= 0 {
		before, last = s[:i+1], s[i+1:]
	}
	if err := json.Unmarshal([]byte(last), &report); err != nil {
		t.Errorf("the last line of %s is not a report: %v: %q", path, err, b)
	}
	return before, report
}

func TestReportOnStdout(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			dir := newOpenDir(t)
			log := filepath.Join(dir, "log.txt")
			for _, tc := range []struct {
				name, line, before string
			}{
				{"dev-stdout", `$RLJAIL --result /dev/stdout -- python3 -c 'print(1)' > log.txt`, "1\n"},
				{"dash", `$RLJAIL --result - -- python3 -c 'print(1)' > log.txt`, "1\n"},
				{"appended", `echo kept > log.txt; $RLJAIL --result /dev/stdout -- python3 -c 'print(1)' >> log.txt`, "kept\n1\n"},
				{"same-file-by-name", `$RLJAIL -q --result log.txt -- python3 -c 'print(1)' > log.txt 2>&1`, "1\n"},
				{"fd-3-to-stdout", `$RLJAIL --result-fd 3 -- python3 -c 'print(1)' 3>&1 > log.txt`, ""},
				{"mid-line-through-a-pipe", `$RLJAIL --result - -- python3 -c 'import sys; sys.stdout.write("partial")' | cat > log.txt`, "partial\n"},
			} {
				os.Remove(log)
				r := shellLine(t, m, dir, tc.line)
				if r.exit != 0 {
					t.Errorf("%s: %s: exit %d, stderr %q", tc.name, tc.line, r.exit, r.stderr)
					continue
				}
				if tc.name == "fd-3-to-stdout" {
					// 3>&1 before > log.txt: fd 3 is the test's pipe, the
					// report there; log.txt has the output alone.
					if b, _ := os.ReadFile(log); string(b) != "1\n" || !strings.HasPrefix(r.stdout, `{"run_id":`) {
						t.Errorf("%s: log.txt %q, stdout %q; want the output there and the report here", tc.name, b, r.stdout)
					}
					continue
				}
				before, rep := lastReport(t, log)
				if before != tc.before {
					t.Errorf("%s: %s: log.txt holds %q before the report, want %q (the payload's output intact)", tc.name, tc.line, before, tc.before)
				}
				checkResult(t, tc.name, rep, "ok", 0)
				if _, err := os.Lstat(filepath.Join(dir, "-")); err == nil {
					t.Errorf("%s: a file named - was made", tc.name)
					os.Remove(filepath.Join(dir, "-"))
				}
			}

			// One object per run: the output in the report, head and tail.
			os.Remove(log)
			r := shellLine(t, m, dir, `$RLJAIL --result - --result-output 64 -- python3 -c 'import sys; print("h" * 40 + "t" * 60); print("oops", file=sys.stderr)' > log.txt 2>/dev/null`)
			if r.exit != 0 {
				t.Fatalf("--result-output: exit %d, stderr %q", r.exit, r.stderr)
			}
			before, rep := lastReport(t, log)
			out, _ := rep["output"].(map[string]any)
			want := map[string]any{"stdout": strings.Repeat("h", 32), "stdout_tail": strings.Repeat("t", 31) + "\n", "stdout_omitted_bytes": float64(101 - 64), "stderr": "oops\n"}
			if before != strings.Repeat("h", 40)+strings.Repeat("t", 60)+"\n" || len(out) != len(want) {
				t.Errorf("--result-output 64: log.txt holds %q before the report, output %v; want the line and %v", before, out, want)
			}
			for k, v := range want {
				if out[k] != v {
					t.Errorf("--result-output 64: output.%s = %#v, want %#v", k, out[k], v)
				}
			}

			// docs/report.md's line for one object per run: the report alone on
			// the caller's stdout, both streams in it, apart although
			// rljail's own stdout and stderr are one /dev/null.
			r = shellLine(t, m, dir, `$RLJAIL -q --result-output 64k --result-fd 3 -- python3 -c 'import sys; print("out"); print("err", file=sys.stderr)' 3>&1 >/dev/null 2>&1`)
			var one map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &one); r.exit != 0 || err != nil {
				t.Errorf("one object per run: exit %d, stdout %q, stderr %q; want the report alone", r.exit, r.stdout, r.stderr)
			} else if out, _ := one["output"].(map[string]any); out["stdout"] != "out\n" || out["stderr"] != "err\n" {
				t.Errorf("one object per run: output %v, want stdout and stderr apart", one["output"])
			}

			// A command line that does not parse: its report on stdout,
			// one line on stderr, no file named "-".
			os.Remove(log)
			r = shellLine(t, m, dir, `$RLJAIL --result - --bogus -- true > log.txt`)
			if _, rep := lastReport(t, log); r.exit != 125 || strings.Count(r.stderr, "\n") != 1 || rep["status"] != "setup_error" {
				t.Errorf("--result - --bogus: exit %d, stderr %q, report %v; want 125, one line and a setup_error report", r.exit, r.stderr, rep)
			}
			if _, err := os.Lstat(filepath.Join(dir, "-")); err == nil {
				t.Errorf("--result - --bogus made a file named -")
			}
		})
	}
}
