package jail

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rljail/rljail/rootfs"
)

func TestPackageEtcDirIsTheRootfsOne(t *testing.T) {
	if packageEtcDir != rootfs.PackageEtcDir {
		t.Fatalf("jail links package /etc files from %s, the rootfs builder puts them in %s", packageEtcDir, rootfs.PackageEtcDir)
	}
}

// TestPackageEtcLinks: each regular file of the rootfs's packageEtcDir is
// linked into the jail's /etc, but never a name init writes itself, a
// hidden name, a directory or a symlink.
func TestPackageEtcLinks(t *testing.T) {
	root := t.TempDir()
	if got := packageEtcLinks(root); len(got) != 0 {
		t.Fatalf("a rootfs without %s: links %v, want none", packageEtcDir, got)
	}
	dir := filepath.Join(root, packageEtcDir)
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"matplotlibrc", "passwd", "hosts", "ld.so.cache", ".hidden"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("matplotlibrc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	got := packageEtcLinks(root)
	want := []rootSymlink{{Name: "etc/matplotlibrc", Target: packageEtcDir + "/matplotlibrc"}}
	if !slices.Equal(got, want) {
		t.Fatalf("links %v, want %v", got, want)
	}
}
