package egress

import (
	"bytes"
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// TestParseRuleForms: every way a user writes a rule (issue 30), with the
// ports each gives, and bad values refused with a line that quotes the
// value and says what is wrong in the rule's terms, never netip's.
func TestParseRuleForms(t *testing.T) {
	for _, c := range []struct {
		in      string
		name    string
		wild    bool
		prefix  string
		ports   []uint16
		wantErr string
	}{
		{in: "http://api.test:8080", name: "api.test", ports: []uint16{8080}},
		{in: "https://api.test", name: "api.test", ports: []uint16{443}},
		{in: "http://api.test", name: "api.test", ports: []uint16{80}},
		{in: "http://api.test/", name: "api.test", ports: []uint16{80}},
		{in: "HTTPS://API.Test.:8443/", name: "api.test", ports: []uint16{8443}},
		{in: "api.test:8080", name: "api.test", ports: []uint16{8080}},
		{in: "api.test", name: "api.test", ports: []uint16{443, 80}},
		{in: "https://*.example.org", name: "example.org", wild: true, ports: []uint16{443}},
		{in: "http://[::1]:8080", prefix: "::1/128", ports: []uint16{8080}},
		{in: "http://10.1.2.3", prefix: "10.1.2.3/32", ports: []uint16{80}},
		{in: "10.0.0.0/8:443", prefix: "10.0.0.0/8", ports: []uint16{443}},
		{in: "[fd00::/8]:8080", prefix: "fd00::/8", ports: []uint16{8080}},
		{in: "::ffff:10.0.0.0/104", prefix: "10.0.0.0/8", ports: []uint16{443, 80}},

		{in: "http://api.test/v1", wantErr: `not the path "/v1": write http://api.test`},
		{in: "https://api.test:8443/v1?x", wantErr: "write https://api.test:8443"},
		{in: "http://api.test?x=1", wantErr: "not the path"},
		{in: "http://10.0.0.0/8", wantErr: "a CIDR without a scheme (10.0.0.0/8:80)"},
		{in: "ftp://api.test", wantErr: `the scheme "ftp" is neither http nor https`},
		{in: "http://", wantErr: "no host"},
		{in: "http://user:secret@api.test", wantErr: "no user name or password"},
		{in: "http://api.test:0", wantErr: "port"},
		{in: "http://api.test:99999", wantErr: "port"},
		{in: "api.test/", wantErr: "not a path: write api.test"},
		{in: "api.test/v1:8080", wantErr: "not a path"},
		{in: "10.0.0.0/33", wantErr: `prefix length "33"`},
		{in: "10.0.0.0/x", wantErr: `prefix length "x"`},
		{in: "10.0.0.0/+8", wantErr: `prefix length "+8"`},
		{in: "::ffff:10.0.0.0/8", wantErr: "/96 at least"},
		{in: "1.2.3/8", wantErr: `"1.2.3" is not an IP address`},
		{in: "fe80::%eth0/64", wantErr: "not an IP address"},
	} {
		r, err := ParseRule(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseRule(%q) = %+v, %v; want an error with %q", c.in, r, err, c.wantErr)
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, strconv.Quote(c.in)+": ") {
				t.Errorf("ParseRule(%q): %q does not start with the value", c.in, msg)
			}
			for _, internal := range []string{"netip", "ParsePrefix", "ParseAddr", "strconv", "\n"} {
				if strings.Contains(msg, internal) {
					t.Errorf("ParseRule(%q): %q has %q in it", c.in, msg, internal)
				}
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
		if r.Name != c.name || r.Wildcard != c.wild || pfx != c.prefix || !slices.Equal(r.Ports, c.ports) || r.Text != c.in {
			t.Errorf("ParseRule(%q) = %+v; want name %q wildcard %v prefix %q ports %v", c.in, r, c.name, c.wild, c.prefix, c.ports)
		}
	}
}

// TestNewListNamesTheSource: a bad entry's line names the flag (or the
// profile table) and the value.
func TestNewListNamesTheSource(t *testing.T) {
	for _, c := range []struct {
		allow, resolve []string
		want           string
	}{
		{allow: []string{"http://api.test:8080/x"}, want: `--allow-host "http://api.test:8080/x": `},
		{allow: []string{""}, want: `--allow-host "": an empty host`},
		{allow: []string{"api.test"}, resolve: []string{"api.test"}, want: `--resolve "api.test" is not NAME:ADDR`},
		{allow: []string{"api.test"}, resolve: []string{"api.test:10.0.0"}, want: `--resolve "api.test:10.0.0": "10.0.0" is not an IP address`},
	} {
		_, err := NewList(c.allow, c.resolve)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("NewList(%q, %q) = %v; want an error starting %q", c.allow, c.resolve, err, c.want)
		}
	}
	l, _ := NewList(nil, nil)
	err := l.Add(`profile "p" [network] allow`, `profile "p" [network] resolve`, []string{"ftp://x.test"}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), `profile "p" [network] allow "ftp://x.test": `) {
		t.Errorf("a profile's bad rule: %v", err)
	}
}

func TestParsePin(t *testing.T) {
	for _, c := range []struct {
		in, name, addr, wantErr string
	}{
		{in: "api.test:10.99.0.1", name: "api.test", addr: "10.99.0.1"},
		{in: "API.Test.:8080:10.99.0.1", name: "api.test", addr: "10.99.0.1"},
		{in: "api.test:[fd00::1]", name: "api.test", addr: "fd00::1"},
		{in: "api.test:::ffff:127.0.0.1", name: "api.test", addr: "127.0.0.1"},
		{in: "api.test:127.0.0.1", name: "api.test", addr: "127.0.0.1"},
		{in: "api.test", wantErr: "not NAME:ADDR"},
		{in: ":1.2.3.4", wantErr: "not NAME:ADDR"},
		{in: "api.test:0x7f.1", wantErr: "not an IP address"},
		{in: "api.test:fe80::1%eth0", wantErr: "not an IP address"},
		{in: "api.test:0.0.0.0", wantErr: "no address to connect to"},
		{in: "api.test:[::]", wantErr: "no address to connect to"},
		{in: "api.test:224.0.0.1", wantErr: "no address to connect to"},
		{in: "api.test:255.255.255.255", wantErr: "no address to connect to"},
		{in: "10.0.0.1:10.0.0.1", wantErr: "neither an address nor a host name"},
	} {
		p, err := ParsePin(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParsePin(%q) = %+v, %v; want an error with %q", c.in, p, err, c.wantErr)
			}
			continue
		}
		if err != nil || p.Name != c.name || p.Addr.String() != c.addr {
			t.Errorf("ParsePin(%q) = %+v, %v; want %s %s", c.in, p, err, c.name, c.addr)
		}
	}
}

// TestPinScope: a pin opens its address to its name, on the ports the
// rules allow that name, and to nothing else: not a literal, not another
// name that resolves there, not another port; a metadata address and the
// IPv4 address an IPv6 form carries still need a rule by address.
func TestPinScope(t *testing.T) {
	l, err := NewList(
		[]string{"http://api.test:8080", "other.test:8080", "*.wild.test:8080", "meta.test:80", "metaok.test:81", "169.254.169.254/32:81",
			"nat64.test:8080", "[64:ff9b::/96]:8080", "ula.test:8080", "lo.test:8080"},
		[]string{"api.test:10.99.0.1", "x.wild.test:10.99.0.1", "meta.test:169.254.169.254", "metaok.test:169.254.169.254",
			"nat64.test:64:ff9b::a63:1", "ula.test:fd12::1", "lo.test:127.0.0.1", "unlisted.test:10.99.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{List: l})
	defer s.Close()
	// Every name not pinned resolves, on the host, to the pinned address:
	// DNS rebinding onto it.
	s.resolver = fakeResolver{netip.MustParseAddr("10.99.0.1")}
	for _, c := range []struct {
		host   string
		port   uint16
		want   string // the address dialled, "" for a refusal
		whyHas string
	}{
		{host: "api.test", port: 8080, want: "10.99.0.1"},
		{host: "api.test", port: 80, whyHas: "not on port 80"},
		{host: "api.test", port: 8081, whyHas: "not on port 8081"},
		{host: "x.wild.test", port: 8080, want: "10.99.0.1"},
		{host: "y.wild.test", port: 8080, whyHas: "resolves to 10.99.0.1, a private address"},
		{host: "other.test", port: 8080, whyHas: "resolves to 10.99.0.1, a private address"},
		{host: "unlisted.test", port: 8080, whyHas: "not on the allowlist"},
		{host: "10.99.0.1", port: 8080, whyHas: "not on the allowlist"},
		{host: "meta.test", port: 80, whyHas: "a cloud metadata address, which a --resolve pin does not open"},
		{host: "metaok.test", port: 81, want: "169.254.169.254"},
		{host: "nat64.test", port: 8080, whyHas: "carrying 10.99.0.1, a private address"},
		{host: "ula.test", port: 8080, want: "fd12::1"},
		{host: "lo.test", port: 8080, want: "127.0.0.1"},
		{host: "127.0.0.1", port: 8080, whyHas: "not on the allowlist"},
	} {
		h, err := NormalizeHost(c.host)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := s.check(context.Background(), h, c.port)
		if c.want != "" {
			if err != nil || tg.Addr.String() != c.want {
				t.Errorf("check(%s, %d) = %v, %v; want %s", c.host, c.port, tg.Addr, err, c.want)
			}
			continue
		}
		if err == nil || !isRefusal(err) || !strings.Contains(err.Error(), c.whyHas) {
			t.Errorf("check(%s, %d) = %v, %v; want a refusal with %q", c.host, c.port, tg.Addr, err, c.whyHas)
		}
	}
}

// TestDNSNeverGivesThePinnedAddress: the jail's resolver answers every
// name, the pinned one too, with a synthetic address; the pinned address
// is in no answer.
func TestDNSNeverGivesThePinnedAddress(t *testing.T) {
	l, _ := NewList([]string{"api.test:8080", "other.test:8080", "*.wild.test"}, []string{"api.test:10.99.0.1", "a.wild.test:10.99.0.1"})
	s := New(Config{List: l})
	defer s.Close()
	pinned := netip.MustParseAddr("10.99.0.1").As4()
	for _, name := range []string{"api.test.", "other.test.", "a.wild.test.", "b.wild.test.", "evil.test.", "10.99.0.1."} {
		for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeALL} {
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, RecursionDesired: true})
			_ = b.StartQuestions()
			if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
				t.Fatal(err)
			}
			q, _ := b.Finish()
			reply := s.answerDNS(q)
			if bytes.Contains(reply, pinned[:]) {
				t.Errorf("the answer for %s %v holds the bytes of 10.99.0.1: %x", name, typ, reply)
			}
			var m dnsmessage.Message
			if err := m.Unpack(reply); err != nil {
				t.Fatalf("%s %v: %v", name, typ, err)
			}
			for _, a := range m.Answers {
				if ar, ok := a.Body.(*dnsmessage.AResource); ok && !SyntheticPrefix.Contains(netip.AddrFrom4(ar.A)) {
					t.Errorf("the answer for %s is %v, not a synthetic address", name, netip.AddrFrom4(ar.A))
				}
			}
		}
	}
}

func TestPinReportAndNotice(t *testing.T) {
	l, err := NewList([]string{"api.test:8080", "meta.test", "pub.test", "nat.test"},
		[]string{"pub.test:93.184.216.34", "api.test:10.99.0.1", "meta.test:169.254.169.254", "nat.test:64:ff9b::7f00:1", "unused.test:10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	rep := l.PinReport()
	var names []string
	for _, p := range rep {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"api.test", "meta.test", "nat.test", "pub.test", "unused.test"}) {
		t.Fatalf("the report's pins are %v, want every pin by name", names)
	}
	byName := map[string]int{}
	for i, p := range rep {
		byName[p.Name] = i
	}
	if p := rep[byName["api.test"]]; p.Address != "10.99.0.1" || p.NonPublic != "a private address" || p.NeedsRule != "" {
		t.Errorf("api.test: %+v", p)
	}
	if p := rep[byName["meta.test"]]; !strings.Contains(p.NonPublic, "metadata") || !strings.Contains(p.NeedsRule, "169.254.169.254") {
		t.Errorf("meta.test: %+v", p)
	}
	if p := rep[byName["nat.test"]]; !strings.Contains(p.NeedsRule, "127.0.0.1") {
		t.Errorf("nat.test: %+v", p)
	}
	if p := rep[byName["pub.test"]]; p.NonPublic != "" && p.NonPublic != "an address of this host" || p.NeedsRule != "" {
		t.Errorf("pub.test: %+v", p)
	}
	n := l.PinNotice()
	if strings.Contains(n, "\n") || !strings.Contains(n, "api.test 10.99.0.1 (a private address)") || !strings.Contains(n, "meta.test 169.254.169.254") {
		t.Errorf("the notice is %q", n)
	}
	// A pin whose name no rule allows reaches nothing, and is not
	// announced; a public pin is not either.
	if strings.Contains(n, "unused.test") || strings.Contains(n, "pub.test") {
		t.Errorf("the notice names a pin that reaches no address that is not public: %q", n)
	}
	if l, _ := NewList([]string{"pub.test"}, []string{"pub.test:93.184.216.34"}); l.PinNotice() != "" {
		t.Errorf("a public pin gets a notice: %q", l.PinNotice())
	}
}
