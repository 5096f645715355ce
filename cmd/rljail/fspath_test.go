package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFSPath: a path's place within its filesystem, by the mount table: a
// bind mount's name leads to the directory it shows.
func TestFSPath(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a/b", "m/b", "sp ace"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	info := "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"30 22 8:1 " + dir + "/a " + dir + "/m rw - ext4 /dev/sda1 rw\n" +
		"31 22 8:1 /x\\040y " + dir + "/sp\\040ace rw - ext4 /dev/sda1 rw\n"
	for _, c := range []struct{ p, want string }{
		{dir + "/a/b", dir + "/a/b"},
		{dir + "/m", dir + "/a"},
		{dir + "/m/b", dir + "/a/b"},
		{dir + "/sp ace", "/x y"},
		{"/", "/"},
	} {
		if got, ok := fsPath([]byte(info), c.p); !ok || got != c.want {
			t.Errorf("fsPath(%s) = %q, %v; want %q", c.p, got, ok, c.want)
		}
	}
}
