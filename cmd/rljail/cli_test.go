package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rljail/rljail/hostfile"
)

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"2s", 2 * time.Second, false},
		{"1m30s", 90 * time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{"5", 5 * time.Second, false},
		{"0.5", 500 * time.Millisecond, false},
		{"0", 0, true},
		{"-1s", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		got, err := parseTimeout(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestEnvEntry(t *testing.T) {
	t.Setenv("RLJAIL_TEST_SET", "from-host")
	os.Unsetenv("RLJAIL_TEST_UNSET")
	tests := []struct {
		in      string
		want    string
		ok      bool
		wantErr bool
	}{
		{"FOO=bar", "FOO=bar", true, false},
		{"FOO=", "FOO=", true, false},
		{"FOO=a=b,c", "FOO=a=b,c", true, false},
		{"RLJAIL_TEST_SET", "RLJAIL_TEST_SET=from-host", true, false},
		{"RLJAIL_TEST_UNSET", "", false, false},
		{"=x", "", false, true},
		{"A B=1", "", false, true},
	}
	for _, tt := range tests {
		got, ok, err := envEntry(tt.in)
		if got != tt.want || ok != tt.ok || (err != nil) != tt.wantErr {
			t.Errorf("envEntry(%q) = %q, %v, %v; want %q, %v, error %v", tt.in, got, ok, err, tt.want, tt.ok, tt.wantErr)
		}
	}
}

func TestReadEnvFile(t *testing.T) {
	t.Setenv("RLJAIL_TEST_SET", "v")
	p := filepath.Join(t.TempDir(), "env")
	content := "# comment\n\nA=1\n  B=two words\r\nRLJAIL_TEST_SET\nC=x=y\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readEnvFile(&hostfile.Guard{}, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "B=two words", "RLJAIL_TEST_SET=v", "C=x=y"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readEnvFile = %q, want %q", got, want)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("A=1\n=oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readEnvFile(&hostfile.Guard{}, bad); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("readEnvFile(&hostfile.Guard{}, bad) error = %v, want one naming line 2", err)
	}
}

func TestScriptOf(t *testing.T) {
	tests := []struct {
		argv         []string
		code, script string
	}{
		{[]string{"python3", "-c", "print(1)"}, "print(1)", ""},
		{[]string{"python3", "-cprint(2)"}, "print(2)", ""},
		{[]string{"python3", "-u", "-X", "dev", "main.py", "arg"}, "", "main.py"},
		{[]string{"python3", "-"}, "", "-"},
		{[]string{"python3", "-m", "json.tool"}, "", ""},
		{[]string{"python3"}, "", ""},
	}
	for _, tt := range tests {
		code, script := scriptOf(tt.argv)
		if code != tt.code || script != tt.script {
			t.Errorf("scriptOf(%q) = %q, %q; want %q, %q", tt.argv, code, script, tt.code, tt.script)
		}
	}
}

func TestUsageErrorsExit125OneLine(t *testing.T) {
	tests := [][]string{
		{"rljail", "--no-such-flag", "--", "true"},
		{"rljail", "--network", "host", "--", "true"},
		{"rljail", "--timeout", "0", "--", "true"},
		{"rljail", "--timeout", "soon", "--", "true"},
		{"rljail", "-v", "nocolon", "--", "true"},
		{"rljail", "-w", "relative", "--", "true"},
		{"rljail", "--"},
		{"rljail"},
		{"rljail", "rootfs", "frob"},
		{"rljail", "profiles", "frob"},
		{"rljail", "--cgroup-manager", "docker", "--", "true"},
		{"rljail", "session", "--cgroup-manager", "Systemd"},
	}
	for _, args := range tests {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errb)
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		if code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: ") {
			t.Errorf("%q: exit %d, stderr %q; want 125 and one line starting rljail:", args, code, errb.String())
		}
	}
}

func TestResultPathInArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--result", "r.json", "--", "true"}, "r.json"},
		{[]string{"--result=r.json", "--bogus", "--", "true"}, "r.json"},
		{[]string{"-result", "r.json", "--cpus", "abc"}, "r.json"},
		{[]string{"--bogus", "--result", "r.json"}, "r.json"},
		{[]string{"-q", "--verbose", "--result", "r.json", "--timeout"}, "r.json"},
		{[]string{"--quiet=true", "--result", "a", "--result", "b"}, "b"},
		{[]string{"--memory", "--result", "x"}, ""}, // --result is --memory's value
		{[]string{"--", "python3", "--result", "x"}, ""},
		{[]string{"python3", "--result", "x"}, ""},
		{[]string{"--timeout", "1s", "-", "--result", "x"}, ""},
		{[]string{"--result"}, ""},
	}
	for _, tt := range tests {
		if got := resultPathInArgs(tt.args); got != tt.want {
			t.Errorf("resultPathInArgs(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// A command line that does not parse, or a setup error found before the
// run (a bad --result-fd, an audit log that cannot be opened), leaves no
// earlier report in --result's file: a runner reading it after exit 125
// finds this run's setup error.
func TestParseFailureReplacesOldReport(t *testing.T) {
	for _, bad := range [][]string{{"--bogus"}, {"--cpus", "abc"}, {"--pids-limit", "x"}, {"--result-fd", "abc"},
		{"--result-fd", "1"}, {"--result-fd", "-7"}, {"--audit-log", "/nonexistent-dir/a.log"}} {
		p := filepath.Join(t.TempDir(), "r.json")
		old := `{"status":"ok","exit_code":0}` + "\n"
		if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"rljail", "--result", p}, bad...), "--", "true")
		var out, errb bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errb); code != 125 {
			t.Fatalf("%q: exit %d, want 125", args, code)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Status   string `json:"status"`
			ExitCode int    `json:"exit_code"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(got, &r); err != nil || r.Status != "setup_error" || r.ExitCode != 125 || r.Error == "" {
			t.Errorf("%q: the result file holds %q, want a setup_error report", args, got)
		}
	}
}

func TestFlagErrorsNameFlagsAsHelpDoes(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"rljail", "--bogus", "--", "true"}, "not defined: --bogus"},
		{[]string{"rljail", "--cpus", "abc", "--", "true"}, "for flag --cpus"},
		{[]string{"rljail", "--timeout"}, "an argument: --timeout"},
		{[]string{"rljail", "-Z", "--", "true"}, "not defined: -Z"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		run(tt.args, strings.NewReader(""), &out, &errb)
		if !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%q: stderr %q, want it to contain %q", tt.args, errb.String(), tt.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"rljail", "--version"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "rljail ") {
		t.Errorf("rljail --version: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
