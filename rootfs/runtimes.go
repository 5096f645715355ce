package rootfs

import (
	"debug/elf"
	"maps"
	"slices"
	"strings"
)

// This file lets --system-packages take a few Debian packages that are not
// Python's: the interpreters and compilers that `rljail serve` runs for its
// other languages (docs/api.md, "Languages"). Each is taken from the host's
// dpkg database as a python3-* package is (installed by apt from the
// archive, listed by dpkg-query -L), copied by the same tree code (modes
// normalized: no set-id bit survives; no device, FIFO or socket), with the
// libraries its programs load found by reading their ELF files.

// RuntimePackages are the Debian packages other than python3-* that
// --system-packages takes, and what each is for. The list is closed: a
// package that is neither is refused with one sentence, so that a build
// never copies, say, sudo or a daemon into a rootfs by accident.
var RuntimePackages = map[string]string{
	"bash":   "GNU bash, for language bash",
	"nodejs": "Node.js, for language nodejs (javascript)",
	"gcc":    "the GNU C compiler with binutils (as, ld), for language c (add libc6-dev's headers: take g++, which brings it)",
	"g++":    "the GNU C++ compiler with binutils, libstdc++'s and libc's headers and libraries, for languages cpp and c",
}

// runtimeSkipped are dependencies of a runtime package that a rootfs
// leaves out: the host's packaging machinery and base files, which no
// program of the language reads at run time (and whose /etc files would
// only shadow the jail's own).
var runtimeSkipped = map[string]bool{
	"base-files": true, "debianutils": true, "debconf": true, "dpkg": true, "tar": true,
	"ca-certificates": true, "openssl": true, "media-types": true, "readline-common": true,
	"perl": true, "perl-base": true, "sensible-utils": true, "coreutils": true, "gcc-12-base": true,
	"libc-dev-bin": true, "rpcsvc-proto": true,
}

// followedRuntimeDep tells which dependencies of a runtime package Build
// takes along: the toolchain's own packages (cpp-12, binutils, ...) and
// every -dev package (headers, crt files, the link-time .so and .a), not
// the shared-library packages, whose libraries come with the programs
// that load them (the ELF closure decides), nor Python's.
func followedRuntimeDep(name string) bool {
	switch {
	case runtimeSkipped[name]:
		return false
	case strings.HasPrefix(name, "python"), strings.HasPrefix(name, "libpython"):
		return false
	case strings.HasSuffix(name, "-dev"):
		return true
	case strings.HasPrefix(name, "lib"):
		return false
	}
	return true
}

// keepRuntimeFile is keepPackageFile for a file of a runtime package: a
// compiler's headers under /usr/include are what it reads at run time.
func keepRuntimeFile(p string) bool {
	if strings.HasPrefix(p, "/usr/include/") {
		return true
	}
	return keepPackageFile(p, false)
}

// isDynamicProgram tells an ELF executable with a program interpreter
// (node, cc1plus, ld): the libraries it loads must be in the tree, as for
// an extension module. An object file (crt1.o), an archive or a static
// program needs none.
func isDynamicProgram(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return false
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

// runtimeNames lists RuntimePackages' names, sorted, for a message.
func runtimeNames() string {
	return strings.Join(slices.Sorted(maps.Keys(RuntimePackages)), ", ")
}
