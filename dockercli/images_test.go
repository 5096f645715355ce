package dockercli

import (
	"strings"
	"testing"
)

func TestParseMapping(t *testing.T) {
	m, err := ParseMapping([]byte(`"python:3.11-slim" = "python"
"node:20" = "/srv/rootfs/node"
sandbox = "py-data"
`), "images.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"python:3.11-slim": "python", "node:20": "/srv/rootfs/node", "sandbox": "py-data"}
	for k, v := range want {
		if m.Map[k] != v {
			t.Errorf("%s = %q, want %q", k, m.Map[k], v)
		}
	}
	for _, bad := range []struct{ text, want string }{
		{`"a" = 3`, `images.toml: "a": the value is a int64, not a root filesystem's name or directory`},
		{`"a" = "../x"`, `images.toml: "a" = "../x": not a root filesystem's name`},
		{`"a" = `, `images.toml:1:`},
		{`[t]` + "\n" + `x = "y"`, `images.toml: "t": the value is a map`},
	} {
		if _, err := ParseMapping([]byte(bad.text), "images.toml"); err == nil || !strings.HasPrefix(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one starting %q", bad.text, err, bad.want)
		}
	}
}

func TestResolve(t *testing.T) {
	built := map[string]bool{"/var/lib/rljail/rootfs/py-data": true}
	im := &Images{
		DefaultDir:    "/var/lib/rljail/rootfs/python",
		DefaultPython: "3.11.2",
		IsRootfs:      func(dir string) bool { return built[dir] },
		UserFile:      "/home/u/.config/rljail/images.toml",
		Files: []MappingFile{
			{Path: "/home/u/.config/rljail/images.toml", Map: map[string]string{"python:3": "python", "data": "py-data", "gone": "nope", "abs": "/srv/r"}},
			{Path: "/etc/rljail/images.toml", Map: map[string]string{"python:3": "/other", "etc-only": "python"}},
		},
	}
	for _, tc := range []struct {
		image, dir, err string
	}{
		{"sandbox-image", "", ""},
		{"python", "", ""},
		{"python:3.11", "", ""},
		{"python:3.11-slim", "", ""},
		{"python:3.11.2-slim", "", ""},
		{"docker.io/library/python:3.11-slim", "", ""},
		{"python:3", "", ""}, // the user's file, before /etc's
		{"etc-only", "", ""}, // /etc's file
		{"data", "/var/lib/rljail/rootfs/py-data", ""},
		{"py-data", "/var/lib/rljail/rootfs/py-data", ""}, // a root filesystem of that name
		{"abs", "/srv/r", ""},
		{"gone", "", "image gone is mapped by /home/u/.config/rljail/images.toml to the root filesystem nope, which is not built at /var/lib/rljail/rootfs/nope"},
		{"python:3.12", "", "image python:3.12 is not mapped: rljail's Python root filesystem is CPython 3.11.2, which that image is not; if it will do, map it in /home/u/.config/rljail/images.toml (\"python:3.12\" = \"python\")"},
		{"python:3.11.4", "", "image python:3.11.4 is not mapped: rljail's Python root filesystem is CPython 3.11.2"},
		{"python:3.11-alpine", "", "image python:3.11-alpine is not mapped: rljail's Python root filesystem is CPython 3.11.2"},
		{"python:latest", "", "image python:latest is not mapped: rljail's Python root filesystem is CPython 3.11.2"},
		{"node:20", "", "image node:20 is not mapped to a root filesystem: rljail runs no images, only its own root filesystems; map it in /home/u/.config/rljail/images.toml (\"node:20\" = \"python\"), /etc/rljail/images.toml or --rljail-images FILE"},
		{"ubuntu", "", "image ubuntu is not mapped to a root filesystem"},
	} {
		got, err := im.Resolve(tc.image)
		switch {
		case tc.err != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one starting %q", tc.image, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.image, err)
		case got.Dir != tc.dir:
			t.Errorf("%s: dir %q (%s), want %q", tc.image, got.Dir, got.By, tc.dir)
		}
	}
	// Not built yet: the python names map, and the first run builds it.
	im.DefaultPython = ""
	if _, err := im.Resolve("python:3.11-slim"); err != nil {
		t.Errorf("an unbuilt default rootfs: %v", err)
	}
}
