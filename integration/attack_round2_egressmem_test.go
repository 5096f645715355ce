package integration

// The red-team pass of the merged binary: the supervisor's own sockets of
// egress tunnels held host TCP memory that no limit of the jail counts.
// Decided on the host: /proc/net/sockstat while the jail holds the tunnels.

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, attackCase{
		name: "egress_host_buffers", group: groupDoS, modes: rootOnly, serial: true,
		mechanism: "40 CONNECT tunnels through --allow-host to a host server that never reads, each written to without end: the supervisor's host-side sockets fill to the host's tcp_wmem maximum",
		layer:     "egress: every socket the supervisor holds for a tunnel has fixed 128 KiB buffers, and --egress-max-conns bounds their number",
		run:       attackEgressHostBuffers,
	})
}

// The tunnels carry NUL bytes: a long run of letters without a line end
// could still become an HTTP request line, and the proxy refuses such a
// tunnel (egress.guessHTTP) before it holds any buffer for it.
const attackEgressHostBuffersCode = `
import socket, sys
port = int(sys.argv[1])
held, sent = [], 0
for i in range(40):
    c = socket.create_connection(("127.0.0.1", 3128))
    c.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
    reply = c.recv(4096)
    if b" 200" not in reply.split(b"\r\n")[0]:
        print("REFUSED", reply[:80]); break
    c.setblocking(False)
    try:
        while True:
            sent += c.send(b"\0" * 65536)
    except OSError:
        pass
    held.append(c)
print("READY", len(held), sent, flush=True)
sys.stdin.read()
`

func attackEgressHostBuffers(t *testing.T, m mode) {
	// The upstream: accepts, never reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4096)
			}
			conns = append(conns, c)
		}
	}()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	before := sockstatPages(t)
	var during int64 = -1
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	marker := randomToken("egressmem")
	r := attackWatch(t, m, runOpts{stdinFile: stdinR}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		time.Sleep(300 * time.Millisecond) // the last segments land
		during = sockstatPages(t)
		stdinW.Close()
	}}, attackPython([]string{"-m", "64m", "--timeout", "60s", "--allow-host", "127.0.0.1:" + port}, attackEgressHostBuffersCode, marker, port)...)
	grew := (during - before) * int64(os.Getpagesize())
	t.Logf("host TCP memory: %d pages before, %d while the tunnels were full (+%d MiB); payload: %q", before, during, grew>>20, attackClip(r.stdout))
	if !strings.Contains(r.stdout, "READY 40") {
		t.Fatalf("the payload did not hold its 40 tunnels:\n%s", r)
	}
	// The jail's own sockets: its 16 MiB socket limit (and what the kernel
	// overshoots); the supervisor's: 40 tunnels of two sockets, each at
	// most twice 128 KiB each way; and slack for the rest of the host.
	if grew > 64<<20 {
		t.Errorf("40 egress tunnels held %d MiB of the host's TCP memory under -m 64m (want at most the jail's 16 MiB, the supervisor's bounded buffers and slack)", grew>>20)
	}
}
