package main

import "testing"

// TestMarkOwn: on a terminal, rljail's own lines start with a marked
// "rljail:" that the payload cannot write there, and carry no control
// character of their own.
func TestMarkOwn(t *testing.T) {
	const mark = ownMarkStart + ownPrefix + ownMarkEnd
	for _, tc := range []struct{ in, want string }{
		{"rljail: timeout\n", mark + " timeout\n"},
		{"rljail: a\nrljail: b\n", mark + " a\n" + mark + " b\n"},
		{"rljail: learn: a profile:\n[seccomp]\nallow = []\n", mark + " learn: a profile:\n[seccomp]\nallow = []\n"},
		{"rljail: bad file \x1b]0;x\x07\n", mark + " bad file ^[]0;x^G\n"},
		{"not ours\n", "not ours\n"},
		{"rljail", "rljail"},
	} {
		if got := string(markOwn(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("markOwn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
