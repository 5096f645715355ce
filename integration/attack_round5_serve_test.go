package integration

// Red-team round 5, rljail serve: a request's payload goes for the server
// that runs it. Decided from the host: the server's own log, one JSON
// line per request it answered, never holds the payload's marker.

import (
	"fmt"
	"strings"
	"testing"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "serve_reach_own_server", group: groupNetwork,
			mechanism: "a /v1/run payload connects to the server that runs it: its Unix socket's host path, the same path below /proc/1/root and /proc/self/root, the abstract name, and its loopback TCP port, and sends GET /MARKER on each connection it gets; the request would then run jails of its own (or, with the server's token unknown to it, probe the API)",
			layer:     "the jail's mount namespace holds none of the host's paths (the socket is not mounted) and its network namespace has a loopback of its own, with no route to the host's; the payload holds no descriptor of the server's but its pipes",
			run:       attackServeReachOwnServer},
	}...)
}

func attackServeReachOwnServer(t *testing.T, m mode) {
	marker := randomToken("servemarker")
	for _, tcp := range []bool{false, true} {
		s := startServer(t, m, serveOpts{tcp: tcp, insecure: tcp, maxConc: 1})
		port := "0"
		if tcp {
			port = s.tcp[strings.LastIndex(s.tcp, ":")+1:]
		}
		code := fmt.Sprintf(`
import os, socket
req = b"GET /%[1]s HTTP/1.0\r\nHost: x\r\n\r\n"
hits = []
sock = %[2]q
# Each place by its directory first (chdir), so that no path is too long
# for AF_UNIX.
for p in [sock, "/proc/1/root" + sock, "/proc/self/root" + sock, "\0" + sock] if sock else []:
    try:
        name = p
        if not p.startswith("\0"):
            os.chdir(os.path.dirname(p)); name = os.path.basename(p)
        s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(name); s.sendall(req); hits.append(p); s.recv(100)
    except OSError as e:
        print("unix", repr(p), e)
for host in ["127.0.0.1", "::1", "localhost"]:
    try:
        s = socket.create_connection((host, %[3]s), timeout=1); s.sendall(req); hits.append(host); s.recv(100)
    except OSError as e:
        print("tcp", host, e)
print("connected:", hits)
`, marker, s.sock, port)
		var r v1Response
		if c := s.postJSON(t, "/v1/run", map[string]any{"code": code, "limits": map[string]any{"timeout_seconds": 15}}, &r); c != 200 {
			t.Fatalf("the attack's run: %d", c)
		}
		s.stop(t)
		log := s.stderr.String()
		if strings.Contains(log, marker) {
			t.Errorf("tcp=%v: the server answered the payload's request (its log holds the marker):\n%s\npayload said: %s", tcp, log, r.Stdout.Text)
		}
		if n := strings.Count(log, `"msg":"request"`); n != 1 {
			t.Errorf("tcp=%v: the server logged %d requests, want only the attack's own:\n%s", tcp, n, log)
		}
		t.Logf("tcp=%v: payload said: %s", tcp, r.Stdout.Text)
	}
}
