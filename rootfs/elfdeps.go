package rootfs

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// This file finds the shared libraries an ELF program needs by reading the files
// themselves, as the dynamic loader (glibc's ld.so) would, never by running ldd: ldd
// executes the program's loader, which is code execution on an arbitrary binary, and it
// reports what this host's ld.so.cache says rather than the paths the jail will open.

// elfObject is what the resolver needs to know about one ELF file.
type elfObject struct {
	class   elf.Class
	machine elf.Machine
	soname  string
	interp  string   // PT_INTERP, "" for shared libraries and static programs
	needed  []string // DT_NEEDED, in order
	rpath   []string // DT_RPATH, $ORIGIN expanded
	runpath []string // DT_RUNPATH, $ORIGIN expanded
}

// readELF parses the dynamic section of the file at path. origin is the directory
// $ORIGIN stands for in the file's RPATH and RUNPATH.
func readELF(path, origin string) (*elfObject, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	obj := &elfObject{class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, fmt.Errorf("read PT_INTERP: %w", err)
		}
		obj.interp = strings.TrimRight(string(b), "\x00")
	}
	if obj.needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return nil, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	if names, err := f.DynString(elf.DT_SONAME); err != nil {
		return nil, fmt.Errorf("read DT_SONAME: %w", err)
	} else if len(names) > 0 {
		obj.soname = names[0]
	}
	if obj.rpath, err = dynPath(f, elf.DT_RPATH, origin); err != nil {
		return nil, err
	}
	if obj.runpath, err = dynPath(f, elf.DT_RUNPATH, origin); err != nil {
		return nil, err
	}
	return obj, nil
}

// dynPath reads a colon-separated search path (DT_RPATH or DT_RUNPATH) and expands
// $ORIGIN. Entries with other dynamic string tokens ($LIB, $PLATFORM) are dropped, as
// are relative entries, which ld.so would resolve against the jail's working directory.
func dynPath(f *elf.File, tag elf.DynTag, origin string) ([]string, error) {
	vals, err := f.DynString(tag)
	if err != nil {
		return nil, fmt.Errorf("read %v: %w", tag, err)
	}
	var dirs []string
	for _, v := range vals {
		for _, d := range strings.Split(v, ":") {
			d = strings.ReplaceAll(d, "${ORIGIN}", origin)
			d = strings.ReplaceAll(d, "$ORIGIN", origin)
			if d == "" || strings.Contains(d, "$") || !filepath.IsAbs(d) {
				continue
			}
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// multiarchTriple names the Debian multiarch directory for a machine, "" when unknown.
func multiarchTriple(class elf.Class, machine elf.Machine) string {
	switch {
	case machine == elf.EM_X86_64 && class == elf.ELFCLASS64:
		return "x86_64-linux-gnu"
	case machine == elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case machine == elf.EM_386:
		return "i386-linux-gnu"
	case machine == elf.EM_RISCV && class == elf.ELFCLASS64:
		return "riscv64-linux-gnu"
	}
	return ""
}

// loaderBuiltinDirs is the search path glibc's ld.so uses when /etc/ld.so.cache does
// not name a library. The jail has none of the host's ld.so.conf, and its cache (Build's,
// LoaderCachePath) lists only these directories: a library the host finds only through
// /etc/ld.so.conf must be made visible in one of these. Debian-style multiarch
// hosts use the triple's directories first; others /lib64 (64-bit) or /lib.
func loaderBuiltinDirs(class elf.Class, triple string) []string {
	if triple != "" {
		if fi, err := os.Stat("/usr/lib/" + triple); err == nil && fi.IsDir() {
			return []string{"/lib/" + triple, "/usr/lib/" + triple, "/lib", "/usr/lib"}
		}
	}
	if class == elf.ELFCLASS64 {
		return []string{"/lib64", "/usr/lib64"}
	}
	return []string{"/lib", "/usr/lib"}
}

// loaderSearchDirs is the host loader's search path after RPATH and RUNPATH: the
// directories of ld.so.conf (which ldconfig put into ld.so.cache, in that order), then the
// built-in directories, then the usual others (/lib64, /usr/lib64, /lib, /usr/lib).
func loaderSearchDirs(ldSoConf string, builtin []string) ([]string, error) {
	conf, err := parseLdSoConf(ldSoConf)
	if err != nil {
		return nil, err
	}
	var dirs []string
	seen := map[string]bool{}
	for _, d := range slices.Concat(conf, builtin, []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64"}) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// parseLdSoConf reads an ld.so.conf with its "include" lines (globs, relative to the
// including file's directory) and returns the library directories in order. A missing
// top-level file is an empty list, as it is for ldconfig.
func parseLdSoConf(path string) ([]string, error) {
	var dirs []string
	visited := map[string]bool{}
	var parse func(p string, depth int) error
	parse = func(p string, depth int) error {
		if depth > 16 || visited[p] {
			return nil // include loop: ldconfig would also stop
		}
		visited[p] = true
		data, err := os.ReadFile(p)
		if err != nil {
			if depth == 0 && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("read %s: %w", p, err)
		}
		for line := range strings.Lines(string(data)) {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			fields := strings.Fields(line)
			switch {
			case len(fields) == 0:
			case fields[0] == "include":
				for _, pat := range fields[1:] {
					if !filepath.IsAbs(pat) {
						pat = filepath.Join(filepath.Dir(p), pat)
					}
					matches, err := filepath.Glob(pat) // sorted, as ldconfig's glob(3)
					if err != nil {
						return fmt.Errorf("%s: include %s: %w", p, pat, err)
					}
					for _, m := range matches {
						if err := parse(m, depth+1); err != nil {
							return err
						}
					}
				}
			case fields[0] == "hwcap":
				// Obsolete syntax, ignored by current ldconfig.
			default:
				for _, d := range fields {
					// ldconfig accepts "dir=type" and comma-separated lists.
					for _, d := range strings.Split(d, ",") {
						if d, _, _ = strings.Cut(d, "="); filepath.IsAbs(d) {
							dirs = append(dirs, d)
						}
					}
				}
			}
		}
		return nil
	}
	if err := parse(path, 0); err != nil {
		return nil, err
	}
	return dirs, nil
}

// libraryResolver answers, for ELF files of one class and machine, where the dynamic
// loader would find each needed library.
type libraryResolver struct {
	class      elf.Class
	machine    elf.Machine
	searchDirs []string // after RPATH/RUNPATH
	// builtinDirs are the loader's built-in directories, in its order.
	builtinDirs []string
	// aliasDir is where a hidden library gets a symlink the jail's loader can find.
	aliasDir string
	objects  map[string]*elfObject // by path as opened; parsing cache
}

// newLibraryResolver prepares a resolver for programs like the one at exe (whose class
// and machine every library must match, as ld.so skips the others) with the host's
// loader configuration in ldSoConf (normally /etc/ld.so.conf).
func newLibraryResolver(exe, ldSoConf string) (*libraryResolver, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", exe, err)
	}
	class, machine := f.Class, f.Machine
	f.Close()
	builtin := loaderBuiltinDirs(class, multiarchTriple(class, machine))
	dirs, err := loaderSearchDirs(ldSoConf, builtin)
	if err != nil {
		return nil, fmt.Errorf("loader search path: %w", err)
	}
	r := &libraryResolver{class: class, machine: machine, searchDirs: dirs,
		builtinDirs: builtin, aliasDir: builtin[0], objects: map[string]*elfObject{}}
	return r, nil
}

// object parses (once) the ELF file at path.
func (r *libraryResolver) object(path, origin string) (*elfObject, error) {
	if o, ok := r.objects[path]; ok {
		return o, nil
	}
	o, err := readELF(path, origin)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	r.objects[path] = o
	return o, nil
}

// matches reports whether the file at path is an ELF library ld.so would accept for
// this program, not one of another class or machine that happens to share the name.
func (r *libraryResolver) matches(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == r.class && f.Machine == r.machine
}

// loadedLibrary is one library of a closure.
type loadedLibrary struct {
	Path string // where the loader opens it, symlinks not resolved (as the loader names it)
	// Hidden is set when the host loader finds it only through ld.so.cache: inside the
	// jail, which has no cache, it must also be reachable from a built-in directory.
	Hidden bool
	// Public is set for a library that a package's extension module brings (addPackages):
	// whoever may write the package chose where the loader looks (RPATH, RUNPATH, an
	// absolute DT_NEEDED), so the rootfs takes it only where others may read it
	// (tree.mirrorPublic).
	Public bool
}

// loadSet is the state of one process's link map: which names are already loaded, and
// the libraries in load order.
type loadSet struct {
	byName  map[string]string // DT_NEEDED name or SONAME -> path
	libs    []loadedLibrary
	interp  string
	program *elfObject // the executable, whose RPATH a dlopened object inherits
}

func (s *loadSet) clone() *loadSet {
	c := &loadSet{byName: map[string]string{}, libs: slices.Clone(s.libs), interp: s.interp, program: s.program}
	for k, v := range s.byName {
		c.byName[k] = v
	}
	return c
}

// programClosure loads an executable: its PT_INTERP and, breadth first as ld.so does,
// every library it needs.
func (r *libraryResolver) programClosure(exe string) (*loadSet, error) {
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", exe, err)
	}
	// For the main program ld.so takes $ORIGIN from /proc/self/exe, a resolved path.
	obj, err := r.object(exe, filepath.Dir(real))
	if err != nil {
		return nil, err
	}
	s := &loadSet{byName: map[string]string{}, program: obj}
	if obj.interp != "" {
		if !r.matches(obj.interp) {
			return nil, fmt.Errorf("program interpreter %s of %s: not an ELF file for this machine", obj.interp, exe)
		}
		s.interp = obj.interp
		ld, err := r.object(obj.interp, filepath.Dir(obj.interp))
		if err != nil {
			return nil, err
		}
		// The loader is already in the link map: a DT_NEEDED on its SONAME (libc needs
		// ld-linux-x86-64.so.2) is satisfied without a search.
		if ld.soname != "" {
			s.byName[ld.soname] = obj.interp
		}
		s.byName[filepath.Base(obj.interp)] = obj.interp
	}
	if err := r.load(s, exe, obj, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// moduleClosure returns the libraries that dlopen(path) would add to the program's link
// map (path being an extension module of the interpreter).
func (r *libraryResolver) moduleClosure(program *loadSet, path string) ([]loadedLibrary, error) {
	return r.moduleClosureAt(program, path, path)
}

// moduleClosureAt is moduleClosure of the module read from file, which was at host
// path (its $ORIGIN is path's directory): a copy of it.
func (r *libraryResolver) moduleClosureAt(program *loadSet, file, path string) ([]loadedLibrary, error) {
	obj, err := r.object(file, filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	return r.dlopenClosure(program, path, obj)
}

// dlopenClosure returns what loading obj (found at path) would add to a copy of the
// program's link map. It also serves libraries that are only ever dlopened by name, such
// as libgcc_s.so.1 (glibc's pthread_exit and pthread_cancel need it), through a synthetic
// object that needs them.
func (r *libraryResolver) dlopenClosure(program *loadSet, path string, obj *elfObject) ([]loadedLibrary, error) {
	s := program.clone()
	before := len(s.libs)
	var inherited []string
	if program.program != nil {
		inherited = program.program.rpath
	}
	if err := r.load(s, path, obj, inherited); err != nil {
		return nil, err
	}
	return s.libs[before:], nil
}

// load resolves the needed libraries of root and of everything they need, breadth
// first. inherited is the RPATH of the objects that loaded root (for a dlopened module:
// the executable's), which glibc also searches while the object has no RUNPATH.
func (r *libraryResolver) load(s *loadSet, rootPath string, root *elfObject, inherited []string) error {
	type pending struct {
		path   string
		obj    *elfObject
		rpaths []string // the RPATH chain: own first, then the loaders'
	}
	queue := []pending{{rootPath, root, slices.Concat(root.rpath, inherited)}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, name := range cur.obj.needed {
			if _, ok := s.byName[name]; ok {
				continue
			}
			path, hidden, err := r.find(name, cur.obj, cur.rpaths)
			if err != nil {
				return fmt.Errorf("library %s needed by %s: %w", name, cur.path, err)
			}
			s.byName[name] = path
			// ld.so takes $ORIGIN of a library from the path it opened, unresolved.
			obj, err := r.object(path, filepath.Dir(path))
			if err != nil {
				return err
			}
			if obj.soname != "" {
				if _, ok := s.byName[obj.soname]; !ok {
					s.byName[obj.soname] = path
				}
			}
			s.libs = append(s.libs, loadedLibrary{Path: path, Hidden: hidden})
			// An object with RUNPATH ignores every RPATH, its own and its loaders'
			// (and the RUNPATH applies to its direct needs only).
			var rpaths []string
			if len(obj.runpath) == 0 {
				rpaths = slices.Concat(obj.rpath, cur.rpaths)
			}
			queue = append(queue, pending{path, obj, rpaths})
		}
	}
	return nil
}

// find searches for one DT_NEEDED name in ld.so's order: the RPATH chain (only if the
// requesting object has no RUNPATH), its RUNPATH, then the system search path. hidden
// reports a library found only through the host's ld.so.cache directories.
func (r *libraryResolver) find(name string, from *elfObject, rpaths []string) (path string, hidden bool, err error) {
	if strings.Contains(name, "/") {
		if filepath.IsAbs(name) && r.matches(name) {
			return name, false, nil
		}
		return "", false, errors.New("not found (a path, and not an absolute one to a matching ELF file)")
	}
	var explicit []string
	if len(from.runpath) == 0 {
		explicit = rpaths
	}
	explicit = slices.Concat(explicit, from.runpath)
	for _, d := range explicit {
		// Joined as a string, not cleaned: ld.so hands "dir/../x" to the kernel, which
		// resolves ".." after following symlinks in dir.
		p := strings.TrimSuffix(d, "/") + "/" + name
		if r.matches(p) {
			return p, false, nil
		}
	}
	for _, d := range r.searchDirs {
		p := filepath.Join(d, name)
		if r.matches(p) {
			return p, !slices.Contains(r.builtinDirs, d), nil
		}
	}
	return "", false, fmt.Errorf("not found in %s", strings.Join(slices.Concat(explicit, r.searchDirs), ":"))
}
