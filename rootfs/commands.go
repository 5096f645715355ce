package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The common commands in the jail: model-written code and the recipes of
// runners call them (`timeout 10 python ...`, subprocess.run(["ls"]),
// os.system("grep ...")), and a rootfs with only python3 and sh fails them
// with "not found". They come from one static binary, Debian's
// busybox-static, linked under each applet's name in /usr/bin; a name
// the tree already has (python3, sh: dash) keeps its program.

// hostBusybox is the busybox the rootfs gets (Debian's busybox-static
// package; a dynamically linked busybox brings its libraries).
const hostBusybox = "/bin/busybox"

// hostTimeout is GNU coreutils' timeout, which the rootfs gets instead of
// busybox's when the host has it (libc only): runners look for its exit
// status 124 when the time is up, and pass fractions of a second, while
// busybox 1.35's timeout ends with the payload's own status (143 for its
// SIGTERM) and cuts 1.5 to 1 second. The official python images, Debian
// with coreutils, have this one.
const hostTimeout = "/usr/bin/timeout"

// busyboxApplets are the applets linked into /usr/bin. Left out: what
// needs privileges, a network or a terminal the jail does not have
// (mount, ip, wget, vi, less), and sh (the rootfs's /bin/sh is dash).
var busyboxApplets = []string{
	"[", "[[", "awk", "base64", "basename", "bc", "bunzip2", "bzcat", "bzip2", "cat", "chmod",
	"cmp", "cp", "cut", "date", "dc", "dd", "df", "diff", "dirname", "du", "echo", "egrep", "env",
	"expand", "expr", "factor", "false", "fgrep", "find", "fold", "getopt", "grep", "gunzip",
	"gzip", "head", "hexdump", "id", "kill", "link", "ln", "ls", "md5sum", "mkdir", "mkfifo",
	"mktemp", "mv", "nl", "nproc", "od", "paste", "patch", "printf", "ps", "pwd", "readlink",
	"realpath", "rev", "rm", "rmdir", "sed", "seq", "sha1sum", "sha256sum", "sha3sum",
	"sha512sum", "shuf", "sleep", "sort", "stat", "strings", "sync", "tac", "tail", "tar",
	"tee", "test", "time", "timeout", "touch", "tr", "true", "truncate", "uname",
	"unexpand", "uniq", "unlink", "unxz", "unzip", "usleep", "uudecode", "uuencode", "wc",
	"which", "whoami", "xargs", "xxd", "xz", "xzcat", "yes", "zcat",
}

// addCommands copies busybox and GNU timeout (hostTimeout, when the host
// has it) into the tree, links the applets, and returns the libraries
// they need. A host without busybox gets an error (the caller logs it and
// builds on).
func addCommands(t *tree, r *libraryResolver, busybox, timeout string) ([]loadedLibrary, error) {
	var libs []loadedLibrary
	if _, err := os.Stat(timeout); err == nil {
		prog, err := r.programClosure(timeout)
		if err != nil {
			return nil, fmt.Errorf("libraries of %s: %w", timeout, err)
		}
		if _, err := t.mirror(timeout); err != nil {
			return nil, fmt.Errorf("copy %s: %w", timeout, err)
		}
		libs = append(libs, prog.libs...)
	}
	prog, err := r.programClosure(busybox)
	if err != nil {
		return libs, fmt.Errorf("busybox: %w", err)
	}
	real, err := t.mirror(busybox)
	if err != nil {
		return libs, fmt.Errorf("copy %s: %w", busybox, err)
	}
	libs = append(libs, prog.libs...)
	bin, err := t.mirror("/usr/bin")
	if err != nil {
		return libs, fmt.Errorf("link the busybox applets: %w", err)
	}
	target := real
	if filepath.Dir(real) == bin {
		target = filepath.Base(real)
	}
	for _, name := range busyboxApplets {
		link := filepath.Join(bin, name)
		if _, err := os.Lstat(t.in(link)); err == nil {
			continue // the tree's own program (GNU timeout) stays
		} else if !errors.Is(err, fs.ErrNotExist) {
			return libs, fmt.Errorf("link %s: %w", link, err)
		}
		if err := t.symlink(link, target); err != nil {
			return libs, fmt.Errorf("link the busybox applets: %w", err)
		}
	}
	return libs, nil
}
