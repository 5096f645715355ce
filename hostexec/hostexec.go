// Package hostexec starts programs of the host (not of a jail) so that they
// do not inherit what rljail's AppArmor profile grants rljail alone.
//
// On hosts that restrict unprivileged user namespaces (Ubuntu 23.10 and
// later), contrib/apparmor/rljail attaches the profile `rljail` to the
// installed binary: unconfined mode plus `userns,`. A profile in unconfined
// mode keeps itself across execve unless another profile attaches to the new
// program, so without this package every program rljail starts on the host
// (the interpreter `rljail rootfs build --python` names, pip, dpkg-query)
// would run as `rljail` and could create user namespaces with capabilities
// in them, which the host's restriction means to prevent. The same file
// holds `rljail-host`: unconfined mode without `userns`. When the calling
// process runs as `rljail`, Start asks the kernel to move the next exec of
// the thread it forks from to `rljail-host` (AppArmor's change_onexec) and
// refuses the exec if it cannot; when AppArmor is absent or the label is
// another, it changes nothing.
//
// The jail's own execs (prestart re-executing /proc/self/exe, the jail's
// init, the payload) do not go through this package: they need `userns`
// (the payload cannot use it: seccomp denies it namespaces).
package hostexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Profile is the label whose userns permission host programs must not keep;
// HostProfile is the one they run under instead (contrib/apparmor/rljail
// holds both).
const (
	Profile     = "rljail"
	HostProfile = "rljail-host"
)

// SafePath is where Command looks up a program named without a slash, and
// the PATH of its default environment: the caller's PATH would let whoever
// runs rljail choose the program.
const SafePath = "/usr/bin:/bin"

// Command is exec.CommandContext for a program of the host, with a bare
// name looked up in SafePath rather than the caller's PATH and the
// environment set to PATH=SafePath (the caller's is never passed on; set
// cmd.Env to add to it). Start it with Start, Run, Output or CombinedOutput
// of this package, never with the exec.Cmd's own methods.
func Command(ctx context.Context, name string, arg ...string) *exec.Cmd {
	path, lerr := lookPath(name)
	cmd := exec.CommandContext(ctx, path, arg...)
	cmd.Args[0] = name
	cmd.Env = []string{"PATH=" + SafePath}
	if lerr != nil {
		cmd.Err = lerr
	}
	return cmd
}

// lookPath finds name in SafePath; a name with a slash is taken as it is.
// Its error wraps exec.ErrNotFound, as exec.LookPath's does.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(SafePath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return name, &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// loaderVars are environment variables (prefixes ending in "_") by which
// whoever sets them steers the dynamic loader or the C library of a
// program: code injected into it (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT,
// GCONV_PATH), or its allocator and tunables. No host exec of rljail needs
// them, and although the program runs as HostProfile, which grants nothing
// an unconfined program lacks, a program still running as Profile (a kernel
// that ignored the request) would run the caller's code with `userns`.
// Start removes them from cmd.Env whoever put them there.
// The list is glibc's own for set-user-ID programs (UNSECURE_ENVVARS in
// sysdeps/generic/unsecvars.h) without TMPDIR and TZDIR, plus the C
// library's tunables.
var loaderVars = []string{"LD_", "GCONV_PATH=", "GETCONF_DIR=", "HOSTALIASES=", "LOCALDOMAIN=",
	"LOCPATH=", "MALLOC_", "NIS_PATH=", "NLSPATH=", "RESOLV_HOST_CONF=", "RES_OPTIONS=",
	"GLIBC_TUNABLES="}

// Start starts cmd as exec.Cmd.Start does, on a locked OS thread that first
// asks AppArmor to run the program as HostProfile when the process runs as
// Profile. cmd.Env must be set (Command sets it): a host program never gets
// the caller's environment by default.
func Start(cmd *exec.Cmd) error {
	return start(cmd, procAttrs)
}

// Run is Start and then cmd.Wait.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// Output is exec.Cmd.Output through Start: it returns the standard output.
func Output(cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil {
		return nil, errors.New("hostexec: Stdout already set")
	}
	var b bytes.Buffer
	cmd.Stdout = &b
	err := Run(cmd)
	return b.Bytes(), err
}

// CombinedOutput is exec.Cmd.CombinedOutput through Start: it returns the
// standard output and error together.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("hostexec: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := Run(cmd)
	return b.Bytes(), err
}

func start(cmd *exec.Cmd, attrs attrFiles) error {
	if cmd.Env == nil {
		return fmt.Errorf("start %s: no environment given (hostexec.Command sets one)", cmd.Path)
	}
	cmd.Env = withoutLoaderVars(cmd.Env)
	done := make(chan error, 1)
	go func() {
		// The request is a property of this OS thread (AppArmor's task
		// context); Go's fork clones the child from the calling thread, and
		// the kernel copies the context into it (apparmor_task_alloc:
		// aa_dup_task_ctx copies onexec), where the exec consumes it. The
		// thread itself keeps the request: returning from this goroutine
		// without UnlockOSThread makes the runtime end the thread, so no
		// later exec (a jail's, which needs Profile) is started from it.
		// The runtime never clones a new thread from a locked one either
		// (runtime.newm hands that to its template thread).
		runtime.LockOSThread()
		requested, err := requestHostProfile(attrs)
		if err != nil {
			done <- fmt.Errorf("start %s: %w", cmd.Path, err)
			return
		}
		err = cmd.Start()
		if !requested {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func withoutLoaderVars(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		drop := false
		for _, p := range loaderVars {
			if strings.HasPrefix(kv, p) {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// attrFiles are the calling thread's AppArmor attributes: the interface of
// Linux 5.8 and later under attr/apparmor/, and the older shared one, which
// speaks for AppArmor only where it is the first LSM that provides them.
type attrFiles struct {
	current, exec             string
	legacyCurrent, legacyExec string
}

var procAttrs = attrFiles{
	current: "/proc/thread-self/attr/apparmor/current", exec: "/proc/thread-self/attr/apparmor/exec",
	legacyCurrent: "/proc/thread-self/attr/current", legacyExec: "/proc/thread-self/attr/exec",
}

// requestHostProfile asks for HostProfile on the calling thread's next exec
// when its label is Profile. It reports whether it asked. Must run on a
// locked OS thread.
func requestHostProfile(a attrFiles) (bool, error) {
	raw, execFile, err := readLabel(a)
	if err != nil {
		return false, err
	}
	if raw == nil || !needsHostProfile(parseLabel(raw)) {
		return false, nil
	}
	if err := writeAttr(execFile, "exec "+HostProfile); err != nil {
		return true, fmt.Errorf("refused: it would keep the AppArmor profile %s and its userns permission, and the kernel did not take the request to run it as %s (\"exec %s\": %w); load %s, which the file of %s defines too: apparmor_parser -r /etc/apparmor.d/rljail",
			Profile, HostProfile, HostProfile, err, HostProfile, Profile)
	}
	return true, nil
}

// writeAttr writes the request in one write(2), as the kernel parses it.
func writeAttr(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(s))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readLabel reads the thread's AppArmor label and names the file that takes
// its on-exec request. raw is nil when AppArmor is absent or disabled
// (ENOENT: no such attribute; EINVAL: no active LSM provides it).
func readLabel(a attrFiles) (raw []byte, execFile string, err error) {
	raw, err = os.ReadFile(a.current)
	if err == nil {
		return raw, a.exec, nil
	}
	if !absent(err) {
		return nil, "", fmt.Errorf("read the AppArmor label: %w", err)
	}
	raw, err = os.ReadFile(a.legacyCurrent)
	if err == nil {
		return raw, a.legacyExec, nil
	}
	if !absent(err) {
		return nil, "", fmt.Errorf("read the security label: %w", err)
	}
	return nil, "", nil
}

func absent(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EINVAL)
}

// parseLabel returns the label's name without its mode: AppArmor writes
// "NAME (MODE)\n" for a profile ("rljail (unconfined)") and "unconfined\n"
// for no profile. The legacy attribute may hold another LSM's context
// (SELinux's "user:role:type:level"), which names no AppArmor profile and is
// returned as it is.
func parseLabel(raw []byte) string {
	s := strings.TrimRight(string(raw), "\x00\n")
	if strings.HasSuffix(s, ")") {
		if i := strings.LastIndex(s, " ("); i > 0 {
			s = s[:i]
		}
	}
	return s
}

// needsHostProfile reports whether a program started under label must be
// moved to HostProfile: only Profile grants userns. A stack containing it
// ("rljail//&other") is not moved: a stack grants only what each of its
// profiles grants, and rljail does not put itself into one.
func needsHostProfile(label string) bool {
	return label == Profile
}
