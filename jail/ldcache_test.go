package jail

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rljail/rljail/rootfs"
)

func TestLoaderCachePathIsTheRootfsOne(t *testing.T) {
	if loaderCachePath != rootfs.LoaderCachePath {
		t.Fatalf("jail links /etc/ld.so.cache to %s, the rootfs builder writes %s", loaderCachePath, rootfs.LoaderCachePath)
	}
	want := map[string]string{
		"etc/ld.so.cache": rootfs.LoaderCachePath,
		"etc/services":    rootfs.ServicesPath,
		"etc/protocols":   rootfs.ProtocolsPath,
	}
	for _, l := range rootfsEtcFiles {
		if want[l.Name] != l.Target {
			t.Errorf("jail links /%s to %s, the rootfs builder writes %q", l.Name, l.Target, want[l.Name])
		}
		delete(want, l.Name)
	}
	if len(want) > 0 {
		t.Errorf("the jail links none of %v", want)
	}
}

// TestPrepareConfigNetbase: /etc/services and /etc/protocols lead to the
// rootfs's copies when it has them, each on its own.
func TestPrepareConfigNetbase(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/rljail"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeCacheFile(t, filepath.Join(root, rootfs.ServicesPath))
	cfg, trees, err := prepareConfig(&Spec{Rootfs: root, Command: []string{"true"}}, false, &hostIDs{}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	closeFiles(trees)
	if !slices.Contains(cfg.Symlinks, rootSymlink{Name: "etc/services", Target: rootfs.ServicesPath}) {
		t.Errorf("symlinks %v: no /etc/services", cfg.Symlinks)
	}
	for _, l := range cfg.Symlinks {
		if l.Name == "etc/protocols" {
			t.Errorf("symlinks %v: /etc/protocols although the rootfs has none", cfg.Symlinks)
		}
	}
}

// TestPrepareConfigLoaderCache: /etc/ld.so.cache leads to the rootfs's
// cache only when the rootfs has one, as a regular file.
func TestPrepareConfigLoaderCache(t *testing.T) {
	link := rootSymlink{Name: "etc/ld.so.cache", Target: loaderCachePath}
	tests := []struct {
		name  string
		setup func(t *testing.T, cache string)
		want  bool
	}{
		{"a cache", func(t *testing.T, cache string) { writeCacheFile(t, cache) }, true},
		{"none (an older rootfs)", func(t *testing.T, cache string) {}, false},
		{"a symlink", func(t *testing.T, cache string) {
			writeCacheFile(t, cache+".real")
			if err := os.Symlink(filepath.Base(cache)+".real", cache); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a directory", func(t *testing.T, cache string) {
			if err := os.MkdirAll(cache, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cache := filepath.Join(root, loaderCachePath)
			if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, cache)
			cfg, trees, err := prepareConfig(&Spec{Rootfs: root, Command: []string{"true"}}, false, &hostIDs{}, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			closeFiles(trees)
			if got := slices.Contains(cfg.Symlinks, link); got != tt.want {
				t.Errorf("symlinks %v: has %v = %v, want %v", cfg.Symlinks, link, got, tt.want)
			}
		})
	}
}

func writeCacheFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("glibc-ld.so.cache1.1"), 0o644); err != nil {
		t.Fatal(err)
	}
}
