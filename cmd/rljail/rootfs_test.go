package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestTopOnlyPlace: the top-only rootfs check is taken for a rootfs in
// the user's own stable data directory that only the user may write, and
// for any user on one in root's data directory that only root may write;
// anywhere else, or with a group- or other-writable bit, an owner who is
// neither, or a top that is not a directory, the rootfs is walked.
func TestTopOnlyPlace(t *testing.T) {
	dir := func(uid, perm uint32) unix.Stat_t { return unix.Stat_t{Uid: uid, Mode: unix.S_IFDIR | perm} }
	const user = 1000
	tests := []struct {
		name              string
		euid              uint32
		top, parent       unix.Stat_t
		inStable, inRoots bool
		owner             uint32
		ok                bool
	}{
		{"root, its own data directory", 0, dir(0, 0o755), dir(0, 0o755), true, true, 0, true},
		{"user, own stable data directory", user, dir(user, 0o755), dir(user, 0o755), true, false, user, true},
		{"user, root's rootfs in root's data directory", user, dir(0, 0o755), dir(0, 0o755), false, true, 0, true},
		{"user, root's rootfs elsewhere", user, dir(0, 0o755), dir(0, 0o755), false, false, 0, false},
		{"user, own rootfs elsewhere", user, dir(user, 0o755), dir(user, 0o755), false, false, 0, false},
		{"user, own rootfs in root's data directory", user, dir(user, 0o755), dir(0, 0o755), false, true, 0, false},
		{"user, another user's rootfs in root's data directory", user, dir(1001, 0o755), dir(0, 0o755), false, true, 0, false},
		{"user, root's rootfs group-writable", user, dir(0, 0o775), dir(0, 0o755), false, true, 0, false},
		{"user, root's rootfs other-writable", user, dir(0, 0o757), dir(0, 0o755), false, true, 0, false},
		{"user, root's data directory group-writable", user, dir(0, 0o755), dir(0, 0o775), false, true, 0, false},
		{"user, root's data directory sticky and other-writable", user, dir(0, 0o755), dir(0, 0o1777), false, true, 0, false},
		{"user, root's data directory another user's", user, dir(0, 0o755), dir(1001, 0o755), false, true, 0, false},
		{"user, root's rootfs a link", user, unix.Stat_t{Uid: 0, Mode: unix.S_IFLNK | 0o777}, dir(0, 0o755), false, true, 0, false},
		{"user, own rootfs group-writable", user, dir(user, 0o775), dir(user, 0o755), true, false, 0, false},
		{"user, own data directory root's", user, dir(user, 0o755), dir(0, 0o755), true, false, 0, false},
		{"root, a user's rootfs in root's data directory", 0, dir(user, 0o755), dir(0, 0o755), true, true, 0, false},
		{"root, its rootfs elsewhere", 0, dir(0, 0o755), dir(0, 0o755), false, false, 0, false},
	}
	for _, tc := range tests {
		p := topOnlyPlace{euid: tc.euid, top: tc.top, parent: tc.parent, inStable: tc.inStable, inRoots: tc.inRoots}
		owner, ok := p.owner()
		if owner != tc.owner || ok != tc.ok {
			t.Errorf("%s: owner() = %d, %v; want %d, %v", tc.name, owner, ok, tc.owner, tc.ok)
		}
	}
}
