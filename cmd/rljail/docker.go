package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/dockercli"
	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/rootfs"
)

// dockerName is the program name under which rljail stands in for docker:
// a link named docker, first on a runner's PATH, makes the runner's
// unmodified ["docker", "run", ...] calls run in rljail.
const dockerName = "docker"

// dockerTimeoutExit is the exit status of a `docker run` that rljail's
// own kill timer (--rljail-timeout) ended: docker has no timer of its
// own, and gives 137 for a container killed with SIGKILL (docker kill,
// docker stop after its grace). A `timeout` inside the jail still gives
// its own 124: a runner can tell the two apart.
const dockerTimeoutExit = 137

// maxImagesFile is the largest images.toml read.
const maxImagesFile = 1 << 20

// dockerCommand is `rljail docker` in the help (rljail --help, rljail help
// docker). A docker command line never reaches it: runCLI hands it to
// runDocker before the flags are parsed, in docker's grammar.
func dockerCommand() *cli.Command {
	return &cli.Command{
		Name:      dockerName,
		Usage:     "run a `docker run` command line in a jail, in docker's grammar (also as docker: a link named docker to rljail)",
		UsageText: "rljail docker run [DOCKER FLAGS] IMAGE CMD [ARG...]",
		// The help is docker's own (docker run --help), verbatim: no
		// template directive is in it.
		CustomHelpTemplate: "rljail docker run [OPTIONS] IMAGE COMMAND [ARG...], or docker run ... through a link named docker to rljail\n\n" + dockercli.Usage,
		SkipFlagParsing:    true,
		HideHelp:           true,
		Action: func(c *cli.Context) error {
			return setupError("rljail docker: give a docker command line (rljail docker run [OPTIONS] IMAGE COMMAND)")
		},
	}
}

// dockerArgs returns the docker command line (program name first) when
// args ask for one: rljail invoked as docker, or `rljail docker ...`.
func dockerArgs(args []string) ([]string, bool) {
	if filepath.Base(args[0]) == dockerName {
		return args, true
	}
	if len(args) > 1 && args[1] == dockerName {
		return append([]string{args[0]}, args[2:]...), true
	}
	return nil, false
}

// runDocker runs a docker command line: `docker run` is translated into
// rljail run's own flags and runs on the same path as they do; anything
// else is one line and exit 125 (version and help say what this is).
func runDocker(args []string, stdin io.Reader, stdout, stderr io.Writer, restoreSignals bool) int {
	fail := func(msg string) int {
		jail.DiscardPrestarted()
		fmt.Fprintln(stderr, "rljail docker: "+oneLine(msg))
		return jail.ExitSetupError
	}
	if len(args) < 2 {
		return fail("no command given: rljail stands in for `docker run [OPTIONS] IMAGE COMMAND [ARG...]` only")
	}
	sub, rest := args[1], args[2:]
	if sub == "container" && len(rest) > 0 && rest[0] == "run" {
		sub, rest = "run", rest[1:]
	}
	switch sub {
	case "run":
	case "version", "--version", "-v", "info":
		jail.DiscardPrestarted()
		fmt.Fprintf(stdout, "rljail %s standing in for `docker run` only: each run is a throwaway rljail jail, and there is no docker daemon, image or container (see `docker run --help`)\n", version)
		return 0
	case "help", "--help", "-h":
		jail.DiscardPrestarted()
		fmt.Fprint(stdout, dockercli.Usage)
		return 0
	default:
		return fail(fmt.Sprintf("`docker %s` is not supported: rljail stands in for `docker run` only; each run is a throwaway jail, so there are no images to pull or list, no containers to list, stop or remove, and no daemon", sub))
	}
	r, err := dockercli.Parse(rest)
	if err != nil {
		return fail(err.Error())
	}
	if r.Help {
		jail.DiscardPrestarted()
		fmt.Fprint(stdout, dockercli.Usage)
		return 0
	}
	guard := hostfile.NewGuard(writableSources(r.Volumes), jail.IsJailHostUID)
	target, err := resolveImage(r, guard)
	if err != nil {
		return fail(err.Error())
	}
	argv := append([]string{args[0], "run"}, r.Args...)
	if target.Dir != "" {
		argv = append(argv, "--rootfs", target.Dir)
	}
	argv = append(argv, "--")
	argv = append(argv, r.Command...)
	if !r.Interactive {
		stdin = strings.NewReader("") // docker without -i: an empty stdin
	}
	return runCLIWith(argv, stdin, stdout, stderr, restoreSignals, runOptions{timeoutExit: dockerTimeoutExit, notice: r.TimerNotice()})
}

// resolveImage maps the run's image to a root filesystem, with the mapping
// files read through guard.
func resolveImage(r *dockercli.Run, guard *hostfile.Guard) (dockercli.Target, error) {
	im := &dockercli.Images{IsRootfs: func(dir string) bool { _, err := rootfs.Check(dir); return err == nil }}
	if dir, err := rootfs.DefaultDir(); err == nil {
		im.DefaultDir = dir
		if m, err := rootfs.Check(dir); err == nil {
			im.DefaultPython = m.PythonVersion
		}
	} else {
		im.IsRootfs = func(string) bool { return false } // no place for names either
	}
	im.UserFile = userImagesFile()
	files := []string{im.UserFile, systemImagesFile}
	explicit := r.ImagesFile != ""
	if explicit {
		files = []string{r.ImagesFile}
	}
	if im.UserFile == "" {
		im.UserFile = systemImagesFile
	}
	for _, p := range files {
		if p == "" {
			continue
		}
		if _, err := os.Lstat(p); !explicit && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		data, err := guard.ReadFile("the image mapping file", p, maxImagesFile)
		if err != nil {
			return dockercli.Target{}, err
		}
		m, err := dockercli.ParseMapping(data, p)
		if err != nil {
			return dockercli.Target{}, err
		}
		im.Files = append(im.Files, m)
	}
	return im.Resolve(r.Image)
}

// systemImagesFile is the system-wide image mapping file.
const systemImagesFile = "/etc/rljail/images.toml"

// userImagesFile is $XDG_CONFIG_HOME/rljail/images.toml, else
// ~/.config/rljail/images.toml; "" without a home.
func userImagesFile() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "rljail", "images.toml")
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "rljail", "images.toml")
	}
	return ""
}
