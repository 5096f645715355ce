package serve

import (
	"slices"
	"strings"
	"testing"
)

// TestParseLanguages: [languages] blocks are read strictly and each mistake
// is one sentence naming the block and the key.
func TestParseLanguages(t *testing.T) {
	for _, tc := range []struct{ name, toml, want string }{
		{"no run", "[languages.bash]\nfile = \"main.sh\"\n", "[languages.bash] run: the run stage's command is required"},
		{"no file", "[languages.bash]\nrun = [\"bash\", \"{file}\"]\n", "[languages.bash] file: a plain file name"},
		{"file with slash", "[languages.bash]\nrun = [\"bash\"]\nfile = \"../x\"\n", "[languages.bash] file"},
		{"unknown key", "[languages.bash]\nrun = [\"bash\"]\nfile = \"m\"\ncmd = 1\n", "unknown key"},
		{"bad placeholder", "[languages.bash]\nrun = [\"bash\", \"{src}\"]\nfile = \"m\"\n", "the placeholders are {file} and {out}"},
		{"out without compile", "[languages.c]\nrun = [\"{out}\"]\nfile = \"m.c\"\n", "{out} is the compile stage's output"},
		{"alias twice", "[languages.a]\nrun = [\"x\"]\nfile = \"m\"\naliases = [\"b\"]\n[languages.b]\nrun = [\"x\"]\nfile = \"m\"\n", "the name \"b\" is also"},
		{"bad name", "[languages.\"a b\"]\nrun = [\"x\"]\nfile = \"m\"\n", "a language name is letters"},
		{"python alias taken", "[languages.sh]\nrun = [\"x\"]\nfile = \"m\"\naliases = [\"py\"]\n", "the default python's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.toml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseConfig = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestParseLanguagesRootfs: a language's rootfs joins the permitted rootfs
// after the default, python stays served, and the stages' argv keep their
// placeholders until a request fills them.
func TestParseLanguagesRootfs(t *testing.T) {
	c, err := ParseConfig([]byte(`rootfs = ["python"]
[languages.cpp]
rootfs = "gcc"
file = "main.cpp"
compile = ["g++", "-o", "{out}", "{file}"]
run = ["{out}"]
aliases = ["c++"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Rootfs, []string{"python", "gcc"}) {
		t.Errorf("Rootfs = %v, want [python gcc]", c.Rootfs)
	}
	if py := c.Languages["python"]; py == nil || py.Rootfs != "python" {
		t.Errorf("python = %+v, want the default on rootfs python", py)
	}
	if got := expand(c.Languages["cpp"].Compile, "/tmp/main.cpp"); !slices.Equal(got, []string{"g++", "-o", outPath, "/tmp/main.cpp"}) {
		t.Errorf("compile = %v", got)
	}
	if v := c.Languages["cpp"].Version; v != "0" {
		t.Errorf("version = %q, want 0 when none is configured", v)
	}
	d := Config{}.withDefaults()
	if l := d.Languages["python"]; l == nil || l.Rootfs != "python" || !slices.Equal(l.Run, []string{"python3", "{file}"}) {
		t.Errorf("default python = %+v", l)
	}
}
