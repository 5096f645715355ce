package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxRequestHead bounds a proxy request's line and headers: a client
// cannot make the supervisor buffer more.
const maxRequestHead = 64 << 10

// headLimit reads at most n bytes until lifted: the request's head is
// bounded, its body is not (the run's byte budget bounds that).
type headLimit struct {
	r io.Reader
	n int64
}

func (h *headLimit) Read(p []byte) (int, error) {
	if h.n <= 0 {
		return 0, fmt.Errorf("a request head over %d bytes", maxRequestHead)
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= int64(n)
	return n, err
}

// serveHTTP serves one client of the HTTP proxy: a CONNECT tunnel, or one
// plain request with an absolute URI (forwarded with Connection: close,
// and the only one of the connection).
func (s *Server) serveHTTP(client net.Conn) {
	lim := &headLimit{r: client, n: maxRequestHead}
	br := bufio.NewReaderSize(lim, 4096)
	_ = client.SetReadDeadline(time.Now().Add(s.limits.IdleTimeout))
	req, err := readRequestHead(br)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		c := s.newConversation(client, "http")
		if isTimeout(err) {
			c.finish("refused", fmt.Sprintf("no request within %s", s.limits.IdleTimeout))
			return
		}
		httpRefuse(client, 400, "a request that could not be read")
		c.finish("refused", "a request that could not be read: "+err.Error())
		return
	}
	lim.n = 1 << 62 // the body is the budget's
	if req.Method == "CONNECT" {
		s.serveConnect(client, br, req)
		return
	}
	s.servePlain(client, br, req)
}

// serveConnect: CONNECT host:port, checked before the 200.
func (s *Server) serveConnect(client net.Conn, br *bufio.Reader, req *requestHead) {
	c := s.newConversation(client, "connect")
	hostport := req.Target
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		c.rec.Host = hostport
		httpRefuse(client, 400, "CONNECT needs host:port")
		c.finish("refused", "CONNECT needs host:port")
		return
	}
	h, port, err := parseDest(host, portStr)
	c.rec.Host, c.rec.Port = host, int(port)
	if err != nil {
		httpRefuse(client, 403, err.Error())
		c.finish("refused", err.Error())
		return
	}
	c.rec.Host = h.String()
	t, ok := s.checkForHTTP(client, c, h, port)
	if !ok {
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.finish("failed", "the client went away")
		return
	}
	// Bytes the client sent after its request are its first.
	var first []byte
	if n := br.Buffered(); n > 0 {
		first, _ = br.Peek(n)
		first = append([]byte(nil), first...)
		if !complete(first) {
			more, _ := readFirst(client, sniffWait)
			first = append(first, more...)
		}
	}
	c.tunnel(t, first)
}

// servePlain forwards one request with an absolute URI: its Host header
// must name the URI's host; its body is passed on as it is framed.
func (s *Server) servePlain(client net.Conn, br *bufio.Reader, req *requestHead) {
	c := s.newConversation(client, "http")
	u, err := url.Parse(req.Target)
	if err != nil || u.Host == "" || u.Scheme != "http" || u.User != nil {
		httpRefuse(client, 400, "a proxy request needs an absolute http:// URI (https goes through CONNECT)")
		c.finish("refused", "not an absolute http URI")
		return
	}
	portStr := u.Port()
	if portStr == "" {
		portStr = "80"
	}
	h, port, err := parseDest(u.Hostname(), portStr)
	c.rec.Host, c.rec.Port = u.Hostname(), int(port)
	if err != nil {
		httpRefuse(client, 403, err.Error())
		c.finish("refused", err.Error())
		return
	}
	c.rec.Host = h.String()
	hh, herr := req.host()
	if herr != nil {
		httpRefuse(client, 400, herr.Error())
		c.finish("refused", herr.Error())
		return
	}
	if hh != "" {
		if x, _, err := net.SplitHostPort(hh); err == nil {
			hh = x
		}
		if why := compareHost("HTTP Host", hh, target{Host: h, Addr: h.Addr}); why != "" {
			httpRefuse(client, 403, why)
			c.finish("refused", why)
			return
		}
	}
	chunked, bodyLen, err := req.framing()
	if err != nil {
		httpRefuse(client, 400, err.Error())
		c.finish("refused", err.Error())
		return
	}
	t, ok := s.checkForHTTP(client, c, h, port)
	if !ok {
		return
	}
	c.rec.Address = t.Addr.String()
	up, err := s.dial(s.ctx, t)
	if err != nil {
		httpRefuse(client, 502, "connect from the host: "+err.Error())
		c.finish("failed", "connect from the host: "+err.Error())
		return
	}
	defer up.Close()
	if req.Header.Get("Host") == "" {
		req.Header.Set("Host", u.Host)
	}
	// The answer is passed back from the start: a client that sent
	// Expect: 100-continue waits for the origin's 100 before its body.
	go c.copyIn(up)
	// This one request and nothing after it: a second request of a
	// keep-alive connection, to whatever host, never leaves the host
	// (onerequest.go says why).
	c.sendRequest(up, br, req.forwardHead(u.RequestURI(), "HTTP/1.1", chunked), chunked, bodyLen)
	<-c.inDone
	c.finish("allowed", c.cutReason())
}

// parseDest normalises a requested host and port.
func parseDest(host, port string) (Host, uint16, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return Host{}, 0, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return Host{}, uint16(p), err
	}
	return h, uint16(p), nil
}

// httpRefuse answers a proxy request that is not served: the reason is in
// X-Rljail-Refused and the body, so that a user can tell what to allow.
func httpRefuse(w io.Writer, code int, reason string) {
	reason = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, reason)
	body := "rljail egress: " + reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nX-Rljail-Refused: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, statusText(code), reason, len(body), body)
}

// checkForHTTP checks the destination of an HTTP proxy request (CONNECT or
// plain) and, refused, answers the client: 403 for the allowlist's
// refusal, 502 when the host could not decide (a resolver failure).
func (s *Server) checkForHTTP(client net.Conn, c *conversation, h Host, port uint16) (target, bool) {
	t, err := s.check(s.ctx, h, port)
	if err != nil {
		code := 403
		if !isRefusal(err) {
			code = 502
		}
		httpRefuse(client, code, err.Error())
		c.refuseOrFail(err)
		return t, false
	}
	return t, true
}
