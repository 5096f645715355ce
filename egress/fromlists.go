package egress

import "github.com/rljail/rljail/jail"

// Source is one place a run's allowlist comes from, as plain strings:
// --allow-host and --resolve, a profile's [network] table, a serve
// request's "egress". AllowFrom and ResolveFrom name it in a bad entry's
// message.
type Source struct {
	AllowFrom, ResolveFrom string
	Allow, Resolve         []string
}

// FromLists builds a run's egress from its sources, in order (a later
// pin for a name replaces an earlier one): nil, no egress made at all,
// when no source allows a host. pinNotice is List.PinNotice, for the
// caller to say once. The CLI (--allow-host) and rljail serve (a
// request's "egress") both build theirs here, so that a rule means the
// same from either.
func FromLists(sources []Source, lim Limits, notify func(string)) (e jail.Egress, pinNotice string, err error) {
	n := 0
	for _, s := range sources {
		n += len(s.Allow)
	}
	if n == 0 {
		return nil, "", nil
	}
	list, err := NewList(nil, nil)
	if err != nil {
		return nil, "", err
	}
	for _, s := range sources {
		if err := list.Add(s.AllowFrom, s.ResolveFrom, s.Allow, s.Resolve); err != nil {
			return nil, "", err
		}
	}
	return New(Config{List: list, Limits: lim, Notify: notify}), list.PinNotice(), nil
}

// Covers tells whether every connection rule o allows, r allows too: the
// same ports (each of o's among r's), and an equal name, a name (or
// wildcard) below r's wildcard, or an address prefix within r's. rljail
// serve permits a request's "egress" entry only when a configured one
// covers it.
func (r Rule) Covers(o Rule) bool {
	for _, p := range o.Ports {
		if !r.hasPort(p) {
			return false
		}
	}
	switch {
	case r.IsAddress() || o.IsAddress():
		return r.IsAddress() && o.IsAddress() && o.Prefix.Bits() >= r.Prefix.Bits() && r.Prefix.Contains(o.Prefix.Addr())
	case r.Wildcard:
		return (o.Wildcard && o.Name == r.Name) || r.matchesName(o.Name)
	default:
		return !o.Wildcard && o.Name == r.Name
	}
}
