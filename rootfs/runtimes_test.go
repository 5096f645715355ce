package rootfs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestRuntimePackagesPlan: g++ brings its toolchain's packages and the
// -dev packages a link needs, with their headers, not the shared-library
// packages (the ELF closure brings those) nor the packaging machinery; its
// programs (cc1plus) are marked for the library closure.
func TestRuntimePackagesPlan(t *testing.T) {
	plan := &packagePlan{}
	if err := plan.addSystemPackages(context.Background(), []string{"g++"}); err != nil {
		t.Fatalf("addSystemPackages: %v (the Makefile's APT_PACKAGES installs g++)", err)
	}
	var names []string
	for _, p := range plan.packages {
		names = append(names, p.Name)
	}
	for _, want := range []string{"g++", "gcc", "binutils", "libc6-dev", "libstdc++-12-dev", "linux-libc-dev"} {
		if !slices.Contains(names, want) {
			t.Errorf("plan lacks %s: %v", want, names)
		}
	}
	for _, not := range []string{"libc6", "dpkg", "debconf", "python3", "libgmp10", "perl-base"} {
		if slices.Contains(names, not) {
			t.Errorf("plan has %s: %v", not, names)
		}
	}
	if !slices.Contains(plan.files, "/usr/include/stdio.h") {
		t.Errorf("plan.files lacks /usr/include/stdio.h (libc6-dev's headers)")
	}
	found := false
	for p := range plan.programs {
		found = found || strings.HasSuffix(p, "/cc1plus")
	}
	if !found {
		t.Errorf("plan.programs lacks cc1plus: its libraries would not be in the tree")
	}
}

// TestRuntimePackagesRefusal: a package outside python3-* and
// RuntimePackages is refused naming the runtimes; a -dev package named
// directly still is.
func TestRuntimePackagesRefusal(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"sudo", "sudo is not a Debian Python package"},
		{"libc6", "nor one of the language runtimes bash, g++, gcc, nodejs"},
		{"libc6-dev", "libc6-dev is not a Python package"},
	} {
		err := (&packagePlan{}).addSystemPackages(context.Background(), []string{tc.name})
		var pe *PackageError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("addSystemPackages(%s) = %v, want a PackageError with %q", tc.name, err, tc.want)
		}
	}
}

func TestFollowedRuntimeDep(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{{"cpp-12", true}, {"binutils", true}, {"libc6-dev", true}, {"libc6", false}, {"libisl23", false},
		{"dpkg", false}, {"python3", false}, {"python3.11", false}, {"libpython3.11-dev", false}} {
		if got := followedRuntimeDep(tc.name); got != tc.want {
			t.Errorf("followedRuntimeDep(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIsDynamicProgram(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{{"/usr/bin/bash", true}, {"/usr/lib/x86_64-linux-gnu/crt1.o", false}, {"/etc/hostname", false}} {
		if got := isDynamicProgram(tc.path); got != tc.want {
			t.Errorf("isDynamicProgram(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
