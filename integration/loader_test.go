package integration

import (
	"strings"
	"testing"
)

// TestLoaderCache: the jail's dynamic loader finds every library through
// the rootfs's ld.so.cache, as glibc's own debug output shows (LD_DEBUG is
// the loader's, not the payload's, and it reads the real cache file):
// no library is looked for along the search path, which in a fresh jail
// costs some thirty failed lookups through its overlayfs.
func TestLoaderCache(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			_, stderr, exit, _ := runJail(t, m, runOpts{}, "-e", "LD_DEBUG=libs", "--", "python3", "-c",
				`import ssl, sqlite3, ctypes, lzma, bz2; ctypes.CDLL("libc.so.6")`)
			if exit != 0 {
				t.Fatalf("exit %d, want 0\nstderr:\n%s", exit, stderr)
			}
			finds := strings.Count(stderr, "find library=")
			cached := strings.Count(stderr, "search cache=/etc/ld.so.cache")
			if finds < 8 {
				t.Fatalf("the loader looked for %d libraries, want the interpreter's and the extension modules' (8 or more)\nstderr:\n%s", finds, stderr)
			}
			// The loader tries the cache first for every name, and the
			// search path only for those the cache lacks (or when there is
			// no cache at all).
			if searched := strings.Count(stderr, "search path="); cached != finds || searched > 0 {
				t.Errorf("of %d libraries the loader looked for, %d were not in /etc/ld.so.cache (it searched the path for them)\nstderr:\n%s", finds, searched, stderr)
			}
		})
	}
}
