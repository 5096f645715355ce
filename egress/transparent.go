package egress

import (
	"fmt"
	"net"
	"net/netip"
)

// serveTransparent serves a client that ignored the proxy variables and
// connected to a synthetic address the jail's resolver (or /etc/hosts)
// gave a name: the address says which name, the local port which port.
// A TLS SNI or HTTP Host in its first bytes must name the same host.
func (s *Server) serveTransparent(client net.Conn) {
	c := s.newConversation(client, "transparent")
	local, _ := netip.ParseAddrPort(client.LocalAddr().String())
	c.rec.Host, c.rec.Port = local.Addr().Unmap().String(), int(local.Port())
	name, ok := s.nameAt(local.Addr())
	if !ok {
		// The wildcard listener also hears the jail's own loopback on
		// that port: nothing is proxied for an address no name was given.
		c.finish("refused", fmt.Sprintf("%s is no address the jail's resolver gave out", local.Addr().Unmap()))
		return
	}
	c.rec.Host = name
	t, err := s.check(s.ctx, Host{Name: name}, local.Port())
	if err != nil {
		c.refuseOrFail(err)
		return
	}
	first, err := readFirst(client, s.limits.IdleTimeout)
	if err != nil && len(first) == 0 {
		if isTimeout(err) {
			c.finish("refused", fmt.Sprintf("nothing sent within %s", s.limits.IdleTimeout))
		} else {
			c.finish("failed", "the client went away")
		}
		return
	}
	c.tunnel(t, first)
}
