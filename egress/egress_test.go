package egress

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func TestParseRule(t *testing.T) {
	for _, c := range []struct {
		in      string
		name    string
		wild    bool
		prefix  string
		ports   []uint16
		wantErr string
	}{
		{in: "api.example.org", name: "api.example.org", ports: []uint16{443, 80}},
		{in: "API.Example.ORG.:8443", name: "api.example.org", ports: []uint16{8443}},
		{in: "*.githubusercontent.com:443", name: "githubusercontent.com", wild: true, ports: []uint16{443}},
		{in: "bücher.example", name: "xn--bcher-kva.example", ports: []uint16{443, 80}},
		{in: "127.0.0.1:8080", prefix: "127.0.0.1/32", ports: []uint16{8080}},
		{in: "10.0.0.0/8", prefix: "10.0.0.0/8", ports: []uint16{443, 80}},
		{in: "[::1]:80", prefix: "::1/128", ports: []uint16{80}},
		{in: "::1", prefix: "::1/128", ports: []uint16{443, 80}},
		{in: "2130706433", prefix: "127.0.0.1/32", ports: []uint16{443, 80}},
		{in: "", wantErr: "empty"},
		{in: "*.com", wantErr: "two labels"},
		{in: "a*.example.org", wantErr: "first label"},
		{in: "example.org:0", wantErr: "port"},
		{in: "example.org:", wantErr: "empty port"},
		{in: "1.2.3.4.5", wantErr: "neither"},
		{in: "exa mple.org", wantErr: "not a host name"},
	} {
		r, err := ParseRule(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseRule(%q) = %v, want an error with %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		pfx := ""
		if r.Prefix.IsValid() {
			pfx = r.Prefix.String()
		}
		if r.Name != c.name || r.Wildcard != c.wild || pfx != c.prefix || len(r.Ports) != len(c.ports) || r.Ports[0] != c.ports[0] {
			t.Errorf("ParseRule(%q) = %+v", c.in, r)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1": "127.0.0.1", "2130706433": "127.0.0.1", "0177.0.0.1": "127.0.0.1", "0x7f.1": "127.0.0.1",
		"127.1": "127.0.0.1", "[::ffff:127.0.0.1]": "127.0.0.1", "::ffff:a9fe:a9fe": "169.254.169.254",
		"Example.ORG.": "example.org", "ÉXAMPLE.org": "xn--xample-9ua.org", "[::1]": "::1",
	} {
		h, err := NormalizeHost(in)
		if err != nil || h.String() != want {
			t.Errorf("NormalizeHost(%q) = %v, %v; want %s", in, h, err, want)
		}
	}
	for _, bad := range []string{"", "a..", "fe80::1%eth0", "256.1.1.1.1", "example.org..", "x\x00y"} {
		if h, err := NormalizeHost(bad); err == nil {
			t.Errorf("NormalizeHost(%q) = %v, want an error", bad, h)
		}
	}
}

func TestListMatch(t *testing.T) {
	l, err := NewList([]string{"api.example.org", "*.cdn.example.net:443", "127.0.0.1:9000"}, []string{"api.example.org:127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		port uint16
		want bool
	}{
		{"api.example.org", 443, true}, {"api.example.org", 80, true}, {"api.example.org", 8080, false},
		{"x.api.example.org", 443, false}, {"a.cdn.example.net", 443, true}, {"a.b.cdn.example.net", 443, true},
		{"cdn.example.net", 443, false}, {"evilcdn.example.net", 443, false}, {"a.cdn.example.net", 80, false},
	} {
		if got := l.AllowsName(c.name, c.port); got != c.want {
			t.Errorf("AllowsName(%s, %d) = %v", c.name, c.port, got)
		}
	}
	if !l.AllowsAddrRule(netip.MustParseAddr("127.0.0.1"), 9000) || l.AllowsAddrRule(netip.MustParseAddr("127.0.0.1"), 9001) {
		t.Error("a rule by address matches its port only")
	}
}

func TestRefusedByDefault(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.77.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1",
		"169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
		"fd00:ec2::254", "fc00::1", "ff02::1", "64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:127.0.0.1"} {
		if refusedByDefault(netip.MustParseAddr(a)) == "" {
			t.Errorf("%s is not refused by default", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"} {
		if why := refusedByDefault(netip.MustParseAddr(a)); why != "" && why != "an address of this host" {
			t.Errorf("%s refused: %s", a, why)
		}
	}
	for _, a := range []string{"169.254.169.254", "168.63.129.16", "fd20:ce::254", "::ffff:168.63.129.16"} {
		if !strings.Contains(refusedByDefault(netip.MustParseAddr(a).Unmap()), "metadata") {
			t.Errorf("%s is not named as a cloud metadata address", a)
		}
	}
}

// fakeResolver answers every name with addrs.
type fakeResolver []netip.Addr

func (f fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return f, nil
}

func TestCheckAfterResolution(t *testing.T) {
	l, _ := NewList([]string{"rebind.example", "mixed.example", "10.0.0.0/8:443"}, nil)
	s := New(Config{List: l})
	defer s.Close()
	s.resolver = fakeResolver{netip.MustParseAddr("127.0.0.1")}
	if _, err := s.check(context.Background(), Host{Name: "rebind.example"}, 443); err == nil || !isRefusal(err) {
		t.Errorf("a name resolving to loopback: %v", err)
	}
	s.resolver = fakeResolver{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("93.184.216.34")}
	tg, err := s.check(context.Background(), Host{Name: "mixed.example"}, 443)
	if err != nil || tg.Addr.String() != "93.184.216.34" {
		t.Errorf("a name with a public and a metadata address: %v %v, want the public one", tg.Addr, err)
	}
	s.resolver = fakeResolver{netip.MustParseAddr("10.1.2.3")}
	if _, err := s.check(context.Background(), Host{Name: "rebind.example"}, 443); err != nil {
		t.Errorf("a private address a rule by CIDR allows: %v", err)
	}
	if _, err := s.check(context.Background(), Host{Name: "rebind.example"}, 80); err == nil {
		t.Error("the CIDR rule is for port 443 only")
	}
}

// clientHello builds a minimal ClientHello record with sni.
func clientHello(sni string) []byte {
	var ext []byte
	if sni != "" {
		name := append([]byte{0}, binary.BigEndian.AppendUint16(nil, uint16(len(sni)))...)
		name = append(name, sni...)
		list := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
		list = append(list, name...)
		ext = binary.BigEndian.AppendUint16(ext, 0)
		ext = binary.BigEndian.AppendUint16(ext, uint16(len(list)))
		ext = append(ext, list...)
	}
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)
	body = append(body, 0)                // session id
	body = append(body, 0, 2, 0x13, 0x01) // one suite
	body = append(body, 1, 0)             // compression
	body = binary.BigEndian.AppendUint16(body, uint16(len(ext)))
	body = append(body, ext...)
	hs := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	hs = append(hs, body...)
	rec := []byte{0x16, 3, 1}
	rec = binary.BigEndian.AppendUint16(rec, uint16(len(hs)))
	return append(rec, hs...)
}

func TestInspect(t *testing.T) {
	good := target{Host: Host{Name: "good.example"}, Port: 443, Addr: netip.MustParseAddr("93.184.216.34")}
	for _, c := range []struct {
		name  string
		first []byte
		ok    bool
	}{
		{"same SNI", clientHello("good.example"), true},
		{"SNI upper case with a dot", clientHello("GOOD.example."), true},
		{"no SNI", clientHello(""), true},
		{"other SNI", clientHello("evil.example"), false},
		{"truncated hello", clientHello("good.example")[:20], false},
		{"same Host", []byte("GET / HTTP/1.1\r\nHost: good.example:443\r\n\r\n"), true},
		{"other Host", []byte("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"), false},
		{"not HTTP or TLS", []byte("SSH-2.0-x\r\n"), true},
	} {
		if got := inspect(c.first, good) == ""; got != c.ok {
			t.Errorf("%s: inspect = %q", c.name, inspect(c.first, good))
		}
	}
}

func TestDNSAnswers(t *testing.T) {
	l, _ := NewList([]string{"api.example.org", "*.cdn.example.net"}, nil)
	s := New(Config{List: l})
	defer s.Close()
	ask := func(name string, typ dnsmessage.Type) (dnsmessage.RCode, []dnsmessage.Resource) {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		var m dnsmessage.Message
		if err := m.Unpack(s.answerDNS(q)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m.RCode, m.Answers
	}
	rc, ans := ask("api.example.org.", dnsmessage.TypeA)
	if rc != dnsmessage.RCodeSuccess || len(ans) != 1 || !SyntheticPrefix.Contains(netip.AddrFrom4(ans[0].Body.(*dnsmessage.AResource).A)) {
		t.Errorf("api.example.org A: %v %v", rc, ans)
	}
	first := ans[0].Body.(*dnsmessage.AResource).A
	if _, again := ask("API.example.org.", dnsmessage.TypeA); len(again) != 1 || again[0].Body.(*dnsmessage.AResource).A != first {
		t.Error("a name gets the same address each time")
	}
	if rc, ans := ask("x.cdn.example.net.", dnsmessage.TypeA); rc != dnsmessage.RCodeSuccess || len(ans) != 1 {
		t.Errorf("a wildcard's subdomain: %v %v", rc, ans)
	}
	if rc, ans := ask("api.example.org.", dnsmessage.TypeAAAA); rc != dnsmessage.RCodeSuccess || len(ans) != 0 {
		t.Errorf("AAAA of an allowed name: %v %v, want an empty answer", rc, ans)
	}
	for _, n := range []string{"evil.example.", "cdn.example.net.", "secret-data.attacker.example."} {
		if rc, _ := ask(n, dnsmessage.TypeA); rc != dnsmessage.RCodeNameError {
			t.Errorf("%s: %v, want NXDOMAIN", n, rc)
		}
	}
}

// FuzzNormalizeHost: whatever a client writes, normalising never panics,
// and the normal form is a fixed point (matching cannot depend on how
// often a name was normalised).
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"example.org", "EXAMPLE.org.", "0x7f.1", "2130706433", "[::ffff:1.2.3.4]", "bücher.de", "xn--bcher-kva.de", "a..b", "*.x.y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := NormalizeHost(s)
		if err != nil {
			return
		}
		again, err := NormalizeHost(h.String())
		if err != nil || again != h {
			t.Errorf("NormalizeHost(%q) = %v, but NormalizeHost(%q) = %v, %v", s, h, h.String(), again, err)
		}
		_, _ = ParseRule(s)
	})
}

// FuzzAnswerDNS: any datagram gets no answer or a well-formed one.
func FuzzAnswerDNS(f *testing.F) {
	f.Add([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', 'p', 'i', 0, 0, 1, 0, 1})
	l, _ := NewList([]string{"api", "*.example.org"}, nil)
	s := New(Config{List: l})
	f.Fuzz(func(t *testing.T, q []byte) {
		r := s.answerDNS(q)
		if r == nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(r); err != nil {
			t.Errorf("answer to %x does not parse: %v", q, err)
		}
	})
}

func TestRuleCovers(t *testing.T) {
	for _, c := range []struct {
		r, o string
		want bool
	}{
		{"api.example.com:443", "api.example.com:443", true},
		{"api.example.com:443", "https://API.example.com", true},
		{"api.example.com:443", "api.example.com", false}, // 443 and 80
		{"api.example.com", "api.example.com:80", true},
		{"api.example.com:443", "x.api.example.com:443", false},
		{"*.example.org:443", "a.example.org:443", true},
		{"*.example.org:443", "a.b.example.org:443", true},
		{"*.example.org:443", "*.example.org:443", true},
		{"*.example.org:443", "*.a.example.org:443", true},
		{"*.example.org:443", "example.org:443", false},
		{"*.example.org:443", "*.org.example:443", false},
		{"*.example.org:443", "badexample.org:443", false},
		{"*.example.org:443", "a.example.org:80", false},
		{"api.example.com:443", "*.api.example.com:443", false},
		{"10.0.0.0/24:80", "10.0.0.9:80", true},
		{"10.0.0.0/24:80", "10.0.0.0/16:80", false},
		{"10.0.0.0/24:80", "10.0.1.9:80", false},
		{"10.0.0.0/24:80", "api.example.com:80", false},
		{"api.example.com:80", "10.0.0.1:80", false},
	} {
		r, err := ParseRule(c.r)
		if err != nil {
			t.Fatal(err)
		}
		o, err := ParseRule(c.o)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Covers(o); got != c.want {
			t.Errorf("%s covers %s: %v, want %v", c.r, c.o, got, c.want)
		}
	}
}
