package spelling

import "testing"

func TestClosest(t *testing.T) {
	flags := []string{"timeout", "stop-grace", "volume", "v", "env", "e", "memory", "m", "quiet", "q", "result", "result-fd", "result-output", "no-workspace", "workdir", "w"}
	commands := []string{"run", "session", "rootfs", "check", "version", "help", "profiles", "docker"}
	for _, tc := range []struct {
		typed string
		names []string
		want  string
	}{
		{"timout", flags, "timeout"},
		{"timeuot", flags, "timeout"},
		{"memroy", flags, "memory"},
		{"quite", flags, "quiet"},
		{"resul", flags, "result"},
		{"result-out", flags, "result-output"},
		{"no-worksapce", flags, "no-workspace"},
		{"Z", flags, ""},
		{"bogus", flags, ""},
		{"cpu-tme", flags, ""},
		{"sesion", commands, "session"},
		{"chek", commands, "check"},
		{"verison", commands, "version"},
		{"dokcer", commands, "docker"},
		{"rootf", commands, "rootfs"},
		// Programs a payload runs are not "corrected".
		{"rm", commands, ""},
		{"true", commands, ""},
		{"python3", commands, ""},
		{"cat", commands, ""},
		{"sh", commands, ""},
		{"bun", commands, ""},
		{"run", commands, ""},
	} {
		if got := Closest(tc.typed, tc.names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.typed, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3}} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
