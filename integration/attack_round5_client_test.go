package integration

// Red-team round 5: the Python client (clients/python) as a runner uses it.
// rljail passes on what a cell makes as deep as Go's decoder takes it (a
// call's arguments, a get's value: the worker's claim), and the client's
// reader thread decodes it with json.loads, whose recursion limit is 1000.
// Every case decides from the host: the runner's own clock and what its
// next request got back.

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "client_deep_reply_stalls_session", group: groupDoS,
			mechanism: "a cell raises its recursion limit and sends a value nested 3000 deep to the host: as a tool call's argument, and as a variable the runner gets; the client's reader thread dies in json.loads (RecursionError), and every later request of the runner waits out its deadline (61 s by default) to fail as SessionLost no_reply",
			layer:     "the client's reader catches whatever a line does: an undecodable reply fails its own request (UndecodableReply, matched by an id read without recursion), an undecodable call is answered with an error (CallFailed in the cell), a line that names neither loses the session at once",
			run:       attackClientDeepReply},
	}...)
}

// clientDeepReplyProgram is the runner: it makes one session, starts the
// attack (argv[1]: call or get), and then asks for one more cell, printing
// a line before each step for the test to time.
const clientDeepReplyProgram = `
import sys
import rljail

DEEP = ("import sys\nsys.setrecursionlimit(100000)\ndeep = 1\n"
        "for _ in range(3000):\n    deep = [deep]\n")
s = rljail.Session(tools={"echo": lambda value: "echoed"})
print("START", flush=True)
try:
    if sys.argv[1] == "call":
        r = s.run(DEEP + "try:\n    echo(deep)\nexcept Exception as e:\n    print(type(e).__name__)")
        first = r.stdout.strip() or str(r.error)
    else:
        s.run(DEEP)
        s.get("deep")
        first = "decoded"
except Exception as e:
    first = "%s: %s" % (type(e).__name__, e)
print("FIRST", first, flush=True)
try:
    print("NEXT", s.run("print(6 * 7)").stdout.strip(), flush=True)
except Exception as e:
    print("NEXT %s: %s" % (type(e).__name__, e), flush=True)
s.close()
`

func attackClientDeepReply(t *testing.T, m mode) {
	dir := newDir(t) // 0755: the rootless user reads the package and the program
	src := filepath.Join("..", "clients", "python", "rljail")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, "rljail", rel)
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			return os.Chmod(dst, 0o755)
		}
		if !strings.HasSuffix(p, ".py") {
			return nil
		}
		return copyFile(p, dst, 0o644)
	})
	if err != nil {
		t.Fatalf("copy the Python client: %v", err)
	}
	writeFile(t, filepath.Join(dir, "runner.py"), clientDeepReplyProgram, 0o644)

	var wg sync.WaitGroup
	for _, vector := range []string{"call", "get"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clientDeepReplyVector(t, m, dir, vector)
		}()
	}
	wg.Wait()
}

// clientDeepReplyVector runs the runner for one vector and judges it by the
// host's clock: from START to the answer of the next request.
func clientDeepReplyVector(t *testing.T, m mode, dir, vector string) {
	tmp := newOpenDir(t)
	// -B: no __pycache__ in the copy; Debian's python3, as the client's tests use.
	cmd := exec.Command("/usr/bin/python3", "-B", filepath.Join(dir, "runner.py"), vector)
	cmd.Dir = tmp
	cmd.Env = append(modeEnv(m), "RLJAIL_BIN="+testBin, "RLJAIL_ROOTFS="+rootfsDir, "TMPDIR="+tmp, "PYTHONPATH="+dir)
	runAsMode(cmd, m)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Errorf("%s: %v", vector, err)
		return
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Errorf("%s: start the runner: %v", vector, err)
		return
	}
	// Past the client's 61 s deadline, so that the old client's failure shows
	// as what it is (SessionLost no_reply) rather than as a kill.
	timer := time.AfterFunc(90*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var start, next time.Time
	var lines []string
	answer := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		switch {
		case line == "START":
			start = time.Now()
		case strings.HasPrefix(line, "NEXT "):
			next = time.Now()
			answer = strings.TrimPrefix(line, "NEXT ")
		}
	}
	waitErr := cmd.Wait()
	if start.IsZero() || next.IsZero() {
		t.Errorf("%s: the runner did not get that far (%v): stdout %q\nstderr: %s", vector, waitErr, lines, attackClip(stderr.String()))
		return
	}
	took := next.Sub(start)
	t.Logf("%s: the next request answered %q %v after the attack began; runner said %q", vector, answer, took.Round(time.Millisecond), lines)
	if answer != "42" {
		t.Errorf("%s: after the deep value the runner's next request got %q, not its cell's 42 (%v after the attack began)\nstderr: %s", vector, answer, took.Round(time.Millisecond), attackClip(stderr.String()))
	}
	if took > 10*time.Second {
		t.Errorf("%s: the next request was answered %v after the attack began, past 10 s: the client waited out its deadline", vector, took.Round(time.Millisecond))
	}
	if waitErr != nil {
		t.Errorf("%s: the runner ended with %v\nstderr: %s", vector, waitErr, attackClip(stderr.String()))
	}
}
