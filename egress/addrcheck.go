package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// refusedPrefixes are the addresses no connection reaches unless a rule
// names them by address: the host itself and its neighbours. A name that
// resolves into one of them (DNS rebinding: an allowed name an attacker
// points at 127.0.0.1 or the cloud metadata service) is refused, since the
// check is made on the address that is dialled. Parsed on first use: a
// run without egress pays nothing for it.
var refusedPrefixes = sync.OnceValue(func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",        // "this network"; 0.0.0.0 reaches the host's own services
		"10.0.0.0/8",       // private (RFC 1918)
		"100.64.0.0/10",    // carrier-grade NAT (RFC 6598)
		"127.0.0.0/8",      // loopback: the host's own services
		"169.254.0.0/16",   // link-local, with the cloud metadata service at 169.254.169.254
		"168.63.129.16/32", // Azure's wireserver: a public address that every Azure VM reaches as a host service (agent, health probes, DNS, and instance metadata through it)
		"172.16.0.0/12",    // private
		"192.0.0.0/24",     // IETF protocol assignments (192.0.0.192 is Oracle's metadata)
		"192.0.2.0/24",     // documentation
		"192.88.99.0/24",   // 6to4 relays
		"192.168.0.0/16",   // private
		"198.18.0.0/15",    // benchmarking
		"198.51.100.0/24",  // documentation
		"203.0.113.0/24",   // documentation
		"224.0.0.0/4",      // multicast
		"240.0.0.0/4",      // reserved, and broadcast
		"::/128",           // unspecified
		"::1/128",          // loopback
		"::/96",            // IPv4-compatible (deprecated, RFC 4291): never routed as such
		"::ffff:0:0/96",    // IPv4-mapped (unmapped before the check; kept for safety)
		"::ffff:0:0:0/96",  // IPv4-translated (SIIT, RFC 2765): never routed on the internet
		"64:ff9b::/96",     // NAT64: reaches IPv4 addresses through a translator
		"64:ff9b:1::/48",   // local NAT64
		"100::/64",         // discard
		"2001::/32",        // Teredo: embeds an IPv4 address
		"2001:db8::/32",    // documentation
		"2002::/16",        // 6to4: embeds an IPv4 address
		"fc00::/7",         // unique local (fd00:ec2::254 is AWS's metadata)
		"fe80::/10",        // link-local
		"fec0::/10",        // site-local (deprecated)
		"ff00::/8",         // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
})

// hostAddrs are the host's own interface addresses, read once: a public
// address of the host reaches its services as loopback would.
var hostAddrs = sync.OnceValue(func() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
})

// refusedByDefault says why a is refused without a rule by address, or ""
// when it is an ordinary public address. An IPv6 address that carries an
// IPv4 one is named with the IPv4 address it carries.
func refusedByDefault(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() {
		return "no address"
	}
	for _, p := range refusedPrefixes() {
		if p.Contains(a) {
			if form, v4 := embeddedIPv4(a); form != "" {
				why := form + " carrying " + joinAddrs(v4)
				for _, v := range v4 {
					if r := refusedByDefault(v); r != "" {
						return why + " (" + v.String() + " is " + r + ")"
					}
				}
				return why
			}
			switch {
			case a.IsLoopback():
				return "a loopback address"
			case isMetadata(a):
				return "a cloud metadata address"
			case a.IsLinkLocalUnicast():
				return "a link-local address"
			case a.IsPrivate():
				return "a private address"
			case a.IsMulticast():
				return "a multicast address"
			}
			return "a reserved address (" + p.String() + ")"
		}
	}
	if hostAddrs()[a] {
		return "an address of this host"
	}
	return ""
}

// metadataAddrs are the addresses of cloud instance metadata and
// credential services: a connection to one can hand the payload the
// host's cloud credentials. Each is refused by default (it lies in a
// refused prefix); unlike the rest, a --resolve pin does not open one
// (List.pinRefusal): only a rule by address that names it does, so that a
// pin written for a test server, or copied from elsewhere, never reaches
// the host's credentials.
var metadataAddrs = sync.OnceValue(func() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range []string{
		"169.254.169.254", // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean...: instance metadata
		"169.254.170.2",   // AWS ECS: a task's credentials
		"169.254.170.23",  // AWS EKS Pod Identity: a pod's credentials
		"fd00:ec2::254",   // AWS: instance metadata over IPv6
		"fd00:ec2::23",    // AWS EKS Pod Identity over IPv6
		"100.100.100.200", // Alibaba Cloud: instance metadata
		"192.0.0.192",     // Oracle Cloud: instance metadata
		"168.63.129.16",   // Azure: the wireserver (VM agent, extension settings and their secrets)
		"fd20:ce::254",    // Google Cloud: instance metadata over IPv6
	} {
		out[netip.MustParseAddr(s)] = true
	}
	return out
})

// isMetadata tells whether a is a cloud metadata or credential address.
func isMetadata(a netip.Addr) bool { return metadataAddrs()[a.Unmap()] }

// embedding is an IPv6 form that carries an IPv4 address: the packets to
// such an address go, through a tunnel, a relay or a translator, to the
// IPv4 address it carries, or it is an IPv4 address written as IPv6.
type embedding struct {
	prefix netip.Prefix
	form   string
	// v4 takes the IPv4 addresses out of an address of the form.
	v4 func(b [16]byte) []netip.Addr
}

// v4At is the IPv4 address in bytes i to i+3 of b.
func v4At(b [16]byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]})
}

// v4Split is the IPv4 address that RFC 6052 (2.2) writes after a prefix
// of bits bits: its bytes skip byte 8 (bits 64 to 71, always zero).
func v4Split(b [16]byte, bits int) netip.Addr {
	var out [4]byte
	j := bits / 8
	for i := range out {
		if j == 8 {
			j++
		}
		out[i] = b[j]
		j++
	}
	return netip.AddrFrom4(out)
}

// embeddings are every form that carries an IPv4 address. The mapped
// form (::ffff:0:0/96) is not among them: it is unmapped into the IPv4
// address itself before any check.
var embeddings = sync.OnceValue(func() []embedding {
	last := func(b [16]byte) []netip.Addr { return []netip.Addr{v4At(b, 12)} }
	return []embedding{
		{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (::/96)", last},
		{netip.MustParsePrefix("::ffff:0:0:0/96"), "an IPv4-translated address (::ffff:0:0:0/96)", last},
		{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address (64:ff9b::/96)", last},
		// A local-use NAT64 prefix is any length from /48 to /96 within
		// 64:ff9b:1::/48, and which one a network uses is not known here:
		// every place RFC 6052 gives the IPv4 address is read.
		{netip.MustParsePrefix("64:ff9b:1::/48"), "a local NAT64 address (64:ff9b:1::/48)", func(b [16]byte) []netip.Addr {
			return []netip.Addr{v4Split(b, 48), v4Split(b, 56), v4Split(b, 64), v4At(b, 12)}
		}},
		{netip.MustParsePrefix("2002::/16"), "a 6to4 address (2002::/16)", func(b [16]byte) []netip.Addr {
			return []netip.Addr{v4At(b, 2)}
		}},
		// Teredo (RFC 4380 4): the server's address in bits 32 to 63, the
		// client's (its NAT's public address) in the last 32 bits, each
		// bit inverted.
		{netip.MustParsePrefix("2001::/32"), "a Teredo address (2001::/32)", func(b [16]byte) []netip.Addr {
			c := v4At(b, 12).As4()
			for i := range c {
				c[i] ^= 0xff
			}
			return []netip.Addr{v4At(b, 4), netip.AddrFrom4(c)}
		}},
	}
})

// embeddedIPv4 names the form of a that carries IPv4 addresses, and those
// addresses (distinct, in order); "" when a carries none. The loopback and
// unspecified addresses, in ::/96, carry none: they are what they are.
func embeddedIPv4(a netip.Addr) (string, []netip.Addr) {
	a = a.Unmap()
	if !a.Is6() || a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
		return "", nil
	}
	for _, e := range embeddings() {
		if !e.prefix.Contains(a) {
			continue
		}
		var out []netip.Addr
		for _, v := range e.v4(a.As16()) {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		return e.form, out
	}
	return "", nil
}

// embeddedRefusal says why a, which a rule allows or which is public,
// is refused still for an IPv4 address it carries: one refused by
// default (refusedByDefault) that no rule by address names on port. A
// packet to a 6to4, Teredo or NAT64 address goes to the IPv4 address it
// carries, so that address is judged by the IPv4 rules: a rule that
// allows 64:ff9b::/96 (a NAT64 network's way to the IPv4 internet) does
// not reach 10.0.0.1 through the translator.
func (l *List) embeddedRefusal(a netip.Addr, port uint16) string {
	form, v4 := embeddedIPv4(a)
	for _, v := range v4 {
		if r := refusedByDefault(v); r != "" && !l.AllowsAddrRule(v, port) {
			return fmt.Sprintf("%s carrying %s, %s", form, v, r)
		}
	}
	return ""
}

// addrRefusal says why a resolved address may not be dialled on port, ""
// when it may: refused by default and named by no rule by address, or
// carrying an IPv4 address that is.
func (l *List) addrRefusal(a netip.Addr, port uint16) string {
	a = a.Unmap()
	if r := refusedByDefault(a); r != "" && !l.AllowsAddrRule(a, port) {
		return r
	}
	return l.embeddedRefusal(a, port)
}

// pinRefusal says why the address a --resolve pin gives a name may not
// be dialled on port, "" when it may. The pin is the user's word for
// that name and that address, so the address passes where
// refusedByDefault would refuse it: a private test server, a service on
// the host's loopback. It passes for the pinned name only: check takes
// it from the pin, so neither a literal (a rule by address decides
// those) nor another name (its resolved addresses get addrRefusal, so
// DNS rebinding onto the pinned address is refused as before) reaches
// it by the pin; and only on the ports the rules allow the name, which
// check has decided first. Two things a pin does not open: a cloud
// metadata address (isMetadata), and the IPv4 address an IPv6 form
// carries (a pin to 64:ff9b::a00:1 reaches 10.0.0.1 through a
// translator, which is not the address written): each still needs a
// rule by address.
func (l *List) pinRefusal(a netip.Addr, port uint16) string {
	a = a.Unmap()
	if isMetadata(a) && !l.AllowsAddrRule(a, port) {
		return "a cloud metadata address, which a --resolve pin does not open"
	}
	return l.embeddedRefusal(a, port)
}

// pinNeedsRule says what a pin's address needs besides the pin, whatever
// the port ("a rule by address for 169.254.169.254: ..."), "" when the
// pin alone reaches it.
func pinNeedsRule(a netip.Addr) string {
	a = a.Unmap()
	if isMetadata(a) {
		return "a rule by address for " + a.String() + ": a pin does not open a cloud metadata address"
	}
	_, v4 := embeddedIPv4(a)
	for _, v := range v4 {
		if refusedByDefault(v) != "" {
			return "a rule by address for " + v.String() + ": a pin does not open the IPv4 address an IPv6 form carries"
		}
	}
	return ""
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " and ")
}
