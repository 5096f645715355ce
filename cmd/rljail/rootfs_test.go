package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootfsFlagsInArgs(t *testing.T) {
	tests := []struct {
		args       []string
		rootfs     string
		unverified bool
	}{
		{[]string{"--", "python3"}, "", false},
		{[]string{"--rootfs", "data", "--", "python3"}, "data", false},
		{[]string{"--rootfs=/srv/py", "--rootfs", "data", "python3"}, "data", false},
		{[]string{"--timeout", "5s", "--rootfs-unverified", "--rootfs", "x", "--", "y"}, "x", true},
		{[]string{"-rootfs-unverified=false", "--", "y"}, "", false},
		{[]string{"--rootfs-unverified=true", "--", "y"}, "", true},
		{[]string{"-e", "--rootfs=evil", "--", "y"}, "", false}, // the value of -e
		{[]string{"python3", "--rootfs", "x"}, "", false},       // the payload's own arguments
		{[]string{"--", "--rootfs", "x", "--rootfs-unverified"}, "", false},
		{[]string{"--rootfs"}, "", false},
	}
	for _, tc := range tests {
		r, u := rootfsFlagsInArgs(tc.args)
		if r != tc.rootfs || u != tc.unverified {
			t.Errorf("rootfsFlagsInArgs(%q) = %q, %v; want %q, %v", tc.args, r, u, tc.rootfs, tc.unverified)
		}
	}
}

// TestLocateRootfs: --rootfs, then the profile's rootfs, then RLJAIL_ROOTFS,
// then the default; a bare name is a rootfs in the data directory, a value
// with a slash a directory.
func TestLocateRootfs(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	xdg := filepath.Join(home, "xdg")
	t.Setenv("XDG_DATA_HOME", xdg)
	names := filepath.Join(xdg, "rljail", "rootfs")
	if os.Geteuid() == 0 {
		names = "/var/lib/rljail/rootfs"
	}
	tests := []struct {
		flag, profile, env string
		want, by, wantErr  string
	}{
		{want: filepath.Join(names, "python"), by: ""},
		{env: "/srv/py", want: "/srv/py", by: "RLJAIL_ROOTFS"},
		{profile: "data", env: "/srv/py", want: filepath.Join(names, "data"), by: "the profile"},
		{flag: "other", profile: "data", env: "/srv/py", want: filepath.Join(names, "other"), by: "--rootfs"},
		{flag: "/opt/rootfs", profile: "data", want: "/opt/rootfs", by: "--rootfs"},
		{flag: "BAD", wantErr: `--rootfs: "BAD" is not a rootfs name`},
		{flag: "a b", wantErr: "is not a rootfs name"},
		{profile: "/x/../y", want: "/y", by: "the profile"},
	}
	for _, tc := range tests {
		t.Setenv("RLJAIL_ROOTFS", tc.env)
		dir, by, err := locateRootfs(tc.flag, tc.profile)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("locateRootfs(%q, %q) = %q, %v; want an error with %q", tc.flag, tc.profile, dir, err, tc.wantErr)
			}
			continue
		}
		if err != nil || dir != tc.want || by != tc.by {
			t.Errorf("locateRootfs(%q, %q) with RLJAIL_ROOTFS=%q = %q, %q, %v; want %q, %q", tc.flag, tc.profile, tc.env, dir, by, err, tc.want, tc.by)
		}
	}
}
