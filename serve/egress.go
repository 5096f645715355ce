package serve

import (
	"fmt"
	"strings"

	"github.com/rljail/rljail/egress"
	"github.com/rljail/rljail/jail"
)

// parseEgressAllow reads egress_allow: the rules a request may ask for,
// each as --allow-host reads it (egress.ParseRule).
func parseEgressAllow(entries []string) ([]egress.Rule, error) {
	var out []egress.Rule
	for i, e := range entries {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("egress_allow[%d]: %v", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// egressEntries checks a request's "egress" against egress_allow: each
// entry a rule as --allow-host reads it that some configured rule covers
// (egress.Rule.Covers: equal, or below a configured *.domain, on the same
// ports). The request never pins a name (--resolve): names resolve as
// the host resolves them, and the egress checks the address it dials.
func (s *Server) egressEntries(entries []string) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	allow := s.conf().EgressAllow
	if len(entries) > 64 {
		return nil, fmt.Errorf("egress: at most 64 entries")
	}
	for i, e := range entries {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("egress[%d]: %v", i, err)
		}
		ok := false
		for _, a := range allow {
			if a.Covers(r) {
				ok = true
				break
			}
		}
		if !ok {
			return nil, fmt.Errorf("egress[%d]: %q is not covered by the server's egress_allow (%s)", i, e, egressNames(allow))
		}
	}
	return entries, nil
}

func egressNames(allow []egress.Rule) string {
	if len(allow) == 0 {
		return "it permits none"
	}
	names := make([]string, len(allow))
	for i, a := range allow {
		names[i] = a.Text
	}
	return strings.Join(names, ", ")
}

// jailEgress builds one jail's egress from a request's checked entries,
// the way the CLI builds --allow-host's (egress.FromLists); nil with none.
// Each jail gets its own: an egress serves one run.
func jailEgress(entries []string) (jail.Egress, error) {
	e, _, err := egress.FromLists([]egress.Source{{AllowFrom: "egress", ResolveFrom: "egress", Allow: entries}}, egress.Limits{}, nil)
	return e, err
}
