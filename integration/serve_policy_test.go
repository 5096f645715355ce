package integration

// rljail serve's policy of what a request may name beyond limits (issue
// 31): configured volumes by name, egress within egress_allow, a
// permitted profile, their reload and the warm pool's refusal of them.
// Each case decides from outside: the HTTP answer, a file on the host in
// the test's own directory, a loopback listener that sees (or never sees)
// a connection, the server's refusal to start.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServePolicyVolumes(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { servePolicyVolumes(t, m) })
	}
}

func servePolicyVolumes(t *testing.T, m mode) {
	ro, rw := newDir(t), newDir(t)
	writeFile(t, filepath.Join(ro, "corpus.txt"), "the corpus\n", 0o644)
	if m == asRootless {
		// The rw volume is the invoking user's, as a rootless user's
		// own directory would be.
		if err := os.Chown(rw, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	auditDir := newDir(t)
	if m == asRootless {
		if err := os.Chown(auditDir, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	auditPath := filepath.Join(auditDir, "audit.jsonl")
	s := startServer(t, m, serveOpts{config: fmt.Sprintf(
		"[volumes.corpus]\nsource = %q\ntarget = \"/data/corpus\"\n[volumes.out]\nsource = %q\ntarget = \"/out\"\nwritable = true\n", ro, rw),
		extraArgs: []string{"--audit-log", auditPath}})

	// A read-only volume: read by the payload, a file fetched from it,
	// and not writable from inside.
	var r v1Response
	code := s.postJSON(t, "/v1/run", map[string]any{
		"code":        "print(open('/data/corpus/corpus.txt').read(), end='')\ntry:\n    open('/data/corpus/new', 'w')\n    print('WROTE')\nexcept OSError as e:\n    print('refused', e.errno)",
		"volumes":     []map[string]any{{"name": "corpus"}},
		"fetch_files": []string{"/data/corpus/corpus.txt"},
	}, &r)
	if code != 200 || r.Stdout.Text != "the corpus\nrefused 30\n" {
		t.Errorf("ro volume: %d %q %q", code, r.Stdout.Text, r.Stderr.Text)
	}
	if len(r.Files) != 1 || r.Files[0].Error != "" {
		t.Fatalf("fetched from the ro volume: %+v", r.Files)
	}
	if got, _ := base64.StdEncoding.DecodeString(r.Files[0].ContentBase64); string(got) != "the corpus\n" {
		t.Errorf("fetched %q", got)
	}
	if fileExists(filepath.Join(ro, "new")) {
		t.Errorf("the payload wrote into the read-only volume")
	}

	// A writable volume, at a target the request names: written by the
	// payload (and a file put in there), seen on the host.
	r = v1Response{}
	code = s.postJSON(t, "/v1/run", map[string]any{
		"code":    "open('/results/made.txt', 'w').write(open('/results/in.txt').read().upper())",
		"volumes": []map[string]any{{"name": "out", "target": "/results", "rw": true}},
		"files":   []map[string]any{{"path": "/results/in.txt", "content": "from the request"}},
	}, &r)
	if code != 200 || r.Result["status"] != "ok" {
		t.Fatalf("rw volume: %d %v %q", code, r.Result["status"], r.Stderr.Text)
	}
	if got, err := os.ReadFile(filepath.Join(rw, "made.txt")); err != nil || string(got) != "FROM THE REQUEST" {
		t.Errorf("the host's %s/made.txt: %q %v", rw, got, err)
	}
	// The audit log names the host paths each run was granted.
	logged, _ := os.ReadFile(auditPath)
	for _, want := range []string{
		fmt.Sprintf(`"volumes":[{"source":%q,"target":"/data/corpus","rw":false}]`, ro),
		fmt.Sprintf(`"volumes":[{"source":%q,"target":"/results","rw":true}]`, rw),
	} {
		if !strings.Contains(string(logged), want) {
			t.Errorf("the audit log has no %s:\n%s", want, logged)
		}
	}

	// Refusals, each naming its field.
	for _, c := range []struct {
		body, want string
	}{
		{`{"command":["true"],"volumes":[{"name":"corpus","rw":true}]}`, `volumes[0].rw: volume \"corpus\" is read-only`},
		{`{"command":["true"],"volumes":[{"name":"secret"}]}`, `volumes[0].name: \"secret\" is not a volume this server grants`},
		{`{"command":["true"],"volumes":[{"name":"corpus","target":"/tmp/c"}]}`, `volumes[0].target: target /tmp/c is on or below /tmp`},
		{`{"command":["true"],"volumes":[{"name":"corpus"}],"files":[{"path":"/data/corpus/x","content":"x"}]}`, `files[0].path: path \"/data/corpus/x\" is outside`},
	} {
		code, body, _ := s.do(t, "POST", "/v1/run", c.body, nil)
		if code != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 with %s", c.body, code, body, c.want)
		}
	}
	if fileExists(filepath.Join(ro, "x")) {
		t.Errorf("a refused request left a file in the volume")
	}
	// A session with the read-only volume.
	code, body, _ := s.do(t, "POST", "/v1/sessions", `{"volumes":[{"name":"corpus","rw":true}]}`, nil)
	if code != 400 || !strings.Contains(string(body), "volumes[0].rw") {
		t.Errorf("session with rw on a ro volume: %d %s", code, body)
	}
	sessionVolumeFiles(t, s, ro, rw)
}

// sessionVolumeFiles: a session's put_file and get_file reach the
// volumes it was granted as /v1/run's files and fetch_files do, over
// REST and the WebSocket: a put into the rw volume is seen on the host, a
// get of a file the host placed in the ro volume returns its bytes; a put
// into the ro volume and paths outside every granted place are 400
// BadPath naming the path, and leave no file.
func sessionVolumeFiles(t *testing.T, s *server, ro, rw string) {
	placed := []byte("placed by the host\x00\xff\n")
	writeFile(t, filepath.Join(ro, "placed.bin"), string(placed), 0o644)
	id := createSession(t, s, `{"volumes":[{"name":"corpus"},{"name":"out","target":"/results","rw":true}]}`)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	put := func(path, data string) (int, []byte) {
		body, _ := json.Marshal(map[string]string{"path": path, "data": b64(data)})
		code, b, _ := s.do(t, "POST", "/v1/sessions/"+id+"/files", string(body), nil)
		return code, b
	}
	get := func(path string) (int, []byte) {
		code, b, _ := s.do(t, "GET", "/v1/sessions/"+id+"/files?path="+url.QueryEscape(path), "", nil)
		return code, b
	}
	if code, b := put("/results/from-rest.txt", "put over REST"); code != 200 || !strings.Contains(string(b), `"ok":true`) {
		t.Errorf("REST put into the rw volume: %d %s", code, b)
	}
	if got, err := os.ReadFile(filepath.Join(rw, "from-rest.txt")); err != nil || string(got) != "put over REST" {
		t.Errorf("the host's %s/from-rest.txt after the session's put: %q %v", rw, got, err)
	}
	var fr struct {
		OK   bool   `json:"ok"`
		Data string `json:"data"`
	}
	code, b := get("/data/corpus/placed.bin")
	if err := json.Unmarshal(b, &fr); code != 200 || err != nil || !fr.OK {
		t.Errorf("REST get from the ro volume: %d %s", code, b)
	} else if got, _ := base64.StdEncoding.DecodeString(fr.Data); !slices.Equal(got, placed) {
		t.Errorf("REST get from the ro volume: %q, want %q", got, placed)
	}
	// What the session's code wrote in the rw volume comes out too.
	if code, r := s.sessionOp(t, "POST", id, "exec", `{"code":"open('/results/made-in-cell.txt','w').write('made in the cell')"}`); code != 200 || !r.OK || r.Error != nil {
		t.Errorf("exec: %d %+v", code, r)
	}
	code, b = get("/results/made-in-cell.txt")
	fr = struct {
		OK   bool   `json:"ok"`
		Data string `json:"data"`
	}{}
	if err := json.Unmarshal(b, &fr); code != 200 || err != nil || fr.Data != b64("made in the cell") {
		t.Errorf("REST get from the rw volume: %d %s", code, b)
	}
	for _, c := range []struct {
		op, path, want string
	}{
		{"put", "/data/corpus/x", "read-only volume /data/corpus"},
		{"put", "/data/x", "path /data/x is outside"},
		{"put", "/etc/x", "path /etc/x is outside"},
		{"put", "/results/../etc/x", "absolute, clean"},
		{"get", "/etc/passwd", "path /etc/passwd is outside the places get_file reads"},
		{"get", "/data/corpus", "is outside"},
	} {
		var code int
		var b []byte
		if c.op == "put" {
			code, b = put(c.path, "refused")
		} else {
			code, b = get(c.path)
		}
		if code != 400 || !strings.Contains(string(b), `"BadPath"`) || !strings.Contains(string(b), c.want) {
			t.Errorf("REST %s %s: %d %s, want 400 BadPath saying %q", c.op, c.path, code, b, c.want)
		}
	}
	if fileExists(filepath.Join(ro, "x")) || fileExists(filepath.Join(rootfsDir, "etc", "x")) {
		t.Errorf("a refused put left a file")
	}

	// The same over the WebSocket.
	ctx := context.Background()
	c, _, err := s.dialSession(ctx, id)
	if err != nil {
		t.Fatalf("dial the session's socket: %v\n%s", err, s.stderr.String())
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20)
	wsSend(t, c, map[string]any{"id": 1, "op": "put_file", "path": "/results/from-ws.txt", "data": b64("put over the socket")})
	if r := wsReply(t, c, 1); !r.OK {
		t.Errorf("socket put into the rw volume: %+v", r)
	}
	if got, err := os.ReadFile(filepath.Join(rw, "from-ws.txt")); err != nil || string(got) != "put over the socket" {
		t.Errorf("the host's %s/from-ws.txt after the socket's put: %q %v", rw, got, err)
	}
	wsSend(t, c, map[string]any{"id": 2, "op": "get_file", "path": "/data/corpus/corpus.txt"})
	ctxR, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, msg, err := c.Read(ctxR)
	cancel()
	fr = struct {
		OK   bool   `json:"ok"`
		Data string `json:"data"`
	}{}
	if err != nil || json.Unmarshal(msg, &fr) != nil || !fr.OK || fr.Data != b64("the corpus\n") {
		t.Errorf("socket get from the ro volume: %v %s", err, msg)
	}
	wsSend(t, c, map[string]any{"id": 3, "op": "put_file", "path": "/data/corpus/y", "data": b64("refused")})
	if r := wsReply(t, c, 3); r.OK || r.Error["type"] != "BadPath" || !strings.Contains(fmt.Sprint(r.Error["message"]), "read-only volume /data/corpus") {
		t.Errorf("socket put into the ro volume: %+v", r)
	}
	wsSend(t, c, map[string]any{"id": 4, "op": "get_file", "path": "/proc/1/environ"})
	if r := wsReply(t, c, 4); r.OK || r.Error["type"] != "BadPath" {
		t.Errorf("socket get outside the granted places: %+v", r)
	}
	if fileExists(filepath.Join(ro, "y")) {
		t.Errorf("a refused put left a file in the ro volume")
	}
	if code, r := s.sessionOp(t, "DELETE", id, "", ""); code != 200 {
		t.Errorf("DELETE the session: %d %+v", code, r)
	}
}

// TestServePolicyVolumeRefused: a writable volume over the rootfs the
// server serves, or over rljail's data directory of root filesystems,
// keeps the server from starting, with one sentence.
func TestServePolicyVolumeRefused(t *testing.T) {
	// Inside the data directory but neither the served rootfs nor above
	// it: another rootfs there (the test machine has several).
	var sibling string
	entries, _ := os.ReadDir(filepath.Dir(rootfsDir))
	for _, e := range entries {
		if e.IsDir() && e.Name() != filepath.Base(rootfsDir) {
			sibling = filepath.Join(filepath.Dir(rootfsDir), e.Name())
			break
		}
	}
	if sibling == "" {
		t.Fatalf("no other directory beside %s to grant: this case needs one", rootfsDir)
	}
	for _, c := range []struct{ name, source, want string }{
		{"the rootfs", rootfsDir, "is inside the volume " + rootfsDir},
		{"above the rootfs", filepath.Dir(rootfsDir), "is inside the volume " + filepath.Dir(rootfsDir)},
		{"in the data directory", sibling, "would let the jail write rljail's root filesystems"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := newDir(t)
			cfg := filepath.Join(dir, "serve.toml")
			writeFile(t, cfg, fmt.Sprintf("rootfs = [%q]\n[volumes.bad]\nsource = %q\ntarget = \"/bad\"\nwritable = true\n", rootfsDir, c.source), 0o644)
			cmd := exec.Command(testBin, "serve", "--config", cfg, "--listen", "unix:"+filepath.Join(dir, "api.sock"))
			cmd.Env = modeEnv(asRoot)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("rljail serve did not refuse the configuration:\n%s", out)
			}
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), c.want) {
				t.Errorf("rljail serve: %v\n%s\nwant exit 125 saying %q", err, out, c.want)
			}
			if fileExists(filepath.Join(dir, "api.sock")) {
				t.Errorf("the refused server made its socket")
			}
		})
	}
}

// TestServePolicyEgress: a request's egress, each entry within the
// configuration's egress_allow, through the jail's proxy (the jail's own
// network namespace has nothing else). The listeners on the host's
// loopback decide: the asked one is reached, the permitted one that was
// not asked and the one never permitted see no connection.
func TestServePolicyEgress(t *testing.T) {
	asked, notAsked, never := startUpstream(t, false), startUpstream(t, false), startUpstream(t, false)
	s := startServer(t, asRoot, serveOpts{config: fmt.Sprintf("egress_allow = [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]\n", asked.port, notAsked.port)})
	code := fmt.Sprintf(`
import socket
def get(port, path):
    try:
        c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        c.sendall(("GET http://127.0.0.1:%%d%%s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" %% (port, path)).encode())
        data = b""
        while True:
            b = c.recv(4096)
            if not b: break
            data += b
        return data.decode(errors="replace").split("\r\n")[0] + "|" + data.decode(errors="replace").split("\r\n\r\n", 1)[-1]
    except OSError as e:
        return "error %%s" %% e
print(get(%d, "/asked"))
print(get(%d, "/not-asked"))
print(get(%d, "/never"))
`, asked.port, notAsked.port, never.port)
	var r v1Response
	if c := s.postJSON(t, "/v1/run", map[string]any{"code": code, "egress": []string{fmt.Sprintf("127.0.0.1:%d", asked.port)}}, &r); c != 200 {
		t.Fatalf("/v1/run with egress: %d", c)
	}
	lines := strings.Split(r.Stdout.Text, "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "upstream:/asked") || strings.Contains(lines[1], "upstream:") || strings.Contains(lines[2], "upstream:") {
		t.Errorf("the payload saw %q (stderr %q)", r.Stdout.Text, r.Stderr.Text)
	}
	if !asked.hasPath("/asked") {
		t.Errorf("the asked listener saw no request")
	}
	if n, _, _, _ := notAsked.seen(); n != 0 {
		t.Errorf("the permitted but not asked listener saw %d connections", n)
	}
	// Not permitted: 400 naming the entry, and no jail at all.
	body := fmt.Sprintf(`{"command":["true"],"egress":["127.0.0.1:%d","127.0.0.1:%d"]}`, asked.port, never.port)
	if c, b, _ := s.do(t, "POST", "/v1/run", body, nil); c != 400 || !strings.Contains(string(b), "egress[1]") || !strings.Contains(string(b), "not covered") {
		t.Errorf("an entry not permitted: %d %s, want 400 naming egress[1]", c, b)
	}
	if n, _, _, _ := never.seen(); n != 0 {
		t.Errorf("the listener never permitted saw %d connections", n)
	}
	// No egress asked: the jail has no network at all.
	r = v1Response{}
	if c := s.postJSON(t, "/v1/run", map[string]any{"code": fmt.Sprintf("import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=5); print('CONNECTED')\nexcept OSError as e:\n    print('refused')", notAsked.port)}, &r); c != 200 || r.Stdout.Text != "refused\n" {
		t.Errorf("without egress: %d %q", c, r.Stdout.Text)
	}
	if n, _, _, _ := notAsked.seen(); n != 0 {
		t.Errorf("the listener not asked saw %d connections", n)
	}
}

// TestServePolicyProfile: a request names a permitted built-in profile,
// and its jail runs under that profile's program (the report says which);
// one not permitted is 400.
func TestServePolicyProfile(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{config: "profiles = [\"python\", \"python-strict\"]\n"})
	for _, c := range []struct{ profile, want string }{{"", "python"}, {"python-strict", "python-strict"}} {
		var r v1Response
		if code := s.postJSON(t, "/v1/run", map[string]any{"command": []string{"true"}, "profile": c.profile}, &r); code != 200 || r.Result["status"] != "ok" {
			t.Fatalf("profile %q: %d %v", c.profile, code, r.Result)
		}
		sc, _ := r.Result["seccomp"].(map[string]any)
		if sc == nil || sc["profile"] != c.want {
			t.Errorf("profile %q: the report's seccomp is %v, want profile %s", c.profile, r.Result["seccomp"], c.want)
		}
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"],"profile":"python-learn"}`, nil); code != 400 || !strings.Contains(string(body), `profile \"python-learn\" is not a profile this server permits`) {
		t.Errorf("a profile not permitted: %d %s", code, body)
	}
}

// TestServePolicyReloadAndPool: SIGHUP carries [volumes], egress_allow
// and profiles to the requests from then on; and a request that names a
// volume, egress or a profile other than the default never takes a jail
// of the warm pool (whose jails have none of them), while a plain one
// does.
func TestServePolicyReloadAndPool(t *testing.T) {
	vol := newDir(t)
	writeFile(t, filepath.Join(vol, "f.txt"), "in the volume\n", 0o644)
	up := startUpstream(t, false)
	s := startServer(t, asRoot, serveOpts{extraArgs: []string{"--warm", "1"}})
	waitFor(t, "the warm pool to fill (/readyz 200)", func() bool {
		code, _, _ := s.do(t, "GET", "/readyz", "", nil)
		return code == 200
	})
	withVol := `{"command":["cat","/v/f.txt"],"volumes":[{"name":"v"}]}`
	withEgress := fmt.Sprintf(`{"command":["true"],"egress":["127.0.0.1:%d"]}`, up.port)
	withProfile := `{"command":["true"],"profile":"python-strict"}`
	for _, b := range []string{withVol, withEgress, withProfile} {
		if code, body, _ := s.do(t, "POST", "/v1/run", b, nil); code != 400 {
			t.Errorf("before the reload %s: %d %s, want 400", b, code, body)
		}
	}
	cfg := s.cmd.Args[slices.Index(s.cmd.Args, "--config")+1]
	raw, _ := os.ReadFile(cfg)
	writeFile(t, cfg, fmt.Sprintf("egress_allow = [\"127.0.0.1:%d\"]\nprofiles = [\"python\", \"python-strict\"]\n%s\n[volumes.v]\nsource = %q\ntarget = \"/v\"\n", up.port, raw, vol), 0o644)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's log line", func() bool {
		return strings.Contains(s.stderr.String(), `"msg":"reloaded"`) || strings.Contains(s.stderr.String(), `"msg":"reload refused`)
	})
	if strings.Contains(s.stderr.String(), "reload refused") {
		t.Fatalf("the reload was refused:\n%s", s.stderr.String())
	}
	type pooled struct {
		Result     map[string]any        `json:"result"`
		Stdout     struct{ Text string } `json:"stdout"`
		Pool       string                `json:"pool"`
		PoolReason string                `json:"pool_reason"`
	}
	for _, c := range []struct{ body, pool, reason string }{
		{withVol, "cold", "misfit"}, {withEgress, "cold", "misfit"}, {withProfile, "cold", "misfit"},
		{`{"command":["true"]}`, "warm", ""},
	} {
		waitFor(t, "a waiting jail (/readyz 200)", func() bool {
			code, _, _ := s.do(t, "GET", "/readyz", "", nil)
			return code == 200
		})
		code, body, _ := s.do(t, "POST", "/v1/run", c.body, nil)
		var r pooled
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Errorf("after the reload %s: %d %s", c.body, code, body)
			continue
		}
		if r.Result["status"] != "ok" || r.Pool != c.pool || r.PoolReason != c.reason {
			t.Errorf("%s: status %v, pool %q %q, want ok, %q %q", c.body, r.Result["status"], r.Pool, r.PoolReason, c.pool, c.reason)
		}
		if c.body == withVol && r.Stdout.Text != "in the volume\n" {
			t.Errorf("the volume added by the reload: %q", r.Stdout.Text)
		}
	}
}

// TestServePolicyReloadRefusesVolume: a reload whose writable volume is
// the rootfs itself is refused with one log line, and the policy stays
// as it was (the volume is not granted).
func TestServePolicyReloadRefusesVolume(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{})
	cfg := s.cmd.Args[slices.Index(s.cmd.Args, "--config")+1]
	raw, _ := os.ReadFile(cfg)
	writeFile(t, cfg, fmt.Sprintf("%s\n[volumes.root]\nsource = %q\ntarget = \"/r\"\nwritable = true\n", raw, rootfsDir), 0o644)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's log line", func() bool {
		return strings.Contains(s.stderr.String(), `"msg":"reloaded"`) || strings.Contains(s.stderr.String(), `"msg":"reload refused`)
	})
	if !strings.Contains(s.stderr.String(), "reload refused") || !strings.Contains(s.stderr.String(), "is inside the volume "+rootfsDir) {
		t.Errorf("the reload was not refused for the rootfs:\n%s", s.stderr.String())
	}
	if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"],"volumes":[{"name":"root","rw":true}]}`, nil); code != 400 || !strings.Contains(string(body), "grants none") {
		t.Errorf("the refused reload's volume: %d %s, want 400", code, body)
	}
}

// TestServePolicyOwnFilesOutsideVolumes: the server reads its
// configuration and tokens, and writes its audit log, only outside every
// host path its jails may write. A configuration in a writable volume
// could be rewritten by a jail to grant itself more at the next SIGHUP:
// the server refuses to start with one, and a reload that would grant the
// directory the configuration lies in is refused (the old policy stays).
func TestServePolicyOwnFilesOutsideVolumes(t *testing.T) {
	for _, c := range []struct {
		name string
		flag string // the flag whose file lies in the volume
	}{
		{"config", "--config"},
		{"tokens file", "--tokens-file"},
		{"audit log", "--audit-log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := newDir(t)
			vol := filepath.Join(dir, "vol")
			if err := os.Mkdir(vol, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "serve.toml")
			if c.flag == "--config" {
				cfg = filepath.Join(vol, "serve.toml")
			}
			writeFile(t, cfg, fmt.Sprintf("rootfs = [%q]\n[volumes.v]\nsource = %q\ntarget = \"/v\"\nwritable = true\n", rootfsDir, vol), 0o644)
			args := []string{"serve", "--config", cfg, "--listen", "unix:" + filepath.Join(dir, "api.sock")}
			var inVol string
			switch c.flag {
			case "--config":
				inVol = cfg
			case "--tokens-file":
				inVol = filepath.Join(vol, "tokens.toml")
				writeFile(t, inVol, "[tokens.a]\ntoken = \"0123456789abcdef0123\"\n", 0o600)
				args = append(args, "--tokens-file", inVol)
			case "--audit-log":
				inVol = filepath.Join(vol, "audit.log")
				args = append(args, "--audit-log", inVol)
			}
			cmd := exec.Command(testBin, args...)
			cmd.Env = modeEnv(asRoot)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("rljail serve started with %s %s inside a writable volume:\n%s", c.flag, inVol, out)
			}
			want := c.flag + " " + inVol + " is inside the volume " + vol
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), want) {
				t.Errorf("rljail serve: %v\n%s\nwant exit 125 saying %q", err, out, want)
			}
			if fileExists(filepath.Join(dir, "api.sock")) {
				t.Errorf("the refused server made its socket")
			}
			if c.flag == "--audit-log" && fileExists(inVol) {
				t.Errorf("the refused server made its audit log %s", inVol)
			}
		})
	}
	t.Run("reload", func(t *testing.T) {
		s := startServer(t, asRoot, serveOpts{})
		cfg := s.cmd.Args[slices.Index(s.cmd.Args, "--config")+1]
		raw, _ := os.ReadFile(cfg)
		writeFile(t, cfg, fmt.Sprintf("%s\n[volumes.here]\nsource = %q\ntarget = \"/here\"\nwritable = true\n", raw, filepath.Dir(cfg)), 0o644)
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reload's log line", func() bool {
			return strings.Contains(s.stderr.String(), `"msg":"reloaded"`) || strings.Contains(s.stderr.String(), `"msg":"reload refused`)
		})
		if !strings.Contains(s.stderr.String(), "reload refused") || !strings.Contains(s.stderr.String(), "--config "+cfg+" is inside the volume "+filepath.Dir(cfg)) {
			t.Errorf("the reload that grants the configuration's directory was not refused:\n%s", s.stderr.String())
		}
		if code, body, _ := s.do(t, "POST", "/v1/run", `{"command":["true"],"volumes":[{"name":"here","rw":true}]}`, nil); code != 400 {
			t.Errorf("the refused reload's volume: %d %s, want 400", code, body)
		}
	})
}
