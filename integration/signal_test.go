package integration

import (
	"os"
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
			ownNS, _ := os.Readlink("/proc/self/ns/pid") // /proc/1 may be unreadable here
			if payload.pidNS == "" || payload.pidNS == ownNS {
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

// TestSignalEscalation: a payload that ignores the signals rljail passes
// on is killed when the caller insists (Spec.Signals): the grace after a
// SIGTERM, a second SIGTERM, a SIGINT after a SIGTERM; SIGINTs alone never
// kill (a REPL takes them as interrupts). Decided from outside: rljail's
// wall time and exit status, no process of the jail left; SIGQUIT and
// SIGUSR1 reach the payload, and SIGQUIT does not end rljail with Go's
// stack dump.
func TestSignalEscalation(t *testing.T) {
	t.Parallel()
	const ignoring = `
import signal, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, lambda *a: (print("got USR1", flush=True), exit(5)))
print("READY", flush=True)
time.sleep(60)
`
	type send struct {
		sig   syscall.Signal
		after time.Duration
	}
	tests := []struct {
		name     string
		flags    []string
		sends    []send
		exit     int
		status   string
		maxWall  time.Duration // from the first signal
		minWall  time.Duration
		errorHas string
	}{
		{"term_then_grace", []string{"--stop-grace", "1s"}, []send{{syscall.SIGTERM, 0}}, 137, "signaled", 4 * time.Second, time.Second, "1s after SIGTERM"},
		{"term_twice", nil, []send{{syscall.SIGTERM, 0}, {syscall.SIGTERM, 200 * time.Millisecond}}, 137, "signaled", 3 * time.Second, 0, "SIGTERM came after SIGTERM"},
		{"int_after_term", []string{"--stop-grace", "20s"}, []send{{syscall.SIGTERM, 0}, {syscall.SIGINT, 200 * time.Millisecond}}, 137, "signaled", 3 * time.Second, 0, "SIGINT came after SIGTERM"},
		// A REPL that a runner interrupts cell after cell must survive it.
		{"ints_never_kill", []string{"--timeout", "4s"}, []send{{syscall.SIGINT, 0}, {syscall.SIGINT, 100 * time.Millisecond}, {syscall.SIGINT, 100 * time.Millisecond}, {syscall.SIGINT, 100 * time.Millisecond}}, 124, "timeout", 6 * time.Second, 2 * time.Second, ""},
		{"usr1_passed_on", nil, []send{{syscall.SIGUSR1, 0}}, 5, "exit_nonzero", 3 * time.Second, 0, ""},
		{"quit_passed_on", nil, []send{{syscall.SIGQUIT, 0}}, 131, "signaled", 3 * time.Second, 0, ""},
	}
	for _, tt := range tests {
		for _, m := range bothModes {
			t.Run(tt.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				marker := randomToken("escalate")
				args := append([]string{"--timeout", "30s"}, tt.flags...)
				p := startJail(t, m, runOpts{}, append(args, python(ignoring, marker)...)...)
				if !p.stdout.waitFor("READY", 10*time.Second) {
					_ = p.cmd.Process.Kill()
					p.wait()
					t.Fatalf("the payload never printed READY: exit %d stderr %q", p.exit, p.stderr.String())
				}
				payload, _ := findPayload(marker, p.cmd.Process.Pid, 5*time.Second)
				first := time.Now()
				for _, s := range tt.sends {
					time.Sleep(s.after)
					if err := p.cmd.Process.Signal(s.sig); err != nil {
						t.Fatal(err)
					}
				}
				p.wait()
				took := time.Since(first)
				if p.exit != tt.exit {
					t.Errorf("exit %d (signal %v), want %d; stderr %q", p.exit, p.signaled, tt.exit, p.stderr.String())
				}
				if took > tt.maxWall || took < tt.minWall {
					t.Errorf("rljail ended %v after the first signal, want between %v and %v", took, tt.minWall, tt.maxWall)
				}
				if strings.Contains(p.stderr.String(), "goroutine ") {
					t.Errorf("rljail printed a Go stack dump: %q", p.stderr.String())
				}
				if alive, _ := leftovers(marker, payload.pidNS, []proc{payload}); len(alive) > 0 {
					t.Errorf("processes of the jail outlived rljail:%s", procList(alive))
				}
				res, err := p.result()
				if err != nil {
					t.Fatal(err)
				}
				checkResult(t, tt.name, res, tt.status, tt.exit)
				if e, _ := res["error"].(string); !strings.Contains(e, tt.errorHas) {
					t.Errorf("the report's error %q does not say %q", e, tt.errorHas)
				}
			})
		}
	}
}
