package rootfs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFileListRoundTrip(t *testing.T) {
	entries := []fileEntry{
		{Path: "/", Kind: 'd', Perm: 0o755, Size: -1},
		{Path: "/bin", Kind: 'l', Perm: 0o777, Size: -1, Digest: "usr/bin"},
		{Path: "/usr/a file with spaces%.py", Kind: 'f', Perm: 0o644, Size: 3, Digest: strings.Repeat("ab", 32)},
		{Path: "/usr/naïve\n\x1b[2J", Kind: 'f', Perm: 0o755, Size: 0, Digest: strings.Repeat("01", 32)},
		{Path: "/usr/link", Kind: 'l', Perm: 0o777, Size: -1, Digest: "../a b/%c"},
	}
	data := encodeFileList(entries)
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if strings.Count(line, " ") != 4 && i > 0 || strings.ContainsAny(line, "\x1b\t") {
			t.Errorf("line %d %q: not five plain fields", i, line)
		}
	}
	got, err := parseFileList(data)
	if err != nil || !reflect.DeepEqual(got, entries) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, entries)
	}
	bad := []string{
		"",
		"rljail-files 2\n",
		filesHeader + "\nf 0644 3 nothex /a\n",
		filesHeader + "\nx 0644 - - /a\n",
		filesHeader + "\nd 0999 - - /a\n",
		filesHeader + "\nd 0755 - - relative\n",
		filesHeader + "\nf 0644 -1 " + strings.Repeat("ab", 32) + " /a\n",
		filesHeader + "\nf 0644 3 " + strings.Repeat("ab", 32) + " /a%4\n",
		filesHeader + "\nd 0755 - -\n",
	}
	for _, b := range bad {
		if _, err := parseFileList([]byte(b)); err == nil {
			t.Errorf("parseFileList(%q) took it", b)
		}
	}
}

// TestVerify: every kind of change is one line naming the entry; an unchanged
// tree has none.
func TestVerify(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string)
		want   []string // each a line of the differences
	}{
		{"unchanged", func(*testing.T, string) {}, nil},
		{"content", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "usr/d00/s00/f001.py"), "x = 9\n")
		}, []string{"/usr/d00/s00/f001.py: content changed (sha256"}},
		{"mode", func(t *testing.T, root string) {
			os.Chmod(filepath.Join(root, "usr/d00/s00/f002.py"), 0o600)
		}, []string{"/usr/d00/s00/f002.py: mode 0600, built 0644"}},
		{"setuid and setgid", func(t *testing.T, root string) {
			unix.Chmod(filepath.Join(root, "usr/d00/s00/f005.py"), 0o6755)
		}, []string{"/usr/d00/s00/f005.py: mode 6755, built 0644"}},
		{"sticky directory", func(t *testing.T, root string) {
			unix.Chmod(filepath.Join(root, "usr/d00/s01"), 0o1755)
		}, []string{"/usr/d00/s01: mode 1755, built 0755"}},
		{"an extended attribute", func(t *testing.T, root string) {
			if err := unix.Lsetxattr(filepath.Join(root, "usr/d00/s00/f006.py"), "user.planted", []byte("1"), 0); err != nil {
				t.Fatalf("set a user extended attribute: %v", err)
			}
		}, []string{"/usr/d00/s00/f006.py: extended attributes user.planted set, built with none"}},
		{"added and removed", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "usr/d00/s01/new.py"), "")
			os.Remove(filepath.Join(root, "usr/d00/s01/f001.py"))
		}, []string{"/usr/d00/s01/f001.py: missing", "/usr/d00/s01/new.py: added (a file)"}},
		{"a link retargeted", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f007.py")
			os.Remove(p)
			os.Symlink("/etc/shadow", p)
		}, []string{`/usr/d00/s00/f007.py: link target "/etc/shadow", built "f000.py"`}},
		{"a file made a directory", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f003.py")
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}, []string{"/usr/d00/s00/f003.py: is a directory, built as a file"}},
		{"touched only", func(t *testing.T, root string) {
			p := filepath.Join(root, "usr/d00/s00/f004.py")
			fi, _ := os.Stat(p)
			data, _ := os.ReadFile(p)
			write(t, p, string(data))
			os.Chtimes(p, fi.ModTime(), fi.ModTime())
		}, []string{"/usr/d00/s00/f004.py: metadata changed since the build"}},
		{"the list edited", func(t *testing.T, root string) {
			p := filepath.Join(root, filesName)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, append(data, "f 0644 0 "+strings.Repeat("00", 32)+" /x\n"...), 0o644)
		}, []string{"/" + filesName + ": the file list does not match the manifest"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "rootfs")
			makeTree(t, root, 60)
			tc.change(t, root)
			diffs, err := Verify(root)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, d := range diffs {
				lines = append(lines, d.String())
			}
			if len(lines) != len(tc.want) {
				t.Fatalf("differences:\n%s\nwant %d: %q", strings.Join(lines, "\n"), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d %q, want %q...", i, lines[i], w)
				}
			}
		})
	}
}
