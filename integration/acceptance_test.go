package integration

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acceptanceCode is the hostile payload of the acceptance check: it dumps
// the environment, reads /etc/hostname and the host's secret files,
// resolves and requests test.example.org, connects to the host's listener
// and then spins forever. argv: PORT ROOT_SECRET_FILE TMP_SECRET_FILE MARKER.
const acceptanceCode = `
import os, socket, sys, urllib.request
port, root_file, tmp_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
print("ENV-BEGIN")
for k, v in os.environ.items():
    print(k + "=" + v)
print("ENV-END")
try:
    print("HOSTNAME-FILE=" + open("/etc/hostname").read().strip())
except Exception as e:
    print("HOSTNAME-FILE-ERR", type(e).__name__, e)
for p in (root_file, tmp_file):
    try:
        print("READ", p, repr(open(p).read()))
    except Exception as e:
        print("READ-ERR", p, type(e).__name__, e)
try:
    print("DNS-OK", socket.getaddrinfo("test.example.org", 443))
except Exception as e:
    print("DNS-FAILED", type(e).__name__, e)
try:
    urllib.request.urlopen("https://test.example.org/", timeout=1)
    print("HTTPS-OK")
except Exception as e:
    print("HTTPS-FAILED", type(e).__name__, e)
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    print("TCP-CONNECTED")
    s.sendall(b"hello from the jail")
except Exception as e:
    print("TCP-FAILED", type(e).__name__, e)
print("LOOPING", flush=True)
while True:
    pass
`

// TestAcceptanceAPS91 is the black-box acceptance check of rule APS-91 of
// the Agent Wranglers application security playbook (CC BY 4.0):
// https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code
//
// Jailed code prints the whole environment, reads /etc/hostname, requests
// https://test.example.org and opens a TCP connection to a listener on the
// host's 127.0.0.1, then loops forever. Pass: no secret of rljail's own
// environment or of the host's files appears in the output, the listener
// saw no connection, the DNS lookup failed, and the run ended at the time
// limit (124, status timeout) with no process left.
//
// Not parallel: the wall-clock bounds want a quiet machine.
func TestAcceptanceAPS91(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			h := newAPS91Host(t)
			defer h.stop()
			envSecret, rootSecret, tmpSecret := h.envSecret, h.rootSecret, h.tmpSecret
			rootFile, tmpFile, port, accepted := h.rootFile, h.tmpFile, h.port, &h.accepted
			envSecret2 := randomToken("envsecret")
			marker := randomToken("aps91marker")

			p := startJail(t, m, runOpts{
				env: []string{"AWS_SECRET_ACCESS_KEY=" + envSecret, "RLJAIL_IT_TOKEN=" + envSecret2},
			}, append([]string{"--timeout", "2s"},
				python(acceptanceCode, strconv.Itoa(port), rootFile, tmpFile, marker)...)...)

			// While it runs: find the payload, its PID namespace and every
			// process below rljail, to check after the run that none is left.
			var tracked []proc
			payloadNS := ""
			done := make(chan struct{})
			go func() {
				p.wait()
				close(done)
			}()
			if payload, ok := findPayload(marker, p.cmd.Process.Pid, 5*time.Second); ok {
				payloadNS = payload.pidNS
				tracked = append(tracked, payload)
			} else {
				t.Errorf("the payload (cmdline with %s) never showed up in the host's /proc", marker)
			}
		sample:
			for {
				tracked = append(tracked, descendants(p.cmd.Process.Pid)...)
				select {
				case <-done:
					break sample
				case <-time.After(20 * time.Millisecond):
				}
			}
			h.stop()

			stdout, stderr := p.stdout.String(), p.stderr.String()
			out := stdout + stderr
			t.Logf("%s\nexit %d after %v\nstdout:\n%s\nstderr:\n%s", p, p.exit, p.wall, stdout, stderr)

			for name, secret := range map[string]string{
				"AWS_SECRET_ACCESS_KEY of rljail's environment": envSecret,
				"RLJAIL_IT_TOKEN of rljail's environment":       envSecret2,
				"the host file " + rootFile:                     rootSecret,
				"the host file " + tmpFile:                      tmpSecret,
			} {
				if strings.Contains(out, secret) {
					t.Errorf("the secret from %s appears in the jail's output", name)
				}
			}
			if strings.Contains(out, "AWS_SECRET_ACCESS_KEY") {
				t.Errorf("the name AWS_SECRET_ACCESS_KEY appears in the jail's output: the environment is not cleared")
			}
			if !strings.Contains(stdout, "ENV-END") {
				t.Errorf("the payload did not print its environment (no ENV-END): it did not run as expected")
			}
			if n := accepted.Load(); n != 0 {
				t.Errorf("the host listener on 127.0.0.1:%d accepted %d connection(s) from the jail, want 0", port, n)
			}
			if strings.Contains(stdout, "TCP-CONNECTED") {
				t.Errorf("the jail connected to 127.0.0.1:%d", port)
			}
			if !strings.Contains(stdout, "DNS-FAILED") {
				t.Errorf("the DNS lookup of test.example.org did not fail (no DNS-FAILED line)")
			}
			if strings.Contains(stdout, "HTTPS-OK") {
				t.Errorf("the https request to test.example.org succeeded")
			}
			if host, err := os.Hostname(); err == nil && host != "rljail" {
				for _, line := range strings.Split(stdout, "\n") {
					if line == "HOSTNAME-FILE="+host {
						t.Errorf("/etc/hostname in the jail holds the host's name %q", host)
					}
				}
			}
			if !strings.Contains(stdout, "LOOPING") {
				t.Errorf("the payload never reached its endless loop (no LOOPING line)")
			}
			if p.exit != 124 {
				t.Errorf("exit status %d, want 124 (timeout)", p.exit)
			}
			res, err := p.result()
			if err != nil {
				t.Error(err)
			}
			checkResult(t, "timeout run", res, "timeout", 124)
			if p.wall < 2*time.Second || p.wall > 2500*time.Millisecond {
				t.Errorf("wall time %v, want between 2s and 2.5s for --timeout 2s", p.wall)
			}
			alive, zombies := leftovers(marker, payloadNS, tracked)
			if len(alive) > 0 {
				t.Errorf("processes of the run are still alive after rljail returned:%s", procList(alive))
			}
			if len(zombies) > 0 {
				t.Logf("zombies of the run, not yet reaped:%s", procList(zombies))
			}
		})
	}
}

// aps91Host is what rule APS-91's check plants on the host: a secret in
// rljail's environment and one in a file of /root and of /tmp, which the
// jail must never show, and a listener on the host's 127.0.0.1 that must
// see no connection.
type aps91Host struct {
	envSecret, rootSecret, tmpSecret string
	rootFile, tmpFile                string
	port                             int
	accepted                         atomic.Int64

	ln   net.Listener
	wg   sync.WaitGroup
	once sync.Once
}

func newAPS91Host(t *testing.T) *aps91Host {
	t.Helper()
	h := &aps91Host{envSecret: randomToken("envsecret"), rootSecret: randomToken("rootsecret"), tmpSecret: randomToken("tmpsecret")}
	h.rootFile = plantHostFile(t, "/root", "rljail-it-secret-", h.rootSecret+"\n")
	h.tmpFile = plantHostFile(t, "/tmp", "rljail-it-secret-", h.tmpSecret+"\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.ln = ln
	countConnections(ln, &h.accepted, &h.wg)
	h.port = ln.Addr().(*net.TCPAddr).Port
	return h
}

// stop closes the listener and waits for what it accepted to be counted.
func (h *aps91Host) stop() {
	h.once.Do(func() {
		h.ln.Close()
		h.wg.Wait()
	})
}
