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
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") || parts[0] == "" || parts[1] == "" {
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

// contentLength is the body's length: 0 without one; an error for a body
// in chunks or of two lengths (request smuggling needs one of those).
func (r *requestHead) contentLength() (int64, error) {
	if len(r.Header.Values("Transfer-Encoding")) > 0 {
		return 0, fmt.Errorf("a request body in chunks is not forwarded: send Content-Length")
	}
	cl := r.Header.Values("Content-Length")
	switch len(cl) {
	case 0:
		return 0, nil
	case 1:
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("Content-Length %s", quote(cl[0]))
		}
		return n, nil
	}
	return 0, fmt.Errorf("%d Content-Length headers", len(cl))
}

// hopByHop are headers for the proxy itself, never passed on.
var hopByHop = []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Transfer-Encoding"}

// forwardHead writes the head as sent to the origin: target in origin
// form, hop-by-hop headers dropped (and those Connection names),
// Connection: close.
func (r *requestHead) forwardHead(target string) []byte {
	drop := map[string]bool{}
	for _, h := range hopByHop {
		drop[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, v := range r.Header.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			drop[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", r.Method, target)
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
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// statusText names the few statuses the proxy answers with.
func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 411:
		return "Length Required"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}
