package integration

// Red-team round 5, rljail serve: a request's payload goes for the server
// that runs it. Decided from the host: the server's own log, one JSON
// line per request it answered, never holds the payload's marker.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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

func init() {
	attackCases = append(attackCases, attackCase{name: "serve_memory_flood", group: groupDoS, serial: true,
		mechanism: "clients of one server send eight 48 MiB bodies at once (stdin, and files in base64) while two payloads write 300 MiB each to stdout and stderr and one asks to fetch 1000 files: a server that holds every body, every stream and every file whole grows by gigabytes (1.5 GiB here with body_budget set to 4g) and is killed by the host's OOM killer, with every other client's run",
		layer:     "serve: body_budget bounds the bodies held at once (429 beyond it), each stream keeps head and tail within output_bytes while the pump discards past pump_output, fetched files are bounded in count and bytes; measured from outside: the server's peak RSS",
		run:       attackServeMemoryFlood})
}

func attackServeMemoryFlood(t *testing.T, m mode) {
	s := startServer(t, m, serveOpts{maxConc: 2, config: "queue = 16"})
	hwm := watchHWM(s.cmd.Process.Pid, 20*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	note := func(c int) { mu.Lock(); codes[c]++; mu.Unlock() }
	big := strings.Repeat("x", 48<<20)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var body []byte
			if i%2 == 0 {
				body, _ = json.Marshal(map[string]any{"code": "import sys; print(len(sys.stdin.read()))", "stdin": big})
			} else {
				body, _ = json.Marshal(map[string]any{"code": "print(len(open('f','rb').read()))", "files": []map[string]any{{"path": "f", "content_base64": base64.StdEncoding.EncodeToString([]byte(big[:36<<20]))}}, "limits": map[string]any{"tmp_size_bytes": 128 << 20}})
			}
			code, _, _ := s.do(t, "POST", "/v1/run", string(body), nil)
			note(code)
		}(i)
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r v1Response
			note(s.postJSON(t, "/v1/run", map[string]any{"code": "import sys\nb = b'y' * (1 << 20)\nfor _ in range(300):\n    sys.stdout.buffer.write(b); sys.stderr.buffer.write(b)", "limits": map[string]any{"timeout_seconds": 30}}, &r))
			if len(r.Stdout.Text) > 1<<20+100 {
				t.Errorf("the response kept %d bytes of stdout", len(r.Stdout.Text))
			}
		}()
	}
	fetch := make([]string, 1000)
	for i := range fetch {
		fetch[i] = fmt.Sprintf("f%d", i)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var r v1Response
		note(s.postJSON(t, "/v1/run", map[string]any{"code": "for i in range(1000):\n    open('f%d' % i, 'wb').write(b'z' * (60 << 10))", "fetch_files": fetch, "limits": map[string]any{"tmp_size_bytes": 128 << 20}}, &r))
		var got int
		for _, f := range r.Files {
			got += len(f.ContentBase64) * 3 / 4
		}
		if got > 16<<20 {
			t.Errorf("fetched %d bytes, over max_fetch", got)
		}
	}()
	wg.Wait()
	peak := hwm()
	t.Logf("answers by code: %v; the server's peak RSS %d KiB", codes, peak)
	if codes[200] == 0 {
		t.Errorf("no request was served")
	}
	// body_budget's 128 MiB of bodies held at once, each about three
	// times over (the body, its strings, the bytes for the jail), and
	// the rest.
	if peak > 600<<10 {
		t.Errorf("the server's peak RSS %d KiB is over 600 MiB", peak)
	}
	if code, _, _ := s.do(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("the server after the flood: %d", code)
	}
}
