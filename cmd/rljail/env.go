package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rljail/rljail/hostfile"
)

// envEntry turns a -e value into KEY=VALUE. A bare KEY takes rljail's own
// value and is dropped when unset (as docker run does); ok is false then.
func envEntry(e string) (kv string, ok bool, err error) {
	key, val, hasVal := strings.Cut(e, "=")
	if key == "" {
		return "", false, errors.New("empty variable name")
	}
	if strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "", false, fmt.Errorf("variable name %q contains whitespace or a control character", key)
	}
	if strings.IndexByte(val, 0) >= 0 {
		return "", false, fmt.Errorf("value of %s contains a NUL byte", key)
	}
	if hasVal {
		return key + "=" + val, true, nil
	}
	v, set := os.LookupEnv(key)
	if !set {
		return "", false, nil
	}
	return key + "=" + v, true, nil
}

// maxEnvFile is the largest --env-file read.
const maxEnvFile = 16 << 20

// readEnvFile reads KEY=VALUE lines (docker's --env-file format: no
// quoting, # starts a comment line, a bare KEY is passed from rljail's
// environment), through guard: never from a volume the jail may write,
// never a planted link, never blocking without a bound.
func readEnvFile(guard *hostfile.Guard, path string) ([]string, error) {
	data, err := guard.ReadFile("--env-file", path, maxEnvFile)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimSpace(text)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		kv, ok, err := envEntry(strings.TrimLeft(text, " \t"))
		if err != nil {
			return nil, fmt.Errorf("--env-file %s:%d: %w", path, line, err)
		}
		if ok {
			out = append(out, kv)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("--env-file %s:%d: the line is longer than 1 MiB", path, line+1)
		}
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	return out, nil
}
