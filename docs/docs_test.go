package docs

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's top: the parent of this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the repository's root: %v", root, err)
	}
	return root
}

// markdownFiles are the pages whose links are checked: the README and
// every page of docs/, and the other Markdown files of the repository.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, f := range repoFiles(t, root) {
		if strings.HasSuffix(f, ".md") {
			files = append(files, f)
		}
	}
	for _, want := range []string{"README.md", "docs/architecture.md", "docs/session-protocol.md"} {
		found := false
		for _, f := range files {
			found = found || f == want
		}
		if !found {
			t.Errorf("%s is not among the repository's Markdown files", want)
		}
	}
	return files
}

// repoFiles lists the repository's files (relative, slash-separated): git's
// list where this is a git work tree, else every regular file but .git's
// and the build's outputs (bin/, build/).
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f == "" {
				continue
			}
			if st, err := os.Lstat(filepath.Join(root, f)); err == nil && st.Mode().IsRegular() {
				files = append(files, f)
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == ".git" || rel == "bin" || rel == "build") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?m)^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// prose returns a page's lines outside code (fenced blocks, lines
// indented as code, inline code spans), where a link is a link.
func prose(text string) []string {
	var lines []string
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence || strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") {
			continue
		}
		lines = append(lines, inlineCode.ReplaceAllString(l, "code"))
	}
	return lines
}

// anchors are the fragment names GitHub gives a page's headings: lower
// case, punctuation dropped but for - and _, spaces as -, and -1, -2 for
// a repeated one.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		a := slug(m[2])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && !strings.ContainsRune("’“”—–…·", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinksResolve: every relative link of a page leads to a file of the
// repository, and a #fragment to a heading of the page it names.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		texts[rel] = string(b)
		return string(b), err
	}
	checked := 0
	for _, page := range files {
		text, err := read(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(text) {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				dest := page
				if path != "" {
					if strings.HasPrefix(path, "/") {
						t.Errorf("%s: link %s is absolute: a page must link within the repository, relatively", page, target)
						continue
					}
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), path)))
					if dest == ".." || strings.HasPrefix(dest, "../") {
						t.Errorf("%s: link %s leads outside the repository", page, target)
						continue
					}
					st, err := os.Stat(filepath.Join(root, dest))
					if err != nil {
						t.Errorf("%s: link %s: %v", page, target, err)
						continue
					}
					if st.IsDir() {
						if frag != "" {
							t.Errorf("%s: link %s has a fragment but names a directory", page, target)
						}
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				destText, err := read(dest)
				if err != nil {
					t.Errorf("%s: link %s: %v", page, target, err)
					continue
				}
				if !anchors(destText)[frag] {
					t.Errorf("%s: link %s: %s has no heading #%s", page, target, dest, frag)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: the link pattern misses them", checked)
	}
	t.Logf("%d relative links in %d pages", checked, len(files))
}

// TestNothingPointsOutside: no file of the repository names a path of the
// machine it was written on (the work directories of its sessions, a
// shared directory beside the repository): a reader of the repository
// has neither.
func TestNothingPointsOutside(t *testing.T) {
	root := repoRoot(t)
	// Spelled in two parts so that this file does not match itself.
	outside := [][]byte{[]byte("/wo" + "rk/"), []byte("../sha" + "red")}
	for _, f := range repoFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // a binary file (a compiled object) names no path a reader follows
		}
		for _, p := range outside {
			if i := bytes.Index(b, p); i >= 0 {
				line := bytes.Count(b[:i], []byte("\n")) + 1
				t.Errorf("%s:%d names %s, a path outside the repository", f, line, p)
			}
		}
	}
}

// TestReadmeIsShort: the README is the page a newcomer starts from: at
// most 300 lines, and its first commands are `make demo` and `make test`,
// which the Makefile has (demo runs an example in the jail).
func TestReadmeIsShort(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the detail to a page of docs/", n)
	}
	var commands []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() && len(commands) < 2 {
		if c, ok := strings.CutPrefix(sc.Text(), "    "); ok {
			if f := strings.Fields(c); len(f) >= 2 {
				commands = append(commands, f[0]+" "+f[1])
			}
		}
	}
	if len(commands) != 2 || commands[0] != "make demo" || commands[1] != "make test" {
		t.Errorf("README.md's first commands are %q, want make demo and make test", commands)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"demo", "test", "install", "deb"} {
		if !regexp.MustCompile(`(?m)^` + target + `:`).Match(mk) {
			t.Errorf("the Makefile has no target %s, which README.md names", target)
		}
	}
	if !regexp.MustCompile(`(?m)^demo:.*\n(\t.*\n)*\t.*\$\(BIN\).* -- python3 examples/demo\.py`).Match(mk) {
		t.Errorf("make demo no longer runs examples/demo.py in the jail, as README.md says")
	}
}
