package egress

import (
	"net"
	"net/netip"
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
		"0.0.0.0/8",       // "this network"; 0.0.0.0 reaches the host's own services
		"10.0.0.0/8",      // private (RFC 1918)
		"100.64.0.0/10",   // carrier-grade NAT (RFC 6598)
		"127.0.0.0/8",     // loopback: the host's own services
		"169.254.0.0/16",  // link-local, with the cloud metadata service at 169.254.169.254
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments (192.0.0.192 is Oracle's metadata)
		"192.0.2.0/24",    // documentation
		"192.88.99.0/24",  // 6to4 relays
		"192.168.0.0/16",  // private
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, and broadcast
		"::/128",          // unspecified
		"::1/128",         // loopback
		"::ffff:0:0/96",   // IPv4-mapped (unmapped before the check; kept for safety)
		"64:ff9b::/96",    // NAT64: reaches IPv4 addresses through a translator
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001::/32",       // Teredo: embeds an IPv4 address
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4: embeds an IPv4 address
		"fc00::/7",        // unique local (fd00:ec2::254 is AWS's metadata)
		"fe80::/10",       // link-local
		"fec0::/10",       // site-local (deprecated)
		"ff00::/8",        // multicast
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
// when it is an ordinary public address.
func refusedByDefault(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() {
		return "no address"
	}
	for _, p := range refusedPrefixes() {
		if p.Contains(a) {
			switch {
			case a.IsLoopback():
				return "a loopback address"
			case a == netip.MustParseAddr("169.254.169.254") || a == netip.MustParseAddr("fd00:ec2::254"):
				return "the cloud metadata address"
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
