package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rljail/rljail/jail"
)

// The jail's side: where init makes the sockets (all on the jail's own
// loopback, in its own network namespace).
var (
	// HTTPProxyAddr serves HTTP proxy requests: CONNECT and absolute URIs.
	HTTPProxyAddr = netip.MustParseAddrPort("127.0.0.1:3128")
	// SOCKSAddr serves SOCKS5 (CONNECT, names resolved by the proxy).
	SOCKSAddr = netip.MustParseAddrPort("127.0.0.1:1080")
	// DNSAddr is the jail's resolver (UDP): allowed names get synthetic
	// addresses, every other name NXDOMAIN.
	DNSAddr = netip.MustParseAddrPort("127.0.0.53:53")
	// SyntheticPrefix holds the addresses the resolver hands out; a
	// connection to one on an allowed port is tied back to its name.
	SyntheticPrefix = netip.MustParsePrefix("127.77.0.0/16")
)

// maxSynthetic bounds the names the resolver gives addresses to.
const maxSynthetic = 4096

// Config is what a run's egress allows and how it is bounded.
type Config struct {
	List   *List
	Limits Limits
	// Notify, when set, gets a line for each refusal as it happens
	// (--verbose), so that a user can tell what to allow.
	Notify func(string)
	// Logger records every connection (nil: none).
	Logger *slog.Logger
}

// Server is one run's egress. It implements jail.Egress.
type Server struct {
	list     *List
	limits   Limits
	notify   func(string)
	logger   *slog.Logger
	resolver resolver

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	closers   []interface{ Close() error }
	conns     map[net.Conn]bool
	synthetic map[netip.Addr]string
	byName    map[string]netip.Addr
	nextAddr  netip.Addr
	report    jail.NetworkReport

	active   chan struct{} // a slot per connection at once
	bytesAll atomic.Int64  // both ways, every connection
	notices  atomic.Int64  // lines given to notify
	ports    []uint16      // of the transparent listener
}

// New makes the egress of a run; nothing is listening until the jail's
// init has made the sockets (jail.Egress).
func New(cfg Config) *Server {
	l := cfg.Limits.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		list: cfg.List, limits: l, notify: cfg.Notify, logger: cfg.Logger,
		resolver: net.DefaultResolver, ctx: ctx, cancel: cancel,
		conns: map[net.Conn]bool{}, synthetic: map[netip.Addr]string{}, byName: map[string]netip.Addr{},
		nextAddr: SyntheticPrefix.Addr().Next(), active: make(chan struct{}, l.MaxConns),
	}
	for _, r := range cfg.List.Rules {
		s.report.Allow = append(s.report.Allow, r.Text)
	}
	s.report.Resolve = cfg.List.PinReport()
	for _, p := range cfg.List.NamePorts() {
		// The proxies' own ports stay theirs.
		if p != HTTPProxyAddr.Port() && p != SOCKSAddr.Port() {
			s.ports = append(s.ports, p)
		}
	}
	sort.Slice(s.ports, func(i, k int) bool { return s.ports[i] < s.ports[k] })
	// Exact names get their addresses now, for /etc/hosts.
	for _, n := range cfg.List.ExactNames() {
		s.addressOf(n)
	}
	return s
}

// Sockets: the two proxies, the resolver and a transparent listener on
// every port a name rule allows (on 0.0.0.0, so that every synthetic
// address reaches it; Serve refuses connections to any other address).
func (s *Server) Sockets() []jail.EgressSocket {
	out := []jail.EgressSocket{{Addr: HTTPProxyAddr}, {Addr: SOCKSAddr}, {Datagram: true, Addr: DNSAddr}}
	for _, p := range s.ports {
		out = append(out, jail.EgressSocket{Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), p)})
	}
	return out
}

// Env points the payload's HTTP clients at the proxies; NO_PROXY keeps
// the jail's own loopback direct.
func (s *Server) Env() []string {
	httpProxy := "http://" + HTTPProxyAddr.String()
	socks := "socks5h://" + SOCKSAddr.String()
	noProxy := "localhost,127.0.0.1,::1"
	var out []string
	for _, kv := range [][2]string{{"HTTP_PROXY", httpProxy}, {"HTTPS_PROXY", httpProxy}, {"ALL_PROXY", socks}, {"NO_PROXY", noProxy}} {
		out = append(out, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return out
}

// EtcFiles: /etc/hosts gives every exact allowed name its synthetic
// address, and the resolver answers the rest (wildcards).
func (s *Server) EtcFiles() []jail.EtcFile {
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost " + jail.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	s.mu.Lock()
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&hosts, "%s\t%s\n", s.byName[n], n)
	}
	s.mu.Unlock()
	return []jail.EtcFile{
		{Name: "hosts", Content: hosts.String()},
		{Name: "resolv.conf", Content: "nameserver " + DNSAddr.Addr().String() + "\noptions ndots:1 timeout:2 attempts:2\n"},
		{Name: "nsswitch.conf", Content: "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"},
	}
}

// addressOf gives name its synthetic address, the same one each time;
// false when the range's bound is reached.
func (s *Server) addressOf(name string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.byName[name]; ok {
		return a, true
	}
	if len(s.byName) >= maxSynthetic {
		return netip.Addr{}, false
	}
	a := s.nextAddr
	s.nextAddr = a.Next()
	s.byName[name], s.synthetic[a] = a, name
	return a, true
}

// nameAt is the name a synthetic address was given to.
func (s *Server) nameAt(a netip.Addr) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.synthetic[a.Unmap()]
	return n, ok
}

// Serve serves the sockets init made, in the order of Sockets.
func (s *Server) Serve(socks []*os.File) {
	defer func() {
		for _, f := range socks {
			f.Close() // the listeners hold their own descriptors
		}
	}()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	want := s.Sockets()
	for i, f := range socks {
		if i >= len(want) {
			break
		}
		w := want[i]
		if w.Datagram {
			pc, err := net.FilePacketConn(f)
			if err != nil {
				s.warn("egress: the resolver's socket: " + err.Error())
				continue
			}
			s.track(pc)
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serveDNS(pc) }()
			continue
		}
		ln, err := net.FileListener(f)
		if err != nil {
			s.warn("egress: a listener: " + err.Error())
			continue
		}
		s.track(ln)
		var handle func(net.Conn)
		switch {
		case w.Addr == HTTPProxyAddr:
			handle = s.serveHTTP
		case w.Addr == SOCKSAddr:
			handle = s.serveSOCKS
		default:
			handle = s.serveTransparent
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.accept(ln, handle) }()
	}
}

// maxNotices bounds the lines a run's refusals print (--verbose): a
// payload that loops on refused names cannot flood rljail's stderr.
const maxNotices = 100

func (s *Server) warn(msg string) {
	if s.notify == nil {
		return
	}
	switch n := s.notices.Add(1); {
	case n <= maxNotices:
		s.notify(msg)
	case n == maxNotices+1:
		s.notify(fmt.Sprintf("egress: more than %d refusals; the rest are only in the report", maxNotices))
	}
}

func (s *Server) track(c interface{ Close() error }) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return
	}
	s.closers = append(s.closers, c)
}

// accept takes connections until the listener is closed. One beyond
// MaxConns is closed at once and logged: the payload cannot make the
// supervisor hold more.
func (s *Server) accept(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if s.ctx.Err() != nil || strings.Contains(err.Error(), "use of closed") {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		// The jail's side of the tunnel is the supervisor's socket too,
		// its buffers charged to rljail's caller: bounded (boundBuffers).
		if sc, ok := c.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { boundBuffers(int(fd)) })
			}
		}
		select {
		case s.active <- struct{}{}:
		default:
			s.record(jail.Connection{Via: "accept", Verdict: "refused", Reason: fmt.Sprintf("more than %d connections at once", s.limits.MaxConns)})
			c.Close()
			continue
		}
		if !s.hold(c) {
			<-s.active
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.active }()
			defer s.release(c)
			handle(c)
		}()
	}
}

// hold and release keep the open connections, so that Close ends them.
func (s *Server) hold(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Server) release(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// record adds one connection to the report and the log.
func (s *Server) record(c jail.Connection) {
	s.mu.Lock()
	r := &s.report
	r.ConnectionsTotal++
	r.BytesOut += c.BytesOut
	r.BytesIn += c.BytesIn
	if c.Verdict == "refused" {
		r.Refused++
	}
	if len(r.Connections) < s.limits.MaxLogged {
		r.Connections = append(r.Connections, c)
	} else {
		r.ConnectionsNotListed++
	}
	s.mu.Unlock()
	if c.Verdict != "allowed" {
		dest := c.Host
		if c.Port != 0 {
			dest = net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
		}
		s.warn(fmt.Sprintf("egress: %s %s (%s): %s", c.Verdict, dest, c.Via, c.Reason))
	}
	if s.logger != nil {
		s.logger.Info("egress connection", "via", c.Via, "host", c.Host, "port", c.Port, "address", c.Address,
			"bytes_out", c.BytesOut, "bytes_in", c.BytesIn, "duration_ms", c.DurationMS, "verdict", c.Verdict, "reason", c.Reason)
	}
}

// Close ends every listener and connection and returns the report.
func (s *Server) Close() *jail.NetworkReport {
	s.mu.Lock()
	if s.closed {
		r := s.report
		s.mu.Unlock()
		return &r
	}
	s.closed = true
	s.cancel()
	for _, c := range s.closers {
		c.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	if r.Connections == nil {
		r.Connections = []jail.Connection{}
	}
	s.report = r
	return &r
}
