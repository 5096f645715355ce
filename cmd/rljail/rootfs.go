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

	"github.com/rljail/rljail/rootfs"
)

func rootfsCommand() *cli.Command {
	dirFlag := &cli.StringFlag{Name: "rootfs", Aliases: []string{"out"}, Usage: "rootfs directory (default $RLJAIL_ROOTFS, else the per-user default)"}
	return &cli.Command{
		Name:         "rootfs",
		Usage:        "build or describe the Python root filesystem",
		OnUsageError: usageError,
		Subcommands: []*cli.Command{
			{
				Name:         "build",
				Usage:        "build the rootfs from a host Python interpreter (replaces an existing one atomically)",
				OnUsageError: usageError,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "python", Usage: "host interpreter (default /usr/bin/python3)"},
					dirFlag,
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"},
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
					m, err := buildLocked(c.Context, dir, c.String("python"), logf, nil)
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
					return nil
				},
			},
		},
	}
}

// rootfsDir picks the rootfs: the flag, else RLJAIL_ROOTFS, else the
// default place (rootfs.DefaultDir reads RLJAIL_ROOTFS too).
func rootfsDir(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	return rootfs.DefaultDir()
}

// ensureRootfs returns a usable rootfs directory, building it first when
// it does not exist yet (one line on stderr says so).
func ensureRootfs(ctx context.Context, flag string, notice func(string, ...any)) (string, error) {
	dir, err := rootfsDir(flag)
	if err != nil {
		return "", err
	}
	if _, err := rootfs.Check(dir); err == nil {
		return dir, nil
	}
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		// Build only into an empty directory; a directory that cannot even
		// be listed is an error, not a missing rootfs.
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return "", fmt.Errorf("rootfs %s: %w", dir, unwrapPath(rerr))
		}
		if len(entries) > 0 {
			_, cerr := rootfs.Check(dir)
			return "", cerr
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("rootfs %s: %w", dir, err)
	}
	announce := func() {
		notice("no Python rootfs at %s yet: building it (once; see rljail rootfs build)", dir)
	}
	if _, err := buildLocked(ctx, dir, "", nil, announce); err != nil {
		return "", fmt.Errorf("build the rootfs in %s: %w", dir, err)
	}
	return dir, nil
}

// buildLocked builds the rootfs under an exclusive lock beside it, so that
// jails started together build it once; a build that finds a valid rootfs
// after waiting for the lock (and was not asked explicitly) returns it.
//
// announce, when set, is called once the lock is held and a build is about
// to start, so that a build that cannot even start prints one line only.
func buildLocked(ctx context.Context, dir, python string, logf func(string), announce func()) (rootfs.Manifest, error) {
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
	if logf == nil {
		if m, err := rootfs.Check(dir); err == nil {
			return m, nil // another rljail built it while we waited
		}
	}
	if announce != nil {
		announce()
	}
	return rootfs.Build(ctx, rootfs.BuildOptions{Python: python, Out: dir, Log: logf})
}

// unwrapPath drops the *PathError wrapper whose path the message names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
