package rootfs

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rljail/rljail/hostexec"
)

// This file adds third-party Python packages to a rootfs, from where users
// already keep them and never from a network: Debian's python3-* packages
// installed on the host (SystemPackages), a virtual environment's
// site-packages (Venv), and an offline pip install from a wheelhouse
// (Wheels, Requirements). Their extension modules bring the libraries they
// load, found by reading the ELF files as for the interpreter's own
// (elfdeps.go), and everything added is compiled to bytecode.

// PackageError is a package source that cannot be used (a package that is
// not installed, a venv of another Python, no pip for a wheelhouse): the
// caller's input is wrong, so the command line reports it as a setup error
// and nothing was built.
type PackageError struct{ msg string }

func (e *PackageError) Error() string { return e.msg }

func packageErrorf(format string, args ...any) error {
	return &PackageError{msg: fmt.Sprintf(format, args...)}
}

// packagePlan is what the package sources add to a tree, decided before the
// build starts so that bad input is refused before anything is written.
type packagePlan struct {
	// sizes are what each Debian package brings, for the build's account
	// of them (by name; files that two packages ship count in the first).
	sizes map[string]packageSize
	// files are host paths (regular files and symlinks) of Debian packages,
	// sorted, copied to the same paths.
	files []string
	// etc are files the packages ship directly in /etc (Debian's matplotlib
	// reads /etc/matplotlibrc and nothing else): the jail's /etc is its own,
	// so they go to PackageEtcDir, which the jail links into its /etc.
	etc []string
	// dirs are directories copied whole into the tree at another place (a
	// venv's site-packages, a pip install's target) into purelib.
	dirs []dirCopy
	// wheels, when set, is an offline pip install to run into purelib.
	wheels *wheelInstall
	// purelib is where the interpreter's site module looks for packages a
	// user installed (Debian: /usr/local/lib/python3.X/dist-packages).
	purelib string
	// packages describe the sources for the manifest: each Debian package
	// with its version, and a venv or a wheelhouse by its directory.
	packages []Package
	withPip  bool
	// programs are the files of language runtimes (runtimes.go) that may
	// be dynamic programs, whose libraries the tree needs as an extension
	// module's.
	programs map[string]bool
}

type dirCopy struct {
	from, to string
	// venv, when set, is the venv whose site-packages (site, relative to it)
	// from is: opened by openVenvSite, as addVenv judged it.
	venv, site string
}

type wheelInstall struct{ dir, requirements string }

func (p *packagePlan) empty() bool {
	return p == nil || (len(p.files) == 0 && len(p.dirs) == 0 && p.wheels == nil && len(p.etc) == 0)
}

// PackageEtcDir is where, in the tree, a rootfs keeps the files its
// packages ship in /etc, one plain name each: the jail's /etc is made by
// init, which links each file here into it under the same name.
const PackageEtcDir = "/usr/lib/rljail/etc"

// planPackages checks the package sources of opts against the host and the
// interpreter (info) and lists what they add. A source the caller got wrong
// is a *PackageError.
func planPackages(ctx context.Context, opts BuildOptions, python string, info pythonInfo) (*packagePlan, error) {
	plan := &packagePlan{purelib: info.Purelib, withPip: opts.WithPip}
	if len(opts.SystemPackages) > 0 {
		if err := plan.addSystemPackages(ctx, opts.SystemPackages); err != nil {
			return nil, err
		}
	}
	if opts.Venv != "" {
		if err := plan.addVenv(opts.Venv, info); err != nil {
			return nil, err
		}
	}
	if opts.Wheels != "" || opts.Requirements != "" {
		if err := plan.addWheels(ctx, opts.Wheels, opts.Requirements, python); err != nil {
			return nil, err
		}
	}
	if !plan.empty() && plan.purelib == "" {
		return nil, packageErrorf("%s reports no purelib directory (sysconfig): nowhere to put packages", python)
	}
	return plan, nil
}

// dpkgPackage is one package of the host's dpkg database.
type dpkgPackage struct {
	name, version string
	installed     bool
	depends       [][]string // groups of alternatives, names only
}

// readDpkgDatabase lists the host's packages and what each provides, with
// one dpkg-query.
func readDpkgDatabase(ctx context.Context) (pkgs map[string]*dpkgPackage, provides map[string][]string, err error) {
	cmd := hostexec.Command(ctx, "dpkg-query", "-W", "-f",
		"${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Provides}\\t${Pre-Depends}, ${Depends}\\n")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := hostexec.Output(cmd)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, nil, packageErrorf("--system-packages needs dpkg-query (a Debian or Ubuntu host)")
		}
		return nil, nil, fmt.Errorf("read the dpkg database: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	pkgs, provides = map[string]*dpkgPackage{}, map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 5 {
			continue
		}
		p := &dpkgPackage{name: f[0], version: f[1], installed: strings.HasPrefix(f[2], "ii"), depends: parseDepends(f[4])}
		if old, ok := pkgs[p.name]; ok && old.installed {
			continue // another architecture's entry of the same name
		}
		pkgs[p.name] = p
		if p.installed {
			for _, g := range parseDepends(f[3]) {
				for _, v := range g {
					provides[v] = append(provides[v], p.name)
				}
			}
		}
	}
	return pkgs, provides, sc.Err()
}

// parseDepends reads a Depends field ("a (>= 1) | b:any, c") into groups of
// alternative package names, versions and architecture qualifiers dropped.
func parseDepends(field string) [][]string {
	var groups [][]string
	for _, g := range strings.Split(field, ",") {
		var alts []string
		for _, a := range strings.Split(g, "|") {
			a = strings.TrimSpace(a)
			if i := strings.IndexAny(a, " ([<"); i >= 0 {
				a = a[:i]
			}
			a, _, _ = strings.Cut(a, ":")
			if a != "" {
				alts = append(alts, a)
			}
		}
		if len(alts) > 0 {
			groups = append(groups, alts)
		}
	}
	return groups
}

// followedPackage tells which dependencies of a Python package Build takes
// along: other Python packages, their data packages (python-matplotlib-data)
// and fonts, except those leftOut names. The interpreter's own packages are
// the rootfs already; shared libraries come with the extension modules
// that load them (the ELF closure decides, not the package metadata).
func followedPackage(name string, withPip bool) bool {
	if leftOut(name, withPip) != "" {
		return false
	}
	return strings.HasPrefix(name, "python3-") || strings.HasPrefix(name, "python-") || strings.HasPrefix(name, "fonts-")
}

// leftOut says why a rootfs never holds the package name (empty: it may):
// as a dependency it is skipped, and named in --system-packages it is
// refused, rather than built into a rootfs that then lacks it.
func leftOut(name string, withPip bool) string {
	switch name {
	case "python3", "python3-minimal", "python3-venv", "python3-all":
		return "is the interpreter's own, which the rootfs holds already"
	case "python3-tk", "python3-pil.imagetk":
		// Tk needs a display, as the standard library's tkinter, which the
		// rootfs leaves out too.
		return "needs Tk, which needs a display: a rootfs leaves Tk out"
	case "python3-pip", "python3-pip-whl":
		if !withPip {
			return "is pip, which a rootfs holds only with --with-pip"
		}
		return ""
	}
	if strings.HasSuffix(name, "-dev") {
		// headers and build tools (python3-all-dev, via pythran)
		return "is a -dev package (headers and build tools): a jail has no compiler"
	}
	return ""
}

// addSystemPackages resolves the named Debian packages and their followed
// dependencies and lists their files.
func (plan *packagePlan) addSystemPackages(ctx context.Context, names []string) error {
	pkgs, provides, err := readDpkgDatabase(ctx)
	if err != nil {
		return err
	}
	chosen := map[string]bool{}
	// runtime marks the packages reached from a language runtime
	// (runtimes.go): their dependencies and files follow its rules.
	runtime := map[string]bool{}
	var queue []string
	for _, n := range names {
		if n == "" {
			return packageErrorf("--system-packages: an empty package name (a comma too many in %q?)", strings.Join(names, ","))
		}
		p, ok := pkgs[n]
		if _, isRuntime := RuntimePackages[n]; isRuntime {
			if !ok || !p.installed {
				return packageErrorf("--system-packages: %s is not installed on this host (apt-get install %s)", n, n)
			}
			if !runtime[n] {
				runtime[n] = true
				chosen[n] = true
				queue = append(queue, n)
			}
			continue
		}
		if !strings.HasPrefix(n, "python3-") && !strings.HasPrefix(n, "python-") {
			// numpy for python3-numpy: Debian's name is what is asked for.
			if d, ok := pkgs["python3-"+strings.ToLower(n)]; ok {
				how := "it is installed"
				if !d.installed {
					how = "apt-get install python3-" + strings.ToLower(n)
				}
				return packageErrorf("--system-packages: %s is not a Debian package name: did you mean python3-%s? (%s)", n, strings.ToLower(n), how)
			}
			if !ok || !p.installed {
				return packageErrorf("--system-packages: %s is not a Debian Python package installed on this host (their names start with python3-: apt-cache search --names-only '^python3-%s')", n, strings.ToLower(n))
			}
			return packageErrorf("--system-packages: %s is not a Python package (python3-*) nor one of the language runtimes %s; the libraries a package needs come with it", n, runtimeNames())
		}
		if !ok || !p.installed {
			return packageErrorf("--system-packages: %s is not installed on this host (apt-get install %s)", n, n)
		}
		if why := leftOut(n, plan.withPip); why != "" {
			return packageErrorf("--system-packages: %s %s", n, why)
		}
		if !chosen[n] {
			chosen[n] = true
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		p := pkgs[queue[0]]
		queue = queue[1:]
		for _, group := range p.depends {
			dep := resolveGroup(group, pkgs, provides)
			if dep == "" {
				continue
			}
			if runtime[p.name] && followedRuntimeDep(dep) && !runtime[dep] {
				runtime[dep] = true
				chosen[dep] = true
				queue = append(queue, dep)
				continue
			}
			if chosen[dep] || !followedPackage(dep, plan.withPip) {
				continue
			}
			chosen[dep] = true
			queue = append(queue, dep)
		}
	}
	all := slices.Sorted(func(yield func(string) bool) {
		for n := range chosen {
			if !yield(n) {
				return
			}
		}
	})
	var files []string
	counted := map[string]bool{}
	plan.sizes = map[string]packageSize{}
	for _, n := range all {
		plan.packages = append(plan.packages, Package{Name: n, Version: pkgs[n].version, Source: "system"})
		list, err := packageFiles(ctx, n)
		if err != nil {
			return err
		}
		keep := func(f string) bool { return keepPackageFile(f, plan.withPip) }
		if runtime[n] {
			keep = keepRuntimeFile
		}
		for _, f := range list {
			if runtime[n] && keep(f) && !isSharedObject(f) {
				if plan.programs == nil {
					plan.programs = map[string]bool{}
				}
				plan.programs[f] = true
			}
			if keep(f) && !counted[f] {
				counted[f] = true
				if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
					sz := plan.sizes[n]
					sz.files++
					sz.bytes += fi.Size()
					plan.sizes[n] = sz
				}
			}
			if dir, name := path.Split(f); dir == "/etc/" && name != "" {
				if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
					plan.etc = append(plan.etc, f)
				}
			}
			if keep(f) {
				files = append(files, f)
			}
		}
	}
	slices.Sort(files)
	plan.files = slices.Compact(files)
	return nil
}

// resolveGroup picks the installed package that satisfies one group of
// alternatives, as dpkg did: the first alternative installed by name or
// provided by an installed package; "" when none is.
func resolveGroup(group []string, pkgs map[string]*dpkgPackage, provides map[string][]string) string {
	for _, alt := range group {
		if p, ok := pkgs[alt]; ok && p.installed {
			return alt
		}
		if by := provides[alt]; len(by) > 0 {
			return slices.Min(by)
		}
	}
	return ""
}

// packageFiles lists a package's regular files and symlinks (dpkg-query -L
// also lists directories, which the tree creates as it needs them).
func packageFiles(ctx context.Context, name string) ([]string, error) {
	cmd := hostexec.Command(ctx, "dpkg-query", "-L", name)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := hostexec.Output(cmd)
	if err != nil {
		return nil, fmt.Errorf("list the files of %s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for line := range strings.Lines(string(out)) {
		p := strings.TrimSpace(line)
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() {
			continue // a file dpkg lists that the host removed, or a directory
		}
		files = append(files, p)
	}
	return files, nil
}

// droppedPrefixes are the parts of a package no program reads at run time
// (documentation, headers, desktop integration; debhelper's add-ons, such
// as python3-numpy's dh_numpy3, Perl programs for building Debian packages
// that a rootfs, with no Perl, could not even start) and /etc, which the
// jail has its own of (a link into it is followed by tree.mirror instead).
var droppedPrefixes = []string{
	"/usr/bin/dh_", "/usr/share/debhelper/", "/usr/share/numpy3/",
	"/etc/", "/usr/include/", "/usr/share/doc/", "/usr/share/doc-base/", "/usr/share/man/",
	"/usr/share/info/", "/usr/share/lintian/", "/usr/share/bug/", "/usr/share/menu/",
	"/usr/share/applications/", "/usr/share/icons/", "/usr/share/pixmaps/", "/usr/share/perl5/",
	"/usr/share/bash-completion/", "/usr/share/zsh/", "/usr/lib/debug/", "/usr/share/python3/",
}

// keepPackageFile tells whether a file of a Debian package goes into the tree.
func keepPackageFile(p string, withPip bool) bool {
	for _, d := range droppedPrefixes {
		if strings.HasPrefix(p, d) {
			return false
		}
	}
	if strings.HasSuffix(p, ".pyc") || strings.Contains(p, "/__pycache__/") {
		return false // ours are compiled into the tree
	}
	return withPip || !isPipPath(p)
}

// isPipPath tells pip's own files (its package, its metadata, its scripts),
// which a rootfs leaves out unless asked: a payload has nothing to install
// from and nowhere to install to.
func isPipPath(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == "pip" || (strings.HasPrefix(c, "pip-") && (strings.HasSuffix(c, ".dist-info") || strings.HasSuffix(c, ".egg-info"))) {
			return true
		}
	}
	base := path.Base(p)
	return strings.HasPrefix(p, "/usr/bin/") && (base == "pip" || strings.HasPrefix(base, "pip3"))
}

// venvConfig reads the keys of a venv's pyvenv.cfg ("key = value" lines).
func venvConfig(dir string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "pyvenv.cfg"))
	if err != nil {
		return nil, err
	}
	cfg := map[string]string{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, "=")
		if ok {
			cfg[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return cfg, nil
}

// minorVersion is "3.11" of "3.11.2".
func minorVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// addVenv checks that the venv at dir was made by an interpreter of the
// rootfs's Python version (extension modules are built for one minor
// version's ABI) and plans the copy of its site-packages.
func (plan *packagePlan) addVenv(dir string, info pythonInfo) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return packageErrorf("--venv %s: %v", dir, err)
	}
	cfg, err := venvConfig(abs)
	if err != nil {
		return packageErrorf("--venv %s: not a virtual environment (no readable pyvenv.cfg: %v)", dir, unwrapPathErr(err))
	}
	version := cfg["version"]
	if version == "" {
		version = cfg["version_info"]
	}
	if version == "" {
		return packageErrorf("--venv %s: its pyvenv.cfg names no Python version", dir)
	}
	if minorVersion(version) != minorVersion(info.Version) {
		return packageErrorf("--venv %s was made by Python %s (home %s), the rootfs's is %s: its extension modules would not load; make the venv with the rootfs's interpreter", dir, version, cfg["home"], info.Version)
	}
	rel := path.Join("lib", "python"+minorVersion(info.Version), "site-packages")
	site, err := openVenvSite(abs, rel)
	if err != nil {
		return packageErrorf("--venv %s: %v", dir, err)
	}
	site.Close()
	plan.dirs = append(plan.dirs, dirCopy{from: filepath.Join(abs, rel), to: plan.purelib, venv: abs, site: rel})
	plan.packages = append(plan.packages, Package{Name: abs, Version: info.Version, Source: "venv"})
	return nil
}

// addWheels checks an offline install from a wheelhouse: both flags, and pip
// in the build interpreter.
func (plan *packagePlan) addWheels(ctx context.Context, dir, requirements, python string) error {
	if dir == "" || requirements == "" {
		return packageErrorf("--wheels DIR and --requirements FILE go together")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return packageErrorf("--wheels %s: %v", dir, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return packageErrorf("--wheels %s is not a directory", dir)
	}
	req, err := filepath.Abs(requirements)
	if err != nil {
		return packageErrorf("--requirements %s: %v", requirements, err)
	}
	if fi, err := os.Stat(req); err != nil || !fi.Mode().IsRegular() {
		return packageErrorf("--requirements %s is not a readable file", requirements)
	}
	cmd := hostexec.Command(ctx, python, "-I", "-m", "pip", "--version")
	cmd.Env = pythonEnv
	if out, err := hostexec.CombinedOutput(cmd); err != nil {
		return packageErrorf("--wheels needs pip in %s, which has none (%s): install it (Debian: apt-get install python3-pip) or use --venv", python, strings.TrimSpace(tail(out, 200)))
	}
	if err := checkRequirements(req, 0); err != nil {
		return err
	}
	w := &wheelInstall{dir: abs, requirements: req}
	// A dry run resolves the requirements against the wheelhouse, so that
	// one it cannot satisfy is refused before the build starts.
	staged, err := pipInstall(ctx, python, w, true)
	if staged != "" {
		os.RemoveAll(staged)
	}
	if err != nil {
		return err
	}
	plan.wheels = w
	plan.packages = append(plan.packages, Package{Name: abs, Source: "wheels"})
	return nil
}

// unwrapPathErr drops the *PathError wrapper whose path the message names.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// addPackages puts the planned packages into the tree and returns the
// libraries their extension modules load and the directories to compile.
// An extension module whose libraries are not all on the host is left out
// (its import fails in the jail as it would on the host), as for the
// standard library's.
func addPackages(ctx context.Context, t *tree, r *libraryResolver, prog *loadSet, python string, plan *packagePlan, logf func(string, ...any)) ([]loadedLibrary, []string, error) {
	if plan.empty() {
		return nil, nil, nil
	}
	// An extension module was at its host path (host), whose directory is
	// its $ORIGIN, and sits at inTree in the tree; libraries found under within (its own copied
	// directory: a wheel's numpy.libs beside it) are in the tree already.
	type module struct{ host, inTree, within string }
	var modules []module
	roots := map[string]bool{}
	for _, f := range plan.files {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		real, err := t.mirror(f)
		if err != nil {
			logf("leaving out %s: %v", f, err)
			continue
		}
		if isSharedObject(f) || plan.programs[f] && isDynamicProgram(t.in(real)) {
			modules = append(modules, module{host: real, inTree: real})
		}
		if root := pythonRoot(f); root != "" {
			roots[root] = true
		}
	}
	slices.Sort(plan.etc)
	for _, f := range slices.Compact(plan.etc) {
		if err := t.mkdirAll(PackageEtcDir); err != nil {
			return nil, nil, err
		}
		if err := t.copyFile(f, path.Join(PackageEtcDir, path.Base(f))); err != nil {
			return nil, nil, err
		}
	}
	if plan.wheels != nil {
		staged, err := pipInstall(ctx, python, plan.wheels, false)
		if staged != "" {
			defer os.RemoveAll(staged)
		}
		if err != nil {
			return nil, nil, err
		}
		plan.dirs = append(plan.dirs, dirCopy{from: staged, to: plan.purelib})
	}
	for _, d := range plan.dirs {
		excluded := func(rel string, isDir bool) bool {
			return strings.HasSuffix(rel, ".pyc") || path.Base(rel) == "__pycache__" || (!plan.withPip && isPipPath("/"+rel))
		}
		var sos []string
		var err error
		if d.venv != "" {
			var dir *os.File
			if dir, err = openVenvSite(d.venv, d.site); err == nil {
				sos, err = t.copySource(ctx, dir, d.from, d.to, excluded)
				dir.Close()
			}
		} else {
			sos, err = t.copyDirTo(ctx, d.from, d.to, excluded)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("copy %s: %w", d.from, err)
		}
		for _, rel := range sos {
			modules = append(modules, module{host: filepath.Join(d.from, rel), inTree: path.Join(d.to, rel), within: d.from})
		}
		roots[d.to] = true
	}
	var libs []loadedLibrary
	public := map[string]bool{} // othersMayRead of a library, by path
	for _, m := range modules {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		// Read from the tree, not the host: the file is the one the copy
		// judged and published, whatever its host path holds by now.
		if !isELF(t.in(m.inTree)) {
			continue
		}
		more, err := r.moduleClosureAt(prog, t.in(m.inTree), m.host)
		if err != nil {
			logf("leaving out %s: %v", m.inTree, err)
			if err := os.Remove(t.in(m.inTree)); err != nil {
				return nil, nil, fmt.Errorf("remove %s: %w", m.inTree, err)
			}
			continue
		}
		var outside []loadedLibrary
		for _, lib := range more {
			if m.within == "" || !strings.HasPrefix(lib.Path, m.within+"/") {
				lib.Public = true
				outside = append(outside, lib)
			}
		}
		// A library others may not read is not published: the module is left
		// out, as one whose library the host lacks (mirrorPublic judges again
		// by descriptor when it copies).
		if i := slices.IndexFunc(outside, func(lib loadedLibrary) bool {
			ok, seen := public[lib.Path]
			if !seen {
				ok = othersMayRead(lib.Path)
				public[lib.Path] = ok
			}
			return !ok
		}); i >= 0 {
			logf("leaving out %s: its library %s is one other users may not read, and every file of a rootfs is readable by all", m.inTree, outside[i].Path)
			if err := os.Remove(t.in(m.inTree)); err != nil {
				return nil, nil, fmt.Errorf("remove %s: %w", m.inTree, err)
			}
			continue
		}
		libs = append(libs, outside...)
	}
	return libs, slices.Sorted(func(yield func(string) bool) {
		for d := range roots {
			if !yield(d) {
				return
			}
		}
	}), nil
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = f.Read(magic)
	return err == nil && string(magic) == "\x7fELF"
}

// pythonRoot is the sys.path directory a package file lives under, "" for
// files outside one (fonts, data).
func pythonRoot(p string) string {
	for _, c := range []string{"/dist-packages/", "/site-packages/"} {
		if i := strings.Index(p, c); i >= 0 {
			return p[:i+len(c)-1]
		}
	}
	return ""
}

// pipInstall installs the requirements from the wheelhouse alone (no index,
// no network) into a temporary directory and returns it; a dry run only
// resolves them (the directory stays empty). Wheels only (no build step)
// and without compiling: the tree's bytecode is compiled later,
// reproducibly.
func pipInstall(ctx context.Context, python string, w *wheelInstall, dryRun bool) (string, error) {
	staged, err := os.MkdirTemp("", "rljail-wheels-")
	if err != nil {
		return "", fmt.Errorf("pip install: %w", err)
	}
	// --no-index stops pip's index, not a URL that the requirements file
	// names (`pkg @ https://...`, `--find-links https://...`), which pip
	// fetches all the same: every request goes to a proxy that is not there
	// (port 1 of the loopback; no retries), so that a build never reads the
	// network. file: URLs and paths are not requests and still work.
	args := []string{"-I", "-m", "pip", "install", "--isolated", "--no-index", "--find-links", w.dir,
		"--only-binary", ":all:", "--no-compile", "--no-cache-dir", "--disable-pip-version-check",
		"--proxy", noNetworkProxy, "--retries", "0", "--timeout", "2",
		"--no-warn-script-location", "--target", staged, "-r", w.requirements}
	if dryRun {
		args = append(args, "--dry-run")
	}
	cmd := hostexec.Command(ctx, python, args...)
	cmd.Env = append(slices.Clone(pythonEnv), "PIP_NO_INPUT=1", "HOME="+staged, "SOURCE_DATE_EPOCH=315532800")
	cmd.WaitDelay = 5 * time.Second
	if out, err := hostexec.CombinedOutput(cmd); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return staged, ctxErr
		}
		if bytes.Contains(out, []byte("ProxyError")) || bytes.Contains(out, []byte(noNetworkProxy)) {
			return staged, packageErrorf("--requirements %s names something on a network (a URL, or --find-links/--index-url to one): a build installs from the wheelhouse %s alone; put the wheel there", w.requirements, w.dir)
		}
		return staged, packageErrorf("pip install --no-index --find-links %s -r %s failed: %s", w.dir, w.requirements, oneLineTail(out))
	}
	return staged, nil
}

// checkRequirements refuses a requirements file (and the files it names
// with -r and -c) that asks pip for more than wheels from the wheelhouse:
// pip builds a local directory, an sdist, a VCS checkout or an editable
// install whatever --only-binary says (running its setup.py as the
// builder), clones a VCS URL past --no-index, and --no-binary would undo
// --only-binary. Named requirements (extras, versions, markers, --hash)
// and local --find-links directories pass.
func checkRequirements(file string, depth int) error {
	if depth > 8 {
		return packageErrorf("--requirements %s: -r/-c nested more than 8 deep", file)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return packageErrorf("--requirements %s: %v", file, unwrapPathErr(err))
	}
	refuse := func(line, why string) error {
		return packageErrorf("--requirements %s: %q %s: a build installs wheels from the wheelhouse alone (name the package, and put its wheel there)", file, line, why)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ") // continuation lines
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, "#"); i == 0 || i > 0 && (line[i-1] == ' ' || line[i-1] == '\t') {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.Contains(line, "${") {
			return refuse(line, "uses an environment variable")
		}
		if strings.HasPrefix(line, "-") {
			opt, val, _ := strings.Cut(strings.Replace(line, "=", " ", 1), " ")
			val = strings.TrimSpace(val)
			switch opt {
			case "-r", "--requirement", "-c", "--constraint":
				if strings.Contains(val, "://") {
					return refuse(line, "names a file on a network")
				}
				if !filepath.IsAbs(val) {
					val = filepath.Join(filepath.Dir(file), val)
				}
				if err := checkRequirements(val, depth+1); err != nil {
					return err
				}
			case "-e", "--editable":
				return refuse(line, "is an editable install, built from source")
			case "--no-binary":
				return refuse(line, "asks for a build from source")
			case "-f", "--find-links":
				if strings.Contains(val, "://") && !strings.HasPrefix(val, "file:") {
					return refuse(line, "names a place on a network")
				}
			}
			continue
		}
		name := line
		if i := strings.IndexAny(name, ";"); i >= 0 {
			name = name[:i]
		}
		switch {
		case strings.Contains(name, "://") || strings.Contains(name, "@"):
			return refuse(line, "is a URL or a direct reference (name @ URL)")
		case strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "~"):
			return refuse(line, "is a path (a local directory or archive, built from source)")
		}
	}
	return nil
}

// noNetworkProxy is where pip's requests go in a build: nothing listens on
// port 1 of the loopback, so each fails at once.
const noNetworkProxy = "http://127.0.0.1:1"

func oneLineTail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return "no output"
}

// compilePackages compiles the added package directories as compileBytecode
// does the standard library's. Unlike the standard library, packages may
// ship files that are not Python 3 (templates, test data named *.py): those
// are reported and stay without bytecode.
func compilePackages(ctx context.Context, t *tree, python string, info pythonInfo, roots []string, logf func(string, ...any)) error {
	for _, dir := range roots {
		if _, err := os.Stat(t.in(dir)); err != nil {
			continue
		}
		cmd := hostexec.Command(ctx, python, "-s", "-S", "-B", "-m", "compileall",
			"-q", "-f", "-j", "1", "--invalidation-mode", "unchecked-hash",
			"-d", dir, t.in(dir))
		cmd.Env = pythonEnv
		cmd.WaitDelay = 5 * time.Second
		out, err := hostexec.CombinedOutput(cmd)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			if !errors.As(err, new(*exec.ExitError)) {
				return fmt.Errorf("compile %s: %w", dir, err)
			}
			if err := checkBytecode(t.in(dir), info.CacheTag, false); err != nil {
				logf("compile %s: %v", dir, err)
			}
			logf("compile %s: some files are not Python 3 and have no bytecode: %s", dir, tail(out, 300))
		}
	}
	return nil
}

// CheckPackageSources refuses, before any build starts (and before the
// caller takes a lock or creates a directory), package sources in opts that
// Build would refuse: a package not installed, a venv of another Python, a
// wheelhouse without pip. It returns nil when opts names none.
func CheckPackageSources(ctx context.Context, opts BuildOptions) error {
	if len(opts.SystemPackages) == 0 && opts.Venv == "" && opts.Wheels == "" && opts.Requirements == "" {
		return nil
	}
	python, err := buildPython(opts.Python)
	if err != nil {
		return err
	}
	info, err := queryPython(ctx, python)
	if err != nil {
		return err
	}
	_, err = planPackages(ctx, opts, python, info)
	return err
}

// packageList is what the manifest records of the planned sources (none
// for a plain build).
// packageSize is what one Debian package brings into the rootfs.
type packageSize struct {
	files int
	bytes int64
}

// logSizes tells what each Debian package of the plan brings, largest
// first, and the total: a user who asked for python3-pandas sees that
// scipy came with it, and how much of the rootfs each is.
func (plan *packagePlan) logSizes(logf func(string, ...any)) {
	if plan == nil || len(plan.sizes) == 0 {
		return
	}
	names := slices.Collect(maps.Keys(plan.sizes))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(plan.sizes[b].bytes, plan.sizes[a].bytes); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var total packageSize
	for _, n := range names {
		total.files += plan.sizes[n].files
		total.bytes += plan.sizes[n].bytes
	}
	logf("adding %d Debian packages (the ones named and what they depend on): %.1f MB in %d files", len(names), float64(total.bytes)/1e6, total.files)
	for _, n := range names {
		logf("  %-40s %8.1f MB %6d files", n, float64(plan.sizes[n].bytes)/1e6, plan.sizes[n].files)
	}
}

func (plan *packagePlan) packageList() []Package {
	if plan == nil {
		return nil
	}
	return append([]Package(nil), plan.packages...)
}
