package jail

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/rljail/rljail/seccomp"
)

// The result report is encoded by hand. encoding/json builds its encoders
// for a type by reflection on the first Marshal of a process, which cost
// the CLI about 0.2 ms per run, after the payload had exited and before
// the caller got its answer, when the report is asked for (--result, as
// every runner does). The output is byte for byte what encoding/json
// writes for the same struct tags; TestResultJSONIsEncodingJSONs holds the
// two together, for every field, so a field added to Result, Limits,
// Limit, seccomp.Report or seccomp.Denied without a line here fails it.

// MarshalJSON makes json.Marshal (as of a Result nested in another
// record) use AppendJSON.
func (r Result) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil) }

// AppendJSON appends the report as one JSON object, as json.Marshal would
// write it.
func (r Result) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"run_id":`...)
	b = appendString(b, r.RunID)
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(r.ExitCode), 10)
	if r.Signal != 0 {
		b = append(b, `,"signal":`...)
		b = strconv.AppendInt(b, int64(r.Signal), 10)
	}
	if r.SignalName != "" {
		b = append(b, `,"signal_name":`...)
		b = appendString(b, r.SignalName)
	}
	b = append(b, `,"wall_ms":`...)
	b = strconv.AppendInt(b, r.WallMS, 10)
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, r.Error)
	}
	b = append(b, `,"limits":`...)
	if b, err = r.Limits.appendJSON(b); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{`,"cpu_user_ms":`, r.CPUUserMS}, {`,"cpu_system_ms":`, r.CPUSystemMS},
		{`,"memory_peak_bytes":`, r.MemoryPeakBytes}, {`,"pids_peak":`, r.PidsPeak},
		{`,"oom_kills":`, r.OOMKills}, {`,"stdout_bytes":`, r.StdoutBytes}, {`,"stderr_bytes":`, r.StderrBytes},
	} {
		b = append(b, f.name...)
		b = strconv.AppendInt(b, f.v, 10)
	}
	b = append(b, `,"stdout_truncated":`...)
	b = strconv.AppendBool(b, r.StdoutTruncated)
	b = append(b, `,"stderr_truncated":`...)
	b = strconv.AppendBool(b, r.StderrTruncated)
	if len(r.Warnings) > 0 {
		b = append(b, `,"warnings":`...)
		b = appendStrings(b, r.Warnings)
	}
	if r.Seccomp != nil {
		b = append(b, `,"seccomp":`...)
		b = appendSeccompReport(b, r.Seccomp)
	}
	if r.Network != nil {
		b = append(b, `,"network":`...)
		b = r.Network.appendJSON(b)
	}
	if r.Output != nil {
		b = append(b, `,"output":`...)
		b = r.Output.appendJSON(b)
	}
	return append(b, '}'), nil
}

func (o *Output) appendJSON(b []byte) []byte {
	for i, s := range []struct {
		name, text, tail string
		omitted          int64
	}{
		{"stdout", o.Stdout, o.StdoutTail, o.StdoutOmittedBytes},
		{"stderr", o.Stderr, o.StderrTail, o.StderrOmittedBytes},
	} {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = appendString(b, s.name)
		b = append(b, ':')
		b = appendString(b, s.text)
		if s.tail != "" {
			b = append(b, `,"`+s.name+`_tail":`...)
			b = appendString(b, s.tail)
		}
		if s.omitted != 0 {
			b = append(b, `,"`+s.name+`_omitted_bytes":`...)
			b = strconv.AppendInt(b, s.omitted, 10)
		}
	}
	return append(b, '}')
}

func (l Limits) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"timeout_ms":`...)
	b = strconv.AppendInt(b, l.TimeoutMS, 10)
	b = append(b, `,"tmp_size_bytes":`...)
	b = strconv.AppendInt(b, l.TmpSizeBytes, 10)
	b = append(b, `,"network":`...)
	b = appendString(b, l.Network)
	for _, f := range []struct {
		name string
		v    Limit
	}{
		{`,"memory_bytes":`, l.Memory}, {`,"pids":`, l.Pids}, {`,"cpus":`, l.CPUs},
		{`,"cpu_time_ms":`, l.CPUTimeMS}, {`,"output_bytes":`, l.Output},
		{`,"file_size_bytes":`, l.FileSize}, {`,"nofile":`, l.NoFile},
	} {
		b = append(b, f.name...)
		b = append(b, `{"value":`...)
		var err error
		if b, err = appendFloat(b, f.v.Value); err != nil {
			return nil, fmt.Errorf("limit %s: %w", f.name[2:len(f.name)-2], err)
		}
		b = append(b, `,"mechanism":`...)
		b = appendString(b, f.v.Mechanism)
		b = append(b, '}')
	}
	b = append(b, `,"cgroup_placement":`...)
	b = appendString(b, l.Placement)
	if l.SystemdScope != "" {
		b = append(b, `,"systemd_scope":`...)
		b = appendString(b, l.SystemdScope)
	}
	if l.CgroupPath != "" {
		b = append(b, `,"cgroup_path":`...)
		b = appendString(b, l.CgroupPath)
	}
	if l.ThreadPools != 0 {
		b = append(b, `,"thread_pools":`...)
		b = strconv.AppendInt(b, int64(l.ThreadPools), 10)
	}
	return append(b, '}'), nil
}

func appendSeccompReport(b []byte, s *seccomp.Report) []byte {
	b = append(b, `{"profile":`...)
	b = appendString(b, s.Profile)
	b = append(b, `,"mode":`...)
	b = appendString(b, s.Mode)
	if len(s.Added) > 0 {
		b = append(b, `,"added":`...)
		b = appendStrings(b, s.Added)
	}
	if len(s.Removed) > 0 {
		b = append(b, `,"removed":`...)
		b = appendStrings(b, s.Removed)
	}
	if s.Violation != "" {
		b = append(b, `,"violation":`...)
		b = appendString(b, s.Violation)
	}
	if len(s.Denied) > 0 {
		b = append(b, `,"denied":[`...)
		for i, d := range s.Denied {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"syscall":`...)
			b = appendString(b, d.Syscall)
			if len(d.Args) > 0 {
				b = append(b, `,"args":{`...)
				keys := make([]string, 0, len(d.Args))
				for k := range d.Args {
					keys = append(keys, k)
				}
				slices.Sort(keys) // encoding/json sorts a map's keys
				for j, k := range keys {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendString(b, k)
					b = append(b, ':')
					b = strconv.AppendUint(b, d.Args[k], 10)
				}
				b = append(b, '}')
			}
			b = append(b, `,"count":`...)
			b = strconv.AppendInt(b, int64(d.Count), 10)
			if d.Filtered {
				b = append(b, `,"filtered":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendFloat writes a float64 as encoding/json does: the shortest
// representation, in exponent form only below 1e-6 or from 1e21 on, with
// a one-digit negative exponent unpadded. NaN and the infinities are not
// JSON.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v is not a JSON number", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 is written e-7
		b = b[:n-1]
	}
	return b, nil
}

// appendString writes s as a JSON string with encoding/json's escaping:
// quotes, backslashes and control characters escaped (\b \f \n \r \t by
// name), <, > and & as \u escapes so that the report is safe inside HTML,
// invalid UTF-8 as U+FFFD, and U+2028 and U+2029, which end a line in
// JavaScript, escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
