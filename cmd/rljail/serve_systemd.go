package main

// `rljail serve` under systemd: the listening socket systemd passes
// (socket activation, contrib/systemd/rljail.socket) and the readiness
// notification of a Type=notify service (contrib/systemd/rljail.service).
// docs/deploy.md says how the two units fit together.

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"
)

// activatedListener takes the listening socket systemd passed, if any
// (sd_listen_fds(3): LISTEN_PID names this process, LISTEN_FDS counts the
// descriptors from 3, LISTEN_FDNAMES names them; go-systemd's activation
// package reads them and unsets them, so that no child sees them). ok
// reports that systemd passed one; then it is the only socket served, and
// --listen, when given as well, must name the same address: a unit and a
// command line that disagree are an error, not a silent choice of one.
//
// The socket's access control is the unit's (SocketMode=, SocketGroup=),
// but the rules of --listen still hold: a Unix socket anyone may connect to
// is refused, and so is TCP (or an abstract Unix socket, which has no
// permissions at all) without a token, but on loopback with
// --insecure-no-token.
func activatedListener(c *cli.Context, haveToken bool) (ln net.Listener, where string, ok bool, err error) {
	files := activation.Files(true)
	if len(files) == 0 {
		return nil, "", false, nil
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) != 1 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.Name()
		}
		return nil, "", true, fmt.Errorf("systemd passed %d sockets (%s): rljail serve takes one (one ListenStream= in rljail.socket)", len(files), strings.Join(names, ", "))
	}
	f := files[0]
	ln, err = net.FileListener(f)
	if err != nil {
		return nil, "", true, fmt.Errorf("the socket systemd passed (%s) is not a listening stream socket (ListenStream= in the socket unit, Accept=no): %w", f.Name(), err)
	}
	where, err = checkActivated(c, ln, haveToken)
	if err != nil {
		ln.Close()
		return nil, "", true, err
	}
	return ln, where, true, nil
}

// checkActivated holds the socket systemd passed to serve's rules and to
// --listen and --socket-mode where they are given; it returns the address
// as --listen spells it.
func checkActivated(c *cli.Context, ln net.Listener, haveToken bool) (string, error) {
	switch a := ln.Addr().(type) {
	case *net.UnixAddr:
		where := "unix:" + a.Name
		if c.IsSet("listen") && c.String("listen") != where {
			if kind, path, _ := strings.Cut(c.String("listen"), ":"); kind != "unix" || filepath.Clean(path) != a.Name {
				return "", fmt.Errorf("--listen %s disagrees with the socket systemd passed (%s): give no --listen under socket activation, or the unit's own address", c.String("listen"), where)
			}
		}
		if strings.HasPrefix(a.Name, "@") || a.Name == "" {
			// An abstract socket has no file, so no mode: anyone in the
			// network namespace may connect.
			if !haveToken {
				return "", fmt.Errorf("the socket systemd passed (%s) is an abstract Unix socket, which anyone in the network namespace may connect to: give --token-file, or a socket path (ListenStream=/run/rljail/api.sock)", where)
			}
			return where, nil
		}
		st, err := os.Stat(a.Name)
		if err != nil {
			return "", fmt.Errorf("the socket systemd passed: %w", err)
		}
		mode := uint64(st.Mode().Perm())
		if mode&0o007 != 0 {
			return "", fmt.Errorf("the socket systemd passed (%s) has mode %04o: anyone on the host may connect and run jails; set SocketMode=0600 (or 0660 with SocketGroup=) in the socket unit", a.Name, mode)
		}
		if c.IsSet("socket-mode") {
			want, err := strconv.ParseUint(c.String("socket-mode"), 8, 32)
			if err != nil || want != mode {
				return "", fmt.Errorf("--socket-mode %s disagrees with the socket systemd passed (%s, mode %04o): the socket unit's SocketMode= decides; drop --socket-mode", c.String("socket-mode"), a.Name, mode)
			}
		}
		return where, nil
	case *net.TCPAddr:
		where := "tcp:" + a.String()
		if c.IsSet("listen") && !sameTCP(c.String("listen"), a) {
			return "", fmt.Errorf("--listen %s disagrees with the socket systemd passed (%s): give no --listen under socket activation, or the unit's own address", c.String("listen"), where)
		}
		if !haveToken && !(a.IP.IsLoopback() && c.Bool("insecure-no-token")) {
			return "", fmt.Errorf("the socket systemd passed (%s) is TCP: TCP needs --token-file or --tokens-file (or, on a loopback address only, --insecure-no-token)", where)
		}
		return where, nil
	default:
		return "", fmt.Errorf("the socket systemd passed (%s %s) is neither a Unix nor a TCP socket", ln.Addr().Network(), ln.Addr())
	}
}

// sameTCP reports whether --listen tcp:HOST:PORT names the address a: the
// same port, and the same IP or, for an unspecified host (tcp::8080,
// tcp:0.0.0.0:8080), an unspecified a (systemd's ListenStream=8080 binds
// [::]).
func sameTCP(listen string, a *net.TCPAddr) bool {
	kind, addr, _ := strings.Cut(listen, ":")
	if kind != "tcp" {
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != strconv.Itoa(a.Port) {
		return false
	}
	if host == "localhost" {
		return a.IP.IsLoopback()
	}
	ip := net.ParseIP(host)
	if host == "" || (ip != nil && ip.IsUnspecified()) {
		return a.IP == nil || a.IP.IsUnspecified()
	}
	return ip != nil && ip.Equal(a.IP)
}

// notifySystemd tells a Type=notify service manager a state change
// (sd_notify(3): READY=1 once the host check is done and the socket is
// served, STOPPING=1 as the drain starts). Outside systemd, with no
// NOTIFY_SOCKET, it does nothing; a failed notification is logged, since
// systemd would then time the start out and say so itself.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", strings.SplitN(state, "\n", 2)[0], "error", err.Error())
	}
}

// readyStatus is the STATUS= line sent with READY=1: what `systemctl
// status` shows.
func readyStatus(where string, ready error) string {
	if ready != nil {
		return "READY=1\nSTATUS=serving on " + where + ", but not ready: " + ready.Error()
	}
	return "READY=1\nSTATUS=serving on " + where
}
