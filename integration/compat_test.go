package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// compatDir holds the compatibility corpus: small, deterministic Python
// programs that use the standard library the ways the python profile must
// allow (issue 3, "Tests"). Each prints stable output and exits 0.
const compatDir = "testdata/compat"

// compatPerProgram bounds one program's run, outside or inside the jail:
// each takes well under a second; the margin is for a loaded machine.
const compatPerProgram = 30 * time.Second

// compatRuns are the corpus programs that run more than once, each run a
// subtest of its own name with its own arguments: one multiprocessing
// program serves the three start methods, which reach the kernel by
// different calls (fork, a server process over a Unix socket, a fresh
// interpreter). A program not named here runs once, without arguments,
// under its own name.
var compatRuns = map[string][]compatRun{
	"mp_start_method.py": {
		{"mp_fork", []string{"fork"}},
		{"mp_forkserver", []string{"forkserver"}},
		{"mp_spawn", []string{"spawn"}},
	},
}

// compatRun is one run of a corpus program: the subtest's name and the
// program's arguments.
type compatRun struct {
	name string
	args []string
}

// TestCompatCorpus runs every program of the corpus with the host's
// python3 and then in the jail under the default profile, as root and
// rootless, and requires exit 0 both ways and the same stdout.
func TestCompatCorpus(t *testing.T) {
	t.Parallel()
	progs, err := filepath.Glob(filepath.Join(compatDir, "*.py"))
	if err != nil || len(progs) == 0 {
		t.Fatalf("no programs in %s (%v)", compatDir, err)
	}
	sort.Strings(progs)
	// One copy of the corpus serves as rljail's working directory (the
	// workspace, /workspace in the jail): 0755 and 0644 so that the
	// rootless user can read it wherever the repository lives.
	corpus := newDir(t)
	for _, p := range progs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(corpus, filepath.Base(p)), string(b), 0o644)
	}
	for name := range compatRuns {
		if !slices.Contains(progs, filepath.Join(compatDir, name)) {
			t.Fatalf("compatRuns names %s, which is not in %s", name, compatDir)
		}
	}
	for _, p := range progs {
		name := filepath.Base(p)
		runs, ok := compatRuns[name]
		if !ok {
			runs = []compatRun{{name: strings.TrimSuffix(name, ".py")}}
		}
		for _, run := range runs {
			command := strings.Join(append([]string{name}, run.args...), " ")
			t.Run(run.name, func(t *testing.T) {
				t.Parallel()
				want := runOutside(t, corpus, name, run.args...)
				for _, m := range bothModes {
					t.Run(string(m), func(t *testing.T) {
						start := time.Now()
						stdout, stderr, exit, res := runJail(t, m, runOpts{dir: corpus, deadline: compatPerProgram},
							append([]string{"--", "python3", name}, run.args...)...)
						wall := time.Since(start)
						if exit != 0 {
							t.Fatalf("rljail -- python3 %s: exit %d, want 0 (outside the jail it exits 0)\nstdout:\n%s\nstderr:\n%s\nresult: %v\n"+
								"(run `rljail --seccomp=learn -- python3 %s` in %s to list the calls the profile denied)",
								command, exit, stdout, stderr, res, command, compatDir)
						}
						if stdout != want {
							t.Errorf("rljail -- python3 %s: stdout differs from outside the jail\n%s\nstderr in the jail:\n%s",
								command, lineDiff(want, stdout), stderr)
						}
						if sc, ok := res["seccomp"].(map[string]any); !ok || sc["profile"] != "python" {
							t.Errorf("rljail -- python3 %s: the result report does not name the python profile: %v", command, res["seccomp"])
						}
						t.Logf("%s: %v in the jail", m, wall.Round(time.Millisecond))
					})
				}
			})
		}
	}
}

// runOutside runs name with args with the host's /usr/bin/python3 in a
// private copy of the corpus directory, with an environment like the
// jail's, and returns its stdout; it fails the test unless the program
// exits 0.
func runOutside(t *testing.T, corpus, name string, args ...string) string {
	t.Helper()
	work := newDir(t)
	ents, err := os.ReadDir(corpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(corpus, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(work, e.Name()), string(b), 0o644)
	}
	home := newDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), compatPerProgram)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", append([]string{name}, args...)...)
	cmd.Dir = work
	// The jail's environment is PATH, HOME=/tmp, LANG=C.UTF-8 and
	// PYTHONDONTWRITEBYTECODE=1; TMPDIR keeps the host's /tmp clean.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + home, "TMPDIR=" + home,
		"PYTHONDONTWRITEBYTECODE=1"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("outside the jail, /usr/bin/python3 %s failed (%v): the program itself is broken\nstdout:\n%s\nstderr:\n%s",
			strings.Join(append([]string{name}, args...), " "), err, stdout.String(), stderr.String())
	}
	if stdout.Len() == 0 {
		t.Fatalf("outside the jail, /usr/bin/python3 %s printed nothing: a corpus program must print what it checked", name)
	}
	return stdout.String()
}

// lineDiff shows the lines of two outputs that differ, with their numbers.
func lineDiff(want, got string) string {
	w := strings.Split(want, "\n")
	g := strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  outside: " + wl + "\n  in jail: " + gl + "\n")
		}
	}
	return b.String()
}
