//go:build rljailsystemd

package systemd

// rljail serve as the packaged pair of units (contrib/systemd/rljail.socket
// and rljail.service), installed by `make install` (packaging/install.sh):
// the socket started alone; the first request over /run/rljail/api.sock
// starts the service (socket activation), which says READY=1 (Type=notify:
// its status text); POST /v1/run answers; a jail's cgroup is below the
// service's own (Delegate=yes), seen in the cgroup tree while it runs;
// `systemctl stop rljail.service` drains (the run under way is answered)
// and leaves no jail process or cgroup. Runs after TestMakeInstall, which
// uninstalled what it installed.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	serveSocket  = "/run/rljail/api.sock"
	serveService = "rljail.service"
	serveCgroup  = cgroupFS + "/system.slice/rljail.service"
)

// servePost sends one POST /v1/run over the API socket and returns the
// status and body.
func servePost(client *http.Client, body string) (int, []byte, error) {
	resp, err := client.Post("http://rljail/v1/run", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

func TestServeSocketActivated(t *testing.T) {
	if v := installedVersion(); v != "" {
		t.Fatalf("the package rljail %s is installed: this case wants /usr/local's units alone", v)
	}
	script := filepath.Join(os.Getenv("RLJAIL_VM_SRC"), "packaging", "install.sh")
	run(t, "sh", script, "--bin", rljailBin())
	t.Cleanup(func() {
		output("systemctl", "stop", "rljail.socket", serveService)
		output("sh", script, "--uninstall")
	})

	run(t, "systemctl", "start", "rljail.socket")
	if st := unitState(t, serveService); st != "loaded inactive" {
		t.Fatalf("%s before any request: %s, want loaded inactive (started by its socket only)", serveService, st)
	}
	st, err := os.Lstat(serveSocket)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s after starting rljail.socket: %v %v, want a socket of mode 0600", serveSocket, st, err)
	}

	client := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", serveSocket)
		}}}
	code, body, err := servePost(client, `{"command":["python3","-c","print(1)"]}`)
	if err != nil || code != 200 {
		t.Fatalf("the first POST /v1/run over %s: %d %v %s\n%s", serveSocket, code, err, body, unitDiag(serveService))
	}
	var answer struct {
		Result struct {
			Status string `json:"status"`
			Limits struct {
				Placement string `json:"cgroup_placement"`
			} `json:"limits"`
		} `json:"result"`
		Stdout struct {
			Text string `json:"text"`
		} `json:"stdout"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatalf("the answer is not JSON: %v\n%s", err, body)
	}
	if answer.Result.Status != "ok" || answer.Stdout.Text != "1\n" {
		t.Errorf("POST /v1/run print(1): %s", body)
	}
	if answer.Result.Limits.Placement != "cgroup2-own" {
		t.Errorf("cgroup_placement %q, want cgroup2-own (Delegate=yes): %s", answer.Result.Limits.Placement, body)
	}
	if st := unitState(t, serveService); st != "loaded active" {
		t.Errorf("%s after the first request: %s, want loaded active", serveService, st)
	}
	// Type=notify: the status text came with READY=1.
	if s, _ := output("systemctl", "show", "-p", "StatusText", "--value", serveService); s != "serving on unix:"+serveSocket {
		t.Errorf("%s StatusText %q, want %q (sd_notify READY=1 with STATUS=)", serveService, s, "serving on unix:"+serveSocket)
	}
	pid, _ := output("systemctl", "show", "-p", "MainPID", "--value", serveService)
	if cg, _ := os.ReadFile("/proc/" + pid + "/cgroup"); strings.TrimSpace(string(cg)) != "0::/system.slice/rljail.service/rljail-supervisor" {
		t.Errorf("rljail serve (pid %s) is in %q, want 0::/system.slice/rljail.service/rljail-supervisor", pid, cg)
	}

	// A run under way: its cgroup is below the service's, and the stop
	// waits for it (the drain) and answers it.
	mark := marker(t)
	answered := make(chan string, 1)
	go func() {
		code, body, err := servePost(client, `{"command":["python3","-c","import time; time.sleep(4); print('drained')","`+mark+`"]}`)
		if err != nil {
			answered <- "error: " + err.Error()
			return
		}
		answered <- fmt.Sprintf("%d %s", code, body)
	}()
	var jailCg string
	if !waitFor(60*time.Second, func() bool {
		for _, c := range jailCgroups() {
			jailCg = c
			return true
		}
		return false
	}) {
		t.Fatalf("no jail cgroup appeared while a run was under way\n%s", unitDiag(serveService))
	}
	if !strings.HasPrefix(jailCg, "/system.slice/rljail.service/") {
		t.Errorf("the jail's cgroup is %s, want it below /system.slice/rljail.service (Delegate=yes)", jailCg)
	}
	for _, p := range procsWith(mark) {
		pid, _, _ := strings.Cut(p, ":")
		cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		if !strings.HasPrefix(strings.TrimSpace(string(cg)), "0::/system.slice/rljail.service/rljail-") {
			t.Errorf("the payload %s is in cgroup %q, want below /system.slice/rljail.service", p, cg)
		}
	}
	stop := exec.Command("systemctl", "stop", serveService)
	stopStart := time.Now()
	if out, err := stop.CombinedOutput(); err != nil {
		t.Errorf("systemctl stop %s: %v\n%s", serveService, err, out)
	}
	stopTook := time.Since(stopStart)
	select {
	case a := <-answered:
		if !strings.HasPrefix(a, "200 ") || !strings.Contains(a, `"text":"drained\n"`) {
			t.Errorf("the run under way at the stop: %s", a)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the run under way at the stop was never answered")
	}
	if st := unitState(t, serveService); st != "loaded inactive" {
		t.Errorf("%s after systemctl stop: %s, want loaded inactive (a drained stop exits 0, not failed)\n%s", serveService, st, unitDiag(serveService))
	}
	if stopTook > 50*time.Second {
		t.Errorf("systemctl stop took %v: the drain ran into TimeoutStopSec", stopTook)
	}
	if j, _ := output("journalctl", "--no-pager", "-o", "cat", "-u", serveService); !strings.Contains(j, `"msg":"drained"`) {
		t.Errorf("the service's journal has no drained line:\n%s", j)
	}
	if _, err := os.Stat(serveCgroup); err == nil {
		t.Errorf("%s is left after the stop", serveCgroup)
	}
	noLeftovers(t, mark)
	// The socket stays: the next client starts the service again.
	if st := unitState(t, "rljail.socket"); st != "loaded active" {
		t.Errorf("rljail.socket after stopping the service: %s, want loaded active", st)
	}
}
