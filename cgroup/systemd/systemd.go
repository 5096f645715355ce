// Package systemd asks a systemd manager over D-Bus for a transient scope
// unit with a delegated cgroup, which is how a process gets a cgroup subtree
// of its own on a host whose cgroup v2 tree systemd owns: root asks the
// system manager, an unprivileged user the user manager (the one podman and
// `systemd-run --user --scope -p Delegate=yes` ask).
//
// The D-Bus exchange is godbus's (github.com/godbus/dbus/v5) with
// go-systemd's unit properties (github.com/coreos/go-systemd/v22/dbus): one
// StartTransientUnit call and the wait for its job's JobRemoved signal, on
// one connection, the whole of it bounded by a timeout. (go-systemd's own
// Conn opens two connections, one for calls and one for signals, and the
// second cost as much again: under the test VM's emulation 1.26 s of a
// 2.09 s exchange was connecting.)
// Nothing here runs unless package cgroup decides that a run's cgroup goes
// into a scope: a run placed in a delegated cgroup of its own, or below
// --cgroup-parent, never connects.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Running reports whether systemd is the host's init, the test
// sd_booted(3) makes: /run/systemd/system exists (systemd creates it early
// at boot; nothing else does). One stat.
func Running() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// Request is a transient scope to ask for.
type Request struct {
	// Unit is the scope's unit name, "NAME.scope".
	Unit string
	// Slice is the slice unit the scope goes in, "NAME.slice"; systemd
	// makes a slice that has no unit file when a unit names it.
	Slice string
	// PIDs are the processes the manager moves into the scope. They must
	// be the caller's own (the user manager has the system manager move a
	// process of the user's that it may not move itself).
	PIDs []int
	// User asks the calling user's manager rather than the system's.
	User bool
	// Description is the unit's description, as systemctl shows it.
	Description string
}

// Scope is a transient scope the manager started.
type Scope struct {
	Unit string
	// Bus is the address of the manager that started it.
	Bus string
	// Took is how long the exchange took: connection, call and job;
	// Connect and Call how long the connection and the call's reply took
	// of it, the rest was the wait for the job.
	Took, Connect, Call time.Duration
}

// StartScope asks the manager for req's scope and waits for its start job
// to complete, all within timeout. The scope is delegated (Delegate=yes:
// its cgroup subtree is the caller's, who makes cgroups and enables
// controllers in it), and collected when it ends, failed or not
// (CollectMode=inactive-or-failed): it ends as soon as its cgroup is
// empty, so nothing of it outlives the processes in it.
func StartScope(req Request, timeout time.Duration) (Scope, error) {
	start := time.Now()
	if err := checkUnitName(req.Unit, ".scope"); err != nil {
		return Scope{}, err
	}
	if err := checkUnitName(req.Slice, ".slice"); err != nil {
		return Scope{}, err
	}
	if len(req.PIDs) == 0 {
		return Scope{}, errors.New("systemd: a scope needs a process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, addr, err := connect(ctx, req.User)
	if err != nil {
		return Scope{}, err
	}
	defer conn.Close()
	connected := time.Now()
	pids := make([]uint32, len(req.PIDs))
	for i, pid := range req.PIDs {
		pids[i] = uint32(pid)
	}
	props := []sd.Property{
		sd.PropSlice(req.Slice),
		sd.PropPids(pids...),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	if req.Description != "" {
		props = append(props, sd.PropDescription(req.Description))
	}
	// The signal channel first: the job may end before the call's reply
	// is read. On a message bus the match rule asks for the signal (on
	// systemd's private socket every signal comes).
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)
	if addr != privateAddr(req.User) {
		if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchInterface(managerInterface), dbus.WithMatchMember("JobRemoved")); err != nil {
			return Scope{}, fmt.Errorf("systemd: subscribe to job signals through %s: %w", addr, err)
		}
	}
	var job dbus.ObjectPath
	// "fail": an existing unit of that name is an error, never a reuse.
	call := conn.Object(managerName, managerPath).CallWithContext(ctx, managerInterface+".StartTransientUnit", 0,
		req.Unit, "fail", props, []sd.PropertyCollection{})
	if err := call.Store(&job); err != nil {
		return Scope{}, fmt.Errorf("systemd: start %s through %s: %w", req.Unit, addr, err)
	}
	called := time.Now()
	for waiting := true; waiting; {
		select {
		case sig, ok := <-signals:
			if !ok {
				return Scope{}, fmt.Errorf("systemd: start %s through %s: the connection closed before the job ended", req.Unit, addr)
			}
			// JobRemoved(u id, o job, s unit, s result)
			if sig == nil || sig.Name != managerInterface+".JobRemoved" || len(sig.Body) != 4 {
				continue
			}
			if path, _ := sig.Body[1].(dbus.ObjectPath); path != job {
				continue
			}
			if result, _ := sig.Body[3].(string); result != "done" {
				return Scope{}, fmt.Errorf("systemd: start %s through %s: the job ended %q", req.Unit, addr, result)
			}
			waiting = false
		case <-ctx.Done():
			return Scope{}, fmt.Errorf("systemd: start %s through %s: no job completion within %v", req.Unit, addr, timeout)
		}
	}
	return Scope{Unit: req.Unit, Bus: addr, Took: time.Since(start), Connect: connected.Sub(start), Call: called.Sub(connected)}, nil
}

// Ping connects to the manager StartScope would ask and reads its version,
// for rljail check: which bus answered and which systemd it is.
func Ping(user bool, timeout time.Duration) (bus, version string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, addr, err := connect(ctx, user)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	v, err := conn.Object(managerName, managerPath).GetProperty(managerInterface + ".Version")
	if err != nil {
		return addr, "", fmt.Errorf("systemd: read the manager's version through %s: %w", addr, err)
	}
	s, _ := v.Value().(string)
	return addr, s, nil
}

// The manager's D-Bus names.
const (
	managerName      = "org.freedesktop.systemd1"
	managerPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	managerInterface = "org.freedesktop.systemd1.Manager"
)

// privateAddr is the address of the manager's own socket: a connection to
// systemd itself, not to a message bus.
func privateAddr(user bool) string {
	if !user {
		return "unix:path=/run/systemd/private"
	}
	return "unix:path=" + filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "systemd/private")
}

// checkUnitName refuses a unit name systemd would refuse (unit_name_is_valid:
// at most 255 bytes of [A-Za-z0-9:_.\-]), so that a bad name is rljail's
// error and no D-Bus round trip.
func checkUnitName(name, suffix string) error {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok || base == "" || len(name) > 255 {
		return fmt.Errorf("systemd: %q is not a %s unit name", name, suffix)
	}
	for _, r := range base {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.-\\", r)
		if !ok {
			return fmt.Errorf("systemd: %q is not a %s unit name (%q)", name, suffix, r)
		}
	}
	return nil
}

// busAddress is one way to reach a manager.
type busAddress struct {
	addr  string
	hello bool // a message bus (dbus-daemon, dbus-broker), not systemd itself
}

// addresses lists where the manager may be reached, the preferred first:
// systemd's own private socket (what systemctl uses first; no message bus
// in between and none needed: a user without dbus-user-session has one),
// then the system or session bus.
func addresses(user bool) ([]busAddress, error) {
	var out []busAddress
	if !user {
		out = append(out, busAddress{addr: privateAddr(false)})
		sys := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
		if sys == "" {
			sys = "unix:path=/run/dbus/system_bus_socket"
		}
		return append(out, busAddress{addr: sys, hello: true}), nil
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt != "" {
		out = append(out, busAddress{addr: privateAddr(true)})
	}
	// godbus's own session-bus lookup would run dbus-launch where neither
	// is set; rljail asks only what the environment names.
	switch s := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); {
	case s != "":
		out = append(out, busAddress{addr: s, hello: true})
	case rt != "":
		out = append(out, busAddress{addr: "unix:path=" + filepath.Join(rt, "bus"), hello: true})
	}
	if len(out) == 0 {
		return nil, errors.New("systemd: no user manager to ask: neither XDG_RUNTIME_DIR nor DBUS_SESSION_BUS_ADDRESS is set (a login session sets them)")
	}
	return out, nil
}

// connect reaches the manager at the first address that answers.
func connect(ctx context.Context, user bool) (*dbus.Conn, string, error) {
	addrs, err := addresses(user)
	if err != nil {
		return nil, "", err
	}
	var errs []error
	for _, a := range addrs {
		if path, ok := strings.CutPrefix(a.addr, "unix:path="); ok && !strings.Contains(path, ",") {
			if _, err := os.Stat(path); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue // no socket: skip the dial
			}
		}
		conn, err := dial(ctx, a)
		if err == nil {
			return conn, a.addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", a.addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	who := "the system manager"
	if user {
		who = "the user manager"
	}
	return nil, "", fmt.Errorf("systemd: cannot reach %s: %w", who, errors.Join(errs...))
}

// dial opens one authenticated connection. EXTERNAL authentication names the
// uid as a number: no user name lookup (the binary is static).
func dial(ctx context.Context, a busAddress) (*dbus.Conn, error) {
	conn, err := dbus.Dial(a.addr, dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	if a.hello {
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}
