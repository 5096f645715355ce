package serve

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// A session's callback_url makes the server itself send requests on a
// client's behalf: the call events go there and the answers come back
// into the jail, which the client reads. Without a list every http(s) URL
// outside the refused addresses (egress.RefusedForCallback) is taken,
// loopback and private ones included, since a runner's callback is
// usually beside the server; a server that clients reach over a network
// names the runners' places in [sessions] callback_allow, so that no
// client can aim it at another service of its host or network.

// callbackPrefix is one entry of callback_allow: a URL's scheme, host and
// port (the scheme's when none is given) and a path prefix.
type callbackPrefix struct {
	scheme, host, port, path string
}

// parseCallbackPrefix reads one callback_allow entry, such as
// "http://127.0.0.1:9000/calls/".
func parseCallbackPrefix(s string) (callbackPrefix, error) {
	p, err := callbackParts(s)
	if err != nil {
		return p, err
	}
	if p.path == "" {
		p.path = "/"
	}
	return p, nil
}

// callbackParts splits a callback URL (or an allow entry) into what is
// compared: scheme and host lowercase, the port spelt out, the path as
// sent. A URL with user info, a query or fragment in an entry, or a path
// with a . or .. segment (which a server may resolve out of the prefix)
// is refused.
func callbackParts(s string) (callbackPrefix, error) {
	u, err := url.Parse(s)
	if err != nil {
		return callbackPrefix{}, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	p := callbackPrefix{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port(), path: u.EscapedPath()}
	switch {
	case p.scheme != "http" && p.scheme != "https":
		return p, fmt.Errorf("%q: the scheme must be http or https", s)
	case p.host == "":
		return p, fmt.Errorf("%q has no host", s)
	case u.User != nil:
		return p, fmt.Errorf("%q: a callback URL carries no user or password", s)
	}
	if p.port == "" {
		p.port = map[string]string{"http": "80", "https": "443"}[p.scheme]
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return p, fmt.Errorf("%q: the path may not have . or .. segments", s)
		}
	}
	return p, nil
}

// covers says whether the callback URL u (split by callbackParts) lies
// within p: the same scheme, host and port, and a path that is p's (with
// or without its last "/") or continues it after a "/".
func (p callbackPrefix) covers(u callbackPrefix) bool {
	if u.scheme != p.scheme || u.host != p.host || u.port != p.port {
		return false
	}
	path := u.path
	if path == "" {
		path = "/"
	}
	base := strings.TrimSuffix(p.path, "/")
	return path == p.path || path == base || strings.HasPrefix(path, base+"/")
}

func (p callbackPrefix) String() string {
	return p.scheme + "://" + net.JoinHostPort(p.host, p.port) + p.path
}

// allowedCallback refuses a callback URL that no entry of allow covers;
// an empty allow takes every URL.
func allowedCallback(raw string, allow []callbackPrefix) error {
	if len(allow) == 0 {
		return nil
	}
	u, err := callbackParts(raw)
	if err != nil {
		return err
	}
	for _, p := range allow {
		if p.covers(u) {
			return nil
		}
	}
	names := make([]string, len(allow))
	for i, p := range allow {
		names[i] = p.String()
	}
	return fmt.Errorf("%q is not below a place the server calls back ([sessions] callback_allow: %s)", raw, strings.Join(names, ", "))
}
