package serve

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener is ln holding at most the configuration's max_connections
// connections at once (read at each accept, so a reload changes it): a
// connection beyond it is closed as soon as it is accepted, before a byte
// of it is read, so that a client opening idle connections takes neither
// the server's descriptors nor a goroutine's worth of it, and the
// listen backlog keeps draining. A connection counts until it is closed,
// however (the server's close, a timeout, a WebSocket's end: a hijacked
// connection is the same value).
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, srv: s}
}

type limitListener struct {
	net.Listener
	srv  *Server
	open atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > int64(l.srv.conf().MaxConnections) {
			l.open.Add(-1)
			l.srv.rejected.WithLabelValues("connections").Inc()
			_ = c.Close()
			continue
		}
		l.srv.conns.Inc()
		return &limitedConn{Conn: c, release: func() { l.open.Add(-1); l.srv.conns.Dec() }}, nil
	}
}

// limitedConn is an accepted connection that gives its place back once,
// at its first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn is the connection itself (ConnContext reads a Unix peer's
// credentials from it).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// unwrapConn is c's own connection below any wrapper of this package.
func unwrapConn(c net.Conn) net.Conn {
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}
