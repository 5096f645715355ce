package integration

// Red-team round 5, egress (issue 30): a --resolve pin is the user's word
// for one name and one address, and opens that address, private as it
// may be, to that name on the ports its rules allow, and to nothing
// else. Decided on the host: what a server this test runs in a network
// namespace of its own (at a private address, on two ports) saw, the
// jail's resolver's answers as they crossed the jail's loopback (read by
// a packet socket the test opens in the jail's network namespace), and
// the supervisor's report.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases, attackCase{name: "egress_resolve_pin_scope", group: groupNetwork,
		mechanism: "with --resolve api.test:ADDR (a private address where a server of the test listens, in a network namespace it made) and api.test:8080 allowed: ADDR as a literal (dotted, decimal, IPv4-mapped; the proxy, CONNECT, SOCKS by address and by name, a direct socket), other allowed names the host's resolver answers with ADDR (other.test, x.wild.test under *.wild.test: proxy, CONNECT, SOCKS, transparent), another Host inside api.test's tunnel, api.test on port 8081 by every path, and raw DNS queries (A, AAAA, ANY) for those names, each answer then connected to",
		layer:     "egress: check takes a pinned name's address from its pin and judges it by pinRefusal, for that name and the ports its rules allow only; literals need a rule by address, other names' resolved addresses are judged as before (no rebinding onto the pin), and the jail's resolver answers synthetic addresses only",
		run:       attackEgressResolvePinScope})
}

// pinServer is a server in a network namespace of the test's own, at a
// private address the host routes to it, on ports 8080 and 8081; it logs
// each connection as it is accepted and the first line of what came.
type pinServer struct {
	addr netip.Addr
	log  string
}

func startPinServer(t *testing.T) *pinServer {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 30))
	// A /30 of 10.99.0.0/16 (the 10.99.0.1), random so that two
	// runs at once do not meet: the host's end .1, the server's .2.
	base := netip.AddrFrom4([4]byte{10, 99, byte(r.IntN(256)), byte(4 * r.IntN(64))})
	hostAddr, srvAddr := base.Next(), base.Next().Next()
	tag := strconv.Itoa(int(time.Now().UnixNano()%1e5)) + strconv.Itoa(r.IntN(10))
	ns, host, peer, ipCmd := vethNetns(t, "rljail-pin-", "rjpn", tag)
	ipCmd("addr", "add", hostAddr.String()+"/30", "dev", host)
	ipCmd("link", "set", host, "up")
	ipCmd("-n", ns, "addr", "add", srvAddr.String()+"/30", "dev", peer)
	ipCmd("-n", ns, "link", "set", peer, "up")
	ipCmd("-n", ns, "link", "set", "lo", "up")
	s := &pinServer{addr: srvAddr, log: filepath.Join(t.TempDir(), "server.log")}
	srv := exec.Command("ip", "netns", "exec", ns, rootfsDir+"/usr/bin/python3", "-u", "-c", `
import socket, sys, threading
lock = threading.Lock()
def log(line):
    with lock:
        with open(sys.argv[1], "a") as f:
            f.write(line + "\n")
def handle(c, port):
    c.settimeout(2)
    first = "-"
    try:
        data = b""
        while b"\r\n" not in data and len(data) < 4096:
            b = c.recv(4096)
            if not b:
                break
            data += b
        if data:
            first = data.split(b"\r\n")[0].decode("latin-1")
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except OSError:
        pass
    log("req %d %s" % (port, first))
    c.close()
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], port)); s.listen(64)
    while True:
        c, _ = s.accept()
        log("accept %d" % port)
        threading.Thread(target=handle, args=(c, port), daemon=True).start()
for p in (8080, 8081):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Event().wait()
`, s.log, srvAddr.String())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for _, port := range []string{"8080", "8081"} {
		up := false
		for i := 0; i < 50 && !up; i++ {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(srvAddr.String(), port), 200*time.Millisecond)
			if err == nil {
				_, _ = c.Write([]byte("GET /probe HTTP/1.0\r\n\r\n"))
				c.Close()
				up = true
			} else {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !up {
			t.Fatalf("the test server in the namespace did not come up on %s:%s", srvAddr, port)
		}
	}
	// The probes' lines, once written, then a fresh log.
	for i := 0; i < 100 && strings.Count(s.read(), "/probe") < 2; i++ {
		time.Sleep(30 * time.Millisecond)
	}
	_ = os.Remove(s.log)
	return s
}

func (s *pinServer) read() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// requests waits until every accepted connection has its line (a silent
// one after the server's 2 s) and returns "PORT PATH" for each ("PORT -"
// for a connection that sent nothing), and the accepts per port.
func (s *pinServer) requests() (reqs []string, accepts map[string]int) {
	for i := 0; i < 100; i++ {
		text := s.read()
		if strings.Count(text, "accept ") <= strings.Count(text, "req ") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	accepts = map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(s.read()), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "accept":
			accepts[f[1]]++
		case len(f) >= 3 && f[0] == "req":
			path := "-"
			if len(f) >= 4 {
				path = f[3]
				// An absolute target (a forward proxy's) by its path.
				if rest, ok := strings.CutPrefix(path, "http://"); ok {
					if i := strings.IndexByte(rest, '/'); i >= 0 {
						path = rest[i:]
					}
				}
			}
			reqs = append(reqs, f[1]+" "+path)
		}
	}
	return reqs, accepts
}

// TestEgressResolvePinReplay replays issue 30: a test server at a private
// address, reached with a pin and one rule in URL form, with one notice
// and the pin in the report; the rule forms that failed parse, and a bad
// one is one line (exit 125).
func TestEgressResolvePinReplay(t *testing.T) {
	t.Parallel()
	srv := startPinServer(t)
	a := srv.addr.String()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			path := "/replay-" + string(m)
			_, stderr, exit, res := runJail(t, m, runOpts{deadline: 60 * time.Second},
				"--timeout", "30s", "--resolve", "api.test:"+a, "--allow-host", "http://api.test:8080",
				"--", "python3", "-c", fmt.Sprintf(`import urllib.request; print(urllib.request.urlopen("http://api.test:8080%s", timeout=10).read())`, path))
			if exit != 0 {
				t.Fatalf("exit %d: %s", exit, stderr)
			}
			reqs, _ := srv.requests()
			if !strings.Contains(strings.Join(reqs, "\n"), "8080 "+path) {
				t.Errorf("the server got %q, not %s on 8080", reqs, path)
			}
			// One notice (a rootless run may add its line about limits).
			var own []string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "rljail: ") && strings.Contains(l, "api.test") {
					own = append(own, l)
				}
			}
			if len(own) != 1 || !strings.HasPrefix(own[0], "rljail: --resolve ") || !strings.Contains(own[0], "api.test "+a+" (a private address)") {
				t.Errorf("rljail's lines on stderr about api.test are %q; want one notice of the pin to a private address (stderr %q)", own, stderr)
			}
			netw, _ := res["network"].(map[string]any)
			pins, _ := netw["resolve"].([]any)
			if len(pins) != 1 || fmt.Sprint(pins[0]) != fmt.Sprintf("map[address:%s name:api.test non_public:a private address]", a) {
				t.Errorf("the report's network.resolve is %v", netw["resolve"])
			}
			if fmt.Sprint(netw["allow"]) != "[http://api.test:8080]" {
				t.Errorf("the report's network.allow is %v", netw["allow"])
			}
		})
	}
	for _, rule := range []string{"http://api.test:8080", "https://api.test", "http://api.test/", "api.test:8080"} {
		if _, stderr, exit, _ := runJail(t, asRoot, runOpts{}, "--allow-host", rule, "--", "true"); exit != 0 {
			t.Errorf("--allow-host %s: exit %d: %s", rule, exit, stderr)
		}
	}
	for _, rule := range []string{"http://api.test:8080/v1", "ftp://api.test", "api.test/x"} {
		_, stderr, exit, _ := runJail(t, asRoot, runOpts{}, "--allow-host", rule, "--", "true")
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if exit != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: --allow-host "+strconv.Quote(rule)+": ") || strings.Contains(stderr, "netip") {
			t.Errorf("--allow-host %s: exit %d, stderr %q; want 125 and one line naming the flag and the value", rule, exit, stderr)
		}
	}
}

// sniffDNSAnswers opens a packet socket in the network namespace of pid
// (the jail's: only its loopback) and keeps every UDP payload sent from
// port 53 there, the jail's resolver's answers, until stop is called.
func sniffDNSAnswers(t *testing.T, pid int) (stop func() [][]byte) {
	t.Helper()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatalf("the jail's network namespace: %v", err)
	}
	defer ns.Close()
	type opened struct {
		fd  int
		err error
	}
	got := make(chan opened, 1)
	go func() {
		// This thread enters the jail's namespace and is never unlocked:
		// it ends with the goroutine rather than serve another one.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			got <- opened{-1, fmt.Errorf("setns: %v", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		got <- opened{fd, err}
	}()
	o := <-got
	if o.err != nil {
		t.Fatalf("a packet socket in the jail's network namespace: %v", o.err)
	}
	_ = unix.SetsockoptTimeval(o.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	var (
		mu      sync.Mutex
		out     [][]byte
		done    = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		buf := make([]byte, 65536)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, _, err := unix.Recvfrom(o.fd, buf, 0)
			if err != nil || n < 28 {
				continue
			}
			b := buf[:n]
			ihl := int(b[0]&0xf) * 4
			if b[0]>>4 != 4 || b[9] != unix.IPPROTO_UDP || n < ihl+8 || binary.BigEndian.Uint16(b[ihl:]) != 53 {
				continue
			}
			mu.Lock()
			out = append(out, append([]byte(nil), b[ihl+8:]...))
			mu.Unlock()
		}
	}()
	return func() [][]byte {
		close(done)
		<-stopped
		unix.Close(o.fd)
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func attackEgressResolvePinScope(t *testing.T, m mode) {
	srv := startPinServer(t)
	a := srv.addr.String()
	v4 := srv.addr.As4()
	// other.test and x.wild.test: rljail's own resolver on the host
	// answers them with the pinned address (DNS rebinding onto the pin).
	hosts := hostsFile(t, a+" other.test", a+" x.wild.test")
	// The rules in the form the old binary read too: the pin is what is
	// tried here (TestEgressResolvePinReplay tries the URL forms).
	flags := []string{"--timeout", "40s", "--resolve", "api.test:" + a, "--allow-host", "api.test:8080",
		"--allow-host", "other.test:8080", "--allow-host", "other.test:8081", "--allow-host", "*.wild.test:8080"}
	code := egressHelpers + fmt.Sprintf(`
import sys
A, DEC = %q, %d
def connect_get(hostport, path, hosthdr):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (hostport, hostport)).encode())
    head = s.recv(4096)
    if b" 200 " not in head.split(b"\r\n")[0]: return head
    s.sendall(("GET %%s HTTP/1.0\r\nHost: %%s\r\n\r\n" %% (path, hosthdr)).encode()); return s.recv(4096)
def socks_ip(ip, port, path):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00"); s.recv(2)
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(ip) + struct.pack(">H", port))
    if s.recv(10)[1] != 0: return "refused"
    s.sendall(("GET %%s HTTP/1.0\r\nHost: %%s\r\n\r\n" %% (path, ip)).encode()); return s.recv(4096)
def dns(name, qtype):
    q = struct.pack(">HHHHHH", 0x3030, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", qtype, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
    u.sendto(q, ("127.0.0.53", 53)); r = u.recv(1500)
    out, p = [], len(q)
    for _ in range(struct.unpack(">H", r[6:8])[0]):
        typ, _, _, rdlen = struct.unpack(">HHIH", r[p+2:p+12])
        if typ == 1: out.append(socket.inet_ntoa(r[p+12:p+12+rdlen]))
        p += 12 + rdlen
    return out
print("READY", flush=True)
sys.stdin.readline()
# The controls: the pinned name on its port, by every path.
quiet(proxy_get, "http://api.test:8080/pin-proxy")
quiet(socks_get, "api.test", 8080, "/pin-socks")
quiet(connect_get, "api.test:8080", "/pin-connect", "api.test")
quiet(raw_get, "api.test", 8080, "/pin-transparent")
# The address as a literal.
quiet(proxy_get, "http://%%s:8080/literal-proxy" %% A)
quiet(proxy_get, "http://%%d:8080/literal-decimal" %% DEC)
quiet(connect_get, "%%s:8080" %% A, "/literal-connect", A)
quiet(connect_get, "[::ffff:%%s]:8080" %% A, "/literal-mapped", A)
quiet(socks_ip, A, 8080, "/literal-socks")
quiet(socks_get, A, 8080, "/literal-socks-name")
quiet(raw_get, A, 8080, "/literal-direct")
# Other names that resolve, on the host, to the pinned address.
quiet(proxy_get, "http://other.test:8080/other-proxy")
quiet(socks_get, "other.test", 8080, "/other-socks")
quiet(connect_get, "other.test:8080", "/other-connect", "other.test")
quiet(raw_get, "other.test", 8080, "/other-transparent")
quiet(proxy_get, "http://x.wild.test:8080/wild-proxy")
quiet(socks_get, "x.wild.test", 8080, "/wild-socks")
quiet(connect_get, "api.test:8080", "/other-host-in-tunnel", "other.test")
# The pinned name on a port its rules do not allow.
quiet(proxy_get, "http://api.test:8081/port-proxy")
quiet(socks_get, "api.test", 8081, "/port-socks")
quiet(connect_get, "api.test:8081", "/port-connect", "api.test")
quiet(raw_get, "api.test", 8081, "/port-transparent")
# The jail's resolver, asked for each name; each answer connected to.
for name in ("api.test", "other.test", "x.wild.test", "y.wild.test", "evil.test"):
    for qtype in (28, 255):
        quiet(dns, name, qtype)
    ips = quiet(dns, name, 1)
    for ip in (ips if isinstance(ips, list) else []):
        for port in (8080, 8081):
            quiet(raw_get, ip, port, "/dns-%%s-%%d" %% (name, port), name)
print("DONE", flush=True)
`, a, binary.BigEndian.Uint32(v4[:]))
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	p, pl := startWatched(t, m, runOpts{stdinFile: stdinR, hostsFile: hosts, deadline: 90 * time.Second}, "READY", code, flags...)
	stdinR.Close()
	stop := sniffDNSAnswers(t, pl.pid)
	if _, err := stdinW.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	stdinW.Close()
	p.wait()
	answers := stop()
	stderr := p.stderr.String()
	if p.exit != 0 || !strings.Contains(p.stdout.String(), "DONE") {
		t.Fatalf("exit %d, stdout %q: %s", p.exit, p.stdout.String(), stderr)
	}
	res, err := p.result()
	if err != nil || res == nil {
		t.Fatalf("the report: %v", err)
	}

	reqs, accepts := srv.requests()
	allowed := map[string]bool{"8080 /pin-proxy": true, "8080 /pin-socks": true, "8080 /pin-connect": true,
		"8080 /pin-transparent": true, "8080 /dns-api.test-8080": true}
	seen := map[string]bool{}
	for _, r := range reqs {
		seen[r] = true
		if !allowed[r] {
			t.Errorf("the server at the pinned address got %q: only api.test on 8080 may reach it", r)
		}
	}
	for r := range allowed {
		if !seen[r] {
			t.Errorf("the control %q (api.test on 8080, pinned to %s) never reached the server (it got %q); stderr: %s", r, a, reqs, stderr)
		}
	}
	if accepts["8081"] != 0 || accepts["8080"] != len(allowed) {
		t.Errorf("the server accepted %v connections; want %d on 8080 and none on 8081", accepts, len(allowed))
	}

	// The supervisor dialled the pinned address for api.test on 8080
	// only, and refused the other names before dialling.
	for _, c := range reportConns(t, res) {
		host, _ := c["host"].(string)
		port, _ := c["port"].(float64)
		if c["address"] == a && (host != "api.test" || port != 8080) {
			t.Errorf("the supervisor dialled %s for %s port %v: %v", a, host, port, c)
		}
		if (host == "other.test" || host == "x.wild.test") && (c["verdict"] != "refused" || c["address"] != nil) {
			t.Errorf("%s (the host's resolver answers %s) was not refused before dialling: %v", host, a, c)
		}
	}

	// The resolver's answers on the jail's loopback: synthetic addresses
	// only, never the pinned one, for any name.
	if len(answers) < 15 {
		t.Fatalf("the packet socket saw %d answers of the jail's resolver, of 15 queries at least", len(answers))
	}
	for _, raw := range answers {
		var msg dnsmessage.Message
		if err := msg.Unpack(raw); err != nil {
			t.Errorf("an answer of the jail's resolver does not parse: %v (%x)", err, raw)
			continue
		}
		q := "?"
		if len(msg.Questions) == 1 {
			q = msg.Questions[0].Name.String()
		}
		for _, rr := range msg.Answers {
			var got netip.Addr
			switch b := rr.Body.(type) {
			case *dnsmessage.AResource:
				got = netip.AddrFrom4(b.A)
			case *dnsmessage.AAAAResource:
				got = netip.AddrFrom16(b.AAAA).Unmap()
			default:
				t.Errorf("the answer for %s holds a %v record", q, rr.Header.Type)
				continue
			}
			if got == srv.addr || !netip.MustParsePrefix("127.77.0.0/16").Contains(got) {
				t.Errorf("the jail's resolver answered %s with %s: only synthetic addresses are given out", q, got)
			}
		}
	}
}
