package main

// Fuzz targets for the parsers of user input in the CLI (issue 5). The
// seed corpora are in testdata/fuzz/FuzzXxx; `go test` runs them as
// ordinary tests, and
//
//	go test -run '^$' -fuzz '^FuzzParseSize$' -fuzztime 30s ./cmd/rljail/
//
// fuzzes one target. Every target checks properties of the result, not
// only that the parser returns.

import (
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
)

// fzOneLine fails t when msg is empty or spans more than one line.
func fzOneLine(t *testing.T, what, msg string) {
	t.Helper()
	if msg == "" || strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("%s: error is not one line: %q", what, msg)
	}
}

// fzDecimal reports whether s is a plain decimal integer: digits only,
// with no sign, unit, point or exponent.
func fzDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FuzzParseSize: --memory, --tmp-size, --output-limit and --file-size.
// An accepted size is positive (zero would silently mean "the default" to
// jail.Resources); an error is one line that names the flag and quotes the
// value; a plain decimal integer that fits an int64 is taken exactly; a
// unit multiplies exactly while the result is exactly representable.
func FuzzParseSize(f *testing.F) {
	f.Add("512m")
	f.Add("65536")
	f.Fuzz(func(t *testing.T, s string) {
		const flag = "memory"
		n, err := parseSize(flag, s)
		trimmed := strings.TrimSpace(s)
		if fzDecimal(trimmed) {
			if want, perr := strconv.ParseInt(trimmed, 10, 64); perr == nil && want > 0 {
				if err != nil || n != want {
					t.Fatalf("parseSize(%q) = %d, %v; a plain integer must be taken exactly: want %d", s, n, err, want)
				}
				for unit, mult := range map[string]int64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40} {
					if want > (1<<53)/mult {
						continue
					}
					got, err := parseSize(flag, trimmed+unit)
					if err != nil || got != want*mult {
						t.Fatalf("parseSize(%q) = %d, %v; want %d", trimmed+unit, got, err, want*mult)
					}
				}
			}
		}
		if err != nil {
			msg := err.Error()
			fzOneLine(t, "parseSize("+strconv.Quote(s)+")", msg)
			if n != 0 {
				t.Fatalf("parseSize(%q) = %d with error %q", s, n, msg)
			}
			if !strings.HasPrefix(msg, "--"+flag+" ") || !strings.Contains(msg, strconv.Quote(s)) {
				t.Fatalf("parseSize(%q) error %q does not name --%s and the value", s, msg, flag)
			}
			return
		}
		if n <= 0 {
			t.Fatalf("parseSize(%q) = %d, nil; an accepted size must be positive (0 means the default, 512 MiB for --memory)", s, n)
		}
	})
}

// FuzzParseTimeout: --timeout (and --cpu-time). A result is positive or an
// error; a Go duration is taken as time.ParseDuration reads it; a number
// of seconds is converted without wrapping around.
func FuzzParseTimeout(f *testing.F) {
	f.Add("10s")
	f.Add("2.5")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTimeout(s)
		if err != nil {
			msg := err.Error()
			fzOneLine(t, "parseTimeout("+strconv.Quote(s)+")", msg)
			if d != 0 {
				t.Fatalf("parseTimeout(%q) = %v with error %q", s, d, msg)
			}
			if !strings.HasPrefix(msg, "--timeout ") || !strings.Contains(msg, strconv.Quote(s)) {
				t.Fatalf("parseTimeout(%q) error %q does not quote the value", s, msg)
			}
			if pd, perr := time.ParseDuration(s); perr == nil && pd > 0 {
				t.Fatalf("parseTimeout(%q) rejects the valid duration %v: %q", s, pd, msg)
			}
			return
		}
		if d <= 0 {
			t.Fatalf("parseTimeout(%q) = %v, nil; want a positive duration or an error", s, d)
		}
		if pd, perr := time.ParseDuration(s); perr == nil {
			if d != pd {
				t.Fatalf("parseTimeout(%q) = %v; time.ParseDuration says %v", s, d, pd)
			}
			return
		}
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			t.Fatalf("parseTimeout(%q) = %v, but it is neither a duration nor a number", s, d)
		}
		if want := secs * float64(time.Second); math.Abs(float64(d)-want) > 1 {
			t.Fatalf("parseTimeout(%q) = %v (%d ns); %g seconds is %g ns", s, d, int64(d), secs, want)
		}
	})
}

// FuzzEnvEntry: -e and the entries of profiles. An accepted entry is
// KEY=VALUE with a non-empty key free of '=', NUL, space and tab, and a
// value free of NUL; KEY=VALUE is passed as given and a bare KEY takes
// rljail's own value; ok and an error never come together.
func FuzzEnvEntry(f *testing.F) {
	f.Add("FOO=bar")
	f.Add("PATH")
	f.Fuzz(func(t *testing.T, e string) {
		kv, ok, err := envEntry(e)
		if err != nil {
			if ok || kv != "" {
				t.Fatalf("envEntry(%q) = %q, %v with error %v", e, kv, ok, err)
			}
			if err.Error() == "" {
				t.Fatalf("envEntry(%q): empty error", e)
			}
			return
		}
		key, _, hasVal := strings.Cut(e, "=")
		if !ok {
			if kv != "" {
				t.Fatalf("envEntry(%q) = %q, not ok", e, kv)
			}
			if _, set := os.LookupEnv(key); hasVal || set {
				t.Fatalf("envEntry(%q) dropped an entry that has a value", e)
			}
			return
		}
		k, v, found := strings.Cut(kv, "=")
		switch {
		case !found || k == "":
			t.Fatalf("envEntry(%q) = %q: not KEY=VALUE", e, kv)
		case strings.ContainsAny(k, "= \t\x00"):
			t.Fatalf("envEntry(%q) = %q: the key has '=', NUL or whitespace", e, kv)
		case strings.IndexByte(v, 0) >= 0:
			t.Fatalf("envEntry(%q) = %q: the value has a NUL byte", e, kv)
		case k != key:
			t.Fatalf("envEntry(%q) = %q: key %q, want %q", e, kv, k, key)
		case hasVal && kv != e:
			t.Fatalf("envEntry(%q) = %q, want the entry unchanged", e, kv)
		case !hasVal && kv != key+"="+os.Getenv(key):
			t.Fatalf("envEntry(%q) = %q, want rljail's own value %q", e, kv, os.Getenv(key))
		}
	})
}

// fzEnvFileLine matches the place an --env-file error names.
var fzEnvFileLine = regexp.MustCompile(`^:([0-9]+): `)

// FuzzReadEnvFile: --env-file. The file holds data, then, when longLine is
// not zero, one more line of about 2^(longLine%22) bytes (up to 2 MiB,
// past the 1 MiB the reader buffers). The result is what reading the lines
// one by one with envEntry gives; an error names the file and the line it
// is about, and is the first line envEntry rejects when there is one.
func FuzzReadEnvFile(f *testing.F) {
	f.Add([]byte("A=1\n# comment\n\nB=two words\r\n"), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, longLine uint8) {
		content := data
		if longLine > 0 {
			content = append(append([]byte(nil), data...), "\nLONG="...)
			content = append(content, strings.Repeat("x", 1<<(longLine%22)+int(longLine/22))...)
		}
		p := filepath.Join(t.TempDir(), "env")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readEnvFile(&hostfile.Guard{}, p)

		// The model: split at \n, drop trailing \r, skip blank and comment
		// lines, give the rest (left-trimmed) to envEntry.
		var want []string
		badLine := 0
		lines := strings.Split(string(content), "\n")
		for i, line := range lines {
			text := strings.TrimRight(line, "\r")
			if trimmed := strings.TrimSpace(text); trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			kv, ok, eerr := envEntry(strings.TrimLeft(text, " \t"))
			if eerr != nil {
				badLine = i + 1
				break
			}
			if ok {
				want = append(want, kv)
			}
		}

		if err != nil {
			msg := err.Error()
			m := fzEnvFileLine.FindStringSubmatch(strings.TrimPrefix(msg, "--env-file "+p))
			if !strings.HasPrefix(msg, "--env-file "+p+":") || m == nil {
				t.Fatalf("readEnvFile error %q does not name the file %s and a line", msg, p)
			}
			n, _ := strconv.Atoi(m[1])
			if n < 1 || n > len(lines) {
				t.Fatalf("readEnvFile error %q names line %d of %d", msg, n, len(lines))
			}
			if badLine != 0 && n > badLine {
				t.Fatalf("readEnvFile error %q names line %d; line %d is the first bad one", msg, n, badLine)
			}
			if badLine == 0 && len(lines[n-1]) < 1<<16 {
				t.Fatalf("readEnvFile error %q about line %d, which envEntry accepts: %q", msg, n, lines[n-1])
			}
			return
		}
		if badLine != 0 {
			t.Fatalf("readEnvFile accepted line %d, which envEntry rejects: %q", badLine, lines[badLine-1])
		}
		if len(got) != len(want) {
			t.Fatalf("readEnvFile = %d entries, want %d:\n got %q\nwant %q", len(got), len(want), got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("readEnvFile entry %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}

// fzArgv splits a fuzz input into an argv: arguments are separated by NUL,
// which no argument can hold.
func fzArgv(s string) []string { return strings.Split(s, "\x00") }

// FuzzScriptOf: the audit log's -c code and script. scriptOf never panics;
// it finds code or a script, not both; what it finds is an argument (or
// the rest of a -cCODE argument) after argv[0]; a script is not an option.
func FuzzScriptOf(f *testing.F) {
	f.Add("python3\x00-c\x00print(1)")
	f.Fuzz(func(t *testing.T, s string) {
		argv := fzArgv(s)
		code, script := scriptOf(argv)
		if code != "" && script != "" {
			t.Fatalf("scriptOf(%q) = code %q and script %q", argv, code, script)
		}
		if script != "" {
			if script != "-" && strings.HasPrefix(script, "-") {
				t.Fatalf("scriptOf(%q): the script %q is an option", argv, script)
			}
			found := false
			for _, a := range argv[1:] {
				found = found || a == script
			}
			if !found {
				t.Fatalf("scriptOf(%q): the script %q is not an argument", argv, script)
			}
		}
		if code != "" {
			found := false
			for i := 1; i < len(argv); i++ {
				found = found || argv[i] == "-c"+code || (argv[i] == "-c" && i+1 < len(argv) && argv[i+1] == code)
			}
			if !found {
				t.Fatalf("scriptOf(%q): the code %q is not the argument of -c", argv, code)
			}
		}
	})
}

// fzPythonShortOpts are CPython's short options (Python/getopt.c,
// SHORT_OPTS); a colon follows those that take a value.
const fzPythonShortOpts = "bBc:dEhiIJm:OPqRsStuvVW:xX:?"

// fzPythonArgv parses argv as CPython 3 does (Python/getopt.c and
// config_parse_cmdline): options may be clustered (-Ic CODE), an option's
// value is the rest of its cluster or the next argument, -c and -m end the
// options, and so do "--", "-" and the first non-option. run is false when
// python would print help or a version, or fail, instead of running code.
func fzPythonArgv(argv []string) (code, script string, run bool) {
	i := 1
options:
	for i < len(argv) {
		a := argv[i]
		if len(a) < 2 || a[0] != '-' {
			break
		}
		i++
		switch a {
		case "--":
			break options
		case "--help", "--version", "--help-all", "--help-env", "--help-xoptions":
			return "", "", false
		case "--check-hash-based-pycs":
			if i >= len(argv) {
				return "", "", false
			}
			switch argv[i] {
			case "always", "never", "default":
			default:
				return "", "", false
			}
			i++
			continue
		}
		if a[1] == '-' {
			return "", "", false // an unknown long option
		}
		for k := 1; k < len(a); k++ {
			opt := a[k]
			at := strings.IndexByte(fzPythonShortOpts, opt)
			if at < 0 || opt == ':' || opt == 'J' || opt == 'h' || opt == '?' || opt == 'V' {
				return "", "", false
			}
			if at+1 < len(fzPythonShortOpts) && fzPythonShortOpts[at+1] == ':' {
				val := a[k+1:]
				if val == "" {
					if i >= len(argv) {
						return "", "", false
					}
					val = argv[i]
					i++
				}
				switch opt {
				case 'c':
					return val, "", true
				case 'm':
					return "", "", true
				}
				break // the value took the rest of the cluster
			}
		}
	}
	if i < len(argv) && argv[i] != "-" {
		return "", argv[i], true
	}
	if i < len(argv) {
		return "", "-", true
	}
	return "", "", true
}

// FuzzScriptOfMatchesPython: what the audit log records as the code or the
// script of a python3 command line is what python3 runs: scriptOf agrees
// with CPython's own argument parsing wherever python would run something.
func FuzzScriptOfMatchesPython(f *testing.F) {
	f.Add("python3\x00-u\x00-X\x00dev\x00main.py")
	f.Fuzz(func(t *testing.T, s string) {
		argv := fzArgv(s)
		wantCode, wantScript, run := fzPythonArgv(argv)
		if !run {
			return
		}
		code, script := scriptOf(argv)
		if code != wantCode || script != wantScript {
			t.Fatalf("scriptOf(%q) = code %q, script %q; python3 runs code %q, script %q", argv, code, script, wantCode, wantScript)
		}
	})
}

// FuzzHostPathOf: the file --audit-log hashes for a script is the file the
// jail ran: for a script path as the jail sees it, hostPathOf gives the
// host path under the mount the jail resolves it to (the deepest one, as
// the jail mounts children on top of parents), or "" for the jail's own
// root filesystem, and never a host path outside what was granted.
func FuzzHostPathOf(f *testing.F) {
	f.Add("/workspace/main.py", "")
	f.Fuzz(func(t *testing.T, script, workdir string) {
		if workdir != "" && (!path.IsAbs(workdir) || path.Clean(workdir) != workdir) {
			return // jail.Spec.Validate rejects it
		}
		spec := jail.Spec{
			Workspace: "/host/ws",
			Workdir:   workdir,
			Volumes: []jail.Volume{
				{Source: "/host/data", Dest: "/data"},
				{Source: "/host/deep", Dest: "/data/deep"},
				{Source: "/host/sub", Dest: "/workspace/sub"},
			},
		}
		mounts := map[string]string{jail.WorkspaceDir: spec.Workspace}
		for _, v := range spec.Volumes {
			mounts[v.Dest] = v.Source
		}
		got := hostPathOf(script, spec)

		wd := workdir
		if wd == "" {
			wd = jail.WorkspaceDir
		}
		p := path.Clean(path.Join(wd, script))
		if path.IsAbs(script) {
			p = path.Clean(script)
		}
		want, best := "", ""
		for dest, src := range mounts {
			if (p == dest || strings.HasPrefix(p, dest+"/")) && len(dest) > len(best) {
				best, want = dest, path.Join(src, strings.TrimPrefix(p, dest))
			}
		}
		if got != "" {
			inside := false
			for _, src := range mounts {
				inside = inside || got == src || strings.HasPrefix(got, src+"/")
			}
			if !inside || path.Clean(got) != got {
				t.Fatalf("hostPathOf(%q) with workdir %q = %q: a host path outside what was granted", script, workdir, got)
			}
		}
		if got != want {
			t.Fatalf("hostPathOf(%q) with workdir %q = %q; the jail runs the file at %s, on the host %q", script, workdir, got, p, want)
		}
	})
}

// FuzzProfileFile: --profile FILE. A profile that loads allows no call
// that every profile must deny, under any spelling: each rule, each
// ENOSYS entry names its call canonically (the name the x86_64 table
// gives its number), and no rule's call number is an always-denied
// call's. A rejection is one line naming the file.
func FuzzProfileFile(f *testing.F) {
	f.Add([]byte("base = \"python\"\n[seccomp]\nallow = [\"getpid\"]\n"))
	denied := map[int]string{}
	for _, n := range seccomp.AlwaysDenied() {
		if nr, err := seccomp.SyscallNumber(n); err == nil {
			denied[nr] = n
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "p.toml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		prof, err := profiles.Load(p)
		if err != nil {
			msg := err.Error()
			fzOneLine(t, "profiles.Load", msg)
			if !strings.HasPrefix(msg, "profile "+p) {
				t.Fatalf("profiles.Load error %q does not name the file", msg)
			}
			return
		}
		canonical := func(what, name string) int {
			nr, err := seccomp.SyscallNumber(name)
			if err != nil {
				t.Fatalf("profile %q: %s %q is not a call: %v", data, what, name, err)
			}
			if c := seccomp.SyscallName(nr); c != name {
				t.Fatalf("profile %q: %s %q is call %d, whose name is %q", data, what, name, nr, c)
			}
			return nr
		}
		for _, r := range prof.Policy.Rules {
			if nr, err := seccomp.SyscallNumber(r.Syscall); err == nil && denied[nr] != "" {
				t.Fatalf("profile %q allows %s (as %q), which every profile must deny", data, denied[nr], r.Syscall)
			}
			canonical("rule", r.Syscall)
		}
		for _, n := range prof.Policy.NoSys {
			canonical("enosys entry", n)
		}
	})
}
