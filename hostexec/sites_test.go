package hostexec

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// jailExecs are the files that start programs without this package, and
// why: they start rljail itself in a jail's namespaces, which needs the
// profile's userns permission (see the package comment).
var jailExecs = map[string]string{
	"jail/run.go":   "prestart: /proc/self/exe as a jail's first step",
	"jail/probe.go": "rljail check's probe: /proc/self/exe in a jail's namespaces",
}

// TestEveryHostExecGoesThroughHostexec reads rljail's own sources: a new
// place that starts a program outside this package and jailExecs fails here
// until it goes through Start or is listed with its reason.
func TestEveryHostExecGoesThroughHostexec(t *testing.T) {
	startsProgram := regexp.MustCompile(`\bexec\.Command(Context)?\(|\bexec\.Cmd\{|\bStartProcess\(|\bForkExec\(|\bsyscall\.Exec\(|\bunix\.Exec(veat)?\(`)
	ownStart := regexp.MustCompile(`\bcmd\.(Start|Run|Output|CombinedOutput)\(\)`)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			// integration/: tests that start rljail and tools, not rljail.
			if rel == "integration" || rel == "hostexec" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		src := string(b)
		if strings.HasPrefix(src, "//go:build ignore") || strings.Contains(src, "\npackage main") && strings.Contains(rel, "/gen") {
			return nil // generators run by make, not part of rljail
		}
		seen++
		if startsProgram.MatchString(src) {
			if _, ok := jailExecs[filepath.ToSlash(rel)]; !ok {
				t.Errorf("%s starts a program without hostexec: use hostexec.Command and hostexec.Start (or list it in jailExecs with its reason)", rel)
			}
		}
		if strings.Contains(src, "hostexec.Command(") && ownStart.MatchString(src) {
			t.Errorf("%s starts a hostexec.Command with the exec.Cmd's own method (%s): use hostexec's", rel, ownStart.FindString(src))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("read only %d Go files under %s: not the repository", seen, root)
	}
}
