package hostexec

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLabel(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"rljail (unconfined)\n", "rljail"},
		{"rljail-host (unconfined)\n", "rljail-host"},
		{"unconfined\n", "unconfined"},
		{"/usr/bin/foo (enforce)\n", "/usr/bin/foo"},
		{"rljail (complain)", "rljail"},
		{"rljail//&other (mixed)\n", "rljail//&other"},
		{"rljail\x00", "rljail"},
		{"system_u:system_r:unconfined_t:s0\x00", "system_u:system_r:unconfined_t:s0"},
		{"(unconfined)\n", "(unconfined)"},
		{"", ""},
	} {
		if got := parseLabel([]byte(c.raw)); got != c.want {
			t.Errorf("parseLabel(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
}

func TestNeedsHostProfile(t *testing.T) {
	for _, c := range []struct {
		label string
		want  bool
	}{
		{"rljail", true},
		{"rljail-host", false},
		{"unconfined", false},
		{"/usr/bin/rljail", false},
		{"rljail//&other", false},
		{"", false},
	} {
		if got := needsHostProfile(c.label); got != c.want {
			t.Errorf("needsHostProfile(%q) = %v, want %v", c.label, got, c.want)
		}
	}
}

// fakeAttrs lays out attribute files in a directory: current and exec
// (attr/apparmor/), legacyCurrent and legacyExec (attr/); an empty value
// leaves the file out.
func fakeAttrs(t *testing.T, current, exec, legacyCurrent, legacyExec string) attrFiles {
	t.Helper()
	dir := t.TempDir()
	a := attrFiles{
		current: filepath.Join(dir, "apparmor-current"), exec: filepath.Join(dir, "apparmor-exec"),
		legacyCurrent: filepath.Join(dir, "current"), legacyExec: filepath.Join(dir, "exec"),
	}
	for p, v := range map[string]string{a.current: current, a.exec: exec, a.legacyCurrent: legacyCurrent, a.legacyExec: legacyExec} {
		if v != "" {
			if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a
}

func TestRequestHostProfile(t *testing.T) {
	const untouched = "untouched"
	for _, c := range []struct {
		name                                     string
		current, exec, legacyCurrent, legacyExec string
		wantRequested                            bool
		wantErr                                  string
		wantExec, wantLegacyExec                 string // "" when the file is absent
	}{
		{name: "rljail asks", current: "rljail (unconfined)\n", exec: untouched, legacyCurrent: "rljail (unconfined)\n", legacyExec: untouched,
			wantRequested: true, wantExec: "exec rljail-host", wantLegacyExec: untouched},
		{name: "unconfined does nothing", current: "unconfined\n", exec: untouched, legacyExec: untouched,
			wantExec: untouched, wantLegacyExec: untouched},
		{name: "already rljail-host", current: "rljail-host (unconfined)\n", exec: untouched,
			wantExec: untouched},
		{name: "legacy attribute", legacyCurrent: "rljail (unconfined)\n", legacyExec: untouched,
			wantRequested: true, wantLegacyExec: "exec rljail-host"},
		{name: "another LSM's context", legacyCurrent: "system_u:system_r:unconfined_t:s0", legacyExec: untouched,
			wantLegacyExec: untouched},
		{name: "no AppArmor", exec: untouched, wantExec: untouched},
		{name: "fails closed", current: "rljail (unconfined)\n",
			wantRequested: true, wantErr: `"exec rljail-host": open `},
		{name: "fails closed on the legacy attribute", legacyCurrent: "rljail (unconfined)\n",
			wantRequested: true, wantErr: `"exec rljail-host": open `},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := fakeAttrs(t, c.current, c.exec, c.legacyCurrent, c.legacyExec)
			requested, err := requestHostProfile(a)
			if requested != c.wantRequested {
				t.Errorf("requested = %v, want %v", requested, c.wantRequested)
			}
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
			for p, want := range map[string]string{a.exec: c.wantExec, a.legacyExec: c.wantLegacyExec} {
				b, err := os.ReadFile(p)
				if want == "" {
					if err == nil {
						t.Errorf("%s was created: %q", p, b)
					}
				} else if string(b) != want {
					t.Errorf("%s = %q, want %q", p, b, want)
				}
			}
		})
	}
}

func TestRequestHostProfileUnreadable(t *testing.T) {
	// A label that exists but cannot be read is not "no AppArmor".
	a := fakeAttrs(t, "", "", "", "")
	if err := os.Mkdir(a.current, 0o700); err != nil {
		t.Fatal(err)
	}
	if requested, err := requestHostProfile(a); err == nil {
		t.Errorf("requested %v without an error from an unreadable label", requested)
	}
}

func TestStartRefusesWhenTheRequestFails(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := Command(context.Background(), "sh", "-c", `: > "$1"`, "sh", marker)
	err := start(cmd, fakeAttrs(t, "rljail (unconfined)\n", "", "", ""))
	if err == nil || !strings.Contains(err.Error(), "rljail-host") {
		t.Fatalf("start: %v, want a refusal naming rljail-host", err)
	}
	if cmd.Process != nil {
		t.Errorf("the program was started: pid %d", cmd.Process.Pid)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the program ran")
	}
}

func TestStartWithAttrs(t *testing.T) {
	// A request the fake attribute takes: the program runs.
	a := fakeAttrs(t, "rljail (unconfined)\n", "x", "", "")
	cmd := Command(context.Background(), "true")
	if err := start(cmd, a); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(a.exec); string(b) != "exec rljail-host" {
		t.Errorf("exec attribute %q", b)
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("PATH", t.TempDir()+":"+os.Getenv("PATH"))
	t.Setenv("RLJAIL_HOSTEXEC_CALLER", "1")
	cmd := Command(context.Background(), "env")
	cmd.Env = append(cmd.Env, "LD_PRELOAD=/nonexistent.so", "LD_LIBRARY_PATH=/x", "GCONV_PATH=/x", "GLIBC_TUNABLES=x", "KEEP=1")
	out, err := Output(cmd)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := strings.Fields(string(out))
	want := []string{"PATH=" + SafePath, "KEEP=1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("environment %q, want %q", got, want)
	}

	if err := Run(&exec.Cmd{Path: "/bin/true"}); err == nil || !strings.Contains(err.Error(), "no environment") {
		t.Errorf("Run without an environment: %v, want a refusal", err)
	}
}

func TestCommandLookPath(t *testing.T) {
	// The caller's PATH does not choose the program.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "true"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	cmd := Command(context.Background(), "true")
	if strings.HasPrefix(cmd.Path, dir) {
		t.Errorf("Command looked true up in the caller's PATH: %s", cmd.Path)
	}
	if err := Run(cmd); err != nil {
		t.Errorf("%s: %v", cmd.Path, err)
	}
	cmd = Command(context.Background(), "rljail-no-such-program")
	if err := Run(cmd); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("a missing program: %v, want exec.ErrNotFound", err)
	}
	// A program in the caller's PATH alone is not found, and does not run.
	marker := filepath.Join(t.TempDir(), "ran")
	if err := os.WriteFile(filepath.Join(dir, "rljail-only-here"), []byte("#!/bin/sh\n: > "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = Command(context.Background(), "rljail-only-here")
	if err := Run(cmd); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("a program only in the caller's PATH: %v, want exec.ErrNotFound", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the program in the caller's PATH ran")
	}
}

func TestCombinedOutput(t *testing.T) {
	out, err := CombinedOutput(Command(context.Background(), "sh", "-c", "echo out; echo err >&2"))
	if err != nil || string(out) != "out\nerr\n" {
		t.Errorf("CombinedOutput = %q, %v", out, err)
	}
}

// TestProfileFile: the profiles Start names are the ones contrib/apparmor/rljail
// defines, Profile with userns and HostProfile without it (make
// test-apparmor parses the file with AppArmor's parser).
func TestProfileFile(t *testing.T) {
	b, err := os.ReadFile("../contrib/apparmor/rljail")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	var name string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "profile" {
			name = f[1]
		}
		if name != "" {
			blocks[name] += line
			if strings.HasPrefix(line, "}") {
				name = ""
			}
		}
	}
	if len(blocks) != 2 || blocks[Profile] == "" || blocks[HostProfile] == "" {
		t.Fatalf("the file defines %d profiles (%v), want %s and %s", len(blocks), blocks, Profile, HostProfile)
	}
	if !strings.Contains(blocks[Profile], "\n  userns,\n") {
		t.Errorf("the profile %s has no userns rule:\n%s", Profile, blocks[Profile])
	}
	if strings.Contains(blocks[HostProfile], "userns") {
		t.Errorf("the profile %s allows userns:\n%s", HostProfile, blocks[HostProfile])
	}
	for n, blk := range blocks {
		if !strings.Contains(strings.SplitN(blk, "\n", 2)[0], "flags=(unconfined)") {
			t.Errorf("the profile %s is not in unconfined mode: %s", n, strings.SplitN(blk, "\n", 2)[0])
		}
	}
}
