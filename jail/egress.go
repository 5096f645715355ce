package jail

import (
	"net/netip"
	"os"
	"strconv"
)

// Egress is a run's network egress by allowlist (package egress): the
// jail keeps its empty network namespace; its init makes listening
// sockets on the jail's loopback and hands them to the supervisor, which
// serves them from the host. Nothing of it exists when Spec.Egress is nil:
// the default run pays nothing for it.
type Egress interface {
	// Sockets are the sockets init makes, in the order Serve gets them.
	Sockets() []EgressSocket
	// Env are entries for the payload's environment (the proxy
	// variables); the caller's own -e entries come after them.
	Env() []string
	// EtcFiles replace files of the jail's generated /etc (hosts,
	// resolv.conf, nsswitch.conf).
	EtcFiles() []EtcFile
	// Serve starts serving the sockets init made; it owns them and
	// returns at once. It is not called when init made none.
	Serve(socks []*os.File)
	// Close stops serving and ends every connection; it returns the
	// report. It is called once the jail is gone, and again harmlessly.
	Close() *NetworkReport
}

// EgressSocket is one socket init makes in the jail's network namespace:
// a TCP listener, or a UDP socket bound (Datagram).
type EgressSocket struct {
	Datagram bool
	Addr     netip.AddrPort
}

// EtcFile is a file of the jail's /etc: Name is its name there.
type EtcFile struct {
	Name    string
	Content string
}

// NetworkReport is the report's "network" object under egress: every
// connection, allowed or refused, up to a bound, and the totals.
type NetworkReport struct {
	// Allow is the rules (--allow-host and a profile's allow), as written.
	Allow []string `json:"allow"`
	// Resolve is the --resolve pins (and a profile's resolve), by name;
	// absent when there are none.
	Resolve     []ResolvePin `json:"resolve,omitempty"`
	Connections []Connection `json:"connections"`
	// ConnectionsTotal counts them all; ConnectionsNotListed those past
	// the report's bound.
	ConnectionsTotal     int64 `json:"connections_total"`
	ConnectionsNotListed int64 `json:"connections_not_listed"`
	Refused              int64 `json:"refused"`
	BytesOut             int64 `json:"bytes_out"`
	BytesIn              int64 `json:"bytes_in"`
	DNSQueries           int64 `json:"dns_queries"`
	DNSRefused           int64 `json:"dns_refused"`
}

// ResolvePin is one --resolve pin: the name and the address it is given
// instead of the host resolver's answer.
type ResolvePin struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// NonPublic says why the address is not public (loopback, private,
	// link-local...), empty for a public one: the pin lets its name, and
	// no other, reach that address on the ports the rules allow it.
	NonPublic string `json:"non_public,omitempty"`
	// NeedsRule says why the pin alone does not reach the address (a
	// cloud metadata address, an IPv6 form carrying an IPv4 address that
	// is not public): a rule by address must name it as well.
	NeedsRule string `json:"needs_rule,omitempty"`
}

// Connection is one connection the jail asked for.
type Connection struct {
	// Via is how it came: http (a plain proxy request), connect (HTTP
	// CONNECT), socks5, or transparent (a synthetic address).
	Via  string `json:"via"`
	Host string `json:"host"`
	Port int    `json:"port"`
	// Address is the address dialled (empty when refused before that).
	Address    string `json:"address,omitempty"`
	BytesOut   int64  `json:"bytes_out"`
	BytesIn    int64  `json:"bytes_in"`
	DurationMS int64  `json:"duration_ms"`
	// Verdict is allowed, refused or failed (allowed, but the host could
	// not connect); Reason says why when not allowed.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// receiveEgressSockets reads the n sockets init sends after its config
// ("lsn!" messages with one descriptor each: make_listeners in init.c).
// An init that ended first gives fewer; those received are returned.
func (j *jailRun) receiveEgressSockets(n int) []*os.File {
	var out []*os.File
	for len(out) < n {
		_, fd, ok := recvTagged(j.control, "lsn!", 4)
		if !ok {
			break
		}
		out = append(out, os.NewFile(uintptr(fd), "egress-socket"))
	}
	return out
}

// startEgress receives init's sockets and serves them, in the background;
// the returned function waits for that and stops serving, giving the
// report. Nil Egress: nothing at all.
func (j *jailRun) startEgress(e Egress) func() *NetworkReport {
	if e == nil {
		return func() *NetworkReport { return nil }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if socks := j.receiveEgressSockets(len(e.Sockets())); len(socks) > 0 {
			e.Serve(socks)
		}
	}()
	return func() *NetworkReport {
		<-done // the control socket is closed by then: the receiver has ended
		return e.Close()
	}
}

// egressRecords are the config's records for e: its sockets and /etc
// files (protocol.go's tagListen and tagEtcFile).
func egressRecords(e Egress, rec func(byte, ...string)) {
	for _, s := range e.Sockets() {
		kind := "tcp"
		if s.Datagram {
			kind = "udp"
		}
		rec(tagListen, kind, s.Addr.Addr().String(), strconv.Itoa(int(s.Addr.Port())))
	}
	for _, f := range e.EtcFiles() {
		rec(tagEtcFile, f.Name, f.Content)
	}
}

func (n *NetworkReport) appendJSON(b []byte) []byte {
	b = append(b, `{"allow":`...)
	if n.Allow == nil {
		b = append(b, "null"...)
	} else {
		b = appendStrings(b, n.Allow)
	}
	if len(n.Resolve) > 0 {
		b = append(b, `,"resolve":[`...)
		for i, p := range n.Resolve {
			if i > 0 {
				b = append(b, ',')
			}
			b = p.appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `,"connections":`...)
	if n.Connections == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range n.Connections {
			if i > 0 {
				b = append(b, ',')
			}
			b = c.appendJSON(b)
		}
		b = append(b, ']')
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{`,"connections_total":`, n.ConnectionsTotal}, {`,"connections_not_listed":`, n.ConnectionsNotListed},
		{`,"refused":`, n.Refused}, {`,"bytes_out":`, n.BytesOut}, {`,"bytes_in":`, n.BytesIn},
		{`,"dns_queries":`, n.DNSQueries}, {`,"dns_refused":`, n.DNSRefused},
	} {
		b = append(b, f.name...)
		b = strconv.AppendInt(b, f.v, 10)
	}
	return append(b, '}')
}

func (p ResolvePin) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, p.Name)
	b = append(b, `,"address":`...)
	b = appendString(b, p.Address)
	if p.NonPublic != "" {
		b = append(b, `,"non_public":`...)
		b = appendString(b, p.NonPublic)
	}
	if p.NeedsRule != "" {
		b = append(b, `,"needs_rule":`...)
		b = appendString(b, p.NeedsRule)
	}
	return append(b, '}')
}

func (c Connection) appendJSON(b []byte) []byte {
	b = append(b, `{"via":`...)
	b = appendString(b, c.Via)
	b = append(b, `,"host":`...)
	b = appendString(b, c.Host)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(c.Port), 10)
	if c.Address != "" {
		b = append(b, `,"address":`...)
		b = appendString(b, c.Address)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{`,"bytes_out":`, c.BytesOut}, {`,"bytes_in":`, c.BytesIn}, {`,"duration_ms":`, c.DurationMS}} {
		b = append(b, f.name...)
		b = strconv.AppendInt(b, f.v, 10)
	}
	b = append(b, `,"verdict":`...)
	b = appendString(b, c.Verdict)
	if c.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, c.Reason)
	}
	return append(b, '}')
}
