package vm

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// guestPackage is a Go package whose tests run inside the VM, compiled with
// `go test -c -tags <tags>`.
type guestPackage struct {
	dir  string   // relative to the repository root, "./cgroup"
	tags []string // build tags that select the in-VM tests
	// run, when set, is the -test.run pattern of the binary in the VM:
	// the tests of a package that make sense there (its other tests are
	// compiled in but belong to the development host).
	run string
	// required packages fail the run when they have no test files; the
	// others are skipped silently then (their VM tests are not written yet).
	required bool
}

// defaultGuests run in every VM boot: the harness's own self-check first,
// then the cgroup package's v2 tests when they exist, then the black-box
// limit and placement tests of ./integration (issue 4) on cgroup v2.
var defaultGuests = []guestPackage{
	{dir: "./integration/vm/guest", tags: []string{"rljailvm"}, required: true},
	{dir: "./cgroup", tags: []string{"cgroupv2vm"}},
	{dir: "./integration", tags: []string{"rljailvm"}, run: "^(TestLimits|TestPlacement|TestOverlay)", required: true},
}

// parseGuestPackages reads RLJAIL_VM_PACKAGES: space-separated
// "dir[:tag,tag[:runregex]]" items, e.g. "./jail:jailvm
// ./integration:rljailvm:^TestLimits$". The run pattern may not hold
// spaces (use \s).
func parseGuestPackages(s string) ([]guestPackage, error) {
	var ps []guestPackage
	for _, item := range strings.Fields(s) {
		dir, rest, _ := strings.Cut(item, ":")
		tags, run, _ := strings.Cut(rest, ":")
		if dir == "" {
			return nil, fmt.Errorf("RLJAIL_VM_PACKAGES: %q has no package directory", item)
		}
		p := guestPackage{dir: dir, run: run, required: true}
		for _, t := range strings.Split(tags, ",") {
			if t != "" {
				p.tags = append(p.tags, t)
			}
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// guest is a compiled test binary bound for the VM.
type guest struct {
	name     string // "integration-vm-guest": the binary is <name>.test
	run      string // -test.run pattern, if any
	binary   string // path on the host
	testdata string // the package's testdata directory, if any
}

// goTool runs the go command in the repository root.
type goTool struct {
	goBin string
	root  string
}

func (g goTool) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.goBin, args...)
	cmd.Dir = g.root
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func (g goTool) output(ctx context.Context, args ...string) (string, error) {
	cmd := g.command(ctx, nil, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// testFiles lists the package's test files when built with tags (-e: a
// missing directory or excluded files yield an empty list, not an error).
func (g goTool) testFiles(ctx context.Context, dir string, tags []string) (pkgDir string, files map[string]bool, err error) {
	out, err := g.output(ctx, "list", "-e", "-tags", strings.Join(tags, ","),
		"-f", "{{.Dir}}\n{{range .TestGoFiles}}{{.}}\n{{end}}{{range .XTestGoFiles}}{{.}}\n{{end}}", dir)
	if err != nil {
		return "", nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	files = map[string]bool{}
	for _, l := range lines[1:] {
		if l != "" {
			files[l] = true
		}
	}
	return lines[0], files, nil
}

// build compiles p statically into outDir. It returns ok=false, no error,
// when p is optional and has no test files that its tags select.
func (g goTool) build(ctx context.Context, p guestPackage, outDir string) (gst guest, ok bool, err error) {
	pkgDir, tagged, err := g.testFiles(ctx, p.dir, p.tags)
	if err != nil {
		return guest{}, false, err
	}
	if len(p.tags) > 0 {
		// Only the files the tags add count: a package's ordinary unit
		// tests are no reason to boot it.
		_, plain, err := g.testFiles(ctx, p.dir, nil)
		if err != nil {
			return guest{}, false, err
		}
		for f := range plain {
			delete(tagged, f)
		}
	}
	if len(tagged) == 0 {
		if p.required {
			return guest{}, false, fmt.Errorf("%s has no test files with tags %q", p.dir, p.tags)
		}
		return guest{}, false, nil
	}

	name := strings.Trim(filepath.ToSlash(filepath.Clean(p.dir)), "./")
	name = strings.NewReplacer("/", "-", ".", "_").Replace(name)
	if name == "" {
		name = "root"
	}
	gst = guest{name: name, binary: filepath.Join(outDir, name+".test"), run: p.run}
	if st, err := os.Stat(filepath.Join(pkgDir, "testdata")); err == nil && st.IsDir() {
		gst.testdata = filepath.Join(pkgDir, "testdata")
	}

	// Static either way: without cgo when nothing in the test binary needs
	// it, else cgo linked statically as the Makefile links rljail.
	cgoPkgs, err := g.output(ctx, "list", "-e", "-deps", "-test", "-tags", strings.Join(p.tags, ","),
		"-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", p.dir)
	if err != nil {
		return guest{}, false, err
	}
	args := []string{"test", "-c", "-trimpath", "-o", gst.binary}
	var env []string
	if strings.TrimSpace(cgoPkgs) == "" {
		env = []string{"CGO_ENABLED=0"}
		args = append(args, "-tags", strings.Join(p.tags, ","))
	} else {
		env = []string{"CGO_ENABLED=1"}
		args = append(args, "-tags", strings.Join(append([]string{"netgo", "osusergo"}, p.tags...), ","),
			"-ldflags", "-linkmode external -extldflags -static")
	}
	args = append(args, p.dir)
	cmd := g.command(ctx, env, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return guest{}, false, fmt.Errorf("%s go %s: %v\n%s", strings.Join(env, " "), strings.Join(args, " "), err, out)
	}
	if err := checkStatic(gst.binary); err != nil {
		return guest{}, false, err
	}
	return gst, true, nil
}

// checkStatic fails unless path is an ELF executable with no program
// interpreter: the VM has no dynamic loader and no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (the VM has no dynamic loader)", path)
		}
	}
	return nil
}

// TestGuestBuildSelectsTaggedTests checks which packages boot: those with
// test files their tags add, built static; optional ones without such files
// (or without a directory) are skipped, required ones fail.
func TestGuestBuildSelectsTaggedTests(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root := t.TempDir()
	files := map[string]string{
		"go.mod":                "module example.com/m\n\ngo 1.22\n",
		"tagged/p.go":           "package p\n",
		"tagged/p_test.go":      "package p\n\nimport \"testing\"\n\nfunc TestPlain(t *testing.T) {}\n",
		"tagged/p_vm_test.go":   "//go:build cgroupv2vm\n\npackage p\n\nimport \"testing\"\n\nfunc TestInVM(t *testing.T) {}\n",
		"tagged/testdata/x.txt": "x\n",
		"plain/q.go":            "package q\n",
		"plain/q_test.go":       "package q\n\nimport \"testing\"\n\nfunc TestPlain(t *testing.T) {}\n",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gt := goTool{goBin: goBin, root: root}
	ctx := context.Background()
	out := t.TempDir()

	g, ok, err := gt.build(ctx, guestPackage{dir: "./tagged", tags: []string{"cgroupv2vm"}}, out)
	if err != nil || !ok {
		t.Fatalf("tagged package: ok=%v err=%v", ok, err)
	}
	if g.name != "tagged" || g.testdata != filepath.Join(root, "tagged", "testdata") {
		t.Errorf("tagged package: got %+v", g)
	}
	if err := checkStatic(g.binary); err != nil {
		t.Error(err)
	}
	for _, dir := range []string{"./plain", "./missing"} {
		if _, ok, err := gt.build(ctx, guestPackage{dir: dir, tags: []string{"cgroupv2vm"}}, out); ok || err != nil {
			t.Errorf("optional %s: ok=%v err=%v, want skipped", dir, ok, err)
		}
		if _, _, err := gt.build(ctx, guestPackage{dir: dir, tags: []string{"cgroupv2vm"}, required: true}, out); err == nil {
			t.Errorf("required %s: no error", dir)
		}
	}
}

// TestParseGuestPackages checks the RLJAIL_VM_PACKAGES syntax.
func TestParseGuestPackages(t *testing.T) {
	got, err := parseGuestPackages("./a ./b:x,y ./c:t:^(TestA|TestB)$ ./d::Run")
	if err != nil {
		t.Fatal(err)
	}
	want := []guestPackage{
		{dir: "./a", required: true},
		{dir: "./b", tags: []string{"x", "y"}, required: true},
		{dir: "./c", tags: []string{"t"}, run: "^(TestA|TestB)$", required: true},
		{dir: "./d", run: "Run", required: true},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("parseGuestPackages:\n got %+v\nwant %+v", got, want)
	}
	if _, err := parseGuestPackages(":tag"); err == nil {
		t.Error("an item without a directory was accepted")
	}
}

// buildGuests builds the test binaries of packages and of the extra packages
// the environment variable env names (parseGuestPackages) into work, each
// once; a package with no tests for its tags is left out, with a line saying
// so.
func buildGuests(ctx context.Context, t *testing.T, h hostTools, packages []guestPackage, env, work string) []guest {
	t.Helper()
	extra, err := parseGuestPackages(os.Getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	gt := goTool{goBin: h.goBin, root: h.repoRoot}
	var guests []guest
	seen := map[string]bool{}
	for _, p := range append(append([]guestPackage{}, packages...), extra...) {
		g, ok, err := gt.build(ctx, p, work)
		if err != nil {
			t.Fatalf("building the VM tests of %s: %v", p.dir, err)
		}
		if !ok {
			t.Logf("%s has no tests with tags %q: not run in the VM", p.dir, p.tags)
			continue
		}
		if seen[g.name] {
			continue
		}
		seen[g.name] = true
		guests = append(guests, g)
	}
	return guests
}
