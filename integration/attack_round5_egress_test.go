package integration

// Red-team round 5, egress (issue 29): IPv6 forms that carry an IPv4
// address, and the requests after the first on a plain HTTP connection.
// Decided on the host: what a listener this test started saw (a server
// in a network namespace of the test's own for the IPv6 addresses, an
// origin on the host's loopback that reads every request of a
// connection), and the supervisor's report.

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "egress_ipv6_embedded_ipv4", group: groupNetwork,
			mechanism: "allowed names resolving to IPv6 forms of a 127/8 address: IPv4-compatible ::127.a.b.c and IPv4-translated (SIIT) ::ffff:0:127.a.b.c with no rule by address, 6to4 2002:7faa:bbcc:: and NAT64 64:ff9b::127.a.b.c under rules that allow 2002::/16 and 64:ff9b::/96; a server holds those addresses in a network namespace the host routes them to",
			layer:     "egress: every IPv6 form that carries an IPv4 address (compatible, translated, NAT64, local NAT64, 6to4, Teredo) is judged by the IPv4 address it carries as well; ::/96 and ::ffff:0:0:0/96 are refused by default",
			run:       attackEgressEmbeddedIPv4},
		{name: "egress_pipelined_requests", group: groupNetwork,
			mechanism: "a second request with Host evil.test after an allowed first one on one connection: pipelined through the transparent path, CONNECT and SOCKS; hidden after a body framed by both Transfer-Encoding and Content-Length; after a Content-Length that Connection names (forward proxy); with an unlisted method FOO, an absolute target http://evil.test/; a keep-alive forward-proxy connection",
			layer:     "egress: a plain HTTP conversation carries one request, checked (Host, target, method, framing) and written anew with its body framed by the proxy, and no byte the client sends after it",
			run:       attackEgressPipelined},
	}...)
}

// attackEgressEmbeddedIPv4 makes a network namespace with a veth pair,
// gives the namespace's end four IPv6 addresses that carry 127.a.b.c
// (and a ULA one, the control), routes each /128 to it from the host,
// and runs a server there that logs every connection. The names are
// pinned to those addresses; only the control, allowed by a rule for
// its /64, may reach the server.
func attackEgressEmbeddedIPv4(t *testing.T, m mode) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 29))
	a, b, c := 1+r.IntN(250), 1+r.IntN(250), 1+r.IntN(250)
	v4 := fmt.Sprintf("127.%d.%d.%d", a, b, c)
	ula := fmt.Sprintf("fd%02x:%x:%x::", r.IntN(256), 1+r.IntN(0xfffe), 1+r.IntN(0xfffe))
	addrs := map[string]string{
		"compat.test": "::" + v4,
		"siit.test":   "::ffff:0:" + v4,
		"6to4.test":   fmt.Sprintf("2002:7f%02x:%02x%02x::1", a, b, c),
		"nat64.test":  "64:ff9b::" + v4,
		"ula.test":    ula + "1",
	}
	tag := strconv.Itoa(int(time.Now().UnixNano() % 1e5))
	ns, host, peer, ipCmd := vethNetns(t, "rljail-e6-", "rje6", tag)
	// No duplicate address detection on the host's end: its link-local
	// address is the namespace's way back at once.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+host+"/accept_dad", []byte("0"), 0o644); err != nil {
		t.Fatalf("IPv6 on the host's veth: %v", err)
	}
	ipCmd("link", "set", host, "up")
	ipCmd("-n", ns, "link", "set", peer, "up")
	ipCmd("-n", ns, "link", "set", "lo", "up")
	for _, addr := range addrs {
		ipCmd("-n", ns, "addr", "add", addr+"/128", "dev", peer, "nodad")
		ipCmd("-6", "route", "add", addr+"/128", "dev", host)
	}
	var ll string
	for i := 0; i < 50 && ll == ""; i++ {
		out, _ := exec.Command("ip", "-6", "-o", "addr", "show", "dev", host, "scope", "link").Output()
		if f := strings.Fields(string(out)); len(f) >= 4 && !strings.Contains(string(out), "tentative") {
			ll, _, _ = strings.Cut(f[3], "/")
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if ll == "" {
		t.Fatal("the host's veth has no IPv6 link-local address")
	}
	ipCmd("-n", ns, "-6", "route", "add", "default", "via", ll, "dev", peer)
	logPath := filepath.Join(t.TempDir(), "server.log")
	srv := exec.Command("ip", "netns", "exec", ns, rootfsDir+"/usr/bin/python3", "-u", "-c", `
import socket, sys
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 8080)); s.listen(64)
while True:
    c, _ = s.accept()
    open(sys.argv[1], "a").write(c.getsockname()[0] + "\n")
    c.settimeout(2)
    try:
        c.recv(4096); c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except OSError:
        pass
    c.close()
`, logPath)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	up := false
	for i := 0; i < 50 && !up; i++ {
		cn, err := net.DialTimeout("tcp", "["+addrs["ula.test"]+"]:8080", 200*time.Millisecond)
		if err == nil {
			cn.Close()
			up = true
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !up {
		t.Fatal("the test server in the namespace did not come up on " + addrs["ula.test"])
	}
	// The probe's line, once the server wrote it.
	for i := 0; i < 50; i++ {
		if b, _ := os.ReadFile(logPath); len(b) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = os.Remove(logPath)
	args := []string{"--allow-host", "[2002::/16]:8080", "--allow-host", "[64:ff9b::/96]:8080", "--allow-host", "[" + ula + "/64]:8080"}
	var calls strings.Builder
	for name, addr := range addrs {
		args = append(args, "--allow-host", name+":8080", "--resolve", name+":["+addr+"]")
		fmt.Fprintf(&calls, "quiet(connect_get, %q, 8080, \"/connect\")\nquiet(proxy_get, \"http://%s:8080/proxy\")\n", name, name)
	}
	code := `
def connect_get(host, port, path):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    head = s.recv(4096)
    if b" 200 " in head.split(b"\r\n")[0]:
        s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, host)).encode()); return s.recv(4096)
    return head
` + calls.String()
	_, stderr, exit, res := runEgress(t, m, args, code)
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, stderr)
	}
	logged, _ := os.ReadFile(logPath)
	// By address, however the server's libc writes it.
	reached := map[string]int{}
	for _, l := range strings.Fields(string(logged)) {
		if a, err := netip.ParseAddr(l); err == nil {
			reached[a.String()]++
		}
	}
	for name, addr := range addrs {
		addrs[name] = netip.MustParseAddr(addr).String()
	}
	if reached[addrs["ula.test"]] != 2 {
		t.Fatalf("the control (ula.test, %s, by CONNECT and the proxy) reached the server %d times of 2 (log %q); stderr: %s", addrs["ula.test"], reached[addrs["ula.test"]], logged, stderr)
	}
	verdicts := map[string][]string{}
	for _, cn := range reportConns(t, res) {
		h, _ := cn["host"].(string)
		v, _ := cn["verdict"].(string)
		verdicts[h] = append(verdicts[h], v)
	}
	for name, addr := range addrs {
		if name == "ula.test" {
			continue
		}
		if n := reached[addr]; n > 0 {
			t.Errorf("%s (%s, carrying %s) reached the server %d times", name, addr, v4, n)
		}
		if v := verdicts[name]; len(v) != 2 || v[0] != "refused" || v[1] != "refused" {
			t.Errorf("%s (%s): the report's verdicts are %v, want two refusals before dialling", name, addr, v)
		}
	}
}

// keepAliveOrigin is an origin on the host's loopback that reads every
// request of a connection, whatever Connection says (the worst origin
// for a proxy that counts on the origin to close), and records the Host
// and path of each. The upstream of egress_test.go reads one request a
// connection, so it cannot see a second one.
type keepAliveOrigin struct {
	port int
	mu   sync.Mutex
	reqs []string // host path
}

func startKeepAliveOrigin(t *testing.T) *keepAliveOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &keepAliveOrigin{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					_ = c.SetReadDeadline(time.Now().Add(time.Second))
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					o.mu.Lock()
					o.reqs = append(o.reqs, req.Host+" "+req.URL.Path)
					o.mu.Unlock()
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return o
}

func (o *keepAliveOrigin) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.reqs...)
}

func attackEgressPipelined(t *testing.T, m mode) {
	o := startKeepAliveOrigin(t)
	code := fmt.Sprintf(`
W = %d
HP = "good.test:%%d" %% W
EVIL = b"GET /evil HTTP/1.1\r\nHost: evil.test\r\n\r\n"
def drain(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except OSError:
        pass
    return out
def transparent(data):
    s = socket.create_connection(("good.test", W), timeout=10); s.sendall(data); return drain(s)
def via_connect(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (HP, HP)).encode())
    if b" 200 " not in s.recv(4096): return "refused"
    s.sendall(data); return drain(s)
def via_socks(data):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00"); s.recv(2)
    s.sendall(b"\x05\x01\x00\x03\x09good.test" + struct.pack(">H", W))
    if s.recv(10)[1] != 0: return "refused"
    s.sendall(data); return drain(s)
def via_proxy(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10); s.sendall(data); return drain(s)
first = b"GET /first HTTP/1.1\r\nHost: good.test\r\n\r\n"
quiet(transparent, first + EVIL)
quiet(via_connect, first + EVIL)
quiet(via_socks, first + EVIL)
quiet(transparent, b"POST /first HTTP/1.1\r\nHost: good.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + EVIL)
quiet(transparent, b"FOO /evil HTTP/1.1\r\nHost: evil.test\r\n\r\n")
quiet(transparent, b"GET http://evil.test/evil HTTP/1.1\r\nHost: good.test\r\n\r\n")
abs_first = ("GET http://%%s/first HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (HP, HP)).encode()
quiet(via_proxy, abs_first + ("GET http://%%s/evil HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (HP, HP)).encode() + EVIL)
quiet(via_proxy, ("POST http://%%s/first HTTP/1.1\r\nHost: %%s\r\nConnection: content-length\r\nContent-Length: %%d\r\n\r\n" %% (HP, HP, len(EVIL))).encode() + EVIL)
`, o.port)
	_, stderr, exit, _ := runEgress(t, m, egressArgs(o.port), code)
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, stderr)
	}
	seen := o.seen()
	firsts := 0
	for _, r := range seen {
		host, path, _ := strings.Cut(r, " ")
		if path == "/first" {
			firsts++
		}
		if h := hostOnlyOf(host); h != "good.test" || path != "/first" {
			t.Errorf("the origin got a request for %s %s: a request after the first, or one naming another host, left the host", host, path)
		}
	}
	// The controls: the first request of the three pipelined
	// conversations and of the two forward-proxy ones.
	if firsts < 5 {
		t.Errorf("the origin got %d first requests of the 5 allowed ones (%v); stderr: %s", firsts, seen, stderr)
	}
}

func hostOnlyOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
