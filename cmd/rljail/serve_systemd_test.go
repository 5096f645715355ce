package main

import (
	"net"
	"testing"
)

// TestSameTCP: --listen against the address of a socket systemd passed.
func TestSameTCP(t *testing.T) {
	v4 := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	any6 := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}
	for _, tc := range []struct {
		listen string
		addr   *net.TCPAddr
		want   bool
	}{
		{"tcp:127.0.0.1:8080", v4, true},
		{"tcp:localhost:8080", v4, true},
		{"tcp:127.0.0.1:8081", v4, false},
		{"tcp:10.0.0.1:8080", v4, false},
		{"tcp::8080", any6, true},
		{"tcp:0.0.0.0:8080", any6, true},
		{"tcp:[::]:8080", any6, true},
		{"tcp::8080", v4, false},
		{"unix:/run/rljail/api.sock", v4, false},
		{"tcp:127.0.0.1", v4, false},
	} {
		if got := sameTCP(tc.listen, tc.addr); got != tc.want {
			t.Errorf("sameTCP(%q, %v) = %v, want %v", tc.listen, tc.addr, got, tc.want)
		}
	}
}
