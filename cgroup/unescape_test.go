package cgroup

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:            "/plain",
		`/a\040b`:           "/a b",
		`/tab\011x\134y`:    "/tab\tx\\y",
		`/trailing\04`:      `/trailing\04`,
		`/not\999octal`:     `/not\999octal`,
		`/end\040`:          "/end ",
		`\040\040`:          "  ",
		`/newline\012there`: "/newline\nthere",
	} {
		if got := UnescapeMountinfo(in); got != want {
			t.Errorf("UnescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
