package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"net/textproto"
	"sort"
	"strconv"
	"strings"
)

// The proxy reads request heads itself, with net/textproto, rather than
// with net/http: net/http links crypto/tls and HTTP/2 into the rljail
// binary, whose package initialisation every run pays (about 0.4 ms,
// measured with GODEBUG=inittrace=1), with egress or without.

// requestHead is an HTTP/1.x request line and its headers.
type requestHead struct {
	Method, Target, Proto string
	Header                textproto.MIMEHeader
}

// readRequestHead reads one request head from br.
func readRequestHead(br *bufio.Reader) (*requestHead, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	// One space between three parts, a token, a target of visible
	// characters and HTTP/1.0 or 1.1: a line that another parser could
	// read otherwise (tabs, two spaces, a bare CR, HTTP/2's preface) is
	// refused rather than guessed at.
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !isToken(parts[0]) || !isVisible(parts[1]) || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
		return nil, fmt.Errorf("a malformed request line %s", quote(line))
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return &requestHead{Method: parts[0], Target: parts[1], Proto: parts[2], Header: h}, nil
}

// host is the request's Host header: one, or "" when there is none.
func (r *requestHead) host() (string, error) {
	hs := r.Header.Values("Host")
	switch len(hs) {
	case 0:
		return "", nil
	case 1:
		return hs[0], nil
	}
	return "", fmt.Errorf("%d Host headers", len(hs))
}

// framing is how the request's body ends: in chunks (HTTP/1.1, the one
// coding "chunked" alone, no Content-Length beside it), or after length
// bytes (one Content-Length of digits; 0 without one). Whatever two
// parsers could frame differently (request smuggling: chunked and a
// length, two lengths, "+5", a coding list) is an error.
func (r *requestHead) framing() (chunked bool, length int64, err error) {
	for k := range r.Header {
		// Some servers read "_" as "-" in a header's name (CGI's
		// HTTP_CONTENT_LENGTH is both): a second length under another
		// name is a second reading.
		if d := textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(k, "_", "-")); d != k && (endToEnd[d] || d == "Transfer-Encoding") {
			return false, 0, fmt.Errorf("a header %s, which a server may read as %s", quote(k), d)
		}
	}
	te, cl := r.Header.Values("Transfer-Encoding"), r.Header.Values("Content-Length")
	if len(te) > 0 {
		switch {
		case len(te) != 1 || !strings.EqualFold(te[0], "chunked"):
			return false, 0, fmt.Errorf("Transfer-Encoding %s: only chunked, alone, is forwarded", quote(strings.Join(te, ", ")))
		case r.Proto != "HTTP/1.1":
			return false, 0, fmt.Errorf("a body in chunks in %s", r.Proto)
		case len(cl) > 0:
			return false, 0, fmt.Errorf("both Transfer-Encoding and Content-Length")
		}
		return true, 0, nil
	}
	switch len(cl) {
	case 0:
		return false, 0, nil
	case 1:
		if cl[0] == "" || len(cl[0]) > 18 || strings.Trim(cl[0], "0123456789") != "" {
			return false, 0, fmt.Errorf("Content-Length %s", quote(cl[0]))
		}
		n, _ := strconv.ParseInt(cl[0], 10, 64)
		return false, n, nil
	}
	return false, 0, fmt.Errorf("%d Content-Length headers", len(cl))
}

// hopByHop are headers for the proxy itself, never passed on.
var hopByHop = []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Transfer-Encoding"}

// endToEnd are headers that a Connection header cannot make hop-by-hop:
// "Connection: content-length" dropped the length of a body that was
// still sent, and the origin read that body as a second request.
var endToEnd = map[string]bool{"Host": true, "Content-Length": true}

// forwardHead writes the head as sent to the origin: the request line in
// proto with target (origin form), hop-by-hop headers dropped (and those
// Connection names, but for endToEnd), Transfer-Encoding: chunked for a
// body in chunks (framed anew by sendRequest), and Connection: close: the
// origin gets this one request on the connection, and no protocol
// upgrade (Upgrade is hop-by-hop).
func (r *requestHead) forwardHead(target, proto string, chunked bool) []byte {
	drop := map[string]bool{}
	for _, h := range hopByHop {
		drop[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, v := range r.Header.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if k := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)); !endToEnd[k] {
				drop[k] = true
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s\r\n", r.Method, target, proto)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if drop[k] {
			continue
		}
		for _, v := range r.Header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	if chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// isToken tells whether s is an HTTP token (RFC 9110 5.6.2), as a method is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isVisible tells whether s is not empty and has only visible ASCII.
func isVisible(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// statusText names the few statuses the proxy answers with.
func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}
