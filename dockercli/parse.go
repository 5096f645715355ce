// Package dockercli reads `docker run`'s command line, in docker's own
// grammar, and translates it into rljail run's flags: a runner written for
// docker (`docker run --rm --network none ... IMAGE timeout 10 python ...`)
// runs in rljail when the program found under the name docker is rljail.
//
// What maps onto the jail is honoured (the limits, the grants, the
// environment); what the jail always does is accepted (--rm, --read-only,
// --cap-drop, no-new-privileges); everything that would weaken the jail,
// or that rljail cannot honour, is refused with one sentence that names the
// flag. Nothing here runs a jail: cmd/rljail hands the translated flags to
// the same run path as its own command line.
package dockercli

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/rljail/rljail/spelling"
)

// Run is one `docker run` command line, translated.
type Run struct {
	// Image is the image named on the command line (MapImage maps it to a
	// root filesystem).
	Image string
	// Command is what follows the image, after --entrypoint if one was
	// given: the payload's argv.
	Command []string
	// Interactive (-i) passes the caller's stdin to the payload; without
	// it, as in docker, the payload's stdin is empty.
	Interactive bool
	// Args are rljail run's own flags, in the order given (the image's
	// root filesystem and the command are not among them).
	Args []string
	// Volumes are the grants, as rljail's -v values (also in Args): the
	// files rljail reads for its caller must lie outside the writable ones.
	Volumes []string
	// ImagesFile is --rljail-images: the image mapping file to read
	// instead of the user's and the system's.
	ImagesFile string
	// Help is set for --help: print Usage, run nothing.
	Help bool
	// Timeout is rljail's own kill timer (--rljail-timeout), DefaultTimeout
	// unless given.
	Timeout string
	// DefaultTimer says that --rljail-timeout was not given: Timeout is
	// DefaultTimeout.
	DefaultTimer bool
}

// TimerNotice is the line to print on stderr when the run may go on for
// rljail's whole default kill timer without a word: no --rljail-timeout,
// and the command not run under timeout(1) as the recipes do. docker has
// no timer of its own, so a runner that forgot one would see a run that
// hangs for ten minutes. "" when a timer was chosen.
func (r *Run) TimerNotice() string {
	if !r.DefaultTimer || (len(r.Command) > 0 && path.Base(r.Command[0]) == "timeout") {
		return ""
	}
	return fmt.Sprintf("rljail docker: no --rljail-timeout given: the jail is killed after %s (exit 137); give --rljail-timeout D, or run the command under timeout", DefaultTimeout)
}

// DefaultTimeout is rljail's wall-clock kill timer for a `docker run`,
// which has none: long enough for the jobs a runner starts with a timeout
// of its own inside (`timeout 10 python ...`), and still a bound when it
// forgot one. --rljail-timeout changes it.
const DefaultTimeout = "10m"

// Error is a command line that rljail will not run: one sentence that
// names the flag and says why (exit 125).
type Error struct {
	Flag string // as written: --privileged, -p
	Msg  string
}

func (e *Error) Error() string {
	if e.Flag == "" {
		return e.Msg
	}
	return e.Flag + " " + e.Msg
}

// refuse is the error of a flag that is docker's but not rljail's.
func refuse(flag, why string) error {
	return &Error{Flag: flag, Msg: "is not supported: " + why}
}

// state gathers a command line's flags before they are translated, so
// that a flag given twice keeps its last value, as docker's do.
type state struct {
	run        Run
	memory     string
	memorySwap string
	swapFlag   string
	tmpSize    string
	entrypoint *string
	single     map[string]string // rljail flag -> value, for single-valued flags
	order      []string          // the single-valued flags in first-given order
}

// set records a single-valued rljail flag (the last one given wins).
func (s *state) set(flag, value string) {
	if s.single == nil {
		s.single = map[string]string{}
	}
	if _, ok := s.single[flag]; !ok {
		s.order = append(s.order, flag)
	}
	s.single[flag] = value
}

// add appends a flag that may be repeated (-e, -v).
func (s *state) add(flag, value string) {
	s.run.Args = append(s.run.Args, flag, value)
}

// Parse reads the arguments of `docker run` (those after "run"): flags,
// then the image, then the command. Flags are pflag's, as docker's:
// --memory=256m, --memory 256m, -m 256m, -m256m, -m=256m, combined short
// flags (-it), and -- before the image.
func Parse(args []string) (*Run, error) {
	s := &state{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		var err error
		if strings.HasPrefix(a, "--") {
			i, err = s.long(args, i)
		} else {
			i, err = s.short(args, i)
		}
		if err != nil {
			return nil, err
		}
		if s.run.Help {
			return &s.run, nil
		}
	}
	if i >= len(args) {
		return nil, &Error{Msg: `"docker run" requires at least 1 argument: docker run [OPTIONS] IMAGE [COMMAND] [ARG...]`}
	}
	s.run.Image = args[i]
	s.run.Command = append([]string(nil), args[i+1:]...)
	if s.entrypoint != nil && *s.entrypoint != "" {
		s.run.Command = append([]string{*s.entrypoint}, s.run.Command...)
	}
	if len(s.run.Command) == 0 {
		return nil, &Error{Msg: fmt.Sprintf("no command given after the image %s: rljail's root filesystems have no default command (docker run %s python ...)", s.run.Image, s.run.Image)}
	}
	if err := s.finish(); err != nil {
		return nil, err
	}
	return &s.run, nil
}

// long reads the flag at args[i], which starts with "--", and returns the
// index of its last argument.
func (s *state) long(args []string, i int) (int, error) {
	name, value, hasValue := strings.Cut(args[i][2:], "=")
	spelled := "--" + name
	byLong, _ := flagIndex()
	f, ok := byLong[name]
	if !ok {
		hint := ""
		if s := spelling.Closest(name, longNames()); s != "" {
			hint = "did you mean --" + s + "? "
		}
		return i, &Error{Msg: fmt.Sprintf("unknown flag: %s (%ssee docker run --help; rljail's own flags there start with --rljail-)", spelled, hint)}
	}
	if f.value && !hasValue {
		if i+1 >= len(args) {
			return i, &Error{Msg: fmt.Sprintf("flag needs an argument: %s", spelled)}
		}
		i++
		value = args[i]
	}
	if !f.value && !hasValue {
		value = "true"
	}
	return i, s.apply(f, spelled, value)
}

// short reads a group of short flags at args[i] (-i, -it, -m256m, -m 256m,
// -e=K=V) and returns the index of its last argument.
func (s *state) short(args []string, i int) (int, error) {
	group := args[i][1:]
	for j := 0; j < len(group); j++ {
		c := group[j]
		spelled := "-" + string(c)
		_, byShort := flagIndex()
		f, ok := byShort[c]
		if !ok {
			return i, &Error{Msg: fmt.Sprintf("unknown shorthand flag: %q in %s (see docker run --help)", c, args[i])}
		}
		if !f.value {
			value := "true"
			if j+1 < len(group) && group[j+1] == '=' { // -i=false
				value = group[j+2:]
				j = len(group)
			}
			if err := s.apply(f, spelled, value); err != nil {
				return i, err
			}
			continue
		}
		value := group[j+1:]
		value = strings.TrimPrefix(value, "=")
		if j+1 == len(group) {
			if i+1 >= len(args) {
				return i, &Error{Msg: fmt.Sprintf("flag needs an argument: %q in %s", c, args[i])}
			}
			i++
			value = args[i]
		}
		return i, s.apply(f, spelled, value)
	}
	return i, nil
}

// apply runs the flag's rule on its value.
func (s *state) apply(f *flagDef, spelled, value string) error {
	if !f.value {
		b, err := strconv.ParseBool(value)
		if err != nil {
			return &Error{Msg: fmt.Sprintf("invalid argument %q for %s: it is true or false", value, spelled)}
		}
		value = strconv.FormatBool(b)
	}
	if f.rule == nil {
		return refuse(spelled, f.why)
	}
	err := f.rule(s, spelled, value)
	var e *Error
	if err != nil && !errors.As(err, &e) {
		return &Error{Flag: spelled, Msg: err.Error()}
	}
	return err
}

// finish checks what only the whole command line shows and puts the
// single-valued flags into Args.
func (s *state) finish() error {
	if s.memory != "" {
		s.set("--memory", s.memory)
	}
	if s.memorySwap != "" {
		if s.memory == "" {
			return refuse(s.swapFlag, "it needs --memory, which it must equal: the jail has no swap")
		}
		sw, err1 := parseBytes(s.memorySwap)
		m, err2 := parseBytes(s.memory)
		if err1 != nil || err2 != nil || sw != m {
			return refuse(s.swapFlag+" "+s.memorySwap, "the jail has no swap: give it equal to --memory, or leave it out")
		}
	}
	if s.tmpSize != "" {
		s.set("--tmp-size", s.tmpSize)
	}
	timeout := DefaultTimeout
	if s.run.Timeout != "" {
		timeout = s.run.Timeout
	} else {
		s.run.DefaultTimer = true
	}
	s.run.Timeout = timeout
	s.set("--timeout", timeout)
	for _, f := range s.order {
		s.run.Args = append(s.run.Args, f, s.single[f])
	}
	// A docker container sees none of the caller's directories unless
	// granted: no workspace.
	s.run.Args = append(s.run.Args, "--no-workspace")
	return nil
}

// parseBytes reads a size in docker's spelling (go-units' RAMInBytes: a
// number, a unit b, k, m, g, t or p, binary multiples, an optional b or
// ib after it), for comparing --memory-swap with --memory.
func parseBytes(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := 1.0
	if n := len(t); n > 0 {
		if k := strings.IndexByte("kmgtp", t[n-1]); k >= 0 {
			mult = float64(int64(1) << (10 * (k + 1)))
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return v * mult, nil
}
