package hostcheck

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// This development machine: hybrid, v1 controllers under /sys/fs/cgroup/*,
// an empty cgroup2 tree at /sys/fs/cgroup/unified.
const (
	hybridMountinfo = `22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	hybridSelf = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/0093
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`
	// A systemd host in unified mode, a user's delegated scope.
	v2Mountinfo = `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	v2Scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
	v2Self  = "0::" + v2Scope + "\n"
	// A Debian 9 style legacy host: cpu and cpuacct co-mounted, no pids.
	legacyMountinfo = `25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
`
	legacySelf = `3:memory:/user.slice
2:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/session-2.scope
`
)

func TestParseSelfCgroup(t *testing.T) {
	tests := []struct {
		name        string
		text        string
		wantUnified string
		wantHas     bool
		wantV1      map[string]string
		wantErr     bool
	}{
		{"hybrid", hybridSelf, "/", true, map[string]string{
			"name=systemd": "/", "pids": "/", "blkio": "/", "freezer": "/", "devices": "/",
			"memory": "/process_api/0093", "cpuset": "/", "cpuacct": "/", "cpu": "/"}, false},
		{"v2", v2Self, v2Scope, true, map[string]string{}, false},
		{"co-mounted v1", legacySelf, "", false, map[string]string{
			"memory": "/user.slice", "cpu": "/user.slice", "cpuacct": "/user.slice", "name=systemd": "/user.slice/session-2.scope"}, false},
		{"colon in path", "0::/a:b\n", "/a:b", true, map[string]string{}, false},
		{"empty", "", "", false, map[string]string{}, false},
		{"not three fields", "0:/\n", "", false, nil, true},
		{"relative path", "1:cpu:user.slice\n", "", false, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSelfCgroup(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseSelfCgroup error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "line 1") {
					t.Errorf("error %q does not name the line", err)
				}
				return
			}
			if got.unified != tt.wantUnified || got.hasUnified != tt.wantHas || !reflect.DeepEqual(got.v1, tt.wantV1) {
				t.Errorf("parseSelfCgroup = %+v, want unified %q (%v) v1 %v", got, tt.wantUnified, tt.wantHas, tt.wantV1)
			}
		})
	}
}

func TestParseCgroupMounts(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []cgroupMount
		wantErr bool
	}{
		{"hybrid", hybridMountinfo, []cgroupMount{
			{"cgroup", "/", "/sys/fs/cgroup/cpu", []string{"cpu"}},
			{"cgroup", "/", "/sys/fs/cgroup/cpuacct", []string{"cpuacct"}},
			{"cgroup", "/", "/sys/fs/cgroup/cpuset", []string{"cpuset"}},
			{"cgroup", "/", "/sys/fs/cgroup/memory", []string{"memory"}},
			{"cgroup", "/", "/sys/fs/cgroup/devices", []string{"devices"}},
			{"cgroup", "/", "/sys/fs/cgroup/freezer", []string{"freezer"}},
			{"cgroup", "/", "/sys/fs/cgroup/blkio", []string{"blkio"}},
			{"cgroup", "/", "/sys/fs/cgroup/pids", []string{"pids"}},
			{"cgroup", "/", "/sys/fs/cgroup/systemd", nil},
			{"cgroup2", "/", "/sys/fs/cgroup/unified", nil},
		}, false},
		{"v2 with optional fields", v2Mountinfo, []cgroupMount{{"cgroup2", "/", "/sys/fs/cgroup", nil}}, false},
		{"co-mounted", legacyMountinfo, []cgroupMount{
			{"cgroup", "/", "/sys/fs/cgroup/cpu,cpuacct", []string{"cpu", "cpuacct"}},
			{"cgroup", "/", "/sys/fs/cgroup/memory", []string{"memory"}},
		}, false},
		{"container root and escaped space",
			"500 499 0:30 /docker/abc /mnt/my\\040cg ro,nosuid - cgroup cgroup ro,xattr,release_agent=/x,memory\n",
			[]cgroupMount{{"cgroup", "/docker/abc", "/mnt/my cg", []string{"memory"}}}, false},
		{"no cgroups", "22 1 253:1 / / rw - ext4 /dev/vda rw\n", nil, false},
		{"no separator", "22 1 253:1 / / rw ext4 /dev/vda rw\n", nil, true},
		{"truncated after separator", "22 1 253:1 / / rw - cgroup2\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCgroupMounts(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCgroupMounts error = %v, want error %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseCgroupMounts =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestCgroupDir(t *testing.T) {
	whole := cgroupMount{fsType: "cgroup2", root: "/", mountPoint: "/sys/fs/cgroup"}
	sub := cgroupMount{fsType: "cgroup", root: "/docker/abc", mountPoint: "/sys/fs/cgroup/memory"}
	tests := []struct {
		m      cgroupMount
		path   string
		want   string
		wantOK bool
	}{
		{whole, "/", "/sys/fs/cgroup", true},
		{whole, "/user.slice/a.scope", "/sys/fs/cgroup/user.slice/a.scope", true},
		{sub, "/docker/abc", "/sys/fs/cgroup/memory", true},
		{sub, "/docker/abc/child", "/sys/fs/cgroup/memory/child", true},
		{sub, "/docker/abcdef", "", false},
		{sub, "/other", "", false},
	}
	for _, tt := range tests {
		got, ok := cgroupDir(tt.m, tt.path)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("cgroupDir(%+v, %q) = %q, %v; want %q, %v", tt.m, tt.path, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestClassifyCgroupFS(t *testing.T) {
	tests := []struct {
		root, unified int64
		want          cgroupMode
	}{
		{unix.CGROUP2_SUPER_MAGIC, 0, cgroupV2},
		{unix.TMPFS_MAGIC, unix.CGROUP2_SUPER_MAGIC, cgroupHybrid},
		{unix.TMPFS_MAGIC, 0, cgroupV1},
		{unix.TMPFS_MAGIC, unix.TMPFS_MAGIC, cgroupV1},
		{unix.CGROUP_SUPER_MAGIC, 0, cgroupV1},
		{0, 0, cgroupNone},
		{unix.SYSFS_MAGIC, 0, cgroupNone},
	}
	for _, tt := range tests {
		if got := classifyCgroupFS(tt.root, tt.unified); got != tt.want {
			t.Errorf("classifyCgroupFS(%#x, %#x) = %v, want %v", tt.root, tt.unified, got, tt.want)
		}
	}
}

// fakeCgroupHost builds a cgroupHost from file contents: files maps a path
// to its content, writable lists the directories this user may write;
// every other directory is read-only (or missing when listed in missing).
func fakeCgroupHost(t *testing.T, mode cgroupMode, self, mountinfo string, root bool,
	files map[string]string, writable []string, errFor map[string]error) cgroupHost {
	t.Helper()
	s, err := parseSelfCgroup(self)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseCgroupMounts(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	return cgroupHost{
		mode: mode, self: s, mounts: m, root: root,
		readFile: func(p string) ([]byte, error) {
			if c, ok := files[p]; ok {
				return []byte(c), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: unix.ENOENT}
		},
		writable: func(dir string) error {
			for _, w := range writable {
				if w == dir {
					return nil
				}
			}
			if err, ok := errFor[dir]; ok {
				return err
			}
			return unix.EACCES
		},
	}
}

func TestCgroupsItem(t *testing.T) {
	scopeDir := "/sys/fs/cgroup" + v2Scope
	hybridFiles := map[string]string{"/sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n"}
	hybridWritable := []string{"/sys/fs/cgroup/memory/process_api/0093", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu"}
	v2Files := map[string]string{
		"/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
		scopeDir + "/cgroup.controllers":    "cpu memory pids\n",
	}
	v2FilesNoCPU := map[string]string{
		"/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
		scopeDir + "/cgroup.controllers":    "memory pids\n",
	}
	tests := []struct {
		name       string
		host       cgroupHost
		wantOK     bool
		wantDetail []string
		wantFix    string
	}{
		{"this machine: hybrid, root",
			fakeCgroupHost(t, cgroupHybrid, hybridSelf, hybridMountinfo, true, hybridFiles, hybridWritable, nil), true,
			[]string{"hybrid: v1 controllers memory,pids,cpu + empty v2 tree at /sys/fs/cgroup/unified (controllers: hugetlb)",
				"memory /sys/fs/cgroup/memory/process_api/0093 (writable)", "pids /sys/fs/cgroup/pids (writable)",
				"limits through cgroup v1"}, ""},
		{"hybrid, rootless",
			fakeCgroupHost(t, cgroupHybrid, hybridSelf, hybridMountinfo, false, hybridFiles, nil, nil), false,
			[]string{"hybrid", "not writable: permission denied", "fall back to rlimits", "memory -> RLIMIT_AS"}, "run rljail as root"},
		{"hybrid, read-only cgroupfs",
			fakeCgroupHost(t, cgroupHybrid, hybridSelf, hybridMountinfo, true, hybridFiles, nil,
				map[string]error{"/sys/fs/cgroup/pids": unix.EROFS}), false,
			[]string{"pids /sys/fs/cgroup/pids (not writable: read-only file system)", "memory /sys/fs/cgroup/memory/process_api/0093 (not writable: permission denied)"},
			"mount -o remount,rw"},
		{"hybrid, missing own cgroup dir",
			fakeCgroupHost(t, cgroupHybrid, hybridSelf, hybridMountinfo, true, hybridFiles,
				[]string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu"},
				map[string]error{"/sys/fs/cgroup/memory/process_api/0093": unix.ENOENT}), false,
			[]string{"memory /sys/fs/cgroup/memory/process_api/0093 (missing)", "except memory", "memory -> RLIMIT_AS"}, ""},
		{"legacy without pids",
			fakeCgroupHost(t, cgroupV1, legacySelf, legacyMountinfo, true, nil,
				[]string{"/sys/fs/cgroup/memory/user.slice", "/sys/fs/cgroup/cpu,cpuacct/user.slice"}, nil), false,
			[]string{"v1 (legacy): controllers memory,cpu", "not mounted: pids", "cpu /sys/fs/cgroup/cpu,cpuacct/user.slice (writable)",
				"except pids", rlimitFallback("pids")},
			"mkdir -p /sys/fs/cgroup/pids && mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids"},
		{"v1 tmpfs with nothing mounted",
			fakeCgroupHost(t, cgroupV1, "", "", true, nil, nil, nil), false,
			[]string{"controllers none", "limits fall back to rlimits (memory -> RLIMIT_AS, " + rlimitFallback("pids") + ", cpus not enforced, cpu-time by RLIMIT_CPU)"}, "mount -t cgroup -o memory"},
		{"v2 delegated scope",
			fakeCgroupHost(t, cgroupV2, v2Self, v2Mountinfo, false, v2Files, []string{scopeDir}, nil), true,
			[]string{"v2 (unified)", "root controllers cpuset,cpu,io,memory,hugetlb,pids,rdma,misc",
				"own cgroup " + v2Scope + " controllers cpu,memory,pids", "jail cgroups under " + scopeDir + " (writable)", "limits through cgroup v2"}, ""},
		{"v2 rootless session, not delegated",
			fakeCgroupHost(t, cgroupV2, v2Self, v2Mountinfo, false, v2Files, nil, nil), false,
			[]string{"not writable", "fall back to rlimits"}, "systemd-run --user --scope -p Delegate=yes"},
		{"v2 root, cpu not enabled",
			fakeCgroupHost(t, cgroupV2, v2Self, v2Mountinfo, true, v2FilesNoCPU, []string{scopeDir}, nil), false,
			[]string{"cpu not enabled there", "cpus not enforced, cpu-time by RLIMIT_CPU"},
			"echo '+memory +pids +cpu' > /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/cgroup.subtree_control"},
		{"v2 no 0:: line",
			fakeCgroupHost(t, cgroupV2, "1:cpu:/\n", v2Mountinfo, true, v2Files, nil, nil), false,
			[]string{"no cgroup2 path"}, "cgroup namespace"},
		{"no cgroup filesystem",
			cgroupHost{mode: cgroupNone, modeErr: unix.ENOENT}, false,
			[]string{"no cgroup filesystem: no such file or directory", "limits fall back to rlimits"}, "mount -t cgroup2 cgroup2 /sys/fs/cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := cgroupsItem(tt.host)
			if it.Name != "cgroups" || it.Fatal || it.OK != tt.wantOK {
				t.Fatalf("cgroupsItem = %+v, want ok=%v, never fatal", it, tt.wantOK)
			}
			for _, s := range tt.wantDetail {
				if !strings.Contains(it.Detail, s) {
					t.Errorf("detail %q lacks %q", it.Detail, s)
				}
			}
			if !strings.Contains(it.Fix, tt.wantFix) {
				t.Errorf("fix %q lacks %q", it.Fix, tt.wantFix)
			}
			if !it.OK && (it.Fix == "" || !strings.Contains(it.Detail, "rlimits")) {
				t.Errorf("failure must announce the rlimit fallback and carry a fix: %+v", it)
			}
		})
	}
}
