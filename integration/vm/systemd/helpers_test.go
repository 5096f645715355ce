//go:build rljailsystemd

package systemd

// Helpers of the systemd VM's cases. To add a case, write a Test function
// in a file of this package with the build tag rljailsystemd; it runs as
// root in rljail-vm-tests.service on the next `make test-systemd-vm`:
//
//	func TestMyCase(t *testing.T) {
//		r := rljail(t, nil, "--memory", "64m", "--", "python3", "-c", "print(1)")
//		r.wantStatus(t, "ok")
//		if !asLoginUser(t, func(t *testing.T) {
//			// runs as rljailtest in a logind session (session-N.scope)
//			r := rljail(t, nil, "--", "python3", "-c", "print(1)")
//			r.wantPlacement(t, "none")
//		}) {
//			return // the user's process ends here
//		}
//		noLeftovers(t, "") // root again
//	}
//
// Decide from outside the jail: the report and exit status rljail (the
// supervisor) writes, the cgroup tree and /proc as this process sees them;
// never what the payload prints about itself alone.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	testUser = "rljailtest"
	testUID  = 1001
	cgroupFS = "/sys/fs/cgroup"
	// loginChildEnv names, in a process asLoginUser started, the test it
	// runs as the user.
	loginChildEnv = "RLJAIL_VM_LOGIN_CHILD"
)

// TestMain refuses to run anywhere but in the systemd VM: the cases
// install packages and start units as root.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == labelProbeName {
		labelProbe() // started by rljail rootfs build as its Python: apparmor_test.go
	}
	if os.Getenv("RLJAIL_IN_SYSTEMD_VM") != "1" {
		fmt.Fprintln(os.Stderr, "these tests run only in the systemd VM (integration/vm TestSystemdVM, make test-systemd-vm)")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// rljailBin is the static rljail under test (not the packaged one).
func rljailBin() string { return os.Getenv("RLJAIL_BIN") }

// runResult is one finished rljail run.
type runResult struct {
	args           []string
	code           int
	stdout, stderr string
	wall           time.Duration
	report         map[string]any // the --result report; nil when none
}

func (r runResult) String() string {
	return fmt.Sprintf("rljail %s: exit %d\nstdout: %q\nstderr: %q\nreport: %v",
		strings.Join(r.args, " "), r.code, trim(r.stdout), trim(r.stderr), r.report)
}

func trim(s string) string {
	if len(s) > 2000 {
		return s[:1000] + " ... " + s[len(s)-1000:]
	}
	return s
}

// rljail runs `prefix... RLJAIL_BIN run --result FILE args...` (prefix: a
// wrapper such as systemd-run, or nil) and returns what it did. args hold
// rljail's flags, "--" and the command; --no-workspace is added (the VM's
// kernel cannot idmap tmpfs, and every directory here is one).
func rljail(t *testing.T, prefix []string, args ...string) runResult {
	t.Helper()
	report := filepath.Join(t.TempDir(), "result.json")
	argv := append(append([]string{}, prefix...), rljailBin(), "run", "--no-workspace", "--result", report)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := runResult{args: argv, stdout: stdout.String(), stderr: stderr.String(), wall: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	if b, err := os.ReadFile(report); err == nil {
		if err := json.Unmarshal(b, &r.report); err != nil {
			t.Fatalf("%s: the report %s is not JSON: %v\n%s", strings.Join(argv, " "), report, err, b)
		}
	}
	return r
}

// field reads a dotted path ("limits.pids.mechanism") of the report.
func (r runResult) field(path string) any {
	var v any = r.report
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (r runResult) str(path string) string { s, _ := r.field(path).(string); return s }

func (r runResult) num(path string) float64 { f, _ := r.field(path).(float64); return f }

// wantStatus fails unless the run wrote a report with this status.
func (r runResult) wantStatus(t *testing.T, status string) {
	t.Helper()
	if r.report == nil {
		t.Fatalf("no report:\n%s", r)
	}
	if got := r.str("status"); got != status {
		t.Errorf("status %q, want %q:\n%s", got, status, r)
	}
}

// wantPlacement fails unless the jail's cgroup placement is p.
func (r runResult) wantPlacement(t *testing.T, p string) {
	t.Helper()
	if got := r.str("limits.cgroup_placement"); got != p {
		t.Errorf("cgroup_placement %q, want %q:\n%s", got, p, r)
	}
}

// wantMechanism fails unless the limit (memory_bytes, pids, cpus) was held
// by mech (cgroup, rlimit, none ...).
func (r runResult) wantMechanism(t *testing.T, limit, mech string) {
	t.Helper()
	if got := r.str("limits." + limit + ".mechanism"); got != mech {
		t.Errorf("limits.%s.mechanism %q, want %q:\n%s", limit, got, mech, r)
	}
}

// run runs a command and returns its combined output; it fails the test
// when the command fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// output runs a command and returns its output and error, without failing.
func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ownCgroup is this process's cgroup v2 path ("/system.slice/x.service").
func ownCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("/proc/self/cgroup has no cgroup v2 line: %q", b)
	return ""
}

// asLoginUser runs body as rljailtest in a real login session: the test
// binary again, through `runuser -l` (PAM: pam_systemd registers a logind
// session, session-N.scope, and starts user@1001.service), with
// -test.run naming this test only. It checks the session before body runs.
// In the parent (root) it returns true once the user's run passed (it fails
// the test otherwise, with that run's output); in the user's process it
// runs body and returns false: the test must then return at once, so that
// what follows the call runs as root only.
func asLoginUser(t *testing.T, body func(t *testing.T)) bool {
	t.Helper()
	if os.Getenv(loginChildEnv) == t.Name() {
		if os.Getuid() != testUID {
			t.Fatalf("the login child runs as uid %d, want %d", os.Getuid(), testUID)
		}
		checkLoginSession(t)
		body(t)
		return false
	}
	if os.Getuid() != 0 {
		t.Fatalf("asLoginUser from uid %d: call it from a test that runs as root", os.Getuid())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	env := []string{loginChildEnv + "=" + t.Name()}
	for _, k := range []string{"RLJAIL_IN_VM", "RLJAIL_IN_SYSTEMD_VM", "RLJAIL_BIN", "RLJAIL_ROOTFS", "RLJAIL_VM_DEBS", "RLJAIL_VM_SRC"} {
		env = append(env, k+"="+os.Getenv(k))
	}
	timeout := 5 * time.Minute
	if dl, ok := t.Deadline(); ok {
		timeout = time.Until(dl) - 10*time.Second
	}
	script := "exec env " + shellJoin(env) + " " + shellJoin([]string{exe, "-test.v",
		"-test.run=" + strings.Join(pattern, "/"), "-test.timeout=" + timeout.Round(time.Second).String()})
	cmd := exec.Command("runuser", "-l", testUser, "-c", script)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		t.Log("  " + testUser + "| " + l)
	}
	if err != nil {
		t.Fatalf("the run as %s in a login session failed: %v", testUser, err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("the run as %s did not pass %s (no --- PASS line)", testUser, t.Name())
	}
	return true
}

// checkLoginSession fails unless this process runs in a logind session of
// rljailtest's (session-N.scope below user-1001.slice) and the user's
// systemd manager (user@1001.service) is running.
func checkLoginSession(t *testing.T) {
	t.Helper()
	cg := ownCgroup(t)
	if !regexp.MustCompile(`^/user\.slice/user-1001\.slice/session-[a-z]*[0-9]+\.scope$`).MatchString(cg) {
		t.Fatalf("the login child's cgroup is %s, want /user.slice/user-1001.slice/session-N.scope", cg)
	}
	sessions, err := output("loginctl", "list-sessions", "--no-legend")
	if err != nil || !strings.Contains(sessions, testUser) {
		t.Fatalf("loginctl list-sessions has no session of %s: %v %q", testUser, err, sessions)
	}
	if st, _ := output("systemctl", "is-active", "user@1001.service"); st != "active" {
		t.Fatalf("user@1001.service is %q, want active", st)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "/run/user/1001" {
		t.Fatalf("XDG_RUNTIME_DIR=%q, want /run/user/1001 (pam_systemd sets it)", d)
	}
}

// shellJoin quotes words for sh -c.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// jailCgroupRE matches the cgroups rljail makes for jails: the cgroupfs
// driver: rljail-<run id> (16 hex digits) or rljail-<pid>-<n>; a systemd driver: rljail-*.scope.
var jailCgroupRE = regexp.MustCompile(`^rljail-([0-9a-f]{16}|[0-9]+-[0-9]+|.*\.scope)$`)

// jailCgroups lists every jail cgroup in the whole tree.
func jailCgroups() []string {
	var found []string
	filepath.WalkDir(cgroupFS, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if jailCgroupRE.MatchString(d.Name()) {
			found = append(found, strings.TrimPrefix(p, cgroupFS))
		}
		return nil
	})
	return found
}

// procsWith lists the processes whose command line holds marker, and
// those running an rljail binary, other than this test process.
func procsWith(marker string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if (marker != "" && strings.Contains(line, marker)) || strings.HasPrefix(filepath.Base(exe), "rljail") {
			found = append(found, e.Name()+": "+line)
		}
	}
	return found
}

// noLeftovers fails when, as seen from this (root) process, any jail
// cgroup, rljail process or process with marker in its command line is
// left. It gives exits a few seconds.
func noLeftovers(t *testing.T, marker string) {
	t.Helper()
	var cgs, procs []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		cgs, procs = jailCgroups(), procsWith(marker)
		if len(cgs)+len(procs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range cgs {
		t.Errorf("jail cgroup left: %s", c)
	}
	for _, p := range procs {
		t.Errorf("process left: %s", p)
	}
}

// jailTaskPeak samples, until stop is closed, the tasks (threads
// included) of processes whose command line holds marker in a PID namespace
// other than this process's, and sends the most seen at once on the
// returned channel.
func jailTaskPeak(marker string, stop <-chan struct{}) <-chan int {
	done := make(chan int, 1)
	own, _ := os.Readlink("/proc/self/ns/pid")
	go func() {
		peak := 0
		for {
			n := 0
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				if _, err := strconv.Atoi(e.Name()); err != nil {
					continue
				}
				ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid")
				if err != nil || ns == own {
					continue
				}
				cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				if !bytes.Contains(cmdline, []byte(marker)) {
					continue
				}
				tasks, _ := os.ReadDir("/proc/" + e.Name() + "/task")
				n += len(tasks)
			}
			peak = max(peak, n)
			select {
			case <-stop:
				done <- peak
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return done
}

// marker is a word unique to this test for a payload's command line.
func marker(t *testing.T) string {
	return fmt.Sprintf("rljail-vm-mark-%d-%s", os.Getpid(), regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
}
