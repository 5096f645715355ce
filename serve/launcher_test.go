package serve

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
)

// TestReadFetched: the launcher's answer is hostile data; readFetched
// takes what is well formed and within the bounds, and stops at the
// first thing that is not.
func TestReadFetched(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     int
		max      int64
		files    []outFile
		notFound int
		errno    syscall.Errno
	}{
		{"two files", "f 4 2\n/a/bzzf 2 0\n/c.\n", 2, 100, []outFile{{Path: "/a/b", Data: []byte("zz")}, {Path: "/c", Data: []byte{}}}, 0, 0},
		{"an error", "x 2 9\n/anot found.\n", 1, 100, []outFile{{Path: "/a", Error: "not found"}}, 0, 0},
		{"an empty error", "x 2 0\n/a.\n", 1, 100, []outFile{{Path: "/a", Error: "not taken"}}, 0, 0},
		{"over max", "f 2 5\n/a12345.\n", 1, 4, nil, 0, 0},
		{"more than asked", "f 2 1\n/a1f 2 1\n/b2.\n", 1, 100, []outFile{{Path: "/a", Data: []byte("1")}}, 0, 0},
		{"negative size", "f 2 -1\n/a.\n", 1, 100, nil, 0, 0},
		{"huge path", "f 99999 1\n", 1, 100, nil, 0, 0},
		{"long line", "f " + strings.Repeat("1", 80) + " 1\n", 1, 100, nil, 0, 0},
		{"unknown tag", "q 1 1\n", 1, 100, nil, 0, 0},
		{"short data", "f 2 10\n/a12", 1, 100, nil, 0, 0},
		{"not found", "E 127 0\n.\n", 0, 100, nil, 127, 0},
		{"exec error", "E 126 13\nf 2 1\n/a1.\n", 1, 100, []outFile{{Path: "/a", Data: []byte("1")}}, 126, syscall.EACCES},
		{"E after a file", "f 2 1\n/a1E 127 0\n", 1, 100, []outFile{{Path: "/a", Data: []byte("1")}}, 0, 0},
		{"E twice", "E 127 0\nE 126 0\n", 0, 100, nil, 127, 0},
		{"E of another code", "E 1 0\n", 0, 100, nil, 0, 0},
		{"E of a huge errno", "E 126 99999\n", 0, 100, nil, 0, 0},
		{"nothing", "", 1, 100, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readFetched(strings.NewReader(tt.in), tt.want, tt.max)
			if len(got.files) != len(tt.files) {
				t.Fatalf("files %+v, want %+v", got.files, tt.files)
			}
			for i, f := range got.files {
				w := tt.files[i]
				if f.Path != w.Path || f.Error != w.Error || !bytes.Equal(f.Data, w.Data) {
					t.Errorf("file %d: %+v, want %+v", i, f, w)
				}
			}
			if got.notFound != tt.notFound || got.errno != tt.errno {
				t.Errorf("E: %d %d, want %d %d", got.notFound, got.errno, tt.notFound, tt.errno)
			}
		})
	}
}
