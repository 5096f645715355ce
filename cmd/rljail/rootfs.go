package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/cgroup"
	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/rootfs"
	"github.com/rljail/rljail/termsafe"
)

func rootfsCommand() *cli.Command {
	dirFlag := &cli.StringFlag{Name: "rootfs", Aliases: []string{"out"}, Usage: "rootfs: a name in rljail's data directory (rljail rootfs list), or a directory (a value with a slash); default $RLJAIL_ROOTFS, else the rootfs named python"}
	// target picks the rootfs of a subcommand: its NAME argument, else --rootfs.
	target := func(c *cli.Context) (dir, label string, err error) {
		if err := emptyValue(c, "rootfs"); err != nil {
			return "", "", err
		}
		value := c.String("rootfs")
		switch {
		case c.NArg() == 1 && c.Args().First() == "":
			return "", "", setupError("rljail rootfs %s: an empty NAME names no rootfs (rljail rootfs list shows them; a directory needs a slash)", c.Command.Name)
		case c.NArg() > 1:
			return "", "", setupError("usage: rljail rootfs %s [NAME|DIR]", c.Command.Name)
		case c.NArg() == 1 && value != "":
			return "", "", setupError("give the rootfs once: as NAME or as --rootfs, not both")
		case c.NArg() == 1:
			value = c.Args().First()
		}
		dir, namedBy, err := locateRootfs(value, "")
		if err != nil {
			msg := err.Error()
			if c.NArg() == 1 { // the NAME argument, not --rootfs
				msg = strings.TrimPrefix(msg, "--rootfs: ")
			}
			return "", "", setupError("%s", msg)
		}
		label = dir
		if namedBy == "" || !rootfs.IsDirValue(value) && value != "" {
			label = rootfsLabel(dir)
		}
		return dir, label, nil
	}
	return &cli.Command{
		Name:         "rootfs",
		Usage:        "build, list, describe, verify or remove the Python root filesystems",
		OnUsageError: usageError,
		Action:       unknownSubcommand("build, list, info, verify, remove"),
		Subcommands: []*cli.Command{
			{
				Name:         "build",
				Usage:        "build a rootfs from a host Python interpreter (replaces an existing one atomically)",
				OnUsageError: usageError,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "python", Usage: "host interpreter (default /usr/bin/python3)"},
					dirFlag,
					&cli.StringFlag{Name: "name", Usage: "build the rootfs of this name in rljail's data directory (/var/lib/rljail/rootfs/NAME as root, $XDG_DATA_HOME/rljail/rootfs/NAME otherwise); default python"},
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"},
					&cli.BoolFlag{Name: "replace", Usage: "without --name or --rootfs: change the default rootfs (that every run without --rootfs uses) to what this build makes, added packages or not"},
					&cli.BoolFlag{Name: "no-commands", Usage: "leave out the common commands (timeout, ls, cat, grep... from busybox; GNU timeout): python3 and /bin/sh only"},
					&cli.StringSliceFlag{Name: "system-packages", Usage: "add Debian python3-* packages installed on this host, with the Python packages, data and fonts they depend on, or the language runtimes bash, nodejs, gcc, g++ with their toolchains (repeatable, or a comma list)"},
					&cli.StringFlag{Name: "venv", Usage: "add a virtual environment's site-packages (made by the rootfs's Python version)"},
					&cli.StringFlag{Name: "wheels", Usage: "add an offline pip install (no index) from this wheelhouse directory, with --requirements"},
					&cli.StringFlag{Name: "requirements", Usage: "requirements file for --wheels"},
					&cli.BoolFlag{Name: "with-pip", Usage: "keep pip where a package source has it (left out otherwise)"},
					&cli.BoolFlag{Name: "test-suites", Usage: "keep CPython's own regression tests and test-only modules (for comparing the jail with a plain machine, not for model code)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return setupError("rljail rootfs build takes no arguments (got %q): name the rootfs with --name NAME or --rootfs DIR", c.Args().First())
					}
					if err := emptyValue(c, "rootfs", "name", "python", "venv", "wheels", "requirements"); err != nil {
						return err
					}
					value := c.String("rootfs")
					if n := c.String("name"); n != "" {
						if value != "" {
							return setupError("give --name or --rootfs, not both")
						}
						if err := rootfs.ValidName(n); err != nil {
							return setupError("--name: %v", err)
						}
						value = n
					}
					dir, _, err := locateRootfs(value, "")
					if err != nil {
						msg := err.Error()
						if c.String("name") != "" { // the name, not --rootfs, was given
							msg = "--name: " + strings.TrimPrefix(msg, "--rootfs: ")
						}
						return setupError("%s", msg)
					}
					logf := func(msg string) {
						if !c.Bool("quiet") {
							fmt.Fprintln(c.App.ErrWriter, "rljail: "+msg)
						}
					}
					opts := rootfs.BuildOptions{Out: dir, Python: c.String("python"), Log: logf, NoCommands: c.Bool("no-commands"), TestSuites: c.Bool("test-suites")}
					opts.SystemPackages, opts.Venv, opts.WithPip = c.StringSlice("system-packages"), c.String("venv"), c.Bool("with-pip")
					opts.Wheels, opts.Requirements = c.String("wheels"), c.String("requirements")
					if value == "" && !c.Bool("replace") {
						if err := defaultRootfsChange(dir, opts); err != nil {
							return err
						}
					}
					// Refused before the build lock is taken or a directory made.
					if err := rootfs.CheckPackageSources(c.Context, opts); err != nil {
						return setupError("%v", err)
					}
					if label := rootfsLabel(dir); label != dir {
						logf(fmt.Sprintf("building the rootfs %s at %s%s", label, dir, buildSources(opts)))
					} else {
						logf(fmt.Sprintf("building a rootfs at %s%s", dir, buildSources(opts)))
					}
					m, err := buildLocked(c.Context, opts, nil)
					if err != nil {
						return setupError("build the rootfs in %s: %v", dir, err)
					}
					fmt.Fprintf(c.App.Writer, "built %s: Python %s, %d files, %.1f MB\n", dir, m.PythonVersion, m.Files, float64(m.SizeBytes)/1e6)
					return nil
				},
			},
			{
				Name:         "list",
				Usage:        "list the named root filesystems in rljail's data directory: Python version, packages, files and size",
				OnUsageError: usageError,
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return setupError("rljail rootfs list takes no arguments")
					}
					list, err := rootfs.List()
					if err != nil {
						return setupError("%v", err)
					}
					w := c.App.Writer
					if len(list) == 0 {
						base, _ := rootfs.DataDir()
						fmt.Fprintf(w, "no root filesystems in %s yet (the first run builds %q; rljail rootfs build --name NAME builds others)\n", base, rootfs.DefaultName)
						return nil
					}
					fmt.Fprintf(w, "%-16s %-8s %7s %9s  %s\n", "NAME", "PYTHON", "FILES", "SIZE", "PACKAGES")
					for _, l := range list {
						if l.Err != nil {
							fmt.Fprintf(w, "%-16s %-8s %7s %9s  unusable: %s\n", l.Name, "-", "-", "-", oneLine(l.Err.Error()))
							continue
						}
						fmt.Fprintf(w, "%-16s %-8s %7d %8.1fM  %s\n", l.Name, l.Manifest.PythonVersion, l.Manifest.Files, float64(l.Manifest.SizeBytes)/1e6, packageSummary(l.Manifest.Packages))
					}
					return nil
				},
			},
			{
				Name:         "info",
				Usage:        "describe a rootfs: Python version, packages, commands, size, file count and source interpreter",
				ArgsUsage:    "[NAME|DIR]",
				OnUsageError: usageError,
				Flags:        []cli.Flag{dirFlag},
				Action: func(c *cli.Context) error {
					dir, label, err := target(c)
					if err != nil {
						return err
					}
					m, err := rootfs.Check(dir)
					if err != nil {
						// A missing or damaged rootfs is bad input, as to
						// verify and a run: exit 125.
						return setupError("%s", oneLine(err.Error()))
					}
					w := c.App.Writer
					if label != dir {
						fmt.Fprintf(w, "name:     %s\n", label)
					}
					fmt.Fprintf(w, "path:     %s\n", dir)
					fmt.Fprintf(w, "python:   %s (%s)\n", m.PythonVersion, m.Python)
					fmt.Fprintf(w, "source:   %s\n", m.Source)
					fmt.Fprintf(w, "files:    %d\n", m.Files)
					fmt.Fprintf(w, "size:     %.1f MB\n", float64(m.SizeBytes)/1e6)
					fmt.Fprintf(w, "tree:     sha256:%s\n", m.TreeSHA256)
					fmt.Fprintf(w, "packages: %s\n", packageSummary(m.Packages))
					for _, p := range m.Packages {
						fmt.Fprintf(w, "  %s %s (%s)\n", p.Name, p.Version, p.Source)
					}
					if fi, err := os.Lstat(filepath.Join(dir, rootfs.LoaderCachePath)); err == nil && fi.Mode().IsRegular() {
						fmt.Fprintf(w, "loader:   ld.so.cache at %s\n", rootfs.LoaderCachePath)
					} else {
						fmt.Fprintf(w, "loader:   no ld.so.cache (built by an older rljail; `rljail rootfs build` again for faster starts)\n")
					}
					if fi, err := os.Lstat(filepath.Join(dir, "usr/bin/timeout")); err == nil && fi.Mode()&fs.ModeType != fs.ModeDir {
						fmt.Fprintf(w, "commands: timeout, sh, ls, cat, grep, sed, awk, find, head, wc... (busybox applets; GNU timeout)\n")
					} else {
						fmt.Fprintf(w, "commands: python3 and /bin/sh only (built without them, or by an older rljail; `rljail rootfs build` adds them)\n")
					}
					if names, err := os.ReadDir(filepath.Join(dir, "usr/bin")); err == nil {
						var cmds []string
						for _, e := range names {
							cmds = append(cmds, rootfs.DisplayPath(e.Name()))
						}
						fmt.Fprintf(w, "usr/bin:  %s\n", strings.Join(cmds, " "))
					}
					return nil
				},
			},
			{
				Name:         "verify",
				Usage:        "check every file of a rootfs against its build's manifest (digests, modes, files added or missing); one line per difference, exit 1 if any",
				ArgsUsage:    "[NAME|DIR]",
				OnUsageError: usageError,
				Flags: []cli.Flag{dirFlag,
					&cli.BoolFlag{Name: "update-fingerprint", Usage: "when every file's content, mode and kind are as built, record their metadata anew, so that runs take the rootfs again (after copying it, or a touch or chown of its files); any other difference is listed and nothing is recorded"},
				},
				Action: func(c *cli.Context) error {
					dir, label, err := target(c)
					if err != nil {
						return err
					}
					if _, err := os.Stat(dir); err != nil {
						return setupError("no rootfs at %s: %v", dir, unwrapPath(err))
					}
					verify := rootfs.Verify
					// Where runs take the rootfs after a look at its top only,
					// a file with a second name is one a jail could write
					// unseen (rootfs.SharedFiles): listed, and never recorded.
					var shared []rootfs.Difference
					if owner, ok := unwritableByJails(dir); ok && owner != 0 {
						if shared, err = rootfs.SharedFiles(dir); err != nil {
							return setupError("%s", oneLine(err.Error()))
						}
					}
					if c.Bool("update-fingerprint") {
						unlock, err := lockRootfs(dir)
						if err != nil {
							return setupError("%v", err)
						}
						defer unlock()
						verify = rootfs.UpdateFingerprint
						if len(shared) > 0 {
							verify = rootfs.Verify
						}
					}
					diffs, err := verify(dir)
					if err != nil {
						// Not a list of differences but a rootfs that cannot
						// be verified at all (a damaged or older manifest):
						// bad input, 125, as to info and a run; 1 means
						// differences found.
						return setupError("%s", oneLine(err.Error()))
					}
					diffs = append(diffs, shared...)
					sort.SliceStable(diffs, func(i, j int) bool { return diffs[i].Path < diffs[j].Path })
					for _, d := range diffs {
						fmt.Fprintln(c.App.Writer, safeText(d.String()))
					}
					if len(diffs) > 0 {
						places := "places"
						if len(diffs) == 1 {
							places = "place"
						}
						return &exitError{code: 1, msg: fmt.Sprintf("rootfs %s differs from its build in %d %s", label, len(diffs), places)}
					}
					if c.Bool("update-fingerprint") {
						fmt.Fprintf(c.App.Writer, "rootfs %s is as built; its fingerprint is recorded anew\n", label)
						return nil
					}
					fmt.Fprintf(c.App.Writer, "rootfs %s is as built\n", label)
					return nil
				},
			},
			{
				Name:         "remove",
				Usage:        "remove a rootfs (atomically: a run sees it whole or not at all; jails running on it keep it until they end)",
				ArgsUsage:    "NAME|DIR",
				OnUsageError: usageError,
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return setupError("usage: rljail rootfs remove NAME|DIR")
					}
					dir, label, err := target(c)
					if err != nil {
						return err
					}
					if err := removeLocked(dir); err != nil {
						return setupError("remove the rootfs %s: %v", label, err)
					}
					fmt.Fprintf(c.App.Writer, "removed %s\n", dir)
					return nil
				},
			},
		},
	}
}

// rootfsLabel names the rootfs at dir for messages: its name when it lies in
// rljail's data directory, else the directory.
func rootfsLabel(dir string) string {
	if base, err := rootfs.DataDir(); err == nil && filepath.Dir(dir) == base && rootfs.ValidName(filepath.Base(dir)) == nil {
		return filepath.Base(dir)
	}
	return dir
}

// packageSummary says in a few words which packages a build added.
func packageSummary(pkgs []rootfs.Package) string {
	if len(pkgs) == 0 {
		return "none beyond the standard library"
	}
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name+" "+p.Version)
	}
	s := strings.Join(names, ", ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return safeText(s)
}

// locateRootfs picks the rootfs of a run: --rootfs (flag), else the
// profile's rootfs, else RLJAIL_ROOTFS, else the default one. A value with
// a slash is a directory, a bare name a rootfs in rljail's data directory
// (rootfs.Resolve). It also says who named it: "--rootfs", "the profile",
// "RLJAIL_ROOTFS", or "" for rljail's default place.
func locateRootfs(flag, profile string) (dir, namedBy string, err error) {
	switch {
	case flag != "":
		dir, err = rootfs.Resolve(flag)
		if err != nil && !rootfs.IsDirValue(flag) {
			err = fmt.Errorf("--rootfs: %w", err)
		}
		return dir, "--rootfs", err
	case profile != "":
		dir, err = rootfs.Resolve(profile)
		if err != nil {
			err = fmt.Errorf("the profile's rootfs: %w", err)
		}
		return dir, "the profile", err
	case os.Getenv("RLJAIL_ROOTFS") != "":
		dir, err = rootfs.DefaultDir()
		return dir, "RLJAIL_ROOTFS", err
	}
	dir, err = rootfs.DefaultDir()
	return dir, "", err
}

// rootfsVerdict says what a run would do with the rootfs: use it (the
// manifest), build it first (build), or refuse it (err, one line with the
// fix). Only rljail's default place is built on first use: a directory
// the user named (--rootfs, RLJAIL_ROOTFS, the profile) that holds no
// rootfs is a mistake to report, not a place to fill with 50 MB (a typo
// would create directories anywhere the user may write).
func rootfsVerdict(dir, namedBy string) (m rootfs.Manifest, build bool, err error) {
	m, checkErr := rootfs.Check(dir)
	if checkErr == nil {
		return m, false, nil
	}
	buildCmd := "rljail rootfs build"
	if label := rootfsLabel(dir); label != dir {
		if label != rootfs.DefaultName {
			buildCmd += " --name " + label
		}
	} else if namedBy != "RLJAIL_ROOTFS" {
		buildCmd += " --rootfs " + dir
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if namedBy != "" {
			return m, false, fmt.Errorf("no Python rootfs at %s (given by %s): build one there with `%s`, or name the directory that holds one", dir, namedBy, buildCmd)
		}
		return m, true, nil
	case err != nil:
		return m, false, fmt.Errorf("rootfs %s: %w", dir, unwrapPath(err))
	case !st.IsDir():
		return m, false, fmt.Errorf("rootfs %s is not a directory", dir)
	}
	// A directory that cannot even be listed is an error, not a missing
	// rootfs; a non-empty one that fails the check is refused as it is.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, false, fmt.Errorf("rootfs %s: %w", dir, unwrapPath(err))
	}
	if len(entries) > 0 {
		return m, false, checkErr
	}
	if namedBy != "" {
		return m, false, fmt.Errorf("rootfs %s (given by %s) is an empty directory: build one there with `%s`", dir, namedBy, buildCmd)
	}
	return m, true, nil
}

// rootfsChoice is what a run says about its rootfs.
type rootfsChoice struct {
	flag       string       // --rootfs
	profile    string       // the profile's rootfs
	unverified bool         // --rootfs-unverified
	early      *rootfsCheck // the check started before the flags were parsed, or nil
}

// rootfsCheck is a comparison of a rootfs with its build's fingerprint
// (rootfs.CheckFingerprint) running in the background.
type rootfsCheck struct {
	dir     string
	verdict chan error
}

// startRootfsCheck starts comparing the rootfs at dir with its
// fingerprint: every entry, or only the top directory's where no jail can
// have written the rootfs (unwritableByJails).
func startRootfsCheck(dir string) *rootfsCheck {
	c := &rootfsCheck{dir: dir, verdict: make(chan error, 1)}
	check := rootfs.CheckFingerprint
	if owner, ok := unwritableByJails(dir); ok {
		check = func(dir string) error { return rootfs.CheckFingerprintTop(dir, owner) }
	}
	go func() { c.verdict <- check(dir) }()
	return c
}

// wait returns the check's verdict (once).
func (c *rootfsCheck) wait(func(string)) error { return <-c.verdict }

// startRootfsCheckEarly starts the rootfs check of a run before its flags
// are parsed, from the --rootfs its arguments give (flagValuesInArgs) or
// the default, so that the check's fstatat calls (a few ms for 2200 files)
// overlap Go's start and the parsing too. It only reads; ensureRootfs
// takes its verdict only for the rootfs it then settles on, after its own
// checks of the place. nil where there is nothing to check early (the run
// is unverified, or no place can be found).
func startRootfsCheckEarly(args []string) *rootfsCheck {
	flag, unverified := rootfsFlagsInArgs(args)
	if unverified {
		return nil
	}
	dir, _, err := locateRootfs(flag, "")
	if err != nil {
		return nil
	}
	return startRootfsCheck(dir)
}

// rootfsFlagsInArgs finds --rootfs (the last one) and --rootfs-unverified
// in a run's arguments as Go's flag parsing reads them (flagValuesInArgs).
func rootfsFlagsInArgs(args []string) (rootfsValue string, unverified bool) {
	takesValue := map[string]bool{}
	for _, f := range runCommand(nil, nil, nil).Flags {
		if df, ok := f.(cli.DocGenerationFlag); ok && !df.TakesValue() {
			continue
		}
		for _, n := range f.Names() {
			takesValue[n] = true
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "rootfs-unverified":
			unverified = !hasValue || value != "false"
		case !takesValue[name]:
		case !hasValue && i+1 >= len(args):
			return rootfsValue, unverified
		case !hasValue:
			i++
			value = args[i]
			fallthrough
		default:
			if name == "rootfs" {
				rootfsValue = value
			}
		}
	}
	return rootfsValue, unverified
}

// ensureRootfs returns a usable rootfs directory, building it first when
// rljail's default place holds none yet (one line on stderr says so), and
// the check to run before the payload starts (jail.Spec.BeforePayload):
// the comparison of the tree with its build's fingerprint
// (rootfs.CheckFingerprint) starts here, in the background, so that it
// runs while the jail is set up rather than before; the payload's execve
// waits for its verdict. With --rootfs-unverified it is skipped, and the
// check says so on stderr and in the report.
func ensureRootfs(ctx context.Context, choice rootfsChoice, guard *hostfile.Guard, notice func(string, ...any)) (string, func(func(string)) error, error) {
	dir, namedBy, err := locateRootfs(choice.flag, choice.profile)
	if err != nil {
		return "", nil, err
	}
	if err := checkRootfsPlace(dir, guard); err != nil {
		return "", nil, err
	}
	if err := checkDataDirVolumes(guard.Writable()); err != nil {
		return "", nil, err
	}
	_, build, err := rootfsVerdict(dir, namedBy)
	if err != nil {
		return dir, nil, err
	}
	if build {
		announce := func() {
			notice("no Python rootfs at %s yet: building it (once; see rljail rootfs build)", dir)
		}
		if _, err := buildLocked(ctx, rootfs.BuildOptions{Out: dir}, announce); err != nil {
			return "", nil, fmt.Errorf("build the rootfs in %s: %w", dir, err)
		}
	}
	if choice.unverified {
		return dir, func(warn func(string)) error {
			warn(fmt.Sprintf("rootfs %s was not verified against its build (--rootfs-unverified): a change made to it since would go unnoticed", dir))
			return nil
		}, nil
	}
	if e := choice.early; e != nil && e.dir == dir && !build {
		return dir, e.wait, nil
	}
	return dir, startRootfsCheck(dir).wait, nil
}

// unwritableByJails reports whether no jail can ever have written the
// rootfs at dir, so that a run needs no walk of it, only a look at its top
// directory (rootfs.CheckFingerprintTop; issue 33: the walk cost every run
// one fstatat per entry, 20 ms on a rootfs of 16,000), and whose every
// entry the fingerprint must then record as owned by owner and writable by
// no one else (CheckFingerprintTop walks where it does not: a tree copied
// in with cp -a keeps its files' owners). A jail writes host files only
// through a writable volume (the rootfs is mounted read-only), as its
// host uid: root-run jails as host ids of their own, which own nothing in
// a rootfs, rootless ones as the invoking user. It holds in two places:
//
//   - rljail's stable data directory of this user (rootfs.StableDataDir:
//     root's, or the one below the passwd entry's home, which no
//     environment variable moves), the rootfs and that directory this
//     user's and neither group- nor other-writable: no run of this user
//     grants a writable volume that covers that directory or lies in it
//     (checkDataDirVolumes refuses one, by inode, whatever the run's HOME
//     and XDG_DATA_HOME), nor any root run one of this user's that reaches
//     it (its jail would write it as this user, idmapped), and a build
//     writes no entry others may write.
//     A rootfs elsewhere (--rootfs DIR, or a data directory that only
//     XDG_DATA_HOME names: a run with another XDG_DATA_HOME does not guard
//     it) is walked, as any path a writable volume of an earlier run might
//     have reached.
//   - root's data directory (rootfs.RootDataDir), for every user: the
//     rootfs and that directory root's and neither group- nor
//     other-writable, and every entry root's and writable by root alone
//     (the fingerprint's record). Root's runs refuse a writable volume
//     over or in that directory whatever their environment (it is both of
//     root's GuardedDataDirs), and so does rljail serve's configuration
//     (checkServeVolumes), so no root-run jail reaches it writable, nor
//     gets the ACL entry a volume of root's gives the jail's host uid. A
//     rootless run may grant it (it guards only its own user's data
//     directories), but its jail is that user, and in its user namespace
//     its capabilities do not reach files whose owner is unmapped, as
//     host root is: every write, create, rename, chmod, utime or setxattr
//     there fails with EACCES or EPERM (rootless_rw_volume_roots_rootfs).
//     Group membership grants nothing (no entry is group-writable), nor
//     does an ACL (its mask shows as the group bits). Only root can make
//     an entry there writable by another user; a change root makes below
//     the top is not noticed by a run (as for root's own runs), and
//     rljail rootfs verify still finds it.
func unwritableByJails(dir string) (owner uint32, ok bool) {
	p := topOnlyPlace{euid: uint32(os.Geteuid())}
	if unix.Lstat(dir, &p.top) != nil || unix.Stat(filepath.Dir(dir), &p.parent) != nil {
		return 0, false
	}
	same := func(base string) bool {
		var st unix.Stat_t
		return unix.Stat(base, &st) == nil && st.Dev == p.parent.Dev && st.Ino == p.parent.Ino
	}
	// Root's data directory first: a rootless run of root's rootfs then
	// needs no look-up of its passwd entry.
	if p.inRoots = same(rootfs.RootDataDir); p.inRoots {
		if owner, ok := p.owner(); ok {
			return owner, true
		}
	}
	if base, err := rootfs.StableDataDir(); err == nil {
		p.inStable = same(base)
	}
	return p.owner()
}

// topOnlyPlace is what unwritableByJails decides from.
type topOnlyPlace struct {
	euid     uint32
	top      unix.Stat_t // the rootfs's (lstat)
	parent   unix.Stat_t // the directory that holds it
	inStable bool        // parent is this user's rootfs.StableDataDir
	inRoots  bool        // parent is rootfs.RootDataDir
}

// owner is unwritableByJails's verdict on p: the uid every entry must be
// recorded as, and whether the place allows the top-only check at all.
func (p topOnlyPlace) owner() (uint32, bool) {
	if p.top.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, false
	}
	onlyBy := func(uid uint32) bool {
		for _, st := range []*unix.Stat_t{&p.top, &p.parent} {
			if st.Uid != uid || st.Mode&0o022 != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case p.inStable && onlyBy(p.euid):
		return p.euid, true
	case p.inRoots && onlyBy(0):
		return 0, true
	}
	return 0, false
}

// checkDataDirVolumes refuses a writable volume that covers one of
// rljail's data directories of root filesystems (rootfs.GuardedDataDirs:
// the one this run's environment names and the stable one), or lies
// inside it: through it the jail would write a rootfs that later runs
// take unchecked (unwritableByJails). Both are judged by inode, so that
// another name of the same directory (a bind mount, a link) is caught too.
//
// A root run's jail writes a volume of another user's as that user (an
// idmapped mount, or the ACL fallback's files given to that owner after
// the run), so such a volume must not reach that user's stable data
// directory either: the user's own runs take a rootfs there unchecked,
// and through -v /home/USER:...:rw a jail of root's could have planted a
// sitecustomize.py in it (rw_volume_into_users_data_dir). Its files of
// other owners it writes as nobody it is mapped to, with no right there.
func checkDataDirVolumes(writable []string) error {
	if len(writable) == 0 {
		return nil
	}
	for _, base := range rootfs.GuardedDataDirs() {
		if err := checkDataDirVolumesOver(base, writable); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return nil
	}
	for _, w := range writable {
		var st unix.Stat_t
		if unix.Stat(w, &st) != nil || st.Uid == 0 {
			continue // refused where the volume is checked; root's: above
		}
		// A uid without a passwd entry (a jail's host id) has no stable
		// data directory, and its runs take no rootfs unchecked.
		base, err := rootfs.StableDataDirOf(int(st.Uid))
		if err != nil {
			continue
		}
		if err := checkDataDirVolumesOver(base, []string{w}); err != nil {
			return err
		}
	}
	return nil
}

// checkDataDirVolumesOver is checkDataDirVolumes for the one data
// directory base.
func checkDataDirVolumesOver(base string, writable []string) error {
	// A data directory not made yet is guarded too: a jail granted a
	// directory above it would make it, with a rootfs and a fingerprint
	// of its own choosing. Then only its existing ancestors can be
	// granted, and nothing lies inside it.
	var data unix.Stat_t
	exists := unix.Stat(base, &data) == nil
	type inode struct{ dev, ino uint64 }
	ancestors := func(p string) map[inode]bool {
		out := map[inode]bool{}
		for {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				out[inode{st.Dev, st.Ino}] = true
			}
			if p == "/" || p == "." || p == "" {
				return out
			}
			p = filepath.Dir(p)
		}
	}
	over := ancestors(base)
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	baseFS, baseOK := fsPath(mounts, base)
	for _, w := range writable {
		var st unix.Stat_t
		if unix.Stat(w, &st) != nil {
			continue // refused where the volume is checked
		}
		// A bind mount names a directory by another path, whose parents
		// are not the directory's: its place in its filesystem is read
		// from the mount table (the mount's root within the filesystem).
		inFS := false
		if wFS, ok := fsPath(mounts, w); ok && baseOK && exists && st.Dev == data.Dev {
			inFS = wFS == "/" || wFS == baseFS || strings.HasPrefix(wFS, baseFS+"/") || strings.HasPrefix(baseFS, wFS+"/")
		}
		if inFS || over[inode{st.Dev, st.Ino}] || (exists && ancestors(w)[inode{data.Dev, data.Ino}]) {
			return fmt.Errorf("the writable volume %s would let the jail write rljail's root filesystems in %s, which runs take without a check: grant a directory outside it (and not one above it)", w, base)
		}
	}
	return nil
}

// checkRootfsPlace refuses a rootfs that a jail could write: one inside a
// volume this run grants rw (by flags or profile: a payload would plant
// sitecustomize.py there for every later run, or a FIFO under the
// manifest's name), one anybody may write, or one a jail's host id owns.
// What an earlier run could write but this one does not grant is not
// known here (SECURITY.md).
func checkRootfsPlace(dir string, guard *hostfile.Guard) error {
	if err := guard.Check("--rootfs", dir); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil // rootfsVerdict says what is wrong with it
	}
	switch {
	case st.Mode&0o002 != 0:
		return fmt.Errorf("rootfs %s may be written by anybody (mode %04o): a jail could have changed it; chmod o-w it, or rebuild it with rljail rootfs build", dir, st.Mode&0o7777)
	// (The caller's own rootfs, the common case, never reads /etc/subuid.)
	case uint32(os.Geteuid()) != st.Uid && jail.IsJailHostUID(st.Uid):
		return fmt.Errorf("rootfs %s is owned by uid %d, a host id jails run as: a jail may have written it; rebuild it with rljail rootfs build", dir, st.Uid)
	}
	return nil
}

// lockRootfs takes the exclusive build lock beside the rootfs at dir (its
// parent is created if missing); the returned func releases it. The lock
// file lives only while it is held: release removes it, and the parent
// directories this call created when they stayed empty (a build that
// failed), so that a build, a failed one included, or a removal leaves no
// lock behind. A waiter that then holds the lock of a removed file sees
// that the path no longer names it (another inode, or none) and takes the
// lock again on what the path names now, so two holders never overlap.
func lockRootfs(dir string) (func(), error) {
	parent := filepath.Dir(dir)
	var made []string // deepest first
	for p := parent; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		made = append(made, p)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", parent, err)
	}
	removeMade := func() {
		for _, p := range made {
			if os.Remove(p) != nil {
				return // not empty: the rootfs, or someone else's
			}
		}
	}
	lockPath := filepath.Join(parent, "."+filepath.Base(dir)+".lock")
	for attempt := 0; ; attempt++ {
		lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			removeMade()
			return nil, fmt.Errorf("open the build lock: %w", err)
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			lock.Close()
			removeMade()
			return nil, fmt.Errorf("take the build lock %s: %w", lockPath, err)
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(lock.Fd()), &held) == nil && unix.Stat(lockPath, &named) == nil &&
			held.Dev == named.Dev && held.Ino == named.Ino {
			return func() {
				os.Remove(lockPath) // while held: see above
				removeMade()
				unix.Flock(int(lock.Fd()), unix.LOCK_UN)
				lock.Close()
			}, nil
		}
		// Its holder removed the file while we waited: lock the new one.
		lock.Close()
		if attempt == 100 {
			return nil, fmt.Errorf("take the build lock %s: it was replaced 100 times while waited for", lockPath)
		}
	}
}

// removeLocked removes the rootfs at dir under its build lock, so that a
// build into the same place cannot interleave with it. The directory that
// holds it is opened once, and the lock, the checks and the rename all go
// through that descriptor: a directory of the path that someone else owns,
// repointed while the lock is awaited, cannot move the removal onto another
// rootfs of the same name.
func removeLocked(dir string) error {
	parent, err := rootfs.OpenParent(dir)
	if err != nil {
		return fmt.Errorf("no rootfs at %s", dir)
	}
	defer parent.Close()
	name := filepath.Base(dir)
	held := rootfs.InDir(parent, name)
	if _, err := os.Lstat(held); err != nil {
		return fmt.Errorf("no rootfs at %s", dir)
	}
	unlock, err := lockRootfs(held)
	if err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), filepath.Dir(held), filepath.Dir(dir)))
	}
	defer unlock()
	return rootfs.RemoveIn(parent, name, dir)
}

// buildLocked builds the rootfs at opts.Out under an exclusive lock beside
// it, so that jails started together build it once; a build that finds a
// valid rootfs after waiting for the lock (and was not asked explicitly:
// no opts.Log) returns it.
//
// announce, when set, is called once the lock is held and a build is about
// to start, so that a build that cannot even start prints one line only.
func buildLocked(ctx context.Context, opts rootfs.BuildOptions, announce func()) (rootfs.Manifest, error) {
	dir := opts.Out
	unlock, err := lockRootfs(dir)
	if err != nil {
		return rootfs.Manifest{}, err
	}
	defer unlock()
	if opts.Log == nil {
		if m, err := rootfs.Check(dir); err == nil {
			return m, nil // another rljail built it while we waited
		}
	}
	if announce != nil {
		announce()
	}
	return rootfs.Build(ctx, opts)
}

// emptyValue refuses a string flag given with an empty value (--name "",
// --rootfs ""): taken for "not given", it would act on the default instead,
// and `rljail rootfs remove --rootfs ""` would remove the default rootfs.
func emptyValue(c *cli.Context, names ...string) error {
	for _, n := range names {
		if c.IsSet(n) && c.String(n) == "" {
			return setupError("--%s: an empty value names nothing; give one, or leave the flag out", n)
		}
	}
	return nil
}

// unwrapPath drops the *PathError wrapper whose path the message names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// safeText makes s safe to print on a terminal: a file name in a rootfs
// that something changed may hold control sequences.
func safeText(s string) string { return string(termsafe.Append(nil, []byte(s))) }

// defaultRootfsChange refuses a build without --name or --rootfs that
// would change what the default rootfs holds, which every run without
// --rootfs uses: one that adds packages, or a plain one over a default
// that has packages. --name python or --replace says it is meant.
func defaultRootfsChange(dir string, opts rootfs.BuildOptions) error {
	if src := buildSources(opts); src != "" {
		return setupError("rljail rootfs build%s, without --name, would add the packages to the default rootfs %s (%s), which every run without --rootfs uses: build a rootfs of its own with --name NAME (then run with --rootfs NAME), or change the default with --name %s or --replace",
			src, rootfsLabel(dir), dir, rootfs.DefaultName)
	}
	if m, err := rootfs.Check(dir); err == nil && len(m.Packages) > 0 {
		names := make([]string, 0, 3)
		for _, p := range m.Packages[:min(3, len(m.Packages))] {
			names = append(names, p.Name)
		}
		more := ""
		if len(m.Packages) > 3 {
			more = fmt.Sprintf(" and %d more", len(m.Packages)-3)
		}
		return setupError("the default rootfs %s (%s) holds %d added packages (%s%s), which a plain build would take out for every run without --rootfs: give --replace (or --name %s) to do it",
			rootfsLabel(dir), dir, len(m.Packages), strings.Join(names, ", "), more, rootfs.DefaultName)
	}
	return nil
}

// buildSources says what a build adds beyond the interpreter (" with
// --system-packages python3-numpy, --venv DIR"), or "".
func buildSources(opts rootfs.BuildOptions) string {
	var parts []string
	if len(opts.SystemPackages) > 0 {
		parts = append(parts, "--system-packages "+strings.Join(opts.SystemPackages, ","))
	}
	if opts.Venv != "" {
		parts = append(parts, "--venv "+opts.Venv)
	}
	if opts.Wheels != "" {
		parts = append(parts, "--wheels "+opts.Wheels)
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

// fsPath is p's path within its filesystem, from the mount table
// (mountinfo, /proc/self/mountinfo's text): the root of the mount p lies
// in (the last one mounted at the longest mount point above p), joined
// with the rest of p. A directory reached through a bind mount has the
// same fsPath as by its own name.
func fsPath(mountinfo []byte, p string) (string, bool) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	best, root := "", ""
	for _, line := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		point := cgroup.UnescapeMountinfo(f[4])
		if point != "/" && real != point && !strings.HasPrefix(real, point+"/") {
			continue
		}
		if len(point) >= len(best) {
			best, root = point, cgroup.UnescapeMountinfo(f[3])
		}
	}
	if best == "" {
		return "", false
	}
	rest := strings.TrimPrefix(real, best)
	if best == "/" {
		rest = real
	}
	return filepath.Join(root, rest), true
}
