package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// One request per connection.
//
// A plain HTTP conversation through a tunnel (the transparent path, or
// CONNECT and SOCKS to a port that speaks plain HTTP) carries one request
// to the origin, and only that one: its head is read and checked (Host,
// target, framing), written anew (forwardHead: Connection: close, no
// Upgrade), its body passed on as its framing says (a length, or chunks
// framed anew), and nothing the client sends after it leaves the host.
// The origin's answer is passed back until the origin closes. The
// forward proxy (servePlain) does the same.
//
// The other way, reading every request of a keep-alive connection and
// checking each Host, needs the proxy to find where each request ends
// exactly as the origin will: a Content-Length and a Transfer-Encoding
// together, two lengths, a coding list, an Upgrade or a CONNECT the
// origin accepts (after which the stream is no HTTP the proxy can
// read), an HTTP/1.0 keep-alive, each is a place where the two may
// disagree, and a disagreement hides a request from the proxy inside
// what it took for a body (request smuggling). Here a disagreement has
// nothing to hide in: the origin gets the bytes of one request, framed
// by the proxy in the one way that has no second reading, and never a
// byte after them. What it costs is a new connection for each request,
// which HTTP/1.1 clients make when the answer says Connection: close.

// httpGuess is what a client's first bytes say about HTTP.
type httpGuess int

const (
	notHTTP   httpGuess = iota
	maybeHTTP           // a first line not yet ended that could still be a request line
	isHTTP              // a first line that is a request line, or one a lenient origin would take for one
)

// guessHTTP tells whether buf starts an HTTP request, by the form of its
// first line rather than a list of methods: an origin takes any token as
// a method (FOO / HTTP/1.1 reached it unchecked), skips empty lines before
// the request line, and some read a bare CR or a tab as a space, and a
// line without a version as HTTP/0.9. Anything that may be a request is
// judged as one, and strictly (readRequestHead), so that what the proxy
// does not read as a request is nothing an origin would take for one.
func guessHTTP(buf []byte) httpGuess {
	b := bytes.TrimLeft(buf, "\r\n")
	if len(b) == 0 {
		if len(buf) > 0 {
			return maybeHTTP
		}
		return notHTTP
	}
	i := 0
	for i < len(b) && isTokenByte(b[i]) {
		i++
	}
	switch {
	case i == 0:
		return notHTTP
	case i == len(b):
		return maybeHTTP
	case strings.IndexByte(" \t\v\f\r", b[i]) < 0:
		return notHTTP
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return maybeHTTP
	}
	line := b[:nl]
	if bytes.Contains(bytes.ToUpper(line[i:]), []byte("HTTP/")) {
		return isHTTP
	}
	if f := bytes.Fields(line); len(f) == 2 && (f[1][0] == '/' || bytes.Contains(f[1], []byte("://"))) {
		return isHTTP // HTTP/0.9: a method and a target
	}
	return notHTTP
}

// headEnded tells whether buf, an HTTP request's start, holds its whole
// head: an empty line after the request line (bare LF line ends too,
// which textproto reads).
func headEnded(buf []byte) bool {
	b := bytes.TrimLeft(buf, "\r\n")
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// checkTunnelRequest judges the head of the request a tunnel to t is to
// carry: "" when it may go. The tunnel was checked for t, so every place
// an origin reads a host from must name t (the Host header, an absolute
// target: an origin takes the target's authority over Host), no CONNECT
// (a tunnel in the tunnel, to anywhere the origin would take it), and a
// framing with one reading.
func checkTunnelRequest(req *requestHead, t target) string {
	if req.Method == "CONNECT" {
		return "a CONNECT inside a tunnel is not passed on"
	}
	host, err := req.host()
	if err != nil {
		return "the client's HTTP request has " + err.Error()
	}
	if host != "" {
		if why := compareHost("HTTP Host", hostOnly(host), t); why != "" {
			return why
		}
	}
	switch {
	case req.Target[0] == '/' && !(len(req.Target) > 1 && req.Target[1] == '/'):
	case req.Target == "*" && req.Method == "OPTIONS":
	default:
		u, err := url.Parse(req.Target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return "the client's HTTP request target " + quote(req.Target) + " is neither a path nor an absolute http URI"
		}
		if why := compareHost("HTTP request target", u.Hostname(), t); why != "" {
			return why
		}
	}
	if _, _, err := req.framing(); err != nil {
		return "the client's HTTP request: " + err.Error()
	}
	return ""
}

// hostOnly is a Host header's host, without its port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// originTarget is the request's target as sent to the origin: the
// origin form of an absolute URI (checked by checkTunnelRequest), else as
// the client wrote it.
func originTarget(req *requestHead) string {
	if req.Target[0] == '/' || req.Target == "*" {
		return req.Target
	}
	if u, err := url.Parse(req.Target); err == nil {
		return u.RequestURI()
	}
	return req.Target
}

// tunnelRequest passes the one request of a plain HTTP conversation in a
// tunnel to up (first are the client's bytes read so far, the whole head
// among them, checked by inspect); the origin's answer goes back in
// copyIn. A request without Host gets the checked name: an origin's
// default site is not the one that was checked.
func (c *conversation) tunnelRequest(up net.Conn, t target, first []byte) {
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(first), c.client), 4096)
	req, err := readRequestHead(br)
	if err != nil { // inspect read it from the same bytes
		c.cutBoth(up, "the client's HTTP request could not be read: "+err.Error())
		return
	}
	chunked, length, err := req.framing()
	if err != nil {
		c.cutBoth(up, "the client's HTTP request: "+err.Error())
		return
	}
	if req.Header.Get("Host") == "" && t.Host.Name != "" {
		host := t.Host.Name
		if t.Port != 80 {
			host = net.JoinHostPort(host, strconv.Itoa(int(t.Port)))
		}
		req.Header.Set("Host", host)
	}
	// The client's own version: the answer to an HTTP/1.0 client must
	// not come in chunks.
	head := req.forwardHead(originTarget(req), req.Proto, chunked)
	c.sendRequest(up, br, head, chunked, length)
}

// cutBoth ends a conversation whose client broke off the request.
func (c *conversation) cutBoth(up net.Conn, why string) {
	c.setCut(why)
	up.Close()
	c.client.Close()
}

// sendRequest writes one request to up: head, then the body read from br
// as the request is framed (length bytes, or chunks passed on framed
// anew: the size in hex, the data, no extensions, no trailers), and
// nothing after it. The run's byte budget, the idle timeout and the
// connection's longest time bound it as they bound pipe. A body that
// breaks off, or chunks that cannot be read, end the conversation: the
// origin has an unfinished request, never a second one.
func (c *conversation) sendRequest(up net.Conn, br *bufio.Reader, head []byte, chunked bool, length int64) {
	s := c.s
	var sent int64
	defer func() {
		c.mu.Lock()
		c.rec.BytesOut = sent
		c.mu.Unlock()
	}()
	write := func(b []byte) string {
		if s.bytesAll.Add(int64(len(b))) > s.limits.MaxBytes {
			return fmt.Sprintf("the run's %d bytes of egress were used up", s.limits.MaxBytes)
		}
		_ = up.SetWriteDeadline(time.Now().Add(s.limits.IdleTimeout))
		n, err := up.Write(b)
		sent += int64(n)
		c.active.Store(time.Now().UnixNano())
		if err != nil {
			return "closed"
		}
		return ""
	}
	// The client's reads: each within the idle timeout, and all within
	// the connection's longest time.
	deadline := func() {
		d := time.Now().Add(s.limits.IdleTimeout)
		if s.limits.MaxDuration > 0 && c.start.Add(s.limits.MaxDuration).Before(d) {
			d = c.start.Add(s.limits.MaxDuration)
		}
		_ = c.client.SetReadDeadline(d)
	}
	buf := make([]byte, 32<<10)
	copyN := func(n int64) string {
		for n > 0 {
			deadline()
			k, err := br.Read(buf[:min(int64(len(buf)), n)])
			if k > 0 {
				if why := write(buf[:k]); why != "" {
					return why
				}
				n -= int64(k)
			}
			if err != nil && n > 0 {
				if isTimeout(err) {
					return fmt.Sprintf("the request's body stalled for %s", s.limits.IdleTimeout)
				}
				return "the client broke off the request's body"
			}
		}
		return ""
	}
	why := write(head)
	switch {
	case why != "":
	case chunked:
		why = c.sendChunks(br, write, copyN, deadline)
	default:
		why = copyN(length)
	}
	_ = c.client.SetReadDeadline(time.Time{})
	if why != "" {
		c.cutBoth(up, cutWhy(why))
	}
}

// maxChunkLine bounds a chunk's size line, extensions and all, and
// maxTrailers the trailers after the last chunk.
const (
	maxChunkLine = 1 << 10
	maxTrailers  = 16 << 10
)

// sendChunks passes a body in chunks on, each framed anew; it returns why
// it stopped before the last chunk ("" when the body went whole).
func (c *conversation) sendChunks(br *bufio.Reader, write func([]byte) string, copyN func(int64) string, deadline func()) string {
	line := func(max int) ([]byte, string) {
		var out []byte
		for {
			deadline()
			b, err := br.ReadSlice('\n')
			out = append(out, b...)
			if len(out) > max {
				return nil, "a line of the request's chunks over " + strconv.Itoa(max) + " bytes"
			}
			if err == nil {
				break
			}
			if err != bufio.ErrBufferFull {
				return nil, "the client broke off the request's chunks"
			}
		}
		if !bytes.HasSuffix(out, []byte("\r\n")) || bytes.IndexByte(out[:len(out)-2], '\r') >= 0 {
			return nil, "a line of the request's chunks does not end in CRLF"
		}
		return out[:len(out)-2], ""
	}
	trailers := 0
	for {
		l, why := line(maxChunkLine)
		if why != "" {
			return why
		}
		size, _, _ := bytes.Cut(l, []byte(";")) // extensions are dropped
		if len(size) == 0 || len(size) > 15 || len(bytes.Trim(size, "0123456789abcdefABCDEF")) > 0 {
			return "a chunk size " + quote(string(l))
		}
		n, _ := strconv.ParseInt(string(size), 16, 64)
		if n == 0 {
			// Trailers are read and dropped, up to the empty line.
			for {
				t, why := line(maxChunkLine)
				if why != "" {
					return why
				}
				if len(t) == 0 {
					break
				}
				if trailers += len(t); trailers > maxTrailers {
					return "the request's trailers are over " + strconv.Itoa(maxTrailers) + " bytes"
				}
			}
			return write([]byte("0\r\n\r\n"))
		}
		if why := write([]byte(strconv.FormatInt(n, 16) + "\r\n")); why != "" {
			return why
		}
		if why := copyN(n); why != "" {
			return why
		}
		if l, why := line(2); why != "" || len(l) != 0 {
			if why == "" {
				why = "a chunk longer than its size"
			}
			return why
		}
		if why := write([]byte("\r\n")); why != "" {
			return why
		}
	}
}
