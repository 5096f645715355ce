package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSupervisorSIGKILL kills rljail with SIGKILL while its payload sleeps:
// one second later no process of the jail may be alive (PR_SET_PDEATHSIG on
// init, then the PID namespace takes the rest).
func TestSupervisorSIGKILL(t *testing.T) {
	t.Parallel()
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			marker := randomToken("killmarker")
			p := startJail(t, m, runOpts{noResult: true},
				append([]string{"--timeout", "120s"}, python("import time; time.sleep(60)", marker)...)...)
			payload, ok := findPayload(marker, p.cmd.Process.Pid, 10*time.Second)
			if !ok {
				_ = p.cmd.Process.Kill()
				p.wait()
				t.Fatalf("the payload never showed up in the host's /proc; exit %d stderr %q", p.exit, p.stderr.String())
			}
			tracked := append(descendants(p.cmd.Process.Pid), payload)
			hostInit, _ := readProc(1)
			if payload.pidNS == "" || payload.pidNS == hostInit.pidNS {
				t.Errorf("the payload's PID namespace %q is the host's", payload.pidNS)
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			p.wait()
			if p.signaled != syscall.SIGKILL {
				t.Errorf("rljail was not killed by SIGKILL: exit %d, signal %v", p.exit, p.signaled)
			}
			time.Sleep(time.Second)
			alive, zombies := leftovers(marker, payload.pidNS, tracked)
			if len(alive) > 0 {
				t.Errorf("1 s after SIGKILL of rljail, processes of its jail are alive:%s", procList(alive))
			}
			if len(zombies) > 0 {
				// The killed rljail cannot reap its init: the host's PID 1 does.
				t.Logf("zombies of the jail, left to the host's PID 1 to reap:%s", procList(zombies))
			}
		})
	}
}

// TestSignalForwarding sends SIGTERM to rljail: the payload's handler must
// see it, and rljail must exit with the payload's status.
func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	const code = `
import os, signal, time
def on_term(sig, frame):
    print("got TERM", flush=True)
    os._exit(7)
signal.signal(signal.SIGTERM, on_term)
print("READY", flush=True)
while True:
    time.sleep(0.05)
`
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			p := startJail(t, m, runOpts{}, append([]string{"--timeout", "30s"}, python(code)...)...)
			if !p.stdout.waitFor("READY", 10*time.Second) {
				_ = p.cmd.Process.Kill()
				p.wait()
				t.Fatalf("the payload never printed READY: exit %d stdout %q stderr %q", p.exit, p.stdout.String(), p.stderr.String())
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.wait()
			if !strings.Contains(p.stdout.String(), "got TERM") {
				t.Errorf("the payload's SIGTERM handler did not run: stdout %q stderr %q", p.stdout.String(), p.stderr.String())
			}
			if p.exit != 7 {
				t.Errorf("exit status %d (signal %v), want the payload's 7", p.exit, p.signaled)
			}
			if p.wall > 10*time.Second {
				t.Errorf("rljail took %v to end after SIGTERM", p.wall)
			}
			res, err := p.result()
			if err != nil {
				t.Error(err)
			}
			checkResult(t, "SIGTERM run", res, "exit_nonzero", 7)
		})
	}
}

// TestTimerPrecision: --timeout 1s on a busy loop ends with 124 within
// 300 ms of the deadline. The target of issue 2 is 100 ms; the margin is
// for loaded test machines. Not parallel: it measures time.
func TestTimerPrecision(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			p := startJail(t, m, runOpts{}, append([]string{"--timeout", "1s"}, python("while True: pass")...)...)
			p.wait()
			if p.exit != 124 {
				t.Errorf("exit status %d, want 124; stderr %q", p.exit, p.stderr.String())
			}
			res, err := p.result()
			if err != nil {
				t.Error(err)
			}
			checkResult(t, "timeout run", res, "timeout", 124)
			t.Logf("wall %v for --timeout 1s (overshoot %v; target 100 ms); result wall_ms %v", p.wall, p.wall-time.Second, res["wall_ms"])
			if p.wall < time.Second {
				t.Errorf("the run ended after %v, before its 1s limit", p.wall)
			}
			if p.wall >= time.Second+300*time.Millisecond {
				t.Errorf("the run ended after %v: more than 300 ms past its 1s limit (the target is 100 ms)", p.wall)
			}
		})
	}
}
