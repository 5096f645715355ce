package integration

// rljail serve's policy of what a request may name beyond limits (issue
// 31): configured volumes by name. Each case decides from outside: the
// HTTP answer, a file on the host in the test's own directory, the
// server's refusal to start.

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServePolicyVolumes(t *testing.T) {
	ro, rw := newDir(t), newDir(t)
	writeFile(t, filepath.Join(ro, "corpus.txt"), "the corpus\n", 0o644)
	s := startServer(t, asRoot, serveOpts{config: fmt.Sprintf(
		"[volumes.corpus]\nsource = %q\ntarget = \"/data/corpus\"\n[volumes.out]\nsource = %q\ntarget = \"/out\"\nwritable = true\n", ro, rw)})

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
