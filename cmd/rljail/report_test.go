package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
)

// issue 30: `rljail --result /dev/stdout ... > log.txt` opened log.txt a
// second time and cut it, over the payload's output; `--result -` wrote
// a file named "-". A report whose target is rljail's stdout or stderr,
// by "-" or by being the same file, is written on that stream, and the
// file is never cut.
func TestResultOnOwnStream(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.txt")
	if err := os.WriteFile(log, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0) // the shell's >> log.txt
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errFile, err := os.Create(filepath.Join(dir, "err.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	stdout, stderr := trackLines(out, errFile)
	g := hostfile.NewGuard(nil, nil)
	fd, _ := fdOf(stdout)
	devStdout := "/proc/self/fd/" + strconv.Itoa(fd) // what /dev/stdout leads to
	for _, tc := range []struct {
		path   string
		stream string
	}{
		{"-", "stdout"}, {devStdout, "stdout"}, {log, "stdout"}, {"./" + filepath.Base(log), "stdout"},
		{errFile.Name(), "stderr"}, {filepath.Join(dir, "other.json"), ""},
	} {
		t.Run(strings.ReplaceAll(tc.path, "/", "_"), func(t *testing.T) {
			wd, _ := os.Getwd()
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			defer os.Chdir(wd)
			f, created, err := openResult(g, tc.path, stdout, stderr, true, reportReserve)
			if err != nil {
				t.Fatalf("openResult(%q): %v", tc.path, err)
			}
			defer f.Close()
			want := map[string]any{"stdout": stdout, "stderr": stderr, "": nil}[tc.stream]
			if f.stream != want {
				t.Fatalf("openResult(%q): stream %v, want %s", tc.path, f.stream, tc.stream)
			}
			if tc.stream == "" && (f.File == nil || created != tc.path) {
				t.Fatalf("openResult(%q): file %v, created %q; want a file of its own, made here", tc.path, f.File, created)
			}
			if _, err := os.Lstat(filepath.Join(dir, "-")); err == nil {
				t.Fatalf("openResult(%q) made a file named -", tc.path)
			}
		})
	}
	// The payload's output ended mid-line: the report starts a line.
	if _, err := stdout.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	f, _, err := openResult(g, "-", stdout, stderr, true, reportReserve)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.write(jail.Result{Status: jail.StatusOK, RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	var r jail.Result
	if len(lines) != 3 || lines[0] != "kept" || lines[1] != "partial" || json.Unmarshal([]byte(lines[2]), &r) != nil || r.RunID != "r1" {
		t.Fatalf("log.txt holds %q; want what it held, the output, and the report on a line of its own", got)
	}
	// A session's stdout carries its protocol: no report there.
	if _, _, err := openResult(g, "-", stdout, stderr, false, 0); err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("a session's --result -: %v, want it refused", err)
	}
	// rljail's stdout in a volume granted rw is refused as such a file is.
	g2 := hostfile.NewGuard([]string{dir}, nil)
	if _, _, err := openResult(g2, "-", stdout, stderr, true, 0); err == nil || !strings.Contains(err.Error(), "inside the volume") {
		t.Errorf("--result - onto a file in a writable volume: %v, want it refused", err)
	}
}

// A command line that does not parse leaves its setup_error report on
// stdout for `--result -`, and makes no file named "-".
func TestParseFailureReportOnStdout(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var out, errb bytes.Buffer
	code := run([]string{"rljail", "--result", "-", "--bogus", "--", "true"}, strings.NewReader(""), &out, &errb)
	var r jail.Result
	if code != 125 || json.Unmarshal(out.Bytes(), &r) != nil || r.Status != jail.StatusSetupError || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want 125, the setup_error report on stdout and one line on stderr", code, out.String(), errb.String())
	}
	if _, err := os.Lstat(filepath.Join(dir, "-")); err == nil {
		t.Errorf("a file named - was made")
	}
}

func TestParseReportOutput(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "64k": 64 << 10, "100": 100, "16m": 16 << 20} {
		if got, err := parseReportOutput(v); err != nil || got != want {
			t.Errorf("parseReportOutput(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"17m", "-1", "lots", ""} {
		if _, err := parseReportOutput(v); err == nil {
			t.Errorf("parseReportOutput(%q) took it", v)
		}
	}
}
