package egress

import (
	"net/netip"
	"testing"
)

func TestRefusedForCallback(t *testing.T) {
	for _, c := range []struct {
		addr    string
		refused bool
	}{
		{"127.0.0.1", false}, {"::1", false}, {"10.1.2.3", false}, {"192.168.1.1", false}, {"8.8.8.8", false},
		{"169.254.169.254", true}, {"169.254.1.1", true}, {"fe80::1", true}, {"fd00:ec2::254", true},
		{"100.100.100.200", true}, {"168.63.129.16", true}, {"0.0.0.0", true}, {"::", true}, {"224.0.0.1", true},
		{"255.255.255.255", true}, {"::ffff:169.254.169.254", true}, {"64:ff9b::a9fe:a9fe", true}, {"2002:a9fe:a9fe::1", true},
		{"64:ff9b::808:808", false},
	} {
		why := RefusedForCallback(netip.MustParseAddr(c.addr))
		if (why != "") != c.refused {
			t.Errorf("%s: %q, want refused %v", c.addr, why, c.refused)
		}
	}
}
