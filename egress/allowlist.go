// Package egress is a run's network egress by allowlist: the jail keeps
// its own empty network namespace, and the supervisor, on the host, serves
// listening sockets that the jail's init made on the jail's loopback (an
// HTTP proxy, a SOCKS5 proxy, a DNS responder and a transparent listener
// for the synthetic addresses that the responder hands out). Every
// connection is checked against the list by name, resolved on the host,
// checked again by the address that resolution gave (no loopback, private,
// link-local or metadata address unless a rule names it by IP), and made
// from the host to exactly that address. No program runs in the jail for
// this, and the jail holds no socket to the host's network.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/rljail/rljail/jail"
)

// DefaultPorts are the ports of a rule written without one.
var DefaultPorts = []uint16{443, 80}

// Rule is one --allow-host entry: a name, a "*." suffix (subdomains only),
// or an address prefix (an IP literal is a /32 or /128), on some ports.
type Rule struct {
	// Text is the rule as written, for messages and the report.
	Text string
	// Name is an exact host name (normalised), or, with Wildcard, the
	// suffix whose subdomains match.
	Name     string
	Wildcard bool
	// Prefix is set for a rule by address.
	Prefix netip.Prefix
	Ports  []uint16
}

// IsAddress tells whether the rule names addresses rather than a name.
func (r Rule) IsAddress() bool { return r.Prefix.IsValid() }

func (r Rule) hasPort(p uint16) bool {
	for _, q := range r.Ports {
		if q == p {
			return true
		}
	}
	return false
}

// matchesName tells whether the normalised name falls under the rule.
func (r Rule) matchesName(name string) bool {
	if r.IsAddress() {
		return false
	}
	if r.Wildcard {
		// *.example.org matches a.example.org and a.b.example.org, never
		// example.org itself nor badexample.org.
		return strings.HasSuffix(name, "."+r.Name)
	}
	return name == r.Name
}

// schemePorts are the URL schemes a rule may be written with, and the
// port each gives a rule that names none: a URL says one port, not both.
var schemePorts = map[string]uint16{"http": 80, "https": 443}

// ParseRule parses one --allow-host entry: HOST[:PORT], where HOST is a
// name, *.suffix, an IPv4 or IPv6 literal (IPv6 in brackets when a port
// follows) or a CIDR; or a URL, http://HOST[:PORT] or https://HOST[:PORT],
// whose scheme gives the port when it names none (80, 443). A URL's path
// may only be "/": a rule allows a host and port, and a path in it
// (https://api.example.org/v1) would read as a limit that nothing
// enforces, so it is refused rather than dropped. The error names the
// value and what is wrong with it, never a parser's own message.
func ParseRule(s string) (Rule, error) {
	r := Rule{Text: s}
	fail := func(format string, a ...any) (Rule, error) {
		return r, fmt.Errorf("%q: %s", s, fmt.Sprintf(format, a...))
	}
	if s == "" {
		return fail("an empty host")
	}
	spec, ports := s, DefaultPorts
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		port, known := schemePorts[strings.ToLower(scheme)]
		if !known {
			return fail("the scheme %q is neither http nor https: a rule is HOST[:PORT], http://HOST[:PORT] or https://HOST[:PORT]", scheme)
		}
		authority, path := rest, ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority, path = rest[:i], rest[i:]
		}
		if path != "" && path != "/" {
			hint := "write " + strings.ToLower(scheme) + "://" + authority
			if strings.Trim(path[1:], "0123456789") == "" && !strings.ContainsAny(authority, ":[") {
				hint += ", or a CIDR without a scheme (" + authority + path + ":" + strconv.Itoa(int(port)) + ")"
			}
			return fail("a rule allows a whole host and port, not the path %q: %s", path, hint)
		}
		if strings.Contains(authority, "@") {
			return fail("a rule has no user name or password (the part before @)")
		}
		if authority == "" {
			return fail("no host after %s://", scheme)
		}
		spec, ports = authority, []uint16{port}
	}
	host, port, err := splitHostPort(spec)
	if err != nil {
		return fail("%v", err)
	}
	if port == "" {
		r.Ports = append([]uint16(nil), ports...)
	} else {
		p, err := parsePort(port)
		if err != nil {
			return fail("%v", err)
		}
		r.Ports = []uint16{p}
	}
	if strings.Contains(host, "/") {
		pfx, err := parsePrefix(host)
		if err != nil {
			return fail("%v", err)
		}
		r.Prefix = pfx
		return r, nil
	}
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		name, err := NormalizeName(suffix)
		if err != nil {
			return fail("%v", err)
		}
		if !strings.Contains(name, ".") {
			// *.com would open a whole top-level domain: surely a mistake.
			return fail("a wildcard needs a suffix of two labels at least (*.example.org)")
		}
		r.Name, r.Wildcard = name, true
		return r, nil
	}
	if strings.Contains(host, "*") {
		return fail("* only as a whole first label (*.example.org)")
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return fail("%v", err)
	}
	if h.Addr.IsValid() {
		r.Prefix = netip.PrefixFrom(h.Addr, h.Addr.BitLen())
		return r, nil
	}
	r.Name = h.Name
	return r, nil
}

// parsePrefix reads ADDRESS/BITS, an IPv4-mapped prefix as the IPv4 one
// it maps, with errors that say which part is wrong (netip's own name
// its internal steps: ParseAddr("http:/")).
func parsePrefix(s string) (netip.Prefix, error) {
	addr, bits, _ := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		if h, err := NormalizeHost(addr); err == nil && h.Name != "" {
			return netip.Prefix{}, fmt.Errorf("a rule allows a whole host and port, not a path: write %s (or http://%s, https://%s)", addr, addr, addr)
		}
		return netip.Prefix{}, fmt.Errorf("not a CIDR (ADDRESS/BITS): %q is not an IP address", addr)
	}
	n, err := strconv.Atoi(bits)
	if err != nil || n < 0 || n > a.BitLen() || strings.Trim(bits, "0123456789") != "" {
		return netip.Prefix{}, fmt.Errorf("not a CIDR: the prefix length %q is not a number from 0 to %d", bits, a.BitLen())
	}
	pfx := netip.PrefixFrom(a, n)
	if a.Is4In6() {
		if n < 96 {
			return netip.Prefix{}, fmt.Errorf("not a CIDR: an IPv4-mapped prefix is /96 at least")
		}
		pfx = netip.PrefixFrom(a.Unmap(), n-96)
	}
	return pfx.Masked(), nil
}

// Pin is one --resolve NAME:ADDR entry: the name resolves to Addr, without
// asking the host's resolver. The user who wrote it vouches for that name
// and that address: the pin lets the name (and no other, and no literal)
// reach the address on the ports the rules allow the name, even where
// the address is not public (List.pinRefusal says which are not opened).
type Pin struct {
	Name string
	Addr netip.Addr
}

// ParsePin parses NAME:ADDR (as curl's --resolve, without its port;
// NAME:PORT:ADDR is accepted too and its port ignored: the rules say the
// ports). An address no TCP connection can be made to (unspecified,
// multicast, broadcast) is refused here rather than at every connection.
func ParsePin(s string) (Pin, error) {
	name, addr, ok := strings.Cut(s, ":")
	if !ok || name == "" || addr == "" {
		return Pin{}, fmt.Errorf("%q is not NAME:ADDR", s)
	}
	if port, rest, ok := strings.Cut(addr, ":"); ok && !strings.Contains(rest, ":") {
		if _, err := parsePort(port); err == nil {
			addr = rest // curl's NAME:PORT:ADDR
		}
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	n, err := NormalizeName(name)
	if err != nil {
		return Pin{}, fmt.Errorf("%q: %w", s, err)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return Pin{}, fmt.Errorf("%q: %q is not an IP address", s, addr)
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return Pin{}, fmt.Errorf("%q: %s is no address to connect to", s, a)
	}
	return Pin{Name: n, Addr: a}, nil
}

// Host is a normalised destination: a name or an address.
type Host struct {
	Name string
	Addr netip.Addr
}

func (h Host) String() string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return h.Name
}

// NormalizeHost reads a host as a client wrote it (a CONNECT line, a
// SOCKS name, a Host header) into the one form the list is matched
// against: IPv6 literals with or without brackets and IPv4-mapped ones,
// IPv4 in the decimal, octal and hexadecimal forms that inet_aton takes
// (0177.1, 2130706433, 0x7f.0.0.1), names in lower case without a
// trailing dot, and internationalised names as punycode. A name that
// could mean something else to another parser is refused rather than
// guessed at.
func NormalizeHost(s string) (Host, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if i := strings.IndexByte(s, '%'); i >= 0 {
		return Host{}, fmt.Errorf("%q: a zoned address is not allowed", s)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return Host{Addr: a.Unmap()}, nil
	}
	if a, ok := parseInetAton(strings.TrimSuffix(s, ".")); ok {
		return Host{Addr: a}, nil
	}
	n, err := NormalizeName(s)
	if err != nil {
		return Host{}, err
	}
	return Host{Name: n}, nil
}

// idnaProfile maps a name as a resolver lookup would (UTS #46), and
// refuses what it cannot map: a name is matched in the form the host's
// resolver is asked.
var idnaProfile = sync.OnceValue(func() *idna.Profile {
	return idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true), idna.VerifyDNSLength(true), idna.BidiRule())
})

// NormalizeName turns a host name into its ASCII, lower-case form without
// a trailing dot.
func NormalizeName(s string) (string, error) {
	if s == "" {
		return "", errors.New("an empty host name")
	}
	if strings.HasSuffix(s, "..") {
		return "", fmt.Errorf("%q is not a host name", s)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q is not a host name: not UTF-8", s)
	}
	s = strings.TrimSuffix(s, ".")
	a, err := idnaProfile().ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a host name: %v", s, err)
	}
	a = strings.ToLower(a)
	// The normal form must be its own: a name that maps to something
	// that maps further would match differently at each step.
	if again, err := idnaProfile().ToASCII(a); err != nil || strings.ToLower(again) != a {
		return "", fmt.Errorf("%q is not a host name", s)
	}
	if a == "" || len(a) > 253 {
		return "", fmt.Errorf("%q is not a host name", s)
	}
	last := a[strings.LastIndexByte(a, '.')+1:]
	if _, err := strconv.ParseUint(last, 0, 64); err == nil || strings.Trim(last, "0123456789") == "" {
		// A numeric last label is an address to some parsers (1.2.3.4.5,
		// 0x7f): never a name to match.
		return "", fmt.Errorf("%q is neither an address nor a host name", s)
	}
	return a, nil
}

// parseInetAton reads the IPv4 forms of inet_aton(3): one to four parts,
// each decimal, octal (leading 0) or hexadecimal (0x), the last filling
// the remaining bytes.
func parseInetAton(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals []uint64
	for _, p := range parts {
		if p == "" {
			return netip.Addr{}, false
		}
		base := 10
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals = append(vals, v)
	}
	var ip uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		ip |= v << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*uint(5-len(vals))) {
		return netip.Addr{}, false
	}
	ip |= last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// splitHostPort splits HOST[:PORT] where HOST may be a bracketed IPv6
// literal, a bare IPv6 literal (no port then) or a CIDR.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("an unclosed [")
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, "", nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", errors.New("text after ]")
		}
		return host, rest[1:], nil
	}
	if strings.Count(s, ":") > 1 {
		return s, "", nil // a bare IPv6 literal or prefix
	}
	host, port, _ = strings.Cut(s, ":")
	if strings.Contains(s, ":") && port == "" {
		return "", "", errors.New("an empty port")
	}
	return host, port, nil
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(p), nil
}

// List is the allowlist of one run.
type List struct {
	Rules []Rule
	Pins  map[string]netip.Addr
}

// NewList parses --allow-host and --resolve entries.
func NewList(allow, resolve []string) (*List, error) {
	l := &List{Pins: map[string]netip.Addr{}}
	if err := l.Add("--allow-host", "--resolve", allow, resolve); err != nil {
		return nil, err
	}
	return l, nil
}

// Add parses more entries into the list, from a source whose rules and
// pins a bad entry's message names with allowFrom and resolveFrom (the
// flags, or a profile's [network] table). A later pin for a name
// replaces an earlier one: the command line's, a profile's.
func (l *List) Add(allowFrom, resolveFrom string, allow, resolve []string) error {
	for _, a := range allow {
		r, err := ParseRule(a)
		if err != nil {
			return fmt.Errorf("%s %w", allowFrom, err)
		}
		l.Rules = append(l.Rules, r)
	}
	for _, s := range resolve {
		p, err := ParsePin(s)
		if err != nil {
			return fmt.Errorf("%s %w", resolveFrom, err)
		}
		if l.Pins == nil {
			l.Pins = map[string]netip.Addr{}
		}
		l.Pins[p.Name] = p.Addr
	}
	return nil
}

// AllowsName tells whether a connection to the name on port is allowed,
// before resolution.
func (l *List) AllowsName(name string, port uint16) bool {
	for _, r := range l.Rules {
		if r.matchesName(name) && r.hasPort(port) {
			return true
		}
	}
	return false
}

// NameListed tells whether any rule names the name, on whatever port: a
// name the resolver answers.
func (l *List) NameListed(name string) bool {
	for _, r := range l.Rules {
		if r.matchesName(name) {
			return true
		}
	}
	return false
}

// AllowsAddrRule tells whether a rule by address names a on port: the
// only way to reach an address that is refused by default, and the only
// way to reach any address written as a literal.
func (l *List) AllowsAddrRule(a netip.Addr, port uint16) bool {
	a = a.Unmap()
	for _, r := range l.Rules {
		if r.IsAddress() && r.Prefix.Contains(a) && r.hasPort(port) {
			return true
		}
	}
	return false
}

// NamePorts lists the ports that some rule by name allows: the ports of
// the transparent listener.
func (l *List) NamePorts() []uint16 {
	seen := map[uint16]bool{}
	var out []uint16
	for _, r := range l.Rules {
		if r.IsAddress() {
			continue
		}
		for _, p := range r.Ports {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// ExactNames lists the names of rules that are not wildcards, for the
// jail's /etc/hosts.
func (l *List) ExactNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range l.Rules {
		if !r.IsAddress() && !r.Wildcard && !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r.Name)
		}
	}
	return out
}

// PinReport is the pins, by name, for the run report: each with why its
// address is not public and why it needs a rule by address besides the
// pin (pinNeedsRule), when it does.
func (l *List) PinReport() []jail.ResolvePin {
	names := make([]string, 0, len(l.Pins))
	for n := range l.Pins {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []jail.ResolvePin
	for _, n := range names {
		a := l.Pins[n]
		out = append(out, jail.ResolvePin{Name: n, Address: a.String(), NonPublic: refusedByDefault(a), NeedsRule: pinNeedsRule(a)})
	}
	return out
}

// PinNotice is the one line rljail prints when a pin gives a name that
// some rule allows an address that is not public: what the run opens
// beyond the public internet should not pass unseen. "" when none does.
func (l *List) PinNotice() string {
	var parts []string
	for _, p := range l.PinReport() {
		if p.NonPublic == "" || !l.NameListed(p.Name) {
			continue
		}
		part := fmt.Sprintf("%s %s (%s", p.Name, p.Address, p.NonPublic)
		if p.NeedsRule != "" {
			part += "; it needs " + p.NeedsRule
		}
		parts = append(parts, part+")")
	}
	if len(parts) == 0 {
		return ""
	}
	return "--resolve opens an address that is not public to the name pinned to it, and to no other name, on the ports the rules allow that name: " + strings.Join(parts, "; ")
}
