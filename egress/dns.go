package egress

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
)

// serveDNS answers the jail's resolver (UDP, resolv.conf points at it).
// An allowed name's A query gets its synthetic address, its AAAA query an
// empty answer (the synthetic range is IPv4: clients fall back to it);
// every other name is NXDOMAIN, and nothing is asked of the host's
// resolver for it: a query cannot carry data out through the host's DNS.
func (s *Server) serveDNS(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if s.ctx.Err() != nil || strings.Contains(err.Error(), "use of closed") {
				return
			}
			continue
		}
		if reply := s.answerDNS(buf[:n]); reply != nil {
			_, _ = pc.WriteTo(reply, from)
		}
	}
}

// DNS message constants (RFC 1035 4.1).
const (
	dnsTypeA      = 1
	dnsTypeAAAA   = 28
	dnsClassIN    = 1
	rcodeFormErr  = 1
	rcodeServFail = 2
	rcodeNXDomain = 3
	rcodeNotImp   = 4
)

// dnsQuestion is a query's one question: the name as its labels, and
// the raw question bytes to echo.
type dnsQuestion struct {
	name       string
	qtype, cls uint16
	raw        []byte
}

// parseQuery reads a standard query with one question; the name is taken
// as it is written (no compression pointer is followed: a query has
// nothing to point at). ok is false for what is no query to answer.
func parseQuery(q []byte) (id uint16, flags uint16, qs dnsQuestion, rcode int, ok bool) {
	if len(q) < 12 {
		return 0, 0, qs, 0, false
	}
	id, flags = binary.BigEndian.Uint16(q), binary.BigEndian.Uint16(q[2:])
	if flags&0x8000 != 0 { // a response
		return 0, 0, qs, 0, false
	}
	if (flags>>11)&0xf != 0 {
		return id, flags, qs, rcodeNotImp, true
	}
	if binary.BigEndian.Uint16(q[4:]) != 1 {
		return id, flags, qs, rcodeFormErr, true
	}
	p := 12
	var labels []string
	for {
		if p >= len(q) {
			return id, flags, qs, rcodeFormErr, true
		}
		l := int(q[p])
		if l == 0 {
			p++
			break
		}
		if l > 63 || p+1+l > len(q) {
			return id, flags, qs, rcodeFormErr, true
		}
		label := q[p+1 : p+1+l]
		for _, c := range label {
			// A dot inside a label would join differently than it was
			// split ("api.example" as one label is not api.example).
			if c == '.' || c <= ' ' || c >= 0x7f {
				return id, flags, qs, rcodeFormErr, true
			}
		}
		labels = append(labels, string(label))
		p += 1 + l
	}
	if p+4 > len(q) {
		return id, flags, qs, rcodeFormErr, true
	}
	qs = dnsQuestion{name: strings.Join(labels, "."), qtype: binary.BigEndian.Uint16(q[p:]), cls: binary.BigEndian.Uint16(q[p+2:]), raw: q[12 : p+4]}
	return id, flags, qs, 0, true
}

// answerDNS builds the reply to one query; nil for what is not a query.
func (s *Server) answerDNS(q []byte) []byte {
	id, flags, qs, rcode, ok := parseQuery(q)
	if !ok {
		return nil
	}
	s.mu.Lock()
	s.report.DNSQueries++
	s.mu.Unlock()
	if rcode != 0 {
		return dnsReply(id, flags, rcode, dnsQuestion{}, netip.Addr{})
	}
	name, nerr := NormalizeName(qs.name)
	if nerr != nil || !s.list.NameListed(name) || qs.cls != dnsClassIN {
		s.mu.Lock()
		s.report.DNSRefused++
		s.mu.Unlock()
		shown := qs.name
		if nerr == nil {
			shown = name
		}
		s.warn("egress: refused DNS query for " + quote(shown) + ": not on the allowlist")
		return dnsReply(id, flags, rcodeNXDomain, qs, netip.Addr{})
	}
	var a netip.Addr
	if qs.qtype == dnsTypeA {
		var ok bool
		if a, ok = s.addressOf(name); !ok {
			return dnsReply(id, flags, rcodeServFail, qs, netip.Addr{})
		}
	}
	return dnsReply(id, flags, 0, qs, a)
}

// dnsReply is an authoritative answer echoing the question, with one A
// record for a when it is valid.
func dnsReply(id, qflags uint16, rcode int, qs dnsQuestion, a netip.Addr) []byte {
	flags := uint16(0x8000|0x0400) | qflags&0x7900 | uint16(rcode) // QR, AA, the query's opcode and RD
	b := binary.BigEndian.AppendUint16(nil, id)
	b = binary.BigEndian.AppendUint16(b, flags)
	qd, an := 0, 0
	if qs.raw != nil {
		qd = 1
	}
	if a.IsValid() {
		an = 1
	}
	for _, n := range []int{qd, an, 0, 0} {
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	}
	b = append(b, qs.raw...)
	if a.IsValid() {
		b = append(b, 0xc0, 12) // the question's name
		b = binary.BigEndian.AppendUint16(b, dnsTypeA)
		b = binary.BigEndian.AppendUint16(b, dnsClassIN)
		b = binary.BigEndian.AppendUint32(b, 3600)
		b = binary.BigEndian.AppendUint16(b, 4)
		v4 := a.As4()
		b = append(b, v4[:]...)
	}
	return b
}
