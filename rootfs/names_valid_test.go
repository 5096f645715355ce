package rootfs

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidNameAsPattern: the hand-written check takes exactly what
// ^[a-z0-9][a-z0-9._-]{0,63}$ takes.
func TestValidNameAsPattern(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	names := []string{"", "python", "data", "a", "0", ".x", "-x", "_x", "x.y-z_0", "X", "pyThon", "a/b", "a b", "é",
		"a\x00", strings.Repeat("a", 64), strings.Repeat("a", 65), "a" + strings.Repeat(".", 63), "a" + strings.Repeat(".", 64), "..", "a\n"}
	for _, n := range names {
		if got, want := validName(n), re.MatchString(n); got != want {
			t.Errorf("validName(%q) = %v, the pattern says %v", n, got, want)
		}
	}
}
