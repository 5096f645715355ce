package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkEgress is `make bench`'s egress row (issue 21): the time of one
// HTTP request from Python to a server on the host's loopback, made
// directly by the rootfs's Python on the host, and from a jail through
// the HTTP proxy and through the transparent path (a raw socket to the
// name's synthetic address). Each client makes its requests in one
// process and times them itself, so that only the request is measured;
// the rows are medians, and the overhead is the proxied one less the
// direct one.
func BenchmarkEgress(b *testing.B) {
	bin, rootfsDir := os.Getenv("RLJAIL_BIN"), os.Getenv("RLJAIL_ROOTFS")
	if bin == "" || rootfsDir == "" {
		b.Fatal("RLJAIL_BIN and RLJAIL_ROOTFS must be set (make bench sets them)")
	}
	up := startUpstream(b, false)
	n := max(b.N, 50)
	client := func(host string, port int, proxied bool) string {
		return fmt.Sprintf(`
import socket, time
ts = []
for i in range(%d):
    t0 = time.perf_counter()
    if %v:
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"GET http://%s:%d/b HTTP/1.0\r\nHost: %s:%d\r\n\r\n")
    else:
        s = socket.create_connection(("%s", %d))
        s.sendall(b"GET /b HTTP/1.0\r\nHost: %s\r\n\r\n")
    while s.recv(65536): pass
    s.close()
    ts.append(time.perf_counter() - t0)
ts.sort(); print(int(ts[len(ts)//2] * 1e6))
`, n, map[bool]string{true: "True", false: "False"}[proxied], host, port, host, port, host, port, host)
	}
	median := func(argv ...string) int {
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			b.Fatalf("%v: %v", argv, err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			b.Fatalf("%v printed %q", argv, out)
		}
		return v
	}
	p := strconv.Itoa(up.port)
	jail := []string{bin, "-q", "--rootfs", rootfsDir, "--timeout", "60s", "--allow-host", "good.test:" + p,
		"--allow-host", "127.0.0.1:" + p, "--resolve", "good.test:127.0.0.1", "--", "python3", "-c"}
	b.ResetTimer()
	direct := median(rootfsDir+"/usr/bin/python3", "-c", client("127.0.0.1", up.port, false))
	viaProxy := median(append(jail, client("good.test", up.port, true))...)
	transparent := median(append(jail, client("good.test", up.port, false))...)
	b.StopTimer()
	fmt.Printf("egress: one HTTP request to the host's loopback, median of %d: direct %d µs, "+
		"through the proxy %d µs (+%d µs), transparent %d µs (+%d µs)\n",
		n, direct, viaProxy, viaProxy-direct, transparent, transparent-direct)
	b.ReportMetric(float64(viaProxy-direct), "proxy-overhead-µs")
	b.ReportMetric(float64(transparent-direct), "transparent-overhead-µs")
}
