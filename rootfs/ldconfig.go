package rootfs

import (
	"fmt"
	"os"
)

// hostLdconfig is glibc's ldconfig (static, no libraries: Debian's libc-bin).
// The rootfs gets it for `ldconfig -p`, which lists the loader cache
// (LoaderCachePath, the jail's /etc/ld.so.cache): ctypes.util.find_library
// runs /sbin/ldconfig -p first (and gcc or ld, which the rootfs does not
// have, after it), so without it find_library("c") is None in the jail and
// model code that loads a C library by name through ctypes fails. In the
// jail it can only read: /etc and the rootfs are read-only.
const hostLdconfig = "/sbin/ldconfig"

// addLdconfig copies ldconfig into the tree when the host has it, and
// returns the libraries it needs (none for glibc's static build).
func addLdconfig(t *tree, r *libraryResolver, ldconfig string) ([]loadedLibrary, error) {
	if _, err := os.Stat(ldconfig); err != nil {
		return nil, err
	}
	prog, err := r.programClosure(ldconfig)
	if err != nil {
		return nil, fmt.Errorf("libraries of %s: %w", ldconfig, err)
	}
	if _, err := t.mirror(ldconfig); err != nil {
		return nil, fmt.Errorf("copy %s: %w", ldconfig, err)
	}
	return prog.libs, nil
}
