package main

import (
	"flag"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// urfave/cli v2 answers IsSet for a flag that was not given by walking
// every flag and computing each one's names with a regular expression
// (FlagNames); Command.Run asks that for every name of every flag
// (runFlagActions). With run's thirty flags that was about half a
// millisecond of every start (BenchmarkCLIBuildSpec), paid once per jailed
// code call. withFixedNames wraps the value flags so that Names returns a
// list computed once. The wrappers embed the flag: Apply, help, actions
// and values are the original's. The help output looks for *cli.BoolFlag
// only to honour Hidden and DisableDefaultText, so bool flags that set
// either stay as they are.
func withFixedNames(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			out[i] = stringFlag{f, flagNames(f.Name, f.Aliases)}
		case *cli.StringSliceFlag:
			out[i] = stringSliceFlag{f, flagNames(f.Name, f.Aliases)}
		case *cli.Int64Flag:
			out[i] = int64Flag{f, flagNames(f.Name, f.Aliases)}
		case *cli.IntFlag:
			out[i] = intFlag{f, flagNames(f.Name, f.Aliases)}
		case *cli.Float64Flag:
			out[i] = float64Flag{f, flagNames(f.Name, f.Aliases)}
		case *cli.BoolFlag:
			if f.Hidden || f.DisableDefaultText {
				out[i] = f
			} else {
				out[i] = boolFlag{f, flagNames(f.Name, f.Aliases)}
			}
		default:
			out[i] = f
		}
	}
	return out
}

// flagNames is what cli.FlagNames returns for a flag, without its regular
// expression ("[, ]+.*", removed wherever it matches), whose first run in
// a process costs more than the rest of this file: each line of each name
// is cut at its first comma or space.
func flagNames(name string, aliases []string) []string {
	out := make([]string, 0, 1+len(aliases))
	for _, n := range append([]string{name}, aliases...) {
		lines := strings.Split(n, "\n")
		for i, l := range lines {
			if j := strings.IndexAny(l, ", "); j >= 0 {
				lines[i] = l[:j]
			}
		}
		out = append(out, strings.Join(lines, "\n"))
	}
	return out
}

type stringFlag struct {
	*cli.StringFlag
	names []string
}

func (f stringFlag) Names() []string { return f.names }

// Apply registers the flag under its names as cli.StringFlag.Apply does,
// without FlagNames' regular expression (which it runs again for each
// name: with the int flags' below, a quarter of the instructions the
// supervisor of `rljail -- true` executed, callgrind). cli's own remembers
// the default for the help's default text, which is the flag's Value here
// too; a flag with a source in the environment or a file, or a
// destination (none of rljail's), is left to it.
func (f stringFlag) Apply(set *flag.FlagSet) error {
	if len(f.EnvVars) > 0 || f.FilePath != "" || f.Destination != nil {
		return f.StringFlag.Apply(set)
	}
	for _, name := range f.names {
		set.String(name, f.Value, f.Usage)
	}
	return nil
}

type stringSliceFlag struct {
	*cli.StringSliceFlag
	names []string
}

func (f stringSliceFlag) Names() []string { return f.names }

type int64Flag struct {
	*cli.Int64Flag
	names []string
}

func (f int64Flag) Names() []string { return f.names }

type intFlag struct {
	*cli.IntFlag
	names []string
}

func (f intFlag) Names() []string { return f.names }

// Apply registers the flag as cli.IntFlag.Apply does, without FlagNames
// (stringFlag.Apply says why).
func (f intFlag) Apply(set *flag.FlagSet) error {
	if len(f.EnvVars) > 0 || f.FilePath != "" || f.Destination != nil {
		return f.IntFlag.Apply(set)
	}
	for _, name := range f.names {
		set.Int(name, f.Value, f.Usage)
	}
	return nil
}

type float64Flag struct {
	*cli.Float64Flag
	names []string
}

func (f float64Flag) Names() []string { return f.names }

type boolFlag struct {
	*cli.BoolFlag
	names []string
}

func (f boolFlag) Names() []string { return f.names }

// Apply registers the flag under its names as cli.BoolFlag.Apply does,
// which computes the names again with FlagNames' regular expression (its
// first run in a process allocates 36 KiB). A flag that takes its value
// from the environment or a file, or keeps a destination or a count (none
// of rljail's), is left to cli.BoolFlag.Apply.
func (f boolFlag) Apply(set *flag.FlagSet) error {
	if len(f.EnvVars) > 0 || f.FilePath != "" || f.Destination != nil || f.Count != nil {
		return f.BoolFlag.Apply(set)
	}
	v := &boolValue{v: f.Value}
	for _, name := range f.names {
		set.Var(v, name, f.Usage)
	}
	return nil
}

// boolValue is a bool flag's value, one for all of its names.
type boolValue struct{ v bool }

func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.v = v
	return nil
}

func (b *boolValue) String() string   { return strconv.FormatBool(b.v) }
func (b *boolValue) Get() any         { return b.v }
func (b *boolValue) IsBoolFlag() bool { return true }
