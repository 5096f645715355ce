package egress

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// refusal is a connection the list does not allow, with the reason the
// client and the report are told.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func refused(format string, a ...any) error { return &refusal{fmt.Sprintf(format, a...)} }

// isRefusal tells a refusal from a failure to connect.
func isRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// resolver is how names become addresses on the host; a test replaces it.
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// target is a checked destination: the name it was asked by (empty for an
// address), the port and the one address that will be dialled.
type target struct {
	Host Host
	Port uint16
	Addr netip.Addr
}

// check decides a destination: the host against the list (name and
// port), then its addresses, resolved on the host, against
// refusedByDefault and the IPv4 address each may carry
// (List.addrRefusal), or the address a --resolve pin gives the name
// (List.pinRefusal). It returns
// the address to dial, never the name again, so that a second answer of
// the name's resolver (rebinding) has nothing to change.
func (s *Server) check(ctx context.Context, h Host, port uint16) (target, error) {
	t := target{Host: h, Port: port}
	if h.Addr.IsValid() {
		// An address written as a literal is reached only by a rule by
		// address: a name rule says nothing about where a literal goes.
		if !s.list.AllowsAddrRule(h.Addr, port) {
			return t, refused("%s port %d is not on the allowlist", h.Addr, port)
		}
		// The rule names this address; the IPv4 address it may carry
		// (2002:a00:1::, a 6to4 way to 10.0.0.1) needs a rule of its own.
		if why := s.list.embeddedRefusal(h.Addr, port); why != "" {
			return t, refused("%s is %s, which no rule by address allows", h.Addr, why)
		}
		t.Addr = h.Addr
		return t, nil
	}
	if !s.list.AllowsName(h.Name, port) {
		if s.list.NameListed(h.Name) {
			return t, refused("%s is allowed, but not on port %d", h.Name, port)
		}
		return t, refused("%s is not on the allowlist", h.Name)
	}
	// A pinned name is never resolved, so no answer of a resolver
	// (rebinding) can change where it goes; its address is judged by
	// pinRefusal, which trusts what the user wrote. Any other name's
	// addresses are judged by addrRefusal, the pinned address among them.
	pinned, isPinned := s.list.Pins[h.Name]
	var addrs []netip.Addr
	if isPinned {
		addrs = []netip.Addr{pinned}
	} else {
		lctx, cancel := context.WithTimeout(ctx, s.limits.ResolveTimeout)
		got, err := s.resolver.LookupNetIP(lctx, "ip", h.Name)
		cancel()
		if err != nil {
			return t, fmt.Errorf("resolve %s on the host: %w", h.Name, err)
		}
		addrs = got
	}
	why := ""
	for _, a := range addrs {
		a = a.Unmap()
		if isPinned {
			if r := s.list.pinRefusal(a, port); r != "" {
				why = fmt.Sprintf("%s is pinned to %s, %s, and no rule by address allows it", h.Name, a, r)
				continue
			}
		} else if r := s.list.addrRefusal(a, port); r != "" {
			if why == "" {
				why = fmt.Sprintf("%s resolves to %s, %s, which no rule by address allows", h.Name, a, r)
			}
			continue
		}
		// IPv4 first: the host may have no IPv6 route at all.
		if !t.Addr.IsValid() || (a.Is4() && !t.Addr.Is4()) {
			t.Addr = a
		}
	}
	if !t.Addr.IsValid() {
		if why == "" {
			why = h.Name + " resolves to no address"
		}
		return t, refused("%s", why)
	}
	return t, nil
}

// dial connects from the host to the checked address of t. The socket's
// Control hook checks the address once more as it is dialled: nothing
// between check and connect can swap it.
func (s *Server) dial(ctx context.Context, t target) (net.Conn, error) {
	d := net.Dialer{
		Timeout: s.limits.DialTimeout,
		Control: func(network, address string, rc syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: %w", address, err)
			}
			if ap.Addr().Unmap() != t.Addr || ap.Port() != t.Port {
				return fmt.Errorf("dial %s: not the checked address %s", address, t.Addr)
			}
			// Before connect, so that the window is negotiated for it.
			return rc.Control(func(fd uintptr) { boundBuffers(int(fd)) })
		},
	}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(t.Addr.String(), strconv.Itoa(int(t.Port))))
	if err != nil {
		return nil, err
	}
	// Held as the jail's side is, so that Close ends it too: a relay
	// blocked writing to an upstream that never reads held rljail for
	// the idle timeout after its payload had ended (red-team pass).
	if !s.hold(c) {
		c.Close()
		return nil, errors.New("the run is ending")
	}
	return heldConn{c.(*net.TCPConn), s}, nil
}

// heldConn is an upstream connection that Server.Close ends; its own
// Close forgets it.
type heldConn struct {
	*net.TCPConn
	s *Server
}

func (h heldConn) Close() error {
	h.s.mu.Lock()
	delete(h.s.conns, h.TCPConn)
	h.s.mu.Unlock()
	return h.TCPConn.Close()
}

// Limits bound what a payload can make the supervisor do for it.
type Limits struct {
	// MaxConns is how many proxied connections may be open at once; more
	// are refused.
	MaxConns int
	// MaxBytes is the most bytes, both ways and all connections, of a
	// run; a connection that would pass it is cut.
	MaxBytes int64
	// IdleTimeout ends a connection on which nothing moved for so long,
	// and a client that connected and sent no request within it.
	IdleTimeout time.Duration
	// MaxDuration ends any one connection after so long (zero: the run's
	// own timeout ends it).
	MaxDuration time.Duration
	// DialTimeout and ResolveTimeout bound the host's connect and lookup.
	DialTimeout    time.Duration
	ResolveTimeout time.Duration
	// MaxLogged is how many connections the report lists; the rest are
	// counted.
	MaxLogged int
}

// Default limits: generous for a task that fetches a few URLs or a
// package index, small beside what the host can give.
const (
	DefaultMaxConns    = 64
	DefaultMaxBytes    = 1 << 30
	DefaultIdleTimeout = 30 * time.Second
	DefaultMaxLogged   = 256
)

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = 10 * time.Second
	}
	if l.ResolveTimeout <= 0 {
		l.ResolveTimeout = 5 * time.Second
	}
	if l.MaxLogged <= 0 {
		l.MaxLogged = DefaultMaxLogged
	}
	return l
}

// socketBuffer is the send and receive buffer of each socket the
// supervisor holds for a proxied connection. These are the host's: an
// upstream that never reads, and a payload that writes without end, left
// each tunnel's host-side buffers at the host's tcp_wmem maximum (some
// 4 MiB a connection, 284 MB of host TCP memory for 60 tunnels under
// -m 64m, charged to rljail's caller, not to the jail; red-team pass).
// With a fixed buffer the kernel gives each socket at most twice this,
// and --egress-max-conns bounds their number.
const socketBuffer = 128 << 10

// boundBuffers fixes the buffers of the socket fd (which also ends their
// autotuning).
func boundBuffers(fd int) {
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuffer)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuffer)
}
