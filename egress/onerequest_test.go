package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEmbeddedIPv4(t *testing.T) {
	for _, c := range []struct {
		addr, form string
		v4         []string
	}{
		{"::127.0.0.1", "IPv4-compatible", []string{"127.0.0.1"}},
		{"::8.8.8.8", "IPv4-compatible", []string{"8.8.8.8"}},
		{"::ffff:0:7f00:1", "IPv4-translated", []string{"127.0.0.1"}},
		{"::ffff:0:a9fe:a9fe", "IPv4-translated", []string{"169.254.169.254"}},
		{"64:ff9b::a00:1", "NAT64", []string{"10.0.0.1"}},
		{"64:ff9b::8.8.8.8", "NAT64", []string{"8.8.8.8"}},
		// 64:ff9b:1::/48 read at /48, /56, /64 and /96 (RFC 6052 2.2).
		{"64:ff9b:1:c0a8:1:100::", "local NAT64", []string{"192.168.1.1", "168.1.1.0", "1.1.0.0", "0.0.0.0"}},
		{"64:ff9b:1::a00:1", "local NAT64", []string{"0.0.0.0", "0.0.0.10", "10.0.0.1"}},
		{"2002:7f00:1::1", "6to4", []string{"127.0.0.1"}},
		{"2002:a9fe:a9fe:1::", "6to4", []string{"169.254.169.254"}},
		// Teredo: server 65.54.227.120, client 192.0.2.45 (RFC 4380's
		// example, its last 32 bits inverted: 3fff:fdd2).
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo", []string{"65.54.227.120", "192.0.2.45"}},
		{"2001:0:7f00:1:0:0:f5ff:fffe", "Teredo", []string{"127.0.0.1", "10.0.0.1"}},
		{"::ffff:127.0.0.1", "", nil}, // mapped: the IPv4 address itself
		{"::1", "", nil},
		{"::", "", nil},
		{"2606:2800:220:1::1", "", nil},
		{"2001:db8::1", "", nil},
		{"127.0.0.1", "", nil},
	} {
		form, v4 := embeddedIPv4(netip.MustParseAddr(c.addr))
		var got []string
		for _, a := range v4 {
			got = append(got, a.String())
		}
		if !strings.Contains(form, c.form) || (c.form == "" && form != "") || strings.Join(got, " ") != strings.Join(c.v4, " ") {
			t.Errorf("embeddedIPv4(%s) = %q %v, want %q %v", c.addr, form, got, c.form, c.v4)
		}
	}
}

// TestEmbeddedIPv4Refused: every form that carries an IPv4 address is
// refused by default, and a rule by address for the IPv6 form reaches
// only a public IPv4 address through it, or one that a rule names too.
func TestEmbeddedIPv4Refused(t *testing.T) {
	for _, a := range []string{"::127.0.0.1", "::10.0.0.1", "::8.8.8.8", "::ffff:0:7f00:1", "::ffff:0:808:808",
		"64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::7f00:1", "2002:808:808::", "2002:a00:1::",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:0:7f00:1::"} {
		why := refusedByDefault(netip.MustParseAddr(a))
		if why == "" || !strings.Contains(why, "carrying") {
			t.Errorf("refusedByDefault(%s) = %q, want a refusal naming the IPv4 address carried", a, why)
		}
	}
	l, err := NewList([]string{"[::/96]:443", "[::ffff:0:0:0/96]:443", "[64:ff9b::/96]:443", "[64:ff9b:1::/48]:443", "[2002::/16]:443", "[2001::/32]:443", "10.0.0.0/8:443"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"::127.0.0.1", false}, {"::8.8.8.8", true}, {"::10.1.2.3", true}, // 10/8 has its rule
		{"::ffff:0:7f00:1", false}, {"::ffff:0:808:808", true},
		{"64:ff9b::7f00:1", false}, {"64:ff9b::a9fe:a9fe", false}, {"64:ff9b::808:808", true}, {"64:ff9b::a00:1", true},
		{"64:ff9b:1:7f00:1::", false}, {"64:ff9b:1:808:8:800:808:808", true},
		{"2002:7f00:1::", false}, {"2002:c0a8:101::", false}, {"2002:808:808::1", true},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false}, // the client 192.0.2.45: documentation
		{"2001:0:7f00:1:0:0:f7f7:f7f7", false},          // the server 127.0.0.1
		{"2001:0:808:808:0:0:f7f7:f7f7", true},          // 8.8.8.8, 8.8.8.8
	} {
		a := netip.MustParseAddr(c.addr)
		why := l.addrRefusal(a, 443)
		if (why == "") != c.ok {
			t.Errorf("addrRefusal(%s) = %q, want allowed %v", c.addr, why, c.ok)
		}
		// A literal: the rule by address names it, the IPv4 address it
		// carries is judged all the same.
		s := New(Config{List: l})
		_, err := s.check(t.Context(), Host{Addr: a}, 443)
		s.Close()
		if (err == nil) != c.ok {
			t.Errorf("check(literal %s) = %v, want allowed %v", c.addr, err, c.ok)
		}
	}
	// Names that resolve to them, with no rule by address: all refused,
	// the reason naming the form and the IPv4 address.
	ln, _ := NewList([]string{"v6.test"}, nil)
	s := New(Config{List: ln})
	defer s.Close()
	for _, a := range []string{"::127.0.0.1", "::ffff:0:7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::"} {
		s.resolver = fakeResolver{netip.MustParseAddr(a)}
		_, err := s.check(t.Context(), Host{Name: "v6.test"}, 443)
		if err == nil || !isRefusal(err) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("v6.test resolving to %s: %v, want a refusal naming 127.0.0.1", a, err)
		}
	}
}

func TestGuessHTTP(t *testing.T) {
	for _, c := range []struct {
		in   string
		want httpGuess
	}{
		{"GET / HTTP/1.1\r\n", isHTTP},
		{"FOO /x HTTP/1.1\r\n", isHTTP},
		{"get / http/1.1\n", isHTTP},
		{"\r\nGET / HTTP/1.1\r\n", isHTTP},
		{"GET\t/ HTTP/1.1\r\n", isHTTP},
		{"GET /x\r\n", isHTTP}, // HTTP/0.9
		{"PRI * HTTP/2.0\r\n", isHTTP},
		{"G", maybeHTTP},
		{"GET / HTTP/1.1", maybeHTTP},
		{"EHLO x", maybeHTTP},
		{"\r\n", maybeHTTP},
		{"SSH-2.0-OpenSSH_9.6\r\n", notHTTP},
		{"EHLO mail.example\r\n", notHTTP},
		{"*1\r\n$4\r\nPING\r\n", notHTTP},
		{"\x16\x03\x01", notHTTP},
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", notHTTP},
		{"", notHTTP},
	} {
		if got := guessHTTP([]byte(c.in)); got != c.want {
			t.Errorf("guessHTTP(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// seenRequest is one request an origin read.
type seenRequest struct {
	host, path, proto, body string
	header                  http.Header
}

// recordingOrigin is an origin that reads every request of a connection
// (keep-alive, whatever Connection says: the worst origin for a proxy
// that counts on it to close) and answers each.
type recordingOrigin struct {
	port  uint16
	mu    sync.Mutex
	conns int
	reqs  []seenRequest
}

func startRecordingOrigin(t *testing.T) *recordingOrigin {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &recordingOrigin{port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.conns++
			o.mu.Unlock()
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, err := io.ReadAll(req.Body)
					if err != nil {
						body = []byte("<cut>")
					}
					o.mu.Lock()
					o.reqs = append(o.reqs, seenRequest{req.Host, req.URL.Path, req.Proto, string(body), req.Header})
					o.mu.Unlock()
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return o
}

func (o *recordingOrigin) seen() (int, []seenRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.conns, append([]seenRequest(nil), o.reqs...)
}

// converse sends raw to a handler of s over a loopback connection whose
// local address is local, and returns all it answered.
func converse(t *testing.T, local string, handle func(net.Conn), raw string) string {
	t.Helper()
	ln, err := net.Listen("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(c)
	<-done
	return string(out)
}

// TestOneRequestPerConnection: whatever a client sends after its first
// plain HTTP request (a pipelined one, one hidden behind a framing that
// another parser reads otherwise, one after an upgrade), through the
// transparent path, CONNECT, SOCKS and the forward proxy, the origin gets
// the first request and nothing else; a request whose framing has two
// readings, or that names another host anywhere, gets nowhere.
func TestOneRequestPerConnection(t *testing.T) {
	o := startRecordingOrigin(t)
	p := strconv.Itoa(int(o.port))
	l, err := NewList([]string{"good.test:" + p, "127.0.0.1:" + p}, []string{"good.test:127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{List: l, Limits: Limits{IdleTimeout: 2 * time.Second}})
	defer s.Close()
	syn, _ := s.addressOf("good.test")
	const evil = "GET /evil HTTP/1.1\r\nHost: evil.test\r\n\r\n"
	hp := "good.test:" + p
	socksHello := "\x05\x01\x00\x05\x01\x00\x03\x09good.test" + string([]byte{byte(o.port >> 8), byte(o.port)})
	for _, c := range []struct {
		name, via, raw string
		want           []string // path:body of each request the origin read
		refused        bool     // the client gets the proxy's 403 or 400
	}{
		{"pipelined", "transparent", "GET /1 HTTP/1.1\r\nHost: " + hp + "\r\n\r\n" + evil, []string{"/1:"}, false},
		{"after a length", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nContent-Length: 5\r\n\r\nhello" + evil, []string{"/1:hello"}, false},
		{"after chunks", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-T: v\r\n\r\n" + evil, []string{"/1:hello!"}, false},
		{"HTTP/1.0 keep-alive", "transparent", "GET /1 HTTP/1.0\r\nHost: good.test\r\nConnection: keep-alive\r\n\r\n" + evil, []string{"/1:"}, false},
		{"upgrade", "transparent", "GET /ws HTTP/1.1\r\nHost: good.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n" + evil, []string{"/ws:"}, false},
		{"Connection names the length", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nConnection: content-length\r\nContent-Length: 39\r\n\r\n" + evil, []string{"/1:" + evil}, false},
		{"no Host", "transparent", "GET /1 HTTP/1.1\r\n\r\n", []string{"/1:"}, false},
		{"chunks and a length", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + evil, nil, true},
		{"two lengths", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nContent-Length: 0\r\nContent-Length: 39\r\n\r\n" + evil, nil, true},
		{"a signed length", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nContent-Length: +39\r\n\r\n" + evil, nil, true},
		{"an underscore for a dash", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nContent_Length: 39\r\n\r\n" + evil, nil, true},
		{"a coding list", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + evil, nil, true},
		{"chunks in HTTP/1.0", "transparent", "POST /1 HTTP/1.0\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + evil, nil, true},
		{"an unlisted method", "transparent", "FOO /1 HTTP/1.1\r\nHost: evil.test\r\n\r\n", nil, true},
		{"an absolute target", "transparent", "GET http://evil.test/1 HTTP/1.1\r\nHost: good.test\r\n\r\n", nil, true},
		{"an empty line first", "transparent", "\r\n" + evil, nil, true},
		{"a tab for a space", "transparent", "GET\t/1 HTTP/1.1\r\nHost: good.test\r\n\r\n", nil, true},
		{"CONNECT in the tunnel", "transparent", "CONNECT evil.test:443 HTTP/1.1\r\nHost: good.test\r\n\r\n", nil, true},
		{"HTTP/2 preface", "transparent", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, true},
		{"a bad chunk", "transparent", "POST /1 HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!!\r\n0\r\n\r\n" + evil, []string{"/1:<cut>"}, false},
		{"CONNECT, pipelined", "http", "CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\nGET /1 HTTP/1.1\r\nHost: good.test\r\n\r\n" + evil, []string{"/1:"}, false},
		{"SOCKS, pipelined", "socks", socksHello + "GET /1 HTTP/1.1\r\nHost: good.test\r\n\r\n" + evil, []string{"/1:"}, false},
		{"proxy, keep-alive", "http", "GET http://" + hp + "/1 HTTP/1.1\r\nHost: " + hp + "\r\n\r\nGET http://" + hp + "/2 HTTP/1.1\r\nHost: " + hp + "\r\n\r\n" + evil, []string{"/1:"}, false},
		{"proxy, Connection names the length", "http", "POST http://" + hp + "/1 HTTP/1.1\r\nHost: " + hp + "\r\nConnection: content-length\r\nContent-Length: 39\r\n\r\n" + evil, []string{"/1:" + evil}, false},
		{"proxy, after chunks", "http", "POST http://" + hp + "/1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" + evil, []string{"/1:hi"}, false},
		{"proxy, chunks and a length", "http", "POST http://" + hp + "/1 HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + evil, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns0, before := o.seen()
			local, handle := "127.0.0.1:0", s.serveHTTP
			switch c.via {
			case "transparent":
				local, handle = net.JoinHostPort(syn.String(), p), s.serveTransparent
			case "socks":
				handle = s.serveSOCKS
			}
			answer := converse(t, local, handle, c.raw)
			conns, after := o.seen()
			// The origin records a request once its handler has read it,
			// which may be just after the client's answer ended (a body cut
			// short is read to its error): wait for the ones wanted, so that
			// a late one is not counted in the next case.
			for deadline := time.Now().Add(5 * time.Second); len(after)-len(before) < len(c.want) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				conns, after = o.seen()
			}
			got := []string{}
			for _, r := range after[len(before):] {
				got = append(got, r.path+":"+r.body)
				if r.host != "good.test" && r.host != hp {
					t.Errorf("the origin got Host %q", r.host)
				}
				if r.header.Get("Upgrade") != "" {
					t.Errorf("the origin got Upgrade: %s", r.header.Get("Upgrade"))
				}
				if c.name == "HTTP/1.0 keep-alive" && r.proto != "HTTP/1.0" {
					t.Errorf("an HTTP/1.0 request reached the origin as %s", r.proto)
				}
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("the origin read %q, want %q (answer %q)", got, c.want, answer)
			}
			refused := strings.Contains(answer, "X-Rljail-Refused")
			if refused != c.refused {
				t.Errorf("refused by the proxy: %v, want %v (answer %q)", refused, c.refused, answer)
			}
			if c.refused && conns != conns0 {
				t.Errorf("the origin saw a connection for a refused request")
			}
		})
	}
}

// TestUnfinishedLine: first bytes that could still become a request line
// when the wait ends are refused, not passed on as something else.
func TestUnfinishedLine(t *testing.T) {
	o := startRecordingOrigin(t)
	p := strconv.Itoa(int(o.port))
	l, _ := NewList([]string{"good.test:" + p, "127.0.0.1:" + p}, []string{"good.test:127.0.0.1"})
	s := New(Config{List: l, Limits: Limits{IdleTimeout: 500 * time.Millisecond}})
	defer s.Close()
	syn, _ := s.addressOf("good.test")
	ln, err := net.Listen("tcp", net.JoinHostPort(syn.String(), p))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			s.serveTransparent(c)
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "FOO")
	time.Sleep(time.Second)
	io.WriteString(c, " /x HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(c)
	if n, reqs := o.seen(); n != 0 {
		t.Errorf("the origin saw %d connections (%v)", n, reqs)
	}
}
