package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/rootfs"
)

func rootfsCommand() *cli.Command {
	dirFlag := &cli.StringFlag{Name: "rootfs", Aliases: []string{"out"}, Usage: "rootfs directory (default $RLJAIL_ROOTFS, else the per-user default)"}
	return &cli.Command{
		Name:         "rootfs",
		Usage:        "build or describe the Python root filesystem",
		OnUsageError: usageError,
		Action:       unknownSubcommand("build, info"),
		Subcommands: []*cli.Command{
			{
				Name:         "build",
				Usage:        "build the rootfs from a host Python interpreter (replaces an existing one atomically)",
				OnUsageError: usageError,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "python", Usage: "host interpreter (default /usr/bin/python3)"},
					dirFlag,
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"},
					&cli.BoolFlag{Name: "no-commands", Usage: "leave out the common commands (timeout, ls, cat, grep... from busybox; GNU timeout): python3 and /bin/sh only"},
					&cli.BoolFlag{Name: "test-suites", Usage: "keep CPython's own regression tests and test-only modules (for comparing the jail with a plain machine, not for model code)"},
				},
				Action: func(c *cli.Context) error {
					dir, err := rootfsDir(c.String("rootfs"))
					if err != nil {
						return setupError("%v", err)
					}
					logf := func(msg string) {
						if !c.Bool("quiet") {
							fmt.Fprintln(c.App.ErrWriter, "rljail: "+msg)
						}
					}
					m, err := buildLocked(c.Context, rootfs.BuildOptions{Out: dir, Python: c.String("python"), Log: logf, NoCommands: c.Bool("no-commands"), TestSuites: c.Bool("test-suites")}, nil)
					if err != nil {
						return setupError("build the rootfs in %s: %v", dir, err)
					}
					fmt.Fprintf(c.App.Writer, "built %s: Python %s, %d files, %.1f MB\n", dir, m.PythonVersion, m.Files, float64(m.SizeBytes)/1e6)
					return nil
				},
			},
			{
				Name:         "info",
				Usage:        "print the rootfs's Python version, size, file count and source interpreter",
				OnUsageError: usageError,
				Flags:        []cli.Flag{dirFlag},
				Action: func(c *cli.Context) error {
					dir, err := rootfsDir(c.String("rootfs"))
					if err != nil {
						return setupError("%v", err)
					}
					m, err := rootfs.Check(dir)
					if err != nil {
						return &exitError{code: 1, msg: oneLine(err.Error())}
					}
					w := c.App.Writer
					fmt.Fprintf(w, "path:     %s\n", dir)
					fmt.Fprintf(w, "python:   %s (%s)\n", m.PythonVersion, m.Python)
					fmt.Fprintf(w, "source:   %s\n", m.Source)
					fmt.Fprintf(w, "files:    %d\n", m.Files)
					fmt.Fprintf(w, "size:     %.1f MB\n", float64(m.SizeBytes)/1e6)
					fmt.Fprintf(w, "tree:     sha256:%s\n", m.TreeSHA256)
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
					return nil
				},
			},
		},
	}
}

// rootfsDir picks the rootfs: the flag, else RLJAIL_ROOTFS, else the
// default place (rootfs.DefaultDir reads RLJAIL_ROOTFS too).
func rootfsDir(flag string) (string, error) {
	dir, _, err := locateRootfs(flag)
	return dir, err
}

// locateRootfs is rootfsDir, and also says who named the directory:
// "--rootfs", "RLJAIL_ROOTFS", or "" for rljail's default place.
func locateRootfs(flag string) (dir, namedBy string, err error) {
	switch {
	case flag != "":
		dir, err = filepath.Abs(flag)
		return dir, "--rootfs", err
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
// the user named (--rootfs, RLJAIL_ROOTFS) that holds no rootfs is a
// mistake to report, not a place to fill with 50 MB (a typo would create
// directories anywhere the user may write).
func rootfsVerdict(dir, namedBy string) (m rootfs.Manifest, build bool, err error) {
	m, checkErr := rootfs.Check(dir)
	if checkErr == nil {
		return m, false, nil
	}
	buildCmd := "rljail rootfs build"
	if namedBy == "--rootfs" {
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

// ensureRootfs returns a usable rootfs directory, building it first when
// rljail's default place holds none yet (one line on stderr says so).
func ensureRootfs(ctx context.Context, flag string, guard *hostfile.Guard, notice func(string, ...any)) (string, error) {
	dir, namedBy, err := locateRootfs(flag)
	if err != nil {
		return "", err
	}
	if err := checkRootfsPlace(dir, guard); err != nil {
		return "", err
	}
	_, build, err := rootfsVerdict(dir, namedBy)
	if err != nil || !build {
		return dir, err
	}
	announce := func() {
		notice("no Python rootfs at %s yet: building it (once; see rljail rootfs build)", dir)
	}
	if _, err := buildLocked(ctx, rootfs.BuildOptions{Out: dir}, announce); err != nil {
		return "", fmt.Errorf("build the rootfs in %s: %w", dir, err)
	}
	return dir, nil
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

// buildLocked builds the rootfs at opts.Out under an exclusive lock beside
// it, so that jails started together build it once; a build that finds a
// valid rootfs after waiting for the lock (and was not asked explicitly:
// no opts.Log) returns it.
//
// announce, when set, is called once the lock is held and a build is about
// to start, so that a build that cannot even start prints one line only.
func buildLocked(ctx context.Context, opts rootfs.BuildOptions, announce func()) (rootfs.Manifest, error) {
	dir := opts.Out
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return rootfs.Manifest{}, fmt.Errorf("create %s: %w", parent, err)
	}
	lockPath := filepath.Join(parent, "."+filepath.Base(dir)+".lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return rootfs.Manifest{}, fmt.Errorf("open the build lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return rootfs.Manifest{}, fmt.Errorf("take the build lock %s: %w", lockPath, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
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

// unwrapPath drops the *PathError wrapper whose path the message names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
