package main

import (
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runApp is the CLI with run's action replaced by inspect.
func runApp(inspect func(c *cli.Context) error) *cli.App {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, c := range app.Commands {
		if c.Name == "run" {
			c.Action = inspect
		}
	}
	return app
}

// TestFlagsSetAgreesWithIsSet checks flagsSet against urfave/cli's own
// IsSet for every name of every run flag, given by long name, by alias or
// not at all.
func TestFlagsSetAgreesWithIsSet(t *testing.T) {
	tests := [][]string{
		{},
		{"--memory", "1g", "--timeout", "3s"},
		{"-m", "1g", "-v", "/tmp:/data", "-e", "A=1", "-q"},
		{"--tmp-size", "1m", "--cpus", "0.5", "--pids-limit", "9", "--nofile", "10", "--cpu-time", "1s"},
		{"--output-limit", "1k", "--file-size", "1k", "--result-fd", "3", "--no-workspace", "-w", "/tmp"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ran := false
			app := runApp(func(c *cli.Context) error {
				ran = true
				set := flagsSet(c)
				for _, f := range c.Command.Flags {
					for _, n := range f.Names() {
						if set[n] != c.IsSet(n) {
							t.Errorf("flag %s: flagsSet says %v, IsSet %v", n, set[n], c.IsSet(n))
						}
					}
				}
				return nil
			})
			argv := append(append([]string{"rljail", "run"}, args...), "--", "true")
			if err := app.Run(argv); err != nil || !ran {
				t.Fatalf("run %q: %v (action ran: %v)", argv, err, ran)
			}
		})
	}
}

// TestWithFixedNames checks that the wrapped flags keep their names.
func TestWithFixedNames(t *testing.T) {
	orig := []cli.Flag{
		&cli.StringFlag{Name: "memory", Aliases: []string{"m"}},
		&cli.StringSliceFlag{Name: "volume", Aliases: []string{"v"}},
		&cli.Int64Flag{Name: "nofile"},
		&cli.IntFlag{Name: "result-fd"},
		&cli.Float64Flag{Name: "cpus"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}},
	}
	fixed := withFixedNames(orig)
	for i, f := range fixed {
		if got, want := f.Names(), orig[i].Names(); !slices.Equal(got, want) {
			t.Errorf("flag %d: names %q, want %q", i, got, want)
		}
	}
}

// TestFlagNames compares flagNames with urfave/cli's FlagNames on names
// and aliases with the separators and blanks FlagNames cuts at, and on
// every flag of every command of the CLI.
func TestFlagNames(t *testing.T) {
	cases := [][]string{
		{"memory", "m"},
		{"volume", "v", "vol"},
		{"a, b", " c", "d e", ",x", "  ", ""},
		{"", "q"},
		{"tab\tname", "nl\nname", " lead", "trail ", "x,,y"},
		{"a b\nc d", "a,\n,b", "\n", "x\ny z\n"},
	}
	for _, c := range cases {
		if got, want := flagNames(c[0], c[1:]), cli.FlagNames(c[0], c[1:]); !slices.Equal(got, want) {
			t.Errorf("flagNames(%q, %q) = %q, want %q", c[0], c[1:], got, want)
		}
	}
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, cmd := range app.Commands {
		for _, f := range cmd.Flags {
			// The wrappers of withFixedNames embed the flag, whose Name
			// and Aliases they promote.
			v := reflect.Indirect(reflect.ValueOf(f))
			name, aliases := v.FieldByName("Name").String(), v.FieldByName("Aliases").Interface().([]string)
			if got, want := f.Names(), cli.FlagNames(name, aliases); !slices.Equal(got, want) {
				t.Errorf("%s --%s: names %q, want %q", cmd.Name, name, got, want)
			}
		}
	}
}

// BenchmarkCLIBuildSpec measures rljail's flag handling and spec building
// up to the jail, which every start pays.
func BenchmarkCLIBuildSpec(b *testing.B) {
	rootfsDir := os.Getenv("RLJAIL_ROOTFS")
	if rootfsDir == "" {
		rootfsDir = "/var/lib/rljail/rootfs/python"
	}
	for i := 0; i < b.N; i++ {
		app := runApp(func(c *cli.Context) error {
			guard, prof, err := loadProfile(c)
			if err != nil {
				return err
			}
			spec, err := buildSpec(c, flagsSet(c), prof, guard, func(string, ...any) {})
			if err != nil {
				return err
			}
			return prepareRootfs(c, prof, guard, func(string, ...any) {}, &spec)
		})
		if err := app.Run([]string{"rljail", "run", "-q", "--rootfs", rootfsDir, "--", "python3", "-c", "pass"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBoolFlagsParseAsUrfaves parses each bool flag of run, by every
// name and in every form, with the wrapped flags and with urfave/cli's
// own, and compares what Bool and IsSet say.
func TestBoolFlagsParseAsUrfaves(t *testing.T) {
	forms := [][]string{{}, {"-%s"}, {"--%s"}, {"--%s=true"}, {"--%s=false"}, {"-%s=0"}, {"--%s", "--%s=false"}}
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	var run *cli.Command
	for _, c := range app.Commands {
		if c.Name == "run" {
			run = c
		}
	}
	var bools []boolFlag
	for _, f := range run.Flags {
		if b, ok := f.(boolFlag); ok {
			bools = append(bools, b)
		}
	}
	if len(bools) < 4 {
		t.Fatalf("run has %d wrapped bool flags, want the 4 or more it had", len(bools))
	}
	parse := func(flags []cli.Flag, argv []string) (map[string]bool, error) {
		got := map[string]bool{}
		a := &cli.App{Name: "rljail", Writer: io.Discard, ErrWriter: io.Discard, Flags: flags, Action: func(c *cli.Context) error {
			for _, f := range flags {
				for _, n := range f.Names() {
					got[n] = c.Bool(n)
					got[n+" set"] = c.IsSet(n)
				}
			}
			return nil
		}}
		return got, a.Run(argv)
	}
	for _, b := range bools {
		for _, name := range b.names {
			for _, form := range forms {
				argv := []string{"rljail"}
				for _, f := range form {
					argv = append(argv, strings.ReplaceAll(f, "%s", name))
				}
				// Fresh flags each time: Apply keeps state in the flag.
				orig := *b.BoolFlag
				want, werr := parse([]cli.Flag{&orig}, argv)
				orig2 := *b.BoolFlag
				got, gerr := parse([]cli.Flag{boolFlag{&orig2, b.names}}, argv)
				if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
					t.Errorf("%q: wrapped %v (%v), urfave/cli's %v (%v)", argv, got, gerr, want, werr)
				}
			}
		}
	}
}
