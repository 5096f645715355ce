package seccomp_test

import (
	"testing"

	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
)

// BenchmarkCompilePython measures compiling the default profile, which
// every run does (issue 3: it must not show in start-up time).
func BenchmarkCompilePython(b *testing.B) {
	p, err := profiles.Load("python")
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := seccomp.Compile(&p.Policy); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadProfile measures decoding the embedded TOML.
func BenchmarkLoadProfile(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := profiles.Load("python"); err != nil {
			b.Fatal(err)
		}
	}
}
