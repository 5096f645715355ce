package systemd

import (
	"strings"
	"testing"
)

func TestCheckUnitName(t *testing.T) {
	good := []struct{ name, suffix string }{
		{"rljail-0123abcd.scope", ".scope"}, {"rljail.slice", ".slice"}, {"my_jails-a.slice", ".slice"},
	}
	for _, g := range good {
		if err := checkUnitName(g.name, g.suffix); err != nil {
			t.Errorf("checkUnitName(%q): %v", g.name, err)
		}
	}
	bad := []struct{ name, suffix string }{
		{".scope", ".scope"}, {"rljail.scope", ".slice"}, {"a/b.slice", ".slice"}, {"a b.scope", ".scope"},
		{strings.Repeat("a", 250) + ".scope", ".scope"}, {"é.slice", ".slice"},
	}
	for _, b := range bad {
		if err := checkUnitName(b.name, b.suffix); err == nil {
			t.Errorf("checkUnitName(%q, %q): no error", b.name, b.suffix)
		}
	}
}

// The addresses asked, in order: systemd's private socket first, then the
// bus; a user only where the environment names a runtime directory or bus.
func TestAddresses(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	got := func(user bool) string {
		a, err := addresses(user)
		if err != nil {
			return "error: " + err.Error()
		}
		var s []string
		for _, x := range a {
			s = append(s, x.addr)
		}
		return strings.Join(s, " ")
	}
	if g, w := got(false), "unix:path=/run/systemd/private unix:path=/run/dbus/system_bus_socket"; g != w {
		t.Errorf("system: %s, want %s", g, w)
	}
	if g, w := got(true), "unix:path=/run/user/1000/systemd/private unix:path=/run/user/1000/bus"; g != w {
		t.Errorf("user: %s, want %s", g, w)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/tmp/bus")
	if g, w := got(true), "unix:path=/run/user/1000/systemd/private unix:path=/tmp/bus"; g != w {
		t.Errorf("user with DBUS_SESSION_BUS_ADDRESS: %s, want %s", g, w)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	if g := got(true); !strings.Contains(g, "neither XDG_RUNTIME_DIR nor DBUS_SESSION_BUS_ADDRESS is set") {
		t.Errorf("user without a session: %s", g)
	}
}

// Without a manager to reach, StartScope fails at once with the reason,
// and within its timeout.
func TestStartScopeNoManager(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	_, err := StartScope(Request{Unit: "rljail-t.scope", Slice: "rljail.slice", PIDs: []int{1}, User: true}, 0)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the user manager") {
		t.Fatalf("StartScope: %v", err)
	}
	if _, err := StartScope(Request{Unit: "x y.scope", Slice: "rljail.slice", PIDs: []int{1}}, 0); err == nil {
		t.Error("a bad unit name: no error")
	}
}
