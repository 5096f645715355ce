package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestServeDrainAfterRevoke: a SIGTERM that arrives right after a reload
// (SIGHUP) revoked a client's token still waits for the revoked session's
// jail to be gone before the server exits. The reload takes the session
// out of the set at once (revokeSessions) and ends its jail in the
// background; the drain must wait for that jail as for the sessions it
// ends itself. The session is busy in a cell (time.sleep), held by a
// WebSocket, when it is revoked: no HTTP request of it is in flight for
// the server's Shutdown to wait for. The cell has also replaced the
// worker's os._exit, so the worker does not end at the channel's EOF and
// the jail goes only by the kill Session.Close falls back to a second
// later (a payload may do this; it must not shorten the drain's wait).
// A drain that forgot the session exited within milliseconds, its jail
// still there (its init reparented and running, its cgroups left;
// rootless, the payload's processes too).
// Judged from outside once the server process has exited, with no wait:
// the jail's init (PID 1 of its PID namespace) and the payload's
// processes gone, its cgroup directories gone (root), and then nothing
// of the server's left (checkLeftovers: processes, mounts, cgroups,
// host uids, files).
func TestServeDrainAfterRevoke(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { serveDrainAfterRevoke(t, m) })
	}
}

func serveDrainAfterRevoke(t *testing.T, m mode) {
	alpha := randomToken("alpha")
	dir := newDir(t)
	if m == asRootless {
		if err := os.Chown(dir, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	tf := filepath.Join(dir, "tokens.toml")
	writeTokens := func(tok string) {
		writeFile(t, tf, fmt.Sprintf("[tokens.alpha]\ntoken = %q\n", tok), 0o600)
		if m == asRootless {
			_ = os.Chown(tf, testUID, testGID)
		}
	}
	writeTokens(alpha)
	s, e := startLoadServer(t, m, serveOpts{extraArgs: []string{"--tokens-file", tf}})
	as := map[string]string{"Authorization": "Bearer " + alpha}
	code, b, _ := s.do(t, "POST", "/v1/sessions", `{}`, as)
	var r struct{ ID string }
	if code != 200 || json.Unmarshal(b, &r) != nil || r.ID == "" {
		t.Fatalf("POST /v1/sessions: %d %s", code, b)
	}
	mk := e.marker + "child"
	cell := fmt.Sprintf(`{"code":"import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '%s'])"}`, mk)
	if code, b, _ := s.do(t, "POST", "/v1/sessions/"+r.ID+"/exec", cell, as); code != 200 || !strings.Contains(string(b), `"ok":true`) {
		t.Fatalf("exec: %d %s", code, b)
	}
	child, ok := findPayload(mk, s.cmd.Process.Pid, 30*time.Second)
	if !ok {
		t.Fatal("the session's marked process was not seen")
	}
	jinit := jailInitOf(t, child)
	var cgroups []string
	if m == asRoot {
		seen := map[string]bool{}
		for _, p := range []proc{jinit, child} {
			cg, err := procCgroup(p.pid)
			if err != nil {
				t.Fatalf("the cgroups of the session's %v: %v", p, err)
			}
			for ctl, cp := range cg {
				d := filepath.Join("/sys/fs/cgroup", ctl, cp)
				for _, parent := range e.cgDirs {
					if strings.HasPrefix(d, parent+"/") && !seen[d] {
						seen[d] = true
						cgroups = append(cgroups, d)
					}
				}
			}
		}
		if len(cgroups) == 0 {
			t.Fatalf("the session's cgroups: none below the server's --cgroup-parent %v", e.cgDirs)
		}
		t.Logf("the session's cgroups: %v", cgroups)
	}

	// A socket holds the session and keeps it busy: a cell that keeps the
	// worker from ending at EOF, starts a second marked process, then
	// sleeps. No HTTP request of the session is in flight (the server's
	// Shutdown would wait for one anyway).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(s.base, "http://", "ws://", 1)+"/v1/sessions/"+r.ID+"/ws",
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: s.client.Transport}, HTTPHeader: http.Header{"Authorization": {"Bearer " + alpha}}})
	if err != nil {
		t.Fatalf("dial the session's socket: %v", err)
	}
	defer c.CloseNow()
	busy := e.marker + "busy"
	wsSend(t, c, map[string]any{"id": 1, "op": "exec",
		"code": fmt.Sprintf("import os, subprocess, sys, time\nos._exit = lambda *a: time.sleep(600)\nq = subprocess.Popen([sys.executable, '-c', 'import time; b = b\"x\" * (300 << 20); time.sleep(600)', '%s'])\ntime.sleep(600)", busy)})
	busyProc, ok := findPayload(busy, s.cmd.Process.Pid, 30*time.Second)
	if !ok {
		t.Fatal("the busy cell's marked process was not seen")
	}
	waitFor(t, "the busy cell's process to hold its 300 MiB", func() bool {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", busyProc.pid))
		v, _ := lineValue(string(st), "VmRSS:")
		kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		return kb > 300<<10
	})

	// The reload changes alpha's token; SIGTERM the moment it has revoked
	// the session.
	writeTokens(randomToken("alpha2"))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(s.stderr.String(), `"msg":"session revoked"`); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no \"session revoked\" log line within 30 s of SIGHUP:\n%s", s.stderr.String())
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("rljail serve did not end within 60 s of SIGTERM:\n%s", s.stderr.String())
	}
	t.Logf("the server exited %v after SIGTERM", time.Since(term).Round(time.Millisecond))
	// The server has exited: its revoked session's jail must be gone now,
	// not a moment later. A server that exited without waiting leaves the
	// jail to its init's parent-death signal and to the cgroup cleaner
	// that outlives a supervisor (jail/stage/spawn.c), which finish within
	// milliseconds: so the first look is at once, by PID and path, and
	// the jail's processes hold memory, which makes their exit slower.
	// (Meanwhile the server's lock on the jail's host uid is gone with the
	// server, free for another jail while the old one's processes live.)
	var left []string
	for _, p := range []proc{jinit, child, busyProc} {
		if q, ok := readProc(p.pid); ok && q.start == p.start && !q.zombie() {
			left = append(left, q.String())
		}
	}
	for _, d := range cgroups {
		if fileExists(d) {
			left = append(left, "cgroup "+d)
		}
	}
	for _, l := range left {
		t.Errorf("the revoked session's jail outlived the server (it exited while the jail was ending): %s", l)
	}
	if st := s.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
		t.Errorf("rljail serve ended with %v after SIGTERM, want exit 0:\n%s", st, s.stderr.String())
	}
	if !strings.Contains(s.stderr.String(), `"msg":"drained"`) {
		t.Errorf("no \"drained\" log line:\n%s", s.stderr.String())
	}
	e.checkLeftovers(t, s)
}

// jailInitOf is the init of p's jail: p's topmost ancestor in p's PID
// namespace, checked to be PID 1 there (the last NSpid).
func jailInitOf(t *testing.T, p proc) proc {
	t.Helper()
	cur := p
	for {
		parent, ok := readProc(cur.ppid)
		if !ok || parent.pidNS != p.pidNS {
			break
		}
		cur = parent
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cur.pid))
	if err != nil {
		t.Fatalf("the jail's init: %v", err)
	}
	ns, _ := lineValue(string(st), "NSpid:")
	if f := strings.Fields(ns); len(f) < 2 || f[len(f)-1] != "1" {
		t.Fatalf("the topmost process of %v's PID namespace is not its PID 1 (NSpid %q): %v", p, ns, cur)
	}
	return cur
}
