package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// manPage renders the man page as `rljail man` prints it.
func manPage(t *testing.T) string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := run([]string{"rljail", "man"}, strings.NewReader(""), &out, &errs); code != 0 {
		t.Fatalf("rljail man: exit %d, stderr %q", code, errs.String())
	}
	return out.String()
}

// TestManPageHasEveryFlag: every visible command and subcommand has its
// section, and every name of every flag of each is in the page, as roff
// spells it (\-\-name, \-n): the page is generated from the App, and this
// says that nothing of the App is left out of it.
func TestManPageHasEveryFlag(t *testing.T) {
	page := manPage(t)
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	flags := 0
	var walk func(parent string, cmds []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := parent + " " + c.Name
			section := ".SS \"" + roffQuoted(name) + "\"\n"
			i := strings.Index(page, section)
			if i < 0 {
				t.Errorf("the man page has no section for %q", name)
				continue
			}
			// The command's flags come in its section, before the next one.
			body := page[i+len(section):]
			if j := strings.Index(body, "\n.SS "); j >= 0 {
				body = body[:j]
			}
			if j := strings.Index(body, "\n.SH "); j >= 0 {
				body = body[:j]
			}
			for _, f := range c.Flags {
				if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
					continue
				}
				for _, n := range f.Names() {
					if n == "help" || n == "h" {
						continue
					}
					spelled := `\fB\-` + roffEscape(n) + `\fR`
					if len(n) > 1 {
						spelled = `\fB\-\-` + roffEscape(n) + `\fR`
					}
					if !strings.Contains(body, spelled) {
						t.Errorf("%s: the man page lacks its flag %s", name, spelled)
					}
					flags++
				}
				if df, ok := f.(cli.DocGenerationFlag); ok && df.GetUsage() != "" && !strings.Contains(body, roffText(df.GetUsage())) {
					t.Errorf("%s --%s: the man page lacks its usage %q", name, f.Names()[0], df.GetUsage())
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("rljail", app.Commands)
	if flags < 100 {
		t.Errorf("only %d flag names checked: the walk misses commands", flags)
	}
	for _, want := range []string{".SH NAME\n", ".SH SYNOPSIS\n", ".SH DESCRIPTION\n", ".SH COMMANDS\n", ".SH EXIT STATUS\n", ".SH FILES\n", ".SH SEE ALSO\n",
		"\\-\\-rljail\\-timeout", ".B 124\n", ".B 125\n", ".B 137\n", ".B 159\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("the man page lacks %q", want)
		}
	}
	if strings.Contains(page, ".SS \"rljail man\"") {
		t.Errorf("the man page lists the hidden man command")
	}
}

// TestManPageRenders: groff's man macros render the page with every
// warning on and say nothing, and so does man -l (man-db) where it is
// installed (both Debian: groff-base, man-db; `make deps`).
func TestManPageRenders(t *testing.T) {
	page := manPage(t)
	f := t.TempDir() + "/rljail.1"
	if err := os.WriteFile(f, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Fatalf("groff is needed to check the man page (Debian package groff-base): %v", err)
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", f)
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Run(); err != nil || errs.Len() > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, errs.String())
	}
	if _, err := exec.LookPath("man"); err == nil {
		cmd := exec.Command("man", "--warnings=w", "-l", f)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "LC_ALL=C.UTF-8", "MANPAGER=cat", "PAGER=cat")
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil || errs.Len() > 0 {
			t.Errorf("man -l: %v\n%s", err, errs.String())
		}
		for _, want := range []string{"RLJAIL(1)", "--allow-host", "EXIT STATUS", "rljail rootfs build"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("man -l's page lacks %q", want)
			}
		}
	}
}
