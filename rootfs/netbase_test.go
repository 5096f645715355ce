package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddNetbase: the host's tables are copied as they are; a missing one
// is replaced by the built-in table, which names what model code asks for.
func TestAddNetbase(t *testing.T) {
	host := t.TempDir()
	hostServices := filepath.Join(host, "services")
	if err := os.WriteFile(hostServices, []byte("http 80/tcp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name               string
		host               map[string]string
		services, protocol string // a line each must contain
	}{
		{"the host's", map[string]string{ServicesPath: hostServices, ProtocolsPath: filepath.Join(host, "none")}, "http 80/tcp", "tcp\t6\tTCP"},
		{"built-in", map[string]string{}, "https\t\t443/tcp", "udp\t17\tUDP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t.TempDir(), nil)
			if err := addNetbase(tr, tt.host, func(string, ...any) {}); err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]string{ServicesPath: tt.services, ProtocolsPath: tt.protocol} {
				b, err := os.ReadFile(tr.in(p))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), want) {
					t.Errorf("%s has no %q:\n%s", p, want, b)
				}
			}
		})
	}
}
