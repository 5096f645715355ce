package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
)

// complete tells whether buf holds enough of a client's first bytes to
// judge them: a whole TLS record, or an HTTP request's head; anything
// else is judged as it is.
func complete(buf []byte) bool {
	if len(buf) == 0 {
		return false
	}
	if buf[0] == 0x16 { // a TLS handshake record
		if len(buf) < 5 {
			return false
		}
		return len(buf) >= 5+int(binary.BigEndian.Uint16(buf[3:5]))
	}
	switch guessHTTP(buf) {
	case maybeHTTP:
		return false
	case isHTTP:
		return headEnded(buf)
	}
	return true
}

// inspect judges a tunnel's first bytes: a TLS ClientHello whose SNI, or
// an HTTP request whose Host or target, names another host than the one
// the tunnel was checked for is refused (a CONNECT to an allowed name that
// then asks a shared front end for another), and so is an HTTP request
// that checkTunnelRequest refuses or that cannot be read. It returns the
// reason, "" when they agree or say nothing. An HTTP request found here is
// the only one the tunnel carries (tunnelRequest). What TLS hides (the
// Host inside it: domain fronting) cannot be seen here; SECURITY.md says
// so.
func inspect(first []byte, t target) string {
	if len(first) > 0 && first[0] == 0x16 {
		sni, ok := parseSNI(first)
		if !ok {
			return "the client's TLS ClientHello could not be read"
		}
		if sni == "" {
			return ""
		}
		return compareHost("TLS SNI", sni, t)
	}
	switch guessHTTP(first) {
	case maybeHTTP:
		// Passed on as it is, the rest of the line could make it a
		// request that nobody checked.
		return "the client's first bytes are an unfinished line that could begin an HTTP request"
	case isHTTP:
		if !headEnded(first) {
			return "the client's HTTP request head did not come whole"
		}
		req, err := readRequestHead(bufio.NewReader(bytes.NewReader(first)))
		if err != nil {
			return "the client's HTTP request could not be read: " + err.Error()
		}
		return checkTunnelRequest(req, t)
	}
	return ""
}

// compareHost says why a host the client named differs from t's.
func compareHost(what, named string, t target) string {
	h, err := NormalizeHost(named)
	if err != nil {
		return what + " " + quote(named) + " is not a host name"
	}
	switch {
	case h.Addr.IsValid() && h.Addr == t.Addr:
		return ""
	case t.Host.Name != "" && h.Name == t.Host.Name:
		return ""
	case t.Host.Name == "" && h.Name != "":
		// A tunnel to an address allowed by a rule by address: its name
		// is the client's business.
		return ""
	}
	return what + " " + quote(named) + " differs from " + t.Host.String() + ", which was checked"
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return "\"" + strings.ToValidUTF8(s, "?") + "\""
}

// parseSNI reads the server_name of a TLS ClientHello (RFC 8446 4.1.2,
// RFC 6066 3): "" when it has none; false when the record is not a
// ClientHello that can be read.
func parseSNI(rec []byte) (string, bool) {
	if len(rec) < 5 || rec[0] != 0x16 {
		return "", false
	}
	n := int(binary.BigEndian.Uint16(rec[3:5]))
	if len(rec) < 5+n {
		return "", false
	}
	p := rec[5 : 5+n]
	// handshake: type 1 (client_hello), 3-byte length
	if len(p) < 4 || p[0] != 1 {
		return "", false
	}
	hl := int(p[1])<<16 | int(p[2])<<8 | int(p[3])
	if len(p) < 4+hl {
		return "", false // a ClientHello over several records: judged unreadable
	}
	p = p[4 : 4+hl]
	r := reader{b: p}
	r.skip(2 + 32)       // version, random
	r.skip(int(r.u8()))  // session id
	r.skip(int(r.u16())) // cipher suites
	r.skip(int(r.u8()))  // compression methods
	if r.bad || len(r.b) == 0 {
		return "", !r.bad
	}
	ext := reader{b: r.take(int(r.u16()))}
	for !r.bad && !ext.bad && len(ext.b) > 0 {
		typ, body := ext.u16(), ext.take(int(ext.u16()))
		if ext.bad {
			break
		}
		if typ != 0 { // server_name
			continue
		}
		names := reader{b: body}
		list := reader{b: names.take(int(names.u16()))}
		for !list.bad && len(list.b) > 0 {
			kind, name := list.u8(), list.take(int(list.u16()))
			if !list.bad && kind == 0 {
				return string(name), true
			}
		}
		return "", false
	}
	return "", !r.bad && !ext.bad
}

// reader takes bytes off a buffer, remembering an overrun.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) skip(n int) { r.take(n) }

func (r *reader) u8() byte {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}
