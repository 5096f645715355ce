// Package rootfs builds and checks the minimal Python root filesystem that rljail's
// jails run on.
//
// A jail's / is a small tmpfs skeleton into which the top-level directories of this tree
// are bind-mounted read-only. The tree holds one host interpreter, the shared libraries
// it and its extension modules load (found by reading the ELF files, never by running
// them), the standard library without its test suites and host-specific parts, and
// bytecode compiled ahead of time, because the read-only tree leaves CPython nowhere to
// cache it. Build makes it reproducible (same inputs, same TreeSHA256) and atomic (a
// directory without a manifest is never used); Check is the cheap test before each run.
package rootfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rljail/rljail/hostexec"
	"golang.org/x/sys/unix"
)

// BuildOptions says what Build builds from and where. The zero value builds from
// DefaultPython into DefaultDir.
type BuildOptions struct {
	// Python is the host interpreter to copy, a path or a name on PATH; "" means
	// DefaultPython. Symlinks are resolved; a script (such as a pyenv shim) is refused.
	Python string
	// Out is the rootfs directory to create or replace; "" means DefaultDir. An
	// existing directory is replaced only if it is empty or an rljail rootfs.
	Out string
	// Log, if set, receives one line per build step, for a progress display.
	Log func(msg string)
	// NoCommands leaves out the common commands (busybox's applets and GNU
	// timeout, commands.go): the rootfs then has python3 and /bin/sh only.
	NoCommands bool
	// Packages, if set, are recorded in the manifest as the packages the build
	// added (for `rljail rootfs list` and `info`), after those of the package
	// sources below.
	Packages []Package

	// Package sources (packages.go), never a network: SystemPackages are
	// Debian python3-* packages installed on the host, taken with the Python
	// packages, data and fonts they depend on; Venv is a virtual environment
	// made by an interpreter of the rootfs's Python version, whose
	// site-packages is copied; Wheels and Requirements are an offline pip
	// install (no index) from a wheelhouse. WithPip keeps pip where a source
	// has it (it is left out otherwise). Each extension module brings the
	// libraries it loads, and everything added is compiled to bytecode.
	SystemPackages []string
	Venv           string
	Wheels         string
	Requirements   string
	WithPip        bool

	// TestSuites keeps CPython's own regression tests (Debian's
	// libpython3.11-testsuite) and the test-only extension modules
	// (testsuites.go): a rootfs for comparing the jail with a plain
	// machine, not for running model code.
	TestSuites bool
}

// Build creates the Python rootfs at opts.Out from the host interpreter, replacing a
// previous one atomically: the tree is assembled in a sibling temporary directory,
// completed by its manifest, flushed to disk and renamed into place, so a jail sees the
// old tree or the new one, never a mix. On failure or cancellation nothing is left behind.
func Build(ctx context.Context, opts BuildOptions) (Manifest, error) {
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, args...))
		}
	}
	start := time.Now()

	python, err := buildPython(opts.Python)
	if err != nil {
		return Manifest{}, err
	}
	out := opts.Out
	if out == "" {
		if out, err = DefaultDir(); err != nil {
			return Manifest{}, err
		}
	}
	if out, err = filepath.Abs(out); err != nil {
		return Manifest{}, fmt.Errorf("rootfs directory %s: %w", opts.Out, err)
	}
	if _, err := replaceable(out); err != nil {
		return Manifest{}, err // refuse before the work, not only after it
	}
	info, err := queryPython(ctx, python)
	if err != nil {
		return Manifest{}, err
	}
	plan, err := planPackages(ctx, opts, python, info)
	if err != nil {
		return Manifest{}, err // bad package input: refused before anything is written
	}
	logf("building Python %s rootfs from %s into %s", info.Version, python, out)
	plan.logSizes(logf)

	parent := filepath.Dir(out)
	if err := mkdirAll(parent); err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return Manifest{}, fmt.Errorf("create build directory: %w", err)
	}
	installed := false
	defer func() {
		if !installed {
			os.RemoveAll(tmp)
		}
	}()

	t := newTree(tmp, opts.Log)
	pkgRoots, err := assemble(ctx, t, python, info, !opts.NoCommands, stdlibFilter(opts.TestSuites), plan, logf)
	if err != nil {
		return Manifest{}, err
	}
	logf("compiling bytecode")
	if err := compileBytecode(ctx, t, python, info, opts.TestSuites); err != nil {
		return Manifest{}, err
	}
	if err := compilePackages(ctx, t, python, info, pkgRoots, logf); err != nil {
		return Manifest{}, err
	}
	if err := normalize(ctx, tmp); err != nil {
		return Manifest{}, err
	}
	sum, err := summarize(ctx, tmp)
	if err != nil {
		return Manifest{}, err
	}
	filesSHA256, err := writeFileList(tmp, sum.entries)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{
		FormatVersion: formatVersion,
		PythonVersion: info.Version,
		Python:        python,
		Source:        python,
		Files:         sum.files,
		SizeBytes:     sum.size,
		TreeSHA256:    sum.sha256,
		Programs:      sum.programs,
		FilesSHA256:   filesSHA256,
		Packages:      append(plan.packageList(), opts.Packages...),
	}
	if err := m.validate(); err != nil {
		return Manifest{}, fmt.Errorf("built rootfs: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Manifest{}, err
	}
	if err := writeManifest(tmp, m); err != nil {
		return Manifest{}, err
	}
	// Written after normalize: give the manifest, the file list and the top directory
	// the same modes and mtime as the rest.
	if err := normalize(ctx, tmp); err != nil {
		return Manifest{}, err
	}
	if err := syncTree(tmp); err != nil {
		return Manifest{}, err
	}
	// The fingerprint comes after the last write and chmod of the tree: the
	// runs compare every entry's lstat with it (manifeststat.go).
	if err := writeFingerprint(tmp); err != nil {
		return Manifest{}, err
	}
	if err := ctx.Err(); err != nil {
		return Manifest{}, err
	}
	if err := install(tmp, out, logf); err != nil {
		return Manifest{}, err
	}
	installed = true
	logf("built %s: %d files, %.1f MB, tree %s, in %v", out, m.Files, float64(m.SizeBytes)/1e6, m.TreeSHA256[:12], time.Since(start).Round(time.Millisecond))
	return m, nil
}

// buildPython resolves the interpreter Build copies.
func buildPython(p string) (string, error) {
	if p == "" {
		return DefaultPython()
	}
	if !strings.Contains(p, "/") {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("python %s: %w", p, err)
		}
		p = found
	}
	return hostInterpreter(p)
}

// pythonInfo is what the host interpreter says about its own layout.
type pythonInfo struct {
	Version    string `json:"version"`
	Stdlib     string `json:"stdlib"`
	PlatStdlib string `json:"platstdlib"`
	Dynload    string `json:"dynload"`
	CacheTag   string `json:"cache_tag"`
	// Purelib is where the site module finds packages a user installed
	// (Debian: /usr/local/lib/python3.X/dist-packages); --venv and --wheels
	// put theirs there.
	Purelib string `json:"purelib"`
}

// queryPythonScript prints pythonInfo. The extension module directory is DESTSHARED
// where the build recorded it (Debian does), else lib-dynload beside the stdlib.
const queryPythonScript = `
import json, os, platform, sys, sysconfig
dyn = sysconfig.get_config_var("DESTSHARED") or os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")
print(json.dumps({
    "version": platform.python_version(),
    "stdlib": sysconfig.get_path("stdlib"),
    "platstdlib": sysconfig.get_path("platstdlib"),
    "dynload": dyn,
    "cache_tag": sys.implementation.cache_tag or "",
    "purelib": sysconfig.get_path("purelib") or "",
}))
`

// pythonEnv is the whole environment of the host interpreter while building: nothing of
// the builder's (PYTHONPATH, PYTHONSTARTUP, a pyenv's settings) may change the result.
// PYTHONHASHSEED=0 fixes the order in which frozensets of constants are marshalled into
// bytecode.
var pythonEnv = []string{"PATH=/usr/bin:/bin", "PYTHONHASHSEED=0"}

// queryPython runs the host interpreter (isolated, without site) to learn its layout.
func queryPython(ctx context.Context, python string) (pythonInfo, error) {
	cmd := hostexec.Command(ctx, python, "-I", "-S", "-c", queryPythonScript)
	cmd.Env = pythonEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := hostexec.Output(cmd)
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return pythonInfo{}, fmt.Errorf("ask %s for its layout: %w", python, err)
	}
	var info pythonInfo
	if err := json.Unmarshal(outb, &info); err != nil {
		return pythonInfo{}, fmt.Errorf("ask %s for its layout: %w", python, err)
	}
	for name, dir := range map[string]string{"stdlib": info.Stdlib, "platstdlib": info.PlatStdlib, "lib-dynload": info.Dynload} {
		if fi, err := os.Stat(dir); !filepath.IsAbs(dir) || err != nil || !fi.IsDir() {
			return pythonInfo{}, fmt.Errorf("%s's %s directory %q is not a directory", python, name, dir)
		}
	}
	if info.Version == "" || info.CacheTag == "" {
		return pythonInfo{}, fmt.Errorf("%s reports no version or bytecode cache tag (not CPython?)", python)
	}
	return info, nil
}

// libraryDirs are the interpreter's library directories in the order copied, leaving
// out any that lies inside another (Debian's lib-dynload is inside the stdlib).
func (info pythonInfo) libraryDirs() []string {
	var dirs []string
	for _, d := range []string{info.Stdlib, info.PlatStdlib, info.Dynload} {
		d = filepath.Clean(d)
		if !slices.ContainsFunc(dirs, func(have string) bool { return d == have || strings.HasPrefix(d, have+"/") }) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// runtimeLibraries are loaded by glibc at run time with dlopen, so no DT_NEEDED names
// them: libgcc_s.so.1 unwinds the stack for pthread_exit and pthread_cancel (CPython
// calls pthread_exit for a daemon thread at shutdown; without it glibc aborts).
var runtimeLibraries = []string{"libgcc_s.so.1"}

// assemble copies the interpreter, its standard library, the planned packages and
// every library they load into the tree. It returns the package directories to
// compile.
func assemble(ctx context.Context, t *tree, python string, info pythonInfo, commands bool, excluded func(string, bool) bool, plan *packagePlan, logf func(string, ...any)) ([]string, error) {
	logf("copying the standard library")
	var modules []string
	for _, dir := range info.libraryDirs() {
		real, err := t.mirror(dir)
		if err != nil {
			return nil, fmt.Errorf("copy standard library: %w", err)
		}
		sos, err := t.copyDir(ctx, real, excluded)
		if err != nil {
			return nil, fmt.Errorf("copy standard library: %w", err)
		}
		modules = append(modules, sos...)
	}

	logf("copying the interpreter and its libraries")
	if _, err := t.mirror(python); err != nil {
		return nil, fmt.Errorf("copy interpreter: %w", err)
	}
	if err := linkPythonNames(t, python); err != nil {
		return nil, err
	}
	r, err := newLibraryResolver(python, "/etc/ld.so.conf")
	if err != nil {
		return nil, err
	}
	prog, err := r.programClosure(python)
	if err != nil {
		return nil, fmt.Errorf("libraries of %s: %w", python, err)
	}
	libs := slices.Clone(prog.libs)
	for _, so := range modules {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		more, err := r.moduleClosure(prog, so)
		if err != nil {
			// It could not be imported on the host either; leave it out rather than
			// fail the whole build (its import raises ImportError in the jail).
			logf("leaving out %s: %v", so, err)
			if err := os.Remove(t.in(so)); err != nil {
				return nil, fmt.Errorf("remove %s: %w", so, err)
			}
			continue
		}
		libs = append(libs, more...)
	}
	pkgLibs, pkgRoots, err := addPackages(ctx, t, r, prog, python, plan, logf)
	if err != nil {
		return nil, err
	}
	libs = append(libs, pkgLibs...)
	if err := addZoneinfo(ctx, t, hostZoneinfo); err != nil {
		logf("no time zone database in the rootfs: %v", err)
	}
	shLibs, err := addShell(t, r, hostShell)
	if err != nil {
		logf("no /bin/sh in the rootfs: %v", err)
	}
	libs = append(libs, shLibs...)
	if commands {
		cmdLibs, err := addCommands(t, r, hostBusybox, hostTimeout)
		if err != nil {
			logf("not all common commands in the rootfs: %v (Debian's busybox-static package has them)", err)
		}
		libs = append(libs, cmdLibs...)
	}
	ldLibs, err := addLdconfig(t, r, hostLdconfig)
	if err != nil {
		logf("no ldconfig in the rootfs (ctypes.util.find_library finds nothing): %v", err)
	}
	libs = append(libs, ldLibs...)
	extra, err := r.dlopenClosure(prog, "glibc", &elfObject{needed: runtimeLibraries})
	if err != nil {
		logf("not adding %s: %v", strings.Join(runtimeLibraries, ", "), err)
	}
	libs = append(libs, extra...)

	if prog.interp != "" {
		if _, err := t.mirror(prog.interp); err != nil {
			return nil, fmt.Errorf("copy program interpreter: %w", err)
		}
	}
	for _, lib := range libs {
		mirror := t.mirror
		if lib.Public {
			mirror = t.mirrorPublic
		}
		if _, err := mirror(lib.Path); err != nil {
			return nil, fmt.Errorf("copy library: %w", err)
		}
		if lib.Hidden {
			if err := aliasHiddenLibrary(t, r.aliasDir, lib.Path, logf); err != nil {
				return nil, err
			}
		}
	}
	if err := mirrorTopLevelLinks(t); err != nil {
		return nil, err
	}
	if n, err := writeLoaderCache(t, r); err != nil {
		return nil, err
	} else if n == 0 {
		logf("no ld.so.cache for this machine's libraries: the jail's loader searches its directories for each")
	}
	if err := addNetbase(t, hostNetbase, logf); err != nil {
		return nil, err
	}
	// glibc's C.UTF-8 locale, so LANG=C.UTF-8 (what the jail sets) is a real locale and
	// setlocale(LC_ALL, "") works. 400 kB.
	if fi, err := os.Stat("/usr/lib/locale/C.utf8"); err == nil && fi.IsDir() {
		real, err := t.mirror("/usr/lib/locale/C.utf8")
		if err != nil {
			return nil, fmt.Errorf("copy C.UTF-8 locale: %w", err)
		}
		if _, err := t.copyDir(ctx, real, func(string, bool) bool { return false }); err != nil {
			return nil, fmt.Errorf("copy C.UTF-8 locale: %w", err)
		}
	} else {
		logf("no /usr/lib/locale/C.utf8 on the host: the jail's locale falls back to C (Python still uses UTF-8)")
	}
	return pkgRoots, nil
}

// linkPythonNames makes "python3" and "python" in /usr/bin lead to the interpreter, so
// both names work on the jail's PATH whatever the host calls them.
// hostShell is the POSIX shell the rootfs gets at /bin/sh: Python runs it
// for subprocess's shell=True, os.system and os.popen, which model-written
// code uses often. Debian's is dash (125 KB, libc only).
const hostShell = "/bin/sh"

// hostZoneinfo is the time zone database the rootfs gets (Python's
// zoneinfo reads it; the tzdata package is not installed), without its
// right/ and posix/ copies: 2 MB.
const hostZoneinfo = "/usr/share/zoneinfo"

// addZoneinfo copies the host's time zone database into the tree.
func addZoneinfo(ctx context.Context, t *tree, dir string) error {
	real, err := t.mirror(dir)
	if err != nil {
		return err
	}
	_, err = t.copyDir(ctx, real, func(rel string, isDir bool) bool {
		top, _, _ := strings.Cut(rel, "/")
		return top == "right" || top == "posix"
	})
	return err
}

// addShell copies the host's /bin/sh (as the links that lead to it) into
// the tree and returns the libraries it needs.
func addShell(t *tree, r *libraryResolver, sh string) ([]loadedLibrary, error) {
	real, err := filepath.EvalSymlinks(sh)
	if err != nil {
		return nil, err
	}
	prog, err := r.programClosure(real)
	if err != nil {
		return nil, fmt.Errorf("libraries of %s: %w", real, err)
	}
	if _, err := t.mirror(sh); err != nil {
		return nil, fmt.Errorf("copy %s: %w", sh, err)
	}
	return prog.libs, nil
}

func linkPythonNames(t *tree, python string) error {
	bin, err := t.mirror("/usr/bin")
	if err != nil {
		return fmt.Errorf("link python names: %w", err)
	}
	target := python
	if filepath.Dir(python) == bin {
		target = filepath.Base(python)
	}
	for _, name := range []string{"python3", "python"} {
		link := filepath.Join(bin, name)
		if link == python {
			continue
		}
		if err := t.symlink(link, target); err != nil {
			return fmt.Errorf("link python names: %w", err)
		}
	}
	return nil
}

// aliasHiddenLibrary gives a library that the host loader finds only through
// ld.so.cache (say in /usr/local/lib) a symlink in the loader's built-in directory: the
// jail's loader must still find the same file, whether through the rootfs's own cache
// (which lists the built-in directories only) or, without one, by its search.
func aliasHiddenLibrary(t *tree, aliasDir, lib string, logf func(string, ...any)) error {
	dir, err := t.mirror(aliasDir)
	if err != nil {
		return fmt.Errorf("alias %s: %w", lib, err)
	}
	link := filepath.Join(dir, filepath.Base(lib))
	if _, err := os.Lstat(t.in(link)); err == nil {
		logf("not aliasing %s as %s: the rootfs already has one", lib, link)
		return nil
	}
	if err := t.symlink(link, lib); err != nil {
		return fmt.Errorf("alias %s: %w", lib, err)
	}
	return nil
}

// mirrorTopLevelLinks recreates the host's merged-/usr symlinks (/bin -> usr/bin,
// /lib -> usr/lib, ...) that lead to something in the tree, so absolute paths that go
// through them (/bin/python3, a library's /lib/... path) work in the jail as on the host.
func mirrorTopLevelLinks(t *tree) error {
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		p := "/" + name
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if _, err := os.Lstat(t.in(p)); err == nil {
			continue
		}
		// Absolute or relative to /, the target is the same path in the tree.
		if fi, err := os.Stat(t.in(target)); err != nil || !fi.IsDir() {
			continue
		}
		if err := t.symlink(p, target); err != nil {
			return err
		}
	}
	return nil
}

// compileBytecode compiles every module of the copied standard library into its
// __pycache__, because the jail mounts the tree read-only and CPython would otherwise
// recompile each imported module on every start. The bytecode is hash-based and never
// checked against the source (unchecked-hash: the tree cannot change under it), its
// co_filename is the path inside the jail (-d), and one worker in a fixed environment
// compiles the files in sorted order, so the output is the same on every build.
func compileBytecode(ctx context.Context, t *tree, python string, info pythonInfo, tests bool) error {
	for _, dir := range info.libraryDirs() {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return fmt.Errorf("compile %s: %w", dir, err)
		}
		// -s: no user site; -S: nothing of site-packages loaded into the compiler's
		// process; -B: the host's own __pycache__ stays untouched.
		args := []string{"-s", "-S", "-B", "-m", "compileall",
			"-q", "-f", "-j", "1", "--invalidation-mode", "unchecked-hash",
			"-d", dir}
		if tests {
			args = append(args, "-x", testSuiteDirs)
		}
		cmd := hostexec.Command(ctx, python, append(args, t.in(real))...)
		cmd.Env = pythonEnv
		cmd.WaitDelay = 5 * time.Second
		if outb, err := hostexec.CombinedOutput(cmd); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return fmt.Errorf("compile %s: %w: %s", dir, err, tail(outb, 2000))
		}
		if err := checkBytecode(t.in(real), info.CacheTag, tests); err != nil {
			return fmt.Errorf("compile %s: %w", dir, err)
		}
	}
	return nil
}

// checkBytecode makes sure every .py under dir has its compiled form for this cache tag.
func checkBytecode(dir, cacheTag string, tests bool) error {
	var missing []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !strings.HasSuffix(name, ".py") {
			return nil
		}
		if tests && inTestSuite(p) {
			return nil
		}
		pyc := filepath.Join(filepath.Dir(p), "__pycache__", strings.TrimSuffix(name, ".py")+"."+cacheTag+".pyc")
		if _, err := os.Lstat(pyc); err != nil {
			missing = append(missing, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check bytecode: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("no bytecode for %d modules, such as %s", len(missing), strings.Join(missing[:min(3, len(missing))], ", "))
	}
	return nil
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// mkdirAll creates dir and its missing parents with mode 0755 whatever the umask: the
// jail's unprivileged user must be able to reach the rootfs.
func mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create %s: not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	} else if err == nil {
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return nil
}

// syncTree flushes everything written under dir to disk before it is renamed into
// place: after a crash, a directory with a manifest must hold complete files.
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// replaceable tells whether out may receive a new rootfs: it is absent, an empty
// directory, or a directory with a manifest (a rootfs of ours, complete or not
// understood). Anything else may be a user's directory, and is refused rather than
// deleted.
func replaceable(out string) (exists bool, err error) {
	fi, err := os.Lstat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rootfs directory %s: %w", out, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return false, fmt.Errorf("rootfs directory %s is a symlink; pass the directory it leads to", out)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("rootfs directory %s exists and is not a directory; refusing to replace it", out)
	}
	if fi, err := os.Lstat(filepath.Join(out, manifestName)); err == nil && fi.Mode().IsRegular() {
		return true, nil
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return false, fmt.Errorf("rootfs directory %s: %w", out, err)
	}
	if len(entries) > 0 {
		return false, fmt.Errorf("%s exists, is not empty and has no %s: not an rljail rootfs, refusing to replace it; remove it or choose another directory (--rootfs DIR or RLJAIL_ROOTFS)", out, manifestName)
	}
	return true, nil
}

// install puts the completed tree tmp at out. A previous rootfs is swapped out in one
// step (RENAME_EXCHANGE) so that out always holds a complete tree, then deleted.
func install(tmp, out string, logf func(string, ...any)) error {
	exists, err := replaceable(out)
	if err != nil {
		return err
	}
	if !exists {
		// NOREPLACE: if another build installed a rootfs meanwhile, replace it below
		// only after checking it again, never by accident.
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, out, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			err = os.Rename(tmp, out) // filesystem without renameat2 flags
		}
		if errors.Is(err, fs.ErrExist) {
			if _, err = replaceable(out); err != nil {
				return err
			}
			exists = true
		} else if err != nil {
			return fmt.Errorf("install rootfs at %s: %w", out, err)
		}
	}
	if exists {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, out, unix.RENAME_EXCHANGE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			err = swapByRenames(tmp, out)
		}
		if err != nil {
			return fmt.Errorf("install rootfs at %s: %w", out, err)
		}
		// tmp now holds the previous tree. A jail still running on it keeps its
		// mounts; the directory entries go.
		if err := os.RemoveAll(tmp); err != nil {
			logf("could not remove the previous rootfs, now at %s: %v", tmp, err)
		}
	}
	if err := syncDir(filepath.Dir(out)); err != nil {
		return fmt.Errorf("install rootfs at %s: %w", out, err)
	}
	return nil
}

// swapByRenames is install's fallback where the filesystem lacks RENAME_EXCHANGE: move
// out aside, move tmp in, and leave the old tree at tmp for removal.
func swapByRenames(tmp, out string) error {
	aside := tmp + ".old"
	if err := os.Rename(out, aside); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Rename(aside, out)
		return err
	}
	return os.Rename(aside, tmp)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
