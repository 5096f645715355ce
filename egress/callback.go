package egress

import "net/netip"

// RefusedForCallback says why a request that rljail itself makes on a
// runner's behalf (serve's session callback_url) may not go to a, or ""
// when it may. It refuses what no runner needs and an attacker who
// chooses the URL would want: the cloud metadata and credential
// addresses, link-local, multicast, unspecified and "this network"
// addresses, and the IPv6 forms that carry such an IPv4 address. Loopback
// and private addresses stay allowed: a runner's callback is usually on
// the same host or in the same private network as the server.
func RefusedForCallback(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "no address"
	case isMetadata(a):
		return "a cloud metadata address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0:
		return "an unspecified address"
	case a.Is4() && a.As4() == [4]byte{255, 255, 255, 255}:
		return "the broadcast address"
	}
	if form, v4 := embeddedIPv4(a); form != "" {
		for _, v := range v4 {
			if r := RefusedForCallback(v); r != "" {
				return form + " carrying " + v.String() + " (" + r + ")"
			}
		}
	}
	return ""
}
