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
			_, err := buildSpec(c, func(string, ...any) {})
			return err
		})
		if err := app.Run([]string{"rljail", "run", "-q", "--rootfs", rootfsDir, "--", "python3", "-c", "pass"}); err != nil {
			b.Fatal(err)
		}
	}
}
