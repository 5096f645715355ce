package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
)

func runCommand(stdin io.Reader, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:         "run",
		Usage:        "run CMD in a new jail (the default: rljail [flags] -- CMD [ARG...])",
		UsageText:    "rljail [run] [flags] -- CMD [ARG...]",
		OnUsageError: usageError,
		Flags: withFixedNames([]cli.Flag{
			&cli.StringFlag{Name: "timeout", Value: "10s", Usage: "wall-clock limit (Go duration such as 2s, 1m30s, or seconds); the jail is killed at it, exit 124"},
			&cli.StringFlag{Name: "stop-grace", Value: "5s", Usage: "how long the payload has to end after rljail passes it SIGTERM, SIGHUP or SIGQUIT before the jail is killed (any further signal of these or SIGINT kills at once; SIGINT alone never kills)"},
			&cli.StringSliceFlag{Name: "volume", Aliases: []string{"v"}, Usage: "grant a host path: SRC:DST[:ro|rw], read-only unless rw"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set KEY=VALUE in the jail, or pass KEY from rljail's environment"},
			&cli.StringSliceFlag{Name: "env-file", Usage: "read KEY=VALUE lines from a file (# comments)"},
			&cli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working directory inside the jail (default /workspace, or /tmp without a workspace)"},
			&cli.BoolFlag{Name: "no-workspace", Usage: "do not mount the current directory at /workspace"},
			&cli.StringFlag{Name: "rootfs", Usage: "Python root filesystem: a name (rljail rootfs list: NAME in /var/lib/rljail/rootfs as root, $XDG_DATA_HOME/rljail/rootfs otherwise) or a directory (a value with a slash); default the profile's, else $RLJAIL_ROOTFS, else the one named python"},
			&cli.BoolFlag{Name: "rootfs-unverified", Usage: "run on the rootfs without checking that it is as its build left it (stderr and the report say so); see rljail rootfs verify"},
			&cli.StringFlag{Name: "network", Value: "none", Usage: "network mode: none is the only one (an empty network namespace with lo)"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "allow connections to HOST[:PORT] (ports 443 and 80 without one; *.example.org for subdomains; an IP or CIDR for addresses) or http://HOST[:PORT], https://HOST[:PORT] (the scheme's port without one; no path), through proxies rljail serves on the jail's loopback"},
			&cli.StringSliceFlag{Name: "resolve", Usage: "with --allow-host: resolve NAME to ADDR (NAME:ADDR, as curl's) instead of asking the host's resolver; NAME alone may then reach ADDR, private or loopback as it may be, on the ports its rules allow (a cloud metadata address still needs a rule by address)"},
			&cli.Int64Flag{Name: "egress-max-conns", DefaultText: "64", Usage: "with --allow-host: most proxied connections at once"},
			&cli.StringFlag{Name: "egress-max-bytes", Usage: "with --allow-host: most bytes both ways, all connections (default 1g)"},
			&cli.StringFlag{Name: "egress-idle-timeout", Usage: "with --allow-host: end a connection idle this long, or silent since it opened (default 30s)"},
			&cli.StringFlag{Name: "profile", Value: profiles.Default, Usage: "profile: an embedded name (rljail profiles list) or a TOML file; it holds the seccomp policy and defaults that flags override"},
			&cli.StringSliceFlag{Name: "seccomp-add", Usage: "allow one more syscall for this run (echoed in the result report)"},
			&cli.StringSliceFlag{Name: "seccomp-remove", Usage: "deny one more syscall for this run (echoed in the result report)"},
			&cli.StringFlag{Name: "seccomp", Usage: "learn: report every call the profile denies (they still fail) and print a profile snippet that would allow them"},
			&cli.StringFlag{Name: "memory", Aliases: []string{"m"}, Usage: "memory limit (512m default; b, k, m, g units): cgroup memory.max without swap, else RLIMIT_AS"},
			&cli.Int64Flag{Name: "pids-limit", DefaultText: "64", Usage: "most processes and threads at once: cgroup pids.max"},
			&cli.Float64Flag{Name: "cpus", DefaultText: "1", Usage: "CPU share in CPUs: cgroup CPU quota"},
			&cli.StringFlag{Name: "cpu-time", Usage: "CPU time the whole jail may use (default: the timeout); status cpu_limit, exit 137 (152 where only RLIMIT_CPU measures it)"},
			&cli.StringFlag{Name: "tmp-size", Usage: "size of the /tmp and /dev/shm tmpfs (default 64m)"},
			&cli.StringFlag{Name: "output-limit", Usage: "bytes of stdout and of stderr passed through (default 1m); the rest is discarded and reported"},
			&cli.StringFlag{Name: "file-size", Usage: "largest file the payload may write (default 64m): RLIMIT_FSIZE"},
			&cli.Int64Flag{Name: "nofile", DefaultText: "256", Usage: "most open descriptors: RLIMIT_NOFILE"},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "create the jail's cgroup below this existing cgroup (a path as under /sys/fs/cgroup); with --cgroup-manager systemd, the slice of the jail's scope (NAME.slice)"},
			&cli.StringFlag{Name: "cgroup-manager", Value: "auto", Usage: "who makes the jail's cgroup on cgroup v2: systemd (a transient scope asked over D-Bus), cgroupfs (rljail itself), or auto: systemd where it runs the host and rljail has no delegated cgroup or --cgroup-parent of its own"},
			&cli.BoolFlag{Name: "strict-limits", Usage: "refuse to run (exit 125) when any limit would fall back to a weaker mechanism"},
			&cli.StringFlag{Name: "result", Usage: "write the JSON result report to FILE (- or a file that is rljail's stdout: on stdout, after the payload's output)"},
			&cli.IntFlag{Name: "result-fd", Value: -1, Usage: "write the JSON result report to this open descriptor"},
			&cli.StringFlag{Name: "result-output", Usage: "carry the payload's stdout and stderr as text in the report, up to SIZE bytes of each (such as 64k; head and tail of a longer one; at most 16m)"},
			&cli.BoolFlag{Name: "verbose", Usage: "print a one-line summary of the run (status, time, CPU, memory, limits) on stderr"},
			&cli.StringFlag{Name: "audit-log", Usage: "append one JSON line per run (argv, code, script hash, result) to FILE"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing of rljail's own but errors: no notices, no warnings (limits weaker than asked too; the report still lists them, and --strict-limits still refuses)"},
			&cli.BoolFlag{Name: "tty-passthrough", Usage: "pass the payload's control characters to a terminal unchanged (colours, but also its title, clipboard and queries); by default they show as ^[, <9B>, <U+009B>"},
		}),
		Action: func(c *cli.Context) error {
			return runAction(c, stdin, stdout, stderr)
		},
	}
}

// parseTimeout parses --timeout: a Go duration or a number of seconds.
func parseTimeout(s string) (time.Duration, error) { return parseDuration("timeout", s) }

// parseDuration accepts a Go duration or a number of seconds, positive and
// within what a time.Duration holds (about 292 years).
func parseDuration(flag, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, fmt.Errorf("--%s %q is not a duration (such as 2s, 500ms, 1m)", flag, s)
		}
		if secs*float64(time.Second) >= math.MaxInt64 {
			return 0, fmt.Errorf("--%s %q is too long", flag, s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("--%s %q must be positive", flag, s)
	}
	return d, nil
}

func runAction(c *cli.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	quiet := c.Bool("quiet")
	own := ownLines(stderr) // rljail's own lines, each at a line's start
	notice := func(format string, a ...any) {
		if !quiet {
			fmt.Fprintf(own, "rljail: "+format+"\n", a...)
		}
	}
	start := time.Now()

	// Files named by flags are opened before anything runs: a report or log
	// that cannot be written stops the run (exit 125).
	// The report goes to --result's file (ours: cut to its length) and to
	// --result-fd's descriptor (the caller's: written as it stands).
	var resultFiles []reportFile
	createdResult := ""
	set := flagsSet(c)
	// The profile is read first: its volumes join the flags' in the rule
	// that no file rljail reads or writes for its caller lies in a volume
	// the jail may write (hostfile.Guard). If it cannot be read, the
	// report still goes to --result's file, guarded by the flags' volumes.
	guard, prof, profErr := loadProfile(c)
	if set["result"] && c.String("result") == "" {
		return setupError("--result needs a file name")
	}
	// --result-output: the payload's output carried in the report, which
	// then needs room for it.
	reportOutput, outputErr := int64(0), error(nil)
	if set["result-output"] {
		reportOutput, outputErr = parseReportOutput(c.String("result-output"))
	}
	if p := c.String("result"); p != "" {
		f, created, err := openResult(guard, p, stdout, stderr, true, reportReserve+2*reportOutput)
		if err != nil {
			return setupError("open the result file: %v", err)
		}
		defer f.Close()
		createdResult = created // ours to remove if it cannot be written
		resultFiles = append(resultFiles, f)
	}
	// A setup error from here on still leaves its report in the files
	// opened so far.
	failEarly := func(err error) error {
		var ee *exitError
		if errors.As(err, &ee) {
			for _, f := range resultFiles {
				_ = f.write(setupErrorResult(ee.code, ee.msg, time.Since(start)))
			}
		}
		return err
	}
	if profErr != nil {
		return failEarly(setupError("%v", profErr))
	}
	switch fd := c.Int("result-fd"); {
	case fd < -1:
		return failEarly(setupError("--result-fd %d is not a descriptor (-1, the default, means none)", fd))
	case fd >= 0:
		if fd <= 2 {
			return failEarly(setupError("--result-fd %d: use a descriptor above 2 (stdout and stderr belong to the payload)", fd))
		}
		if err := checkResultFD(fd); err != nil {
			return failEarly(setupError("%v", err))
		}
		if err := guard.CheckFD("--result-fd", fd); err != nil {
			return failEarly(setupError("%v", err))
		}
		f := os.NewFile(uintptr(fd), "result-fd")
		defer f.Close()
		resultFiles = append(resultFiles, resultFD(f, stdout, stderr))
	}
	if outputErr != nil {
		return failEarly(setupError("%v", outputErr))
	}
	if set["result-output"] && len(resultFiles) == 0 {
		return failEarly(setupError("--result-output carries the payload's output in the report: give --result FILE (or -) or --result-fd N too"))
	}
	var audit *os.File
	if p := c.String("audit-log"); p != "" {
		f, created, err := guard.OpenWrite("--audit-log", p, unix.O_WRONLY|unix.O_APPEND, 0o600)
		if err != nil {
			return failEarly(setupError("open the audit log: %v", err))
		}
		defer f.Close()
		var end int64
		if st, err := f.Stat(); err == nil {
			end = st.Size()
		}
		if err := reserveSpace(f, end, reportReserve+2*reportOutput); err != nil {
			if created {
				_ = os.Remove(p) // ours, and empty
			}
			return failEarly(setupError("no room for the audit log's record in %s: %v", p, err))
		}
		audit = f
	}

	spec, err := buildSpec(c, set, prof, guard, notice)
	if err == nil {
		err = prepareRootfs(c, prof, guard, notice, &spec)
	}
	var hashedStdin *hashingReader
	if err == nil {
		in, closeIn := pollableStdin(stdin)
		defer closeIn()
		hashedStdin = newHashingReader(in)
		spec.Stdin, spec.Stdout, spec.Stderr = hashedStdin, stdout, stderr
		spec.ReportOutput = reportOutput
		if reportOutput > 0 {
			// A runner that takes the output from the report sends
			// rljail's own to /dev/null (>/dev/null 2>&1): one file, so
			// the jail would merge the two streams into the report's
			// stdout. Nothing is kept there whose order merging would
			// keep; the jail discards them itself, each on its own.
			if isDevNull(stdout) {
				spec.Stdout = nil
			}
			if isDevNull(stderr) {
				spec.Stderr = nil
			}
		}
		spec.Early, _ = c.App.Metadata[earlyKey].(*jail.Early)
		// Every warning is in the report (Result.Warnings); --quiet keeps
		// them off stderr, --strict-limits refuses a weaker limit either
		// way.
		if !quiet {
			spec.Warn = func(msg string) { fmt.Fprintln(own, "rljail: warning: "+msg) }
		}
		sigs, _ := c.App.Metadata[signalsKey].(*jail.SignalPipe)
		if sigs == nil {
			if sigs, err = catchSignals(); err == nil {
				defer sigs.Stop()
			}
		}
		if sigs != nil {
			spec.Signals = sigs.C()
		}
	}

	var res jail.Result
	var scriptSum string
	if err == nil && audit != nil {
		scriptSum = auditScriptSum(c.Args().Slice(), spec)
	}
	opts, _ := c.App.Metadata[optionsKey].(runOptions)
	if err == nil {
		if opts.notice != "" && !quiet {
			fmt.Fprintln(own, opts.notice)
		}
		res, err = jail.Run(context.Background(), spec)
		if opts.timeoutExit != 0 && res.Status == jail.StatusTimeout {
			res.ExitCode = opts.timeoutExit
		}
		if spec.Workspace == "" && !c.Bool("no-workspace") {
			// Not mounted for a reason (workspaceDir): the report says
			// so, and a payload that failed on a file of the current
			// directory is told why on stderr, -q or not.
			if _, reason, werr := workspaceDir(); werr == nil && reason != "" {
				res.Warnings = append(res.Warnings, reason)
				if f := hostFileArg(spec.Command); f != "" && failedOnAFile(res) {
					fmt.Fprintf(own, "rljail: %s is in the current directory, which the jail does not have: %s\n", safeText(f), reason)
				}
			}
		}
	} else {
		res = setupErrorResult(jail.ExitSetupError, err.Error(), time.Since(start))
	}
	switch res.Status {
	case jail.StatusTimeout, jail.StatusSeccompViolation, jail.StatusMemoryLimit, jail.StatusCPULimit, jail.StatusPidsLimit:
		notice("%s", res.Error)
	case jail.StatusSignaled:
		if res.Error != "" { // killed as the caller insisted (jail.Spec.Signals)
			notice("%s", res.Error)
		}
	}
	if res.StdoutTruncated || res.StderrTruncated {
		notice("output beyond the limit of %s was discarded (stdout %d bytes, stderr %d bytes written)", jail.FormatBytes(int64(res.Limits.Output.Value)), res.StdoutBytes, res.StderrBytes)
	}
	if res.Seccomp != nil && spec.Seccomp != nil {
		res.Seccomp.Added = c.StringSlice("seccomp-add")
		res.Seccomp.Removed = c.StringSlice("seccomp-remove")
		if c.String("seccomp") == "learn" {
			printLearned(own, *res.Seccomp)
		}
	}
	if c.Bool("verbose") {
		fmt.Fprintln(own, "rljail: "+summary(res))
	}
	for _, f := range resultFiles {
		if werr := f.write(res); werr != nil && err == nil {
			if createdResult != "" && f.ours {
				_ = os.Remove(createdResult) // no empty report left behind
			}
			return setupError("write the result report: %v", werr)
		}
	}
	if audit != nil {
		rec := newAuditRecord(c.Args().Slice(), scriptSum, res, hashedStdin)
		if werr := writeJSON(audit, rec); werr != nil && err == nil {
			return setupError("write the audit log: %v", werr)
		}
	}
	if err != nil {
		msg := oneLine(err.Error())
		if res.ExitCode == jail.ExitNotFound && len(spec.Command) > 0 {
			// `rljail sesion` runs a program named sesion in the jail.
			if s := closestName(spec.Command[0], subcommandNames()); s != "" {
				msg += fmt.Sprintf(" (did you mean rljail %s?)", s)
			}
		}
		return &exitError{code: res.ExitCode, msg: msg}
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}

// buildSpec turns flags and the profile (loadProfile's, with its guard)
// into a jail.Spec (set: flagsSet of c); jail.Run validates the rest.
func buildSpec(c *cli.Context, set map[string]bool, prof *profiles.Profile, guard *hostfile.Guard, notice func(string, ...any)) (jail.Spec, error) {
	if c.NArg() == 0 {
		return jail.Spec{}, fmt.Errorf("no command given: usage: rljail [flags] -- CMD [ARG...]")
	}
	spec, err := buildJailSpec(c, set, prof, guard, notice)
	spec.Command = c.Args().Slice()
	return spec, err
}

// buildJailSpec is buildSpec but for the command: a session's is fixed.
func buildJailSpec(c *cli.Context, set map[string]bool, prof *profiles.Profile, guard *hostfile.Guard, notice func(string, ...any)) (jail.Spec, error) {
	var spec jail.Spec
	spec.TTYPassthrough = c.Bool("tty-passthrough")
	if n := c.String("network"); n != "none" {
		return spec, fmt.Errorf("--network %q is not supported: the jail has no network; none is the only mode", n)
	}
	var err error
	if spec.Seccomp, err = seccompProgram(c, prof); err != nil {
		return spec, err
	}
	spec.Timeout = prof.Timeout
	if set["timeout"] || spec.Timeout == 0 {
		if spec.Timeout, err = parseTimeout(c.String("timeout")); err != nil {
			return spec, err
		}
	}
	if set["stop-grace"] {
		if spec.StopGrace, err = parseDuration("stop-grace", c.String("stop-grace")); err != nil {
			return spec, err
		}
	}
	if term := os.Getenv("TERM"); term != "" {
		spec.Env = append(spec.Env, "TERM="+term)
	}
	for _, e := range prof.Env {
		kv, ok, err := envEntry(e)
		if err != nil {
			return spec, fmt.Errorf("profile %s: env %q: %w", prof.Name, e, err)
		}
		if ok {
			spec.Env = append(spec.Env, kv)
		}
	}
	for _, v := range prof.Volumes {
		vol, err := jail.ParseVolume(v)
		if err != nil {
			return spec, fmt.Errorf("profile %s: %w", prof.Name, err)
		}
		spec.Volumes = append(spec.Volumes, vol)
	}
	if prof.Workdir != "" {
		spec.Workdir = prof.Workdir
	}
	for _, f := range c.StringSlice("env-file") {
		entries, err := readEnvFile(guard, f)
		if err != nil {
			return spec, err
		}
		spec.Env = append(spec.Env, entries...)
	}
	for _, e := range c.StringSlice("env") {
		kv, ok, err := envEntry(e)
		if err != nil {
			return spec, fmt.Errorf("-e %q: %w", e, err)
		}
		if ok {
			spec.Env = append(spec.Env, kv)
		}
	}
	for _, v := range c.StringSlice("volume") {
		vol, err := jail.ParseVolume(v)
		if err != nil {
			return spec, err
		}
		spec.Volumes = append(spec.Volumes, vol)
	}
	if spec.Resources, err = resourcesFromFlags(c, set); err != nil {
		return spec, err
	}
	if spec.TmpSize, err = tmpSize(c, set); err != nil {
		return spec, err
	}
	if wd := c.String("workdir"); wd != "" {
		if !filepath.IsAbs(wd) {
			return spec, fmt.Errorf("--workdir %q must be an absolute path inside the jail", wd)
		}
		spec.Workdir = filepath.Clean(wd)
	}
	if !c.Bool("no-workspace") {
		ws, reason, err := workspaceDir()
		if err != nil {
			return spec, err
		}
		if reason != "" {
			notice("%s", reason)
		}
		spec.Workspace = ws
	}
	if spec.Egress, err = egressFromFlags(c, set, prof, notice); err != nil {
		return spec, err
	}
	return spec, nil
}

// prepareRootfs gives spec its rootfs, as a step of its own once the
// spec is assembled (so that a mistyped flag never waits for a first-use
// build): the directory the flags, the profile or RLJAIL_ROOTFS name,
// built first where it is rljail's default place and empty, and the check
// that gates the payload (ensureRootfs).
func prepareRootfs(c *cli.Context, prof *profiles.Profile, guard *hostfile.Guard, notice func(string, ...any), spec *jail.Spec) error {
	if err := emptyValue(c, "rootfs"); err != nil {
		return err
	}
	choice := rootfsChoice{flag: c.String("rootfs"), profile: prof.Rootfs, unverified: c.Bool("rootfs-unverified")}
	choice.early, _ = c.App.Metadata[rootfsCheckKey].(*rootfsCheck)
	var err error
	spec.Rootfs, spec.BeforePayload, err = ensureRootfs(c.Context, choice, guard, notice)
	return err
}

// workspaceDir returns the current directory to mount at /workspace, or ""
// with a reason when it is the filesystem root or the user's home (or a
// parent of it): granting those by default would hand the payload SSH keys
// and cloud credentials. -v grants them explicitly. As root the jail reads
// the workspace with the rights of other users (never its owner's: from
// /tmp or /var it read root's 0600 files), so a directory they may not
// enter is not mounted either.
func workspaceDir() (string, string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", fmt.Errorf("find the current directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(wd)
	if err != nil {
		return "", "", fmt.Errorf("resolve the current directory %s: %w", wd, err)
	}
	sensitive := []string{"/"}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil {
			sensitive = append(sensitive, h)
		}
	}
	for _, s := range sensitive {
		if real == s || (s != "/" && strings.HasPrefix(s, real+"/")) || (real == "/" && s != "/") {
			return "", fmt.Sprintf("not mounting %s at %s: it is the root or your home directory; cd to a project directory or grant it with -v", real, jail.WorkspaceDir), nil
		}
	}
	// The host's configuration and state: nothing a payload needs, and
	// what of it any user may read (a host's configuration, names of its
	// users and services) is no one's project either.
	for _, s := range []string{"/etc", "/root", "/boot", "/proc", "/sys", "/dev", "/run"} {
		if real == s || strings.HasPrefix(real, s+"/") {
			return "", fmt.Sprintf("not mounting %s at %s: it holds the host's configuration or state; cd to a project directory or grant it with -v", real, jail.WorkspaceDir), nil
		}
	}
	// As root the workspace is not idmapped (jail/idmap.go): the jail
	// reads it with a host uid of its own, as any other user could, so a
	// directory that other users may not enter would only fail the run.
	// Every directory above it counts too: the mount makes the directory
	// reachable without them, and a file in /home/alice/proj of a 0700
	// /home/alice is one that other users cannot read (red-team pass).
	if os.Geteuid() == 0 {
		for p := real; ; p = filepath.Dir(p) {
			if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
				what := "the current directory"
				if p != real {
					what = p + ", a directory above the current one,"
				}
				return "", fmt.Sprintf("not mounting %s at %s: as root the jail reads the current directory as other users do, and they may not enter %s (mode %04o); chmod o+x it, or grant it with -v (read with its owner's rights)", real, jail.WorkspaceDir, what, fi.Mode().Perm()), nil
			}
			if p == "/" {
				break
			}
		}
	}
	return real, "", nil
}

// hostFileArg returns the first of the command's arguments that names,
// by a relative path, a file of rljail's current directory (the
// command's own name only when written with a slash, as ./run.sh: python3
// is looked up on the jail's PATH); "" for none.
func hostFileArg(argv []string) string {
	for i, a := range argv {
		if i >= 16 {
			break
		}
		if a == "" || strings.HasPrefix(a, "-") || filepath.IsAbs(a) || (i == 0 && !strings.Contains(a, "/")) {
			continue
		}
		if fi, err := os.Stat(a); err == nil && !fi.IsDir() {
			return a
		}
	}
	return ""
}

// failedOnAFile reports whether a run ended as one that could not find a
// file does: the payload's own failure, or a command not found or not
// executable.
func failedOnAFile(res jail.Result) bool {
	switch res.Status {
	case jail.StatusExitNonzero:
		return true
	case jail.StatusSetupError:
		return res.ExitCode == jail.ExitNotFound || res.ExitCode == jail.ExitNotExecutable
	}
	return false
}

// earlyKey is where run puts the init stage it started early
// (jail.StartEarly) in the app's Metadata, signalsKey its jail.SignalPipe,
// optionsKey a front end's runOptions, rootfsCheckKey the rootfs check it
// started before the flags were parsed (*rootfsCheck).
const (
	earlyKey       = "rljail.early"
	signalsKey     = "rljail.signals"
	optionsKey     = "rljail.options" // runOptions
	rootfsCheckKey = "rljail.rootfs-check"
)

// catchSignals catches SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
// SIGUSR2 for the payload: the jail's init passes them on
// (jail.Spec.Signals). Until then a signal has its default effect: it ends
// rljail, and its jail with it.
func catchSignals() (*jail.SignalPipe, error) {
	return jail.CatchSignals(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
}

// flagsSet names every flag given on the command line or by its
// environment variable, under each of its names. It stands in for
// cli.Context.IsSet, which for a flag not given walks every flag and runs
// a regular expression over each of their names: about 40 µs a question,
// paid on every start (BenchmarkCLI).
func flagsSet(c *cli.Context) map[string]bool {
	given := map[string]bool{}
	for _, n := range c.LocalFlagNames() {
		given[n] = true
	}
	set := map[string]bool{}
	for _, f := range c.Command.Flags {
		names := f.Names()
		hit := f.IsSet()
		for _, n := range names {
			hit = hit || given[n]
		}
		for _, n := range names {
			set[n] = set[n] || hit
		}
	}
	return set
}

// loadProfile loads --profile, and returns with it the Guard for the
// run's files: it knows the volumes granted rw by the flags and by the
// profile. A profile file is read through the flags' Guard, and must not
// lie in a volume that the profile itself grants rw either. The common
// case, an embedded profile used as it is, takes its build-time program
// and decodes no TOML: the profile then only carries its name (an
// embedded profile sets no defaults). A guard is returned even with an
// error.
func loadProfile(c *cli.Context) (*hostfile.Guard, *profiles.Profile, error) {
	guard := hostfile.NewGuard(writableSources(c.StringSlice("volume")), jail.IsJailHostUID)
	name := c.String("profile")
	if !policyChanged(c) {
		if prog, ok := profiles.Precompiled(name); ok {
			return guard, &profiles.Profile{Name: name, Source: "embedded", Program: prog}, nil
		}
	}
	prof, err := profiles.LoadGuarded(name, guard)
	if err != nil {
		return guard, nil, err
	}
	if len(prof.Volumes) > 0 {
		guard = guard.With(writableSources(prof.Volumes)...)
		if profiles.IsFile(name) {
			if err := guard.Check("--profile", name); err != nil {
				return guard, nil, err
			}
		}
	}
	return guard, prof, nil
}

// writableSources lists the host sources of the volumes granted rw among
// vols (-v values, or a profile's); one that does not parse is left to
// buildSpec to report.
func writableSources(vols []string) []string {
	var out []string
	for _, v := range vols {
		vol, err := jail.ParseVolume(v)
		if err == nil && vol.Writable {
			out = append(out, vol.Source)
		}
	}
	return out
}

// policyChanged reports whether flags change the profile's policy, which
// then must be compiled for this run.
func policyChanged(c *cli.Context) bool {
	return len(c.StringSlice("seccomp-add")) > 0 || len(c.StringSlice("seccomp-remove")) > 0 || c.String("seccomp") != ""
}

// seccompProgram applies --seccomp-add/--seccomp-remove and --seccomp to
// the profile's policy and compiles it.
func seccompProgram(c *cli.Context, prof *profiles.Profile) (*seccomp.Program, error) {
	if prof.Program != nil && !policyChanged(c) {
		return prof.Program, nil
	}
	pol := prof.Policy
	pol.Rules = append([]seccomp.Rule(nil), prof.Policy.Rules...)
	pol.NoSys = append([]string(nil), prof.Policy.NoSys...)
	for _, n := range c.StringSlice("seccomp-remove") {
		if _, err := seccomp.SyscallNumber(n); err != nil {
			return nil, fmt.Errorf("--seccomp-remove: %w", err)
		}
		pol.Remove(n)
	}
	if err := pol.Allow(c.StringSlice("seccomp-add")...); err != nil {
		return nil, fmt.Errorf("--seccomp-add: %w", err)
	}
	switch mode := c.String("seccomp"); mode {
	case "":
	case "learn":
		pol.Violation = seccomp.ViolationLearn
	default:
		return nil, fmt.Errorf("--seccomp %q: the only mode is learn", mode)
	}
	prog, err := seccomp.Compile(&pol)
	if err != nil {
		return nil, fmt.Errorf("seccomp policy of profile %s: %w", prof.Name, err)
	}
	return &prog, nil
}

// printLearned prints learn mode's findings: each denied call with its
// count, then a profile that would allow them (Report.Snippet: never
// beyond the invariants of rljail's profiles, whatever the payload did).
func printLearned(w io.Writer, r seccomp.Report) {
	if len(r.Denied) == 0 {
		fmt.Fprintf(w, "rljail: learn: the profile %s denied nothing\n", r.Profile)
		return
	}
	fmt.Fprintf(w, "rljail: learn: the profile %s denied:\n", r.Profile)
	for _, d := range r.Denied {
		args := ""
		keys := make([]string, 0, len(d.Args))
		for k := range d.Args {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			args += fmt.Sprintf(" %s=%#x", k, d.Args[k])
		}
		fmt.Fprintf(w, "  %6d  %s%s\n", d.Count, d.Syscall, args)
	}
	// The snippet allows what the profile may allow; the calls that break
	// an invariant of rljail's profiles stay denied and say so.
	fmt.Fprintf(w, "rljail: learn: a profile that would allow them, but for those it says stay denied (rljail --profile FILE):\n%s", r.Snippet())
}
