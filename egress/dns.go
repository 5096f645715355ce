package egress

import (
	"net"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
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

// answerDNS builds the reply to one query; nil for what is not a query.
func (s *Server) answerDNS(q []byte) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(q)
	if err != nil || hdr.Response {
		return nil
	}
	questions, err := p.AllQuestions()
	s.mu.Lock()
	s.report.DNSQueries++
	s.mu.Unlock()
	resp := dnsmessage.Header{ID: hdr.ID, Response: true, OpCode: hdr.OpCode, RecursionDesired: hdr.RecursionDesired, Authoritative: true}
	if err != nil || len(questions) != 1 || hdr.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeFormatError
		return build(resp, questions, nil)
	}
	qn := questions[0]
	name, nerr := NormalizeName(qn.Name.String())
	allowed := nerr == nil && s.list.NameListed(name) && qn.Class == dnsmessage.ClassINET
	if !allowed {
		s.mu.Lock()
		s.report.DNSRefused++
		s.mu.Unlock()
		shown := qn.Name.String()
		if nerr == nil {
			shown = name
		}
		s.warn("egress: refused DNS query for " + quote(strings.TrimSuffix(shown, ".")) + ": not on the allowlist")
		resp.RCode = dnsmessage.RCodeNameError
		return build(resp, questions, nil)
	}
	var answers []dnsmessage.Resource
	if qn.Type == dnsmessage.TypeA {
		a, ok := s.addressOf(name)
		if !ok {
			resp.RCode = dnsmessage.RCodeServerFailure
			return build(resp, questions, nil)
		}
		answers = append(answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: qn.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 3600},
			Body:   &dnsmessage.AResource{A: a.As4()},
		})
	}
	return build(resp, questions, answers)
}

func build(h dnsmessage.Header, qs []dnsmessage.Question, answers []dnsmessage.Resource) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	_ = b.StartQuestions()
	for _, q := range qs {
		_ = b.Question(q)
	}
	_ = b.StartAnswers()
	for _, a := range answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			_ = b.AResource(a.Header, *r)
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
