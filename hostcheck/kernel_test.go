package hostcheck

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func kernelRelease(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

func TestKernelAtLeast(t *testing.T) {
	tests := []struct {
		release      string
		major, minor int
		want         bool
		wantErr      bool
	}{
		{"6.1.0-18-amd64", 5, 12, true, false},
		{"6.18.44-fc-v669", 5, 12, true, false},
		{"5.12.0", 5, 12, true, false},
		{"5.12", 5, 12, true, false},
		{"5.11.22-generic", 5, 12, false, false},
		{"5.10.0-28-amd64", 5, 12, false, false},
		{"5.2.0", 5, 12, false, false}, // numeric, not lexical: 2 < 12
		{"5.15.0-91-generic", 5, 12, true, false},
		{"6.8.0-rc1", 6, 8, true, false},
		{"6.0", 5, 12, true, false},
		{"4.19.0-26-amd64", 5, 12, false, false},
		{"10.0.0", 5, 12, true, false},
		{"", 5, 12, false, true},
		{"6", 5, 12, false, true},
		{"linux", 5, 12, false, true},
		{"6.x.1", 5, 12, false, true},
		{"v6.1", 5, 12, false, true},
	}
	for _, tt := range tests {
		got, err := kernelAtLeast(tt.release, tt.major, tt.minor)
		if (err != nil) != tt.wantErr {
			t.Errorf("kernelAtLeast(%q, %d, %d) error = %v, want error %v", tt.release, tt.major, tt.minor, err, tt.wantErr)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), tt.release) {
			t.Errorf("kernelAtLeast(%q) error %q does not name the release", tt.release, err)
		}
		if got != tt.want {
			t.Errorf("kernelAtLeast(%q, %d, %d) = %v, want %v", tt.release, tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestKernelItem(t *testing.T) {
	tests := []struct {
		release     string
		wantOK      bool
		wantInclude []string // substrings of Detail
		wantExclude []string
	}{
		{"6.1.0-18-amd64", true, []string{"6.1.0-18-amd64", "5.12"}, nil},
		{"5.12.0", true, []string{"5.12.0"}, nil},
		{"5.10.0-28-amd64", false, []string{"5.10.0-28-amd64", "older than 5.12", "mount_setattr"},
			[]string{"CLONE_INTO_CGROUP", "pidfd_open", "fsopen"}},
		{"5.4.0-150-generic", false, []string{"mount_setattr", "CLONE_INTO_CGROUP"}, []string{"pidfd_open", "fsopen"}},
		{"4.19.0", false, []string{"mount_setattr", "CLONE_INTO_CGROUP", "pidfd_open", "fsopen"}, nil},
		{"garbage", false, []string{"garbage"}, nil},
	}
	for _, tt := range tests {
		it := kernelItem(tt.release)
		if it.Name != "kernel" || !it.Fatal || it.OK != tt.wantOK {
			t.Errorf("kernelItem(%q) = %+v, want ok=%v fatal=true", tt.release, it, tt.wantOK)
		}
		if !it.OK && !strings.Contains(it.Fix, "5.12") {
			t.Errorf("kernelItem(%q) fix %q does not name the minimum kernel", tt.release, it.Fix)
		}
		for _, s := range tt.wantInclude {
			if !strings.Contains(it.Detail, s) {
				t.Errorf("kernelItem(%q) detail %q lacks %q", tt.release, it.Detail, s)
			}
		}
		for _, s := range tt.wantExclude {
			if strings.Contains(it.Detail, s) {
				t.Errorf("kernelItem(%q) detail %q names %q, which this kernel has", tt.release, it.Detail, s)
			}
		}
	}
}
