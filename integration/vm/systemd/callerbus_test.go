//go:build rljailsystemd

package systemd

import (
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDriverRootCallerBus (red-team round 3): root's run asks the system
// manager on its own socket, /run/systemd/private, whatever bus addresses
// the caller's environment names. Two sockets this test serves stand in
// for an attacker's: DBUS_SESSION_BUS_ADDRESS (never a root run's) and
// DBUS_SYSTEM_BUS_ADDRESS (only a fallback, where the private socket
// fails). Decided from outside: neither socket is ever connected to, the
// run's cgroup is a scope of rljail.slice, and rljail check names the
// private socket.
func TestDriverRootCallerBus(t *testing.T) {
	slowVM(t)
	dir := t.TempDir()
	var connects atomic.Int32
	env := []string{"env"}
	for _, v := range []string{"DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS"} {
		p := filepath.Join(dir, strings.ToLower(v))
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				connects.Add(1)
				c.Close()
			}
		}()
		env = append(env, v+"=unix:path="+p)
	}
	r := rljail(t, env, "--", "python3", "-c", "pass")
	r.wantStatus(t, "ok")
	wantScope(t, r, "/rljail.slice")
	check := run(t, env[0], append(env[1:], rljailBin(), "check")...)
	if !strings.Contains(check, "at unix:path=/run/systemd/private") {
		t.Errorf("rljail check with the caller's bus addresses does not name systemd's private socket:\n%s", check)
	}
	if n := connects.Load(); n != 0 {
		t.Errorf("root's run and check connected %d times to a bus address the caller's environment named", n)
	}
	noUnits(t)
}
