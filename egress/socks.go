package egress

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// SOCKS5 (RFC 1928), CONNECT only, without authentication. A request by
// name (socks5h://, ATYP 3) is checked by that name; one by address is an
// address literal, allowed only by a rule by address.

const (
	socksVersion   = 5
	socksConnect   = 1
	atypIPv4       = 1
	atypDomain     = 3
	atypIPv6       = 4
	repSucceeded   = 0
	repNotAllowed  = 2
	repHostUnreach = 4
	repCmdUnsupp   = 7
	repAtypUnsupp  = 8
)

func (s *Server) serveSOCKS(client net.Conn) {
	c := s.newConversation(client, "socks5")
	_ = client.SetReadDeadline(time.Now().Add(s.limits.IdleTimeout))
	h, port, err := readSOCKSRequest(client)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		if rep, ok := err.(socksErr); ok {
			socksReply(client, rep.code)
		}
		c.finish("refused", "SOCKS: "+err.Error())
		return
	}
	c.rec.Host, c.rec.Port = h.String(), int(port)
	t, err := s.check(s.ctx, h, port)
	if err != nil {
		code := byte(repNotAllowed)
		if !isRefusal(err) {
			code = repHostUnreach
		}
		socksReply(client, code)
		c.refuseOrFail(err)
		return
	}
	if socksReply(client, repSucceeded) != nil {
		c.finish("failed", "the client went away")
		return
	}
	c.tunnel(t, nil)
}

type socksErr struct {
	code byte
	msg  string
}

func (e socksErr) Error() string { return e.msg }

// readSOCKSRequest reads the greeting and the request.
func readSOCKSRequest(r io.ReadWriter) (Host, uint16, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Host{}, 0, fmt.Errorf("no greeting: %v", err)
	}
	if hdr[0] != socksVersion {
		return Host{}, 0, fmt.Errorf("version %d, not 5", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return Host{}, 0, fmt.Errorf("no methods: %v", err)
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		_, _ = r.Write([]byte{socksVersion, 0xff})
		return Host{}, 0, fmt.Errorf("the client offers no unauthenticated method")
	}
	if _, err := r.Write([]byte{socksVersion, 0}); err != nil {
		return Host{}, 0, err
	}
	var req [4]byte
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return Host{}, 0, fmt.Errorf("no request: %v", err)
	}
	if req[0] != socksVersion {
		return Host{}, 0, socksErr{repCmdUnsupp, "a request of another version"}
	}
	if req[1] != socksConnect {
		// BIND and UDP ASSOCIATE: no listening on the host, no UDP.
		return Host{}, 0, socksErr{repCmdUnsupp, fmt.Sprintf("command %d: only CONNECT is served", req[1])}
	}
	var h Host
	switch req[3] {
	case atypIPv4, atypIPv6:
		n := 4
		if req[3] == atypIPv6 {
			n = 16
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return Host{}, 0, err
		}
		a, _ := netip.AddrFromSlice(b)
		h = Host{Addr: a.Unmap()}
	case atypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return Host{}, 0, err
		}
		b := make([]byte, l[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return Host{}, 0, err
		}
		var err error
		if h, err = NormalizeHost(string(b)); err != nil {
			return Host{}, 0, socksErr{repNotAllowed, err.Error()}
		}
	default:
		return Host{}, 0, socksErr{repAtypUnsupp, "address type " + strconv.Itoa(int(req[3]))}
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return Host{}, 0, err
	}
	port := binary.BigEndian.Uint16(p[:])
	if port == 0 {
		return Host{}, 0, socksErr{repNotAllowed, "port 0"}
	}
	return h, port, nil
}

// socksReply answers with code and a zero bound address: the host's own
// address is none of the jail's business.
func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}
