package serve

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
)

// parseProfiles checks profiles: built-in profile names (package
// profiles), each once; the first is a request's default.
func parseProfiles(names []string) ([]string, error) {
	builtin := profiles.Names()
	for i, n := range names {
		if !slices.Contains(builtin, n) {
			return nil, fmt.Errorf("profiles[%d] %q is not a built-in profile (%s)", i, n, strings.Join(builtin, ", "))
		}
		if slices.Index(names, n) != i {
			return nil, fmt.Errorf("profiles[%d] %q is listed twice", i, n)
		}
	}
	return names, nil
}

// profile picks the profile a request names among the configuration's
// ("" the default, its first).
func (s *Server) profile(field, name string) (string, error) {
	c := s.conf()
	if name == "" {
		return c.Profiles[0], nil
	}
	if !slices.Contains(c.Profiles, name) {
		return "", fmt.Errorf("%s %q is not a profile this server permits (%s)", field, name, strings.Join(c.Profiles, ", "))
	}
	return name, nil
}

// program is the seccomp program of the profile name ("" the default).
func (s *Server) program(name string) *seccomp.Program {
	if name == "" {
		name = s.conf().Profiles[0]
	}
	return s.opts.Seccomp[name]
}

// checkPrograms refuses a configuration that permits a profile whose
// program was not set up at the start (Options.Seccomp).
func (s *Server) checkPrograms(c Config) error {
	if s.opts.Seccomp == nil {
		return nil
	}
	for _, n := range c.Profiles {
		if s.opts.Seccomp[n] == nil {
			return fmt.Errorf("profile %q has no program set up at the start: restart the server to permit it", n)
		}
	}
	return nil
}
