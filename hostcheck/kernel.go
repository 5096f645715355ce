package hostcheck

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelFeature is a kernel interface rljail uses and the first release
// that has it.
type kernelFeature struct {
	major, minor int
	what         string
}

// kernelFeatures lists what sets rljail's minimum kernel, newest first: the
// first entry is the minimum.
func kernelFeatures() []kernelFeature {
	return []kernelFeature{
		{5, 12, "mount_setattr (recursive read-only, nosuid, nodev mounts)"},
		{5, 7, "clone3 with CLONE_INTO_CGROUP"},
		{5, 3, "pidfd_open"},
		{5, 2, "fsopen, open_tree and move_mount"},
	}
}

// checkKernel reports the running kernel's release and whether it has every
// interface rljail uses.
func checkKernel() Item {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Item{Name: "kernel", Fatal: true, Detail: fmt.Sprintf("uname: %v", err)}
	}
	return kernelItem(unix.ByteSliceToString(u.Release[:]))
}

// kernelItem judges a kernel release string ("6.1.0-18-amd64").
func kernelItem(release string) Item {
	features := kernelFeatures()
	need := features[0]
	it := Item{Name: "kernel", Fatal: true}
	ok, err := kernelAtLeast(release, need.major, need.minor)
	if err != nil {
		it.Detail = err.Error()
		it.Fix = fmt.Sprintf("run a kernel %d.%d or newer (Debian 12's linux-image-amd64 is 6.1)", need.major, need.minor)
		return it
	}
	if ok {
		it.OK = true
		it.Detail = fmt.Sprintf("%s (%d.%d or newer)", release, need.major, need.minor)
		return it
	}
	var missing []string
	for _, f := range features {
		if has, _ := kernelAtLeast(release, f.major, f.minor); !has {
			missing = append(missing, fmt.Sprintf("%s needs %d.%d", f.what, f.major, f.minor))
		}
	}
	it.Detail = fmt.Sprintf("%s is older than %d.%d: %s", release, need.major, need.minor, strings.Join(missing, "; "))
	it.Fix = fmt.Sprintf("install a kernel %d.%d or newer and reboot (Debian 12: apt install linux-image-amd64, 6.1)", need.major, need.minor)
	return it
}

// kernelAtLeast reports whether release ("6.1.0-18-amd64", "5.15",
// "6.8.0-rc1") is major.minor or newer.
func kernelAtLeast(release string, major, minor int) (bool, error) {
	gotMajor, gotMinor, err := parseKernelRelease(release)
	if err != nil {
		return false, err
	}
	return gotMajor > major || gotMajor == major && gotMinor >= minor, nil
}

// parseKernelRelease returns the major and minor numbers of a uname release.
func parseKernelRelease(release string) (major, minor int, err error) {
	majStr, rest, ok := strings.Cut(release, ".")
	if !ok {
		return 0, 0, fmt.Errorf("kernel release %q: no major.minor version", release)
	}
	major, err = strconv.Atoi(majStr)
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: bad major version: %w", release, err)
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	minor, err = strconv.Atoi(rest[:end])
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: bad minor version: %w", release, err)
	}
	return major, minor, nil
}
