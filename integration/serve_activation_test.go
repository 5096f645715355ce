package integration

// rljail serve under systemd's protocols, without systemd: the test makes
// the listening socket itself and passes it as descriptor 3 with
// LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES (sd_listen_fds(3)), as
// systemd's socket units do; LISTEN_PID is the server's own pid because a
// shell sets it to $$ and then execs rljail. A datagram socket of the
// test's is NOTIFY_SOCKET (sd_notify(3)). The server must serve that
// socket, tell READY=1 and STOPPING=1, and refuse a socket that breaks
// serve's rules or disagrees with its flags. The real systemd case is
// integration/vm/systemd/serve_test.go.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// activatedServe is one `rljail serve` started with a passed socket.
type activatedServe struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	notify *net.UnixConn
	done   chan struct{}
}

// startActivated starts `rljail serve --config CFG args...` as root with ln
// as its descriptor 3 under the socket-activation variables, and
// NOTIFY_SOCKET a datagram socket in dir.
func startActivated(t *testing.T, dir string, ln net.Listener, args ...string) *activatedServe {
	t.Helper()
	cfg := filepath.Join(dir, "serve.toml")
	writeFile(t, cfg, fmt.Sprintf("rootfs = [%q]\n", rootfsDir), 0o644)
	f, err := ln.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	notifyPath := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })
	argv := append([]string{"-c", `LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=api exec "$0" "$@"`, testBin, "serve", "--config", cfg}, args...)
	s := &activatedServe{stderr: &syncBuffer{}, notify: notify, done: make(chan struct{})}
	s.cmd = exec.Command("/bin/sh", argv...)
	s.cmd.Env = append(modeEnv(asRoot), "NOTIFY_SOCKET="+notifyPath)
	s.cmd.ExtraFiles = []*os.File{f}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { stopServe(t, s.cmd, s.done) })
	return s
}

// nextNotification waits for one datagram on NOTIFY_SOCKET.
func (s *activatedServe) nextNotification(t *testing.T, within time.Duration) string {
	t.Helper()
	_ = s.notify.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, 4096)
	n, err := s.notify.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message within %v: %v\nserver stderr:\n%s", within, err, s.stderr.String())
	}
	return string(buf[:n])
}

// exited waits for the server to end and returns its exit code.
func (s *activatedServe) exited(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("rljail serve did not end within 20 s:\n%s", s.stderr.String())
		return -1
	}
}

func unixListener(t *testing.T, path string, mode os.FileMode) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestServeSocketActivation: the passed socket is served (a run answered
// over it, though no --listen was given), READY=1 comes once it is, and
// STOPPING=1 at SIGTERM's drain.
func TestServeSocketActivation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen bool // give --listen naming the passed socket too
	}{
		{"no-listen", false},
		{"listen-same", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			sock := filepath.Join(dir, "api.sock")
			ln := unixListener(t, sock, 0o600)
			var args []string
			if tc.listen {
				args = []string{"--listen", "unix:" + sock}
			}
			s := startActivated(t, dir, ln, args...)
			// Only the server serves the socket: the test's copy stops
			// taking connections once closed here.
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
			if msg := s.nextNotification(t, 30*time.Second); !strings.Contains(msg, "READY=1") || !strings.Contains(msg, "STATUS=serving on unix:"+sock) {
				t.Errorf("the first sd_notify message is %q, want READY=1 and STATUS=serving on unix:%s", msg, sock)
			}
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", sock)
				}}}
			resp, err := client.Post("http://rljail/v1/run", "application/json", strings.NewReader(`{"command":["python3","-c","print(6*7)"]}`))
			if err != nil {
				t.Fatalf("POST /v1/run over the passed socket: %v\n%s", err, s.stderr.String())
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(body.String(), `"text":"42\n"`) {
				t.Errorf("POST /v1/run: %d %s", resp.StatusCode, body.String())
			}
			if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("the passed socket's mode after the start: %v %v, want 0600 untouched", fi, err)
			}
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			if msg := s.nextNotification(t, 10*time.Second); !strings.Contains(msg, "STOPPING=1") {
				t.Errorf("the sd_notify message after SIGTERM is %q, want STOPPING=1", msg)
			}
			if code := s.exited(t); code != 0 {
				t.Errorf("rljail serve exited %d after its drain:\n%s", code, s.stderr.String())
			}
			if !strings.Contains(s.stderr.String(), `"listen":"unix:`+sock+`"`) {
				t.Errorf("the serving line does not name the passed socket:\n%s", s.stderr.String())
			}
		})
	}
}

// TestServeSocketActivationRefused: a passed socket that breaks serve's
// rules, or that the flags contradict, ends the start with exit 125 and
// one sentence, before READY=1.
func TestServeSocketActivationRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		ln   func(t *testing.T, dir string) net.Listener
		args []string
		want string
	}{
		{"listen-other", func(t *testing.T, dir string) net.Listener {
			return unixListener(t, filepath.Join(dir, "api.sock"), 0o600)
		}, []string{"--listen", "unix:/run/rljail-elsewhere.sock"}, "--listen unix:/run/rljail-elsewhere.sock disagrees with the socket systemd passed"},
		{"listen-tcp", func(t *testing.T, dir string) net.Listener {
			return unixListener(t, filepath.Join(dir, "api.sock"), 0o600)
		}, []string{"--listen", "tcp:127.0.0.1:0", "--insecure-no-token"}, "disagrees with the socket systemd passed"},
		{"mode-0666", func(t *testing.T, dir string) net.Listener {
			return unixListener(t, filepath.Join(dir, "api.sock"), 0o666)
		}, nil, "has mode 0666: anyone on the host may connect"},
		{"socket-mode", func(t *testing.T, dir string) net.Listener {
			return unixListener(t, filepath.Join(dir, "api.sock"), 0o600)
		}, []string{"--socket-mode", "0660"}, "--socket-mode 0660 disagrees with the socket systemd passed"},
		{"tcp-no-token", func(t *testing.T, dir string) net.Listener {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return ln
		}, nil, "is TCP: TCP needs --token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			s := startActivated(t, dir, tc.ln(t, dir), tc.args...)
			if code := s.exited(t); code != 125 {
				t.Errorf("exit %d, want 125:\n%s", code, s.stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(s.stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("stderr %q, want one line with %q", s.stderr.String(), tc.want)
			}
			_ = s.notify.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if n, _ := s.notify.Read(make([]byte, 512)); n > 0 {
				t.Errorf("a refused start sent an sd_notify message")
			}
		})
	}
}
