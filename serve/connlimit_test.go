package serve

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestLimitListener: beyond max_connections a connection is closed at
// its accept (the client reads EOF); closing one gives its place back.
func TestLimitListener(t *testing.T) {
	s := New(Options{Config: Config{MaxConnections: 2}})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := s.LimitListener(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	defer a.Close()
	defer b.Close()
	held := []net.Conn{<-accepted, <-accepted}
	extra := dial()
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang bound
	if n, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection beyond the cap: read %d, %v; want EOF (closed at its accept)", n, err)
	}
	select {
	case c := <-accepted:
		t.Errorf("a connection beyond the cap was handed to the server: %v", c.RemoteAddr())
	default:
	}
	_ = held[0].Close()
	_ = held[0].Close() // a second Close gives back nothing more
	c := dial()
	defer c.Close()
	select {
	case got := <-accepted:
		defer got.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("a connection after one closed was not accepted")
	}
	if got := s.conns.n.Load(); got != 2 {
		t.Errorf("rljail_connections_open %d, want 2", got)
	}
	if s.rejected.WithLabelValues("connections") == nil {
		t.Fatal("no rejected counter")
	}
	if _, ok := unwrapConn(held[1]).(*net.TCPConn); !ok {
		t.Errorf("unwrapConn: %T, want the *net.TCPConn", unwrapConn(held[1]))
	}
}
