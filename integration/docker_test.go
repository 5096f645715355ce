package integration

// rljail in docker's place (issue 24): the sandbox rule's own command
// lines, verbatim but for the program found under the name docker (a link
// to the binary, first on PATH), run in rljail, and the rule's "how to
// check" holds from outside. The rule is APS-91 of the Agent Wranglers
// application security playbook (CC BY 4.0):
// https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rule's shell example and Python example, as the rule prints them.
const (
	dockerShellExample = `docker run --rm --network none --read-only --memory 256m --cpus 0.5 --pids-limit 64 \
--user 65534 --cap-drop ALL --security-opt no-new-privileges \
-v "$PWD/task:/task:ro" sandbox-image timeout 10 python /task/main.py`

	// The runner around the Python example reads model_code from a file
	// and exits with the run's status.
	dockerPythonExample = `import subprocess, sys
model_code = open(sys.argv[1]).read()
r = subprocess.run(["docker", "run", "--rm", "--network", "none", "sandbox-image",
"timeout", "10", "python", "-c", model_code], timeout=15, check=False)
sys.exit(r.returncode)
`
	// recipeLimit is the recipes' `timeout 10`.
	recipeLimit = 10 * time.Second
	// recipeSlack is how much later than its limit a recipe may end: the
	// jail's start, Python's, and a loaded machine.
	recipeSlack = 2 * time.Second
)

// dockerLink makes a directory holding a link named docker to the test's
// rljail binary, and returns it.
func dockerLink(t *testing.T) string {
	t.Helper()
	dir := newDir(t)
	if err := os.Symlink(testBin, filepath.Join(dir, "docker")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dockerEnv is a runner's environment: the mode's own, with PATH leading
// first to link (dockerLink), the rootfs under test as rljail's default
// one, and extra entries.
func dockerEnv(link string, m mode, extra ...string) []string {
	env := []string{"PATH=" + link + ":" + hostPath, "RLJAIL_ROOTFS=" + rootfsDir}
	for _, e := range modeEnv(m) {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(env, extra...)
}

// needCommands fails the test when the rootfs under test lacks the
// recipes' timeout (a rootfs built before the common commands).
func needCommands(t *testing.T) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(rootfsDir, "usr/bin/timeout")); err != nil {
		t.Fatalf("the rootfs %s has no timeout (built without the common commands): `make rootfs` rebuilds it", rootfsDir)
	}
}

// hostRun is one runner process on the host and what it left.
type hostRun struct {
	stdout, stderr string
	exit           int
	wall           time.Duration
	tracked        []proc // every process seen below it during the run
}

// runHost runs cmd as m, samples the processes below it until it ends,
// and bounds it by limit.
func runHost(t *testing.T, m mode, cmd *exec.Cmd, limit time.Duration) hostRun {
	t.Helper()
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	runAsMode(cmd, m)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer killer.Stop()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	var r hostRun
sample:
	for {
		r.tracked = append(r.tracked, descendants(cmd.Process.Pid)...)
		select {
		case <-done:
			break sample
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.wall = time.Since(start)
	r.exit = cmd.ProcessState.ExitCode()
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

// TestDockerRecipes runs the rule's shell example and Python example with
// rljail as docker, as root and rootless, and checks the rule's "how to
// check" from outside: no secret of the runner's environment or of the
// host's files in the output, no connection to a listener the test runs
// on loopback, and the endless loop ended at the recipes' time limit by
// the wall clock, with no process left. The four runs go at once (each
// waits ten seconds), whatever -parallel says: the subtests are started
// from goroutines of their own.
func TestDockerRecipes(t *testing.T) {
	needCommands(t)
	var wg sync.WaitGroup
	for _, recipe := range []string{"shell", "python"} {
		for _, m := range bothModes {
			wg.Go(func() {
				t.Run(recipe+"/"+string(m), func(t *testing.T) { dockerRecipe(t, m, recipe) })
			})
		}
	}
	wg.Wait()
}

func dockerRecipe(t *testing.T, m mode, recipe string) {
	h := newAPS91Host(t)
	defer h.stop()
	envSecret, rootSecret, tmpSecret := h.envSecret, h.rootSecret, h.tmpSecret
	rootFile, tmpFile, port, accepted := h.rootFile, h.tmpFile, h.port, &h.accepted
	marker := randomToken("dockermarker")

	// The acceptance check's payload, with its arguments written in: the
	// recipes pass none.
	code := strings.Replace(acceptanceCode, "int(sys.argv[1]), sys.argv[2], sys.argv[3]",
		strconv.Itoa(port)+", "+strconv.Quote(rootFile)+", "+strconv.Quote(tmpFile), 1) + "# " + marker + "\n"
	dir := newDir(t)
	var cmd *exec.Cmd
	switch recipe {
	case "shell":
		if err := os.Mkdir(filepath.Join(dir, "task"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "task", "main.py"), code, 0o644)
		cmd = exec.Command("/bin/sh", "-c", dockerShellExample)
	case "python":
		writeFile(t, filepath.Join(dir, "runner.py"), dockerPythonExample, 0o644)
		writeFile(t, filepath.Join(dir, "model_code.py"), code, 0o644)
		cmd = exec.Command("/usr/bin/python3", "runner.py", "model_code.py")
	}
	cmd.Dir = dir
	cmd.Env = dockerEnv(dockerLink(t), m, "AWS_SECRET_ACCESS_KEY="+envSecret, "PWD="+dir)
	r := runHost(t, m, cmd, 30*time.Second)
	h.stop()
	t.Logf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.exit, r.wall, r.stdout, r.stderr)

	out := r.stdout + r.stderr
	for name, secret := range map[string]string{"the runner's AWS_SECRET_ACCESS_KEY": envSecret, rootFile: rootSecret, tmpFile: tmpSecret} {
		if strings.Contains(out, secret) {
			t.Errorf("the secret of %s appears in the output", name)
		}
	}
	if !strings.Contains(r.stdout, "ENV-END") || !strings.Contains(r.stdout, "LOOPING") {
		t.Errorf("the payload did not run to its endless loop (no ENV-END or LOOPING)")
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the listener on 127.0.0.1:%d accepted %d connection(s), want 0", port, n)
	}
	if r.exit != 124 {
		t.Errorf("exit %d, want 124: the recipe's timeout ended the loop", r.exit)
	}
	if r.wall < recipeLimit || r.wall > recipeLimit+recipeSlack {
		t.Errorf("the run took %v, want the loop ended at the recipe's limit %v (at most %v later)", r.wall, recipeLimit, recipeSlack)
	}
	if alive, _ := leftovers(marker, "", r.tracked); len(alive) > 0 {
		t.Errorf("processes of the run are still alive:%s", procList(alive))
	}
}

// dockerRun runs `docker ARGS` (through a link named docker) in dir as m
// and returns what it printed and its status.
func dockerRun(t *testing.T, m mode, dir, stdin string, args ...string) hostRun {
	t.Helper()
	link := dockerLink(t)
	cmd := exec.Command(filepath.Join(link, "docker"), args...)
	cmd.Dir, cmd.Env = dir, dockerEnv(link, m)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return runHost(t, m, cmd, 30*time.Second)
}

// TestDockerFlags: the same flags in several orders and spellings give the
// same jail (read from rljail's report and from files on the host),
// stdin passes with -i only, and the exit statuses are docker's.
func TestDockerFlags(t *testing.T) {
	needCommands(t)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			dir := newOpenDir(t)
			in := filepath.Join(dir, "in")
			out := filepath.Join(dir, "out")
			for _, d := range []string{in, out} {
				if err := os.Mkdir(d, 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			token := randomToken("volume")
			writeFile(t, filepath.Join(in, "data"), token, 0o644)
			script := `import sys; d = open("/in/data").read(); open("/out/" + sys.argv[1], "w").write(d); print("read", d)`
			for i, flags := range [][]string{
				{"--rm", "--memory", "256m", "--pids-limit", "32", "-v", in + ":/in:ro", "-v", out + ":/out"},
				{"--memory=256m", "--pids-limit=32", "--volume=" + in + ":/in:ro", "--volume", out + ":/out:rw", "--rm"},
				{"-m256m", "--mount", "type=bind,source=" + in + ",target=/in,readonly", "--mount=type=bind,src=" + out + ",dst=/out", "--pids-limit", "32"},
				{"-m", "256m", "--user", "65534:65534", "--cap-drop=ALL", "--security-opt=no-new-privileges:true", "-v", out + ":/out", "-v", in + ":/in:ro", "--pids-limit", "32", "--network=none", "--read-only"},
			} {
				report := filepath.Join(newOpenDir(t), "report.json")
				name := "run" + strconv.Itoa(i)
				args := append(append([]string{"run", "--rljail-result", report}, flags...), "python:3.11-slim", "python3", "-c", script, name)
				r := dockerRun(t, m, dir, "", args...)
				if r.exit != 0 || !strings.Contains(r.stdout, "read "+token) {
					t.Errorf("docker %q: exit %d, stdout %q, stderr %q", args, r.exit, r.stdout, r.stderr)
					continue
				}
				if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(got) != token {
					t.Errorf("docker %q: the writable volume holds %q, %v; want the token", args, got, err)
				}
				var res struct {
					Limits struct {
						Memory struct{ Value float64 } `json:"memory_bytes"`
						Pids   struct{ Value float64 } `json:"pids"`
					}
				}
				if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &res) != nil {
					t.Errorf("docker %q: no report: %v", args, err)
				} else if res.Limits.Memory.Value != 256<<20 || res.Limits.Pids.Value != 32 {
					t.Errorf("docker %q: limits %+v, want memory 256 MiB and 32 pids", args, res.Limits)
				}
			}
			// A writable grant is where docker puts it: ro only when asked.
			if r := dockerRun(t, m, dir, "", "run", "-v", in+":/in:ro", "sandbox-image", "sh", "-c", "echo x > /in/w"); r.exit == 0 {
				t.Errorf("a :ro volume was written (exit 0)")
			}
			if _, err := os.Stat(filepath.Join(in, "w")); err == nil {
				t.Errorf("a :ro volume was written on the host")
			}

			// stdin: docker without -i gives the payload none.
			r := dockerRun(t, m, dir, "fed-"+token, "run", "-i", "sandbox-image", "cat")
			if r.stdout != "fed-"+token {
				t.Errorf("-i: stdout %q, want the stdin fed", r.stdout)
			}
			r = dockerRun(t, m, dir, "fed-"+token, "run", "sandbox-image", "cat")
			if r.exit != 0 || r.stdout != "" {
				t.Errorf("without -i: exit %d, stdout %q, want 0 and nothing", r.exit, r.stdout)
			}

			// Exit statuses as docker gives them.
			for _, tc := range []struct {
				args []string
				exit int
				max  time.Duration
			}{
				{[]string{"run", "sandbox-image", "sh", "-c", "exit 3"}, 3, 0},
				{[]string{"run", "sandbox-image", "/no/such/program"}, 127, 0},
				{[]string{"run", "sandbox-image", "/etc/hostname"}, 126, 0},
				{[]string{"run", "sandbox-image", "sh", "-c", "kill -USR1 $$"}, 128 + 10, 0},
				{[]string{"run", "sandbox-image", "timeout", "0.5", "sleep", "5"}, 124, 3 * time.Second},
				// rljail's own timer is a kill, as docker kill's: 137.
				{[]string{"run", "--rljail-timeout", "1s", "sandbox-image", "sleep", "5"}, 137, 3 * time.Second},
				{[]string{"run", "--rm", "sandbox-image"}, 125, 0},
			} {
				r := dockerRun(t, m, dir, "", tc.args...)
				if r.exit != tc.exit || (tc.max > 0 && r.wall > tc.max) {
					t.Errorf("docker %q: exit %d after %v, want %d (within %v); stderr %q", tc.args, r.exit, r.wall, tc.exit, tc.max, r.stderr)
				}
			}
			if m == asRoot { // rootless on cgroup v1, memory is RLIMIT_AS: a MemoryError
				r := dockerRun(t, m, dir, "", "run", "-m", "64m", "sandbox-image", "python3", "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])")
				if r.exit != 137 {
					t.Errorf("over --memory: exit %d, want 137; stderr %q", r.exit, r.stderr)
				}
			}
		})
	}
}

// TestDockerRefused: every flag that would weaken the jail or that rljail
// cannot honour is refused with its one line and exit 125, and nothing
// runs (the command would write a file in a writable volume); so is an
// image without a mapping, with its hint, and any subcommand but run.
func TestDockerRefused(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) { dockerRefused(t, m) })
	}
}

func dockerRefused(t *testing.T, m mode) {
	dir := newOpenDir(t)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(out, 0o777)
	for _, tc := range []struct {
		flags []string
		image string
		want  string
	}{
		{[]string{"--privileged"}, "", "--privileged is not supported: "},
		{[]string{"--cap-add", "SYS_ADMIN"}, "", "--cap-add is not supported: "},
		{[]string{"--network", "host"}, "", "--network host is not supported: "},
		{[]string{"--network", "bridge"}, "", "--network bridge is not supported: "},
		{[]string{"--pid=host"}, "", "--pid host is not supported: "},
		{[]string{"--ipc", "host"}, "", "--ipc host is not supported: "},
		{[]string{"--uts", "host"}, "", "--uts host is not supported: "},
		{[]string{"--userns=host"}, "", "--userns host is not supported: "},
		{[]string{"--security-opt", "seccomp=unconfined"}, "", "--security-opt seccomp=unconfined is not supported: "},
		{[]string{"--security-opt", "apparmor=unconfined"}, "", "--security-opt apparmor=unconfined is not supported: "},
		{[]string{"--security-opt", "systempaths=unconfined"}, "", "--security-opt systempaths=unconfined is not supported: "},
		{[]string{"-p", "8080:80"}, "", "-p is not supported: "},
		{[]string{"--device", "/dev/kvm"}, "", "--device is not supported: "},
		{[]string{"--gpus", "all"}, "", "--gpus is not supported: "},
		{[]string{"-d"}, "", "-d is not supported: rljail runs a jail in the foreground only; a persistent jail is `rljail session`"},
		{[]string{"-it"}, "", "-t is not supported: "},
		{[]string{"--user", "0"}, "", "--user 0 is not supported: "},
		{[]string{"--memory", "256m", "--memory-swap", "-1"}, "", "--memory-swap -1 is not supported: "},
		{[]string{"--pids-limit", "-1"}, "", "--pids-limit -1 is not supported: "},
		{[]string{"--oom-kill-disable"}, "", "--oom-kill-disable is not supported: "},
		{[]string{"--sysctl", "kernel.x=1"}, "", "--sysctl is not supported: "},
		{[]string{"--bogus-flag"}, "", "unknown flag: --bogus-flag"},
		{nil, "node:20", "image node:20 is not mapped to a root filesystem: rljail runs no images, only its own root filesystems; map it in "},
		{nil, "python:2.7", "image python:2.7 is not mapped: rljail's Python root filesystem is CPython 3."},
	} {
		image := tc.image
		if image == "" {
			image = "sandbox-image"
		}
		args := append(append(append([]string{"run", "-v", out + ":/out"}, tc.flags...), image), "sh", "-c", "echo ran > /out/ran")
		r := dockerRun(t, m, dir, "", args...)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.exit != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail docker: "+tc.want) || r.stdout != "" {
			t.Errorf("docker %q: exit %d, stdout %q, stderr %q; want 125 and one line starting %q", args, r.exit, r.stdout, r.stderr, "rljail docker: "+tc.want)
		}
		if _, err := os.Stat(filepath.Join(out, "ran")); err == nil {
			t.Fatalf("docker %q: the command ran", args)
		}
	}
	// Other subcommands, through the link and as `rljail docker`.
	for _, args := range [][]string{{"ps"}, {"pull", "python:3.11"}, {"images"}} {
		r := dockerRun(t, m, dir, "", args...)
		if r.exit != 125 || !strings.HasPrefix(r.stderr, "rljail docker: `docker "+args[0]+"` is not supported: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("docker %q: exit %d, stderr %q", args, r.exit, r.stderr)
		}
		var stderr bytes.Buffer
		cmd := exec.Command(testBin, append([]string{"docker"}, args...)...)
		cmd.Stderr = &stderr
		runAsMode(cmd, m)
		if err := cmd.Run(); cmd.ProcessState.ExitCode() != 125 || !strings.HasPrefix(stderr.String(), "rljail docker: ") {
			t.Errorf("rljail docker %q: %v, stderr %q", args, err, stderr.String())
		}
	}
	if r := dockerRun(t, m, dir, "", "version"); r.exit != 0 || !strings.Contains(r.stdout, "standing in for `docker run` only") {
		t.Errorf("docker version: exit %d, stdout %q", r.exit, r.stdout)
	}
}
