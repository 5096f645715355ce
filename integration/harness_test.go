// Package integration holds the black-box tests of rljail: they run the
// static binary as a user would, as root and as an unprivileged user, attack
// the jail from inside and judge the outcome from outside wherever they can
// (a listener that sees no connection, a secret that never appears, a wall
// clock, a scan of the host's process table).
//
// Environment:
//
//	RLJAIL_BIN     the binary under test (default: `make -C <repo> build`, bin/rljail)
//	RLJAIL_ROOTFS  the Python rootfs (required; `make rootfs` builds it)
//
// The tests must run as root: they create the unprivileged user rljailtest
// for the rootless runs.
//
// Built with the tag rljailvm, the package's limit and placement tests
// (TestLimits*, TestPlacement*) run in the cgroup v2 test VM
// (integration/vm): there RLJAIL_IN_VM=1 and the VM's init has made
// rljailtest (uid 1001) already.
package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mode says who runs rljail.
type mode string

const (
	asRoot     mode = "root"
	asRootless mode = "rootless"
)

// bothModes is the list of modes for the tests that make sense both ways.
var bothModes = []mode{asRoot, asRootless}

const (
	testUserName = "rljailtest"
	// hostPath is the PATH of rljail's own environment.
	hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// fallbackWarning starts the one stderr line that names every limit
	// weaker than asked (rootless on a cgroup v1 host): the limit, attack
	// and fault tests each tell it apart from rljail's error lines.
	fallbackWarning = "rljail: warning: limits weaker than asked"
)

var (
	// testBin is a private copy of $RLJAIL_BIN in a 0755 directory: the
	// rootless user can reach it, and a concurrent `make build` cannot
	// replace the binary under a running test.
	testBin   string
	rootfsDir string
	// baseDir (0755) holds every directory the tests create.
	baseDir string

	testUID, testGID int
	testHome         string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "integration: "+format+"\n", a...)
		return 1
	}
	if os.Geteuid() != 0 {
		return fail("these tests must run as root: they run rljail as root and as the unprivileged user %s, whom they create", testUserName)
	}
	rootfsDir = os.Getenv("RLJAIL_ROOTFS")
	if rootfsDir == "" {
		return fail("RLJAIL_ROOTFS is not set: point it at the Python rootfs (`make rootfs` builds /var/lib/rljail/rootfs/python as root), e.g. RLJAIL_ROOTFS=/var/lib/rljail/rootfs/python")
	}
	bin := os.Getenv("RLJAIL_BIN")
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return fail("RLJAIL_BIN is not set and the repository root is not found: %v", err)
		}
		out, err := exec.Command("make", "-C", root, "build").CombinedOutput()
		if err != nil {
			return fail("RLJAIL_BIN is not set and `make -C %s build` failed: %v\n%s", root, err, out)
		}
		bin = filepath.Join(root, "bin", "rljail")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return fail("RLJAIL_BIN: %v", err)
	}
	if out, err := exec.Command(bin, "rootfs", "info", "--rootfs", rootfsDir).CombinedOutput(); err != nil {
		return fail("`%s rootfs info --rootfs %s` failed (%v): the rootfs is missing or broken; build it with `make rootfs` or `rljail rootfs build --rootfs %s`\n%s",
			bin, rootfsDir, err, rootfsDir, out)
	}
	if err := ensureTestUser(); err != nil {
		return fail("%v", err)
	}
	baseDir, err = os.MkdirTemp("", "rljail-it-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(baseDir)
	if err := os.Chmod(baseDir, 0o755); err != nil {
		return fail("%v", err)
	}
	binDir := filepath.Join(baseDir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		return fail("%v", err)
	}
	testBin = filepath.Join(binDir, "rljail")
	if err := copyFile(bin, testBin, 0o755); err != nil {
		return fail("copy the binary: %v", err)
	}
	// A rootless run needs to read the rootfs; say so once, clearly, if it
	// cannot (the rootless tests then fail on their own).
	info := exec.Command(testBin, "rootfs", "info", "--rootfs", rootfsDir)
	info.Env = modeEnv(asRootless)
	info.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)}}
	if out, err := info.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: warning: `rljail rootfs info` as %s fails (%v): %s", testUserName, err, out)
	}
	moved, err := enterOwnCgroups()
	if moved != nil {
		defer moved.leave()
	}
	if err != nil {
		return fail("%v", err)
	}
	return m.Run()
}

// repoRoot finds the directory holding go.mod above the current one.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the current directory")
		}
		dir = parent
	}
}

// ensureTestUser creates the unprivileged test user once (idempotent). In
// the test VM (RLJAIL_IN_VM=1), which has no useradd, it uses the user the
// VM's init created (uid 1001).
func ensureTestUser() error {
	u, err := user.Lookup(testUserName)
	if err != nil && os.Getenv("RLJAIL_IN_VM") == "1" {
		return fmt.Errorf("the test VM has no user %s (integration/vm/init.sh creates it with uid 1001): %v", testUserName, err)
	}
	if err != nil {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", testUserName).CombinedOutput(); err != nil {
			// Another run may have created it meanwhile.
			if u2, err2 := user.Lookup(testUserName); err2 == nil {
				u = u2
			} else {
				return fmt.Errorf("useradd %s: %v: %s", testUserName, err, out)
			}
		} else if u, err = user.Lookup(testUserName); err != nil {
			return err
		}
	}
	testUID, _ = strconv.Atoi(u.Uid)
	testGID, _ = strconv.Atoi(u.Gid)
	testHome = u.HomeDir
	if testUID == 0 {
		return fmt.Errorf("user %s has uid 0", testUserName)
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// modeEnv is rljail's own environment for a mode: minimal and fixed, so
// that what reaches the jail is only what a test adds.
func modeEnv(m mode) []string {
	if m == asRootless {
		return []string{"PATH=" + hostPath, "HOME=" + testHome, "USER=" + testUserName, "LOGNAME=" + testUserName}
	}
	return []string{"PATH=" + hostPath, "HOME=/root", "USER=root", "LOGNAME=root"}
}

// runAsMode makes cmd run as the rootless test user in rootless mode.
func runAsMode(cmd *exec.Cmd, m mode) {
	if m == asRootless {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)}}
	}
}

// The host ids a jail's user maps to, the invoking user's own rootless
// and one of a reserved range as root, are checked by checkJailHostIDs
// (attack_round2_uid_test.go).

var nameClean = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// newDir makes a fresh 0755 directory under baseDir (the rootless user can
// read it), removed when the test ends.
func newDir(t testing.TB) string {
	t.Helper()
	name := nameClean.ReplaceAllString(t.Name(), "_")
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	dir, err := os.MkdirTemp(baseDir, name+"-")
	if err != nil {
		t.Fatalf("make a test directory: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newOpenDir is newDir with mode 0777: the jail's user (whatever host uid
// it maps to: as root one of the range, never the same twice at once) can
// write there.
func newOpenDir(t testing.TB) string {
	t.Helper()
	dir := newDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	return dir
}

func writeFile(t testing.TB, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatalf("chmod %s: %v", path, err)
	}
}

// plantHostFile writes content to a new file prefix<random>.txt in the
// host directory dir and returns its path; the file is removed when the
// test ends. It is world-readable (0644): only the jail, not the file's
// mode, may hide it, which is what the tests that plant secrets check.
func plantHostFile(t testing.TB, dir, prefix, content string) string {
	t.Helper()
	path := filepath.Join(dir, randomToken(prefix)+".txt")
	writeFile(t, path, content, 0o644)
	t.Cleanup(func() { os.Remove(path) })
	return path
}

// randomToken returns a fresh random string, for secrets and markers.
func randomToken(prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}

// runOpts are the options of one rljail invocation.
type runOpts struct {
	dir   string // working directory of rljail; default a fresh 0755 dir
	stdin string // fed to rljail's stdin (default: /dev/null)
	// stdinFile, when set, is rljail's stdin itself (a pipe the test
	// holds open, say), rather than a copy of stdin.
	stdinFile *os.File
	env       []string      // added to rljail's own environment
	noRootfs  bool          // do not pass --rootfs
	noResult  bool          // do not pass --result
	deadline  time.Duration // the harness kills rljail after this (default 60s)
	// moveInto, when set, is a cgroup directory (such as
	// /sys/fs/cgroup/x) that rljail starts in: a helper shell of the
	// mode's user is moved there by the harness (as root, as systemd moves
	// a service's process) and then execs rljail, which keeps its pid.
	moveInto string
	// hostsFile, when set, is a file (0644) that rljail itself reads as
	// /etc/hosts: rljail starts in a mount namespace of its own, made as
	// root by unshare, with the file bound over /etc/hosts there (the
	// host's own file is not touched), and as the mode's user through
	// setpriv. This is how a test makes an allowed name resolve on the
	// host, by rljail's own resolver, to an address it chooses (DNS
	// rebinding) without --resolve, which is the user's word for a name.
	hostsFile string
}

// jailProc is one running rljail.
type jailProc struct {
	cmd        *exec.Cmd
	stdout     *syncBuffer
	stderr     *syncBuffer
	resultPath string
	start      time.Time
	argv       []string
	killer     *time.Timer

	exit     int            // exit status, -1 when rljail died of a signal
	signaled syscall.Signal // the signal, when it died of one
	wall     time.Duration  // from just before start to the end of Wait
}

// launch starts rljail; it returns errors instead of failing the test, so
// that goroutines can use it.
func launch(m mode, o runOpts, resultDir string, args ...string) (*jailProc, error) {
	var full []string
	p := &jailProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	if !o.noResult {
		p.resultPath = filepath.Join(resultDir, "result.json")
		full = append(full, "--result", p.resultPath)
	}
	if !o.noRootfs {
		full = append(full, "--rootfs", rootfsDir)
	}
	full = append(full, args...)
	p.argv = full
	cmd := exec.Command(testBin, full...)
	var release *os.File
	if o.moveInto != "" {
		// The helper waits for EOF on fd 3, which comes once it is in the
		// cgroup, then becomes rljail (without fd 3).
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		release = w
		cmd = exec.Command("/bin/sh", append([]string{"-c", `read -r x <&3; exec "$0" "$@" 3<&-`, testBin}, full...)...)
		cmd.ExtraFiles = []*os.File{r}
	}
	if o.hostsFile != "" {
		if o.moveInto != "" {
			return nil, errors.New("launch: hostsFile and moveInto together")
		}
		var tools []string
		for _, name := range []string{"unshare", "mount", "setpriv"} {
			path, err := exec.LookPath(name)
			if err != nil {
				return nil, fmt.Errorf("launch with a hosts file: %v", err)
			}
			tools = append(tools, path)
		}
		inner := []string{testBin}
		if m == asRootless {
			inner = []string{tools[2], "--reuid", strconv.Itoa(testUID), "--regid", strconv.Itoa(testGID), "--clear-groups", "--", testBin}
		}
		script := tools[1] + ` --bind "$0" /etc/hosts && exec "$@"`
		cmd = exec.Command(tools[0], append(append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, o.hostsFile}, inner...), full...)...)
	}
	cmd.Dir = o.dir
	cmd.Env = append(modeEnv(m), o.env...)
	if o.stdin != "" {
		cmd.Stdin = strings.NewReader(o.stdin)
	}
	if o.stdinFile != nil {
		cmd.Stdin = o.stdinFile
	}
	cmd.Stdout = p.stdout
	cmd.Stderr = p.stderr
	// If rljail leaks a process that holds its stdout, Wait must not hang.
	cmd.WaitDelay = 5 * time.Second
	if m == asRootless && o.hostsFile == "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)},
		}
	}
	p.cmd = cmd
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		if release != nil {
			release.Close()
		}
		return nil, fmt.Errorf("start %s: %v", testBin, err)
	}
	if release != nil {
		err := os.WriteFile(filepath.Join(o.moveInto, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0)
		release.Close()
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("move the helper that starts rljail (pid %d) into %s: %v", cmd.Process.Pid, o.moveInto, err)
		}
	}
	deadline := o.deadline
	if deadline == 0 {
		deadline = 60 * time.Second
	}
	p.killer = time.AfterFunc(deadline, func() { _ = cmd.Process.Kill() })
	return p, nil
}

// wait waits for rljail to end and records its status and wall time.
func (p *jailProc) wait() {
	err := p.cmd.Wait()
	p.wall = time.Since(p.start)
	p.killer.Stop()
	p.exit = -1
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.signaled = ws.Signal()
		} else {
			p.exit = st.ExitCode()
		}
	}
	if err != nil && !errors.As(err, new(*exec.ExitError)) {
		fmt.Fprintf(p.stderr, "\n[harness: wait: %v]", err)
	}
}

// result reads the --result report; nil when there is none.
func (p *jailProc) result() (map[string]any, error) {
	if p.resultPath == "" {
		return nil, nil
	}
	b, err := os.ReadFile(p.resultPath)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(bytes.TrimSpace(b)) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("--result is not JSON: %v: %q", err, b)
	}
	return r, nil
}

func (p *jailProc) String() string {
	return "rljail " + shellQuote(p.argv)
}

// startJail starts rljail as mode with cwd o.dir (default a fresh dir).
func startJail(t testing.TB, m mode, o runOpts, args ...string) *jailProc {
	t.Helper()
	if o.dir == "" {
		o.dir = newDir(t)
	}
	resultDir := ""
	if !o.noResult {
		resultDir = newOpenDir(t)
	}
	p, err := launch(m, o, resultDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// runJail runs rljail to its end and returns what it printed, its exit
// status (-1 when it died of a signal) and the --result report (nil if none).
func runJail(t testing.TB, m mode, o runOpts, args ...string) (stdout, stderr string, exit int, result map[string]any) {
	t.Helper()
	p := startJail(t, m, o, args...)
	p.wait()
	res, err := p.result()
	if err != nil {
		t.Errorf("%s: %v", p, err)
	}
	return p.stdout.String(), p.stderr.String(), p.exit, res
}

// python is the argv of python3 -c code plus extra arguments.
func python(code string, args ...string) []string {
	return append([]string{"--", "python3", "-c", code}, args...)
}

func shellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;|&<>()*?![]{}#~") {
			b.WriteString(a)
			continue
		}
		if len(a) > 200 {
			a = a[:200] + "..."
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// syncBuffer is a bytes.Buffer safe for concurrent Write and String, with a
// way to wait for some output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the output contains s; false on timeout.
func (b *syncBuffer) waitFor(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(b.String(), s) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return strings.Contains(b.String(), s)
}

// jsonInt returns a JSON number field of a report as an int.
func jsonInt(m map[string]any, key string) (int64, bool) {
	v, ok := m[key].(float64)
	return int64(v), ok
}

// checkResult compares fields of a --result report with what is expected.
func checkResult(t testing.TB, what string, res map[string]any, status string, exit int) {
	t.Helper()
	if res == nil {
		t.Errorf("%s: no --result report was written", what)
		return
	}
	if got, _ := res["status"].(string); got != status {
		t.Errorf("%s: --result status = %q, want %q (report %v)", what, got, status, res)
	}
	if got, ok := jsonInt(res, "exit_code"); !ok || got != int64(exit) {
		t.Errorf("%s: --result exit_code = %v, want %d (report %v)", what, res["exit_code"], exit, res)
	}
}

// checkSetupError asserts a 125 exit with exactly one line on stderr
// starting "rljail: ".
func checkSetupError(t testing.TB, what, stderr string, exit int) {
	t.Helper()
	if exit != 125 {
		t.Errorf("%s: exit status %d, want 125 (stderr %q)", what, exit, stderr)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: ") || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("%s: stderr must be exactly one line starting \"rljail: \", got %d line(s): %q", what, len(lines), stderr)
	}
}

// ---- the host's process table ----

// proc is one host process as seen in /proc.
type proc struct {
	pid, ppid int
	start     uint64 // start time in clock ticks: (pid, start) names a process
	state     string // R, S, D, Z (zombie), ...
	cmdline   string // NULs replaced by spaces
	exe       string // readlink of /proc/PID/exe, " (deleted)" removed
	pidNS     string // readlink of /proc/PID/ns/pid
}

func (p proc) key() string { return fmt.Sprintf("%d@%d", p.pid, p.start) }

func (p proc) String() string {
	c := p.cmdline
	if len(c) > 120 {
		c = c[:120] + "..."
	}
	return fmt.Sprintf("pid %d (state %s, ppid %d, exe %s, %s): %q", p.pid, p.state, p.ppid, p.exe, p.pidNS, c)
}

func readProc(pid int) (proc, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is the state (field 3); ppid is field 4, starttime field 22.
	if len(f) < 20 {
		return proc{}, false
	}
	p := proc{pid: pid, state: f[0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	cmd, _ := os.ReadFile(dir + "/cmdline")
	p.cmdline = strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " ")
	p.exe, _ = os.Readlink(dir + "/exe")
	p.exe = strings.TrimSuffix(p.exe, " (deleted)")
	p.pidNS, _ = os.Readlink(dir + "/ns/pid")
	return p, true
}

// allProcs lists the host's processes.
func allProcs() []proc {
	ents, _ := os.ReadDir("/proc")
	var ps []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// findPayload waits until a process whose cmdline holds marker, other than
// rljail itself, shows up in the host's /proc in a PID namespace other than
// the test's own, as every payload runs in its jail's. The cmdline alone also
// matches a fork of a launcher on its way to another program: the sh of a
// hosts-file launch (or TestIDRangeFromSubuid's) forks mount with its own
// cmdline, the marker in it, and that child is mount, then gone, a moment
// later (CI: /proc/PID/ns/net of such a pid was gone). An exiting process can
// show its cmdline and then no exe or namespace: it is passed over too.
func findPayload(marker string, supervisor int, timeout time.Duration) (proc, bool) {
	ownNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return proc{}, false
	}
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range allProcs() {
			if p.pid != supervisor && p.exe != "" && p.exe != testBin && strings.Contains(p.cmdline, marker) &&
				p.pidNS != "" && p.pidNS != ownNS {
				return p, true
			}
		}
		if time.Now().After(deadline) {
			return proc{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// descendants returns the processes below pid.
func descendants(pid int) []proc {
	ps := allProcs()
	children := map[int][]proc{}
	for _, p := range ps {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// orphanedInits lists rljail-init processes whose parent is not an rljail
// supervisor: a jail that outlived the process that ran it. The scan is of
// the whole host, and tests that kill supervisors run in parallel: an init
// whose supervisor another test killed a moment ago is still dying, as it
// should. So an orphan counts only if it is still there, the same process,
// half a second later; a jail that outlived its supervisor stays far longer.
func orphanedInits() []proc {
	first := orphanedInitsNow()
	if len(first) == 0 {
		return nil
	}
	time.Sleep(500 * time.Millisecond)
	again := map[string]bool{}
	for _, p := range orphanedInitsNow() {
		again[p.key()] = true
	}
	var out []proc
	for _, p := range first {
		if again[p.key()] {
			out = append(out, p)
		}
	}
	return out
}

func orphanedInitsNow() []proc {
	var out []proc
	for _, p := range allProcs() {
		if !strings.HasPrefix(p.cmdline, "rljail-init") || p.zombie() {
			continue
		}
		parent, ok := readProc(p.ppid)
		if !ok || filepath.Base(parent.exe) != "rljail" || strings.HasPrefix(parent.cmdline, "rljail-init") {
			out = append(out, p)
		}
	}
	return out
}

func (p proc) zombie() bool { return p.state == "Z" || p.state == "X" }

// leftovers lists the processes of a run that are still alive: any with
// marker in its cmdline, any in the jail's PID namespace ns, any of the
// tracked processes (same pid and start time), and any orphaned rljail-init.
//
// Zombies are not alive: they run no code and hold no resource but a PID.
// When rljail is killed, its init is reparented to the host's PID 1 (or a
// subreaper), whose job it is to reap it; rljail cannot. They are returned
// separately, for the log.
func leftovers(marker, ns string, tracked []proc) (alive, zombies []proc) {
	for _, p := range candidates(marker, ns, tracked) {
		if p.zombie() {
			zombies = append(zombies, p)
		} else {
			alive = append(alive, p)
		}
	}
	return alive, zombies
}

func candidates(marker, ns string, tracked []proc) []proc {
	seen := map[string]bool{}
	var out []proc
	add := func(p proc) {
		if !seen[p.key()] {
			seen[p.key()] = true
			out = append(out, p)
		}
	}
	trackedKeys := map[string]bool{}
	for _, p := range tracked {
		trackedKeys[p.key()] = true
	}
	for _, p := range allProcs() {
		switch {
		case marker != "" && strings.Contains(p.cmdline, marker):
			add(p)
		case ns != "" && p.pidNS == ns:
			add(p)
		case trackedKeys[p.key()]:
			add(p)
		}
	}
	for _, p := range orphanedInits() {
		add(p)
	}
	return out
}

func procList(ps []proc) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("\n\t" + p.String())
	}
	return b.String()
}

// procCgroup reads /proc/<pid>/cgroup: controller (or "" for cgroup2) to
// path, relative to this process's cgroup namespace. The limit, placement
// and attack tests use it to see from the host where a jail's processes
// are, which the jail itself cannot lie about.
func procCgroup(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			m[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m, nil
}

// watchHWM samples the VmHWM of rljail (pid) every interval until the
// returned function is called, which returns the largest value seen, in
// KiB: the supervisor's peak RSS, which the limit, attack and soak tests
// bound from outside. Only samples of a process named like the binary
// count (a helper shell before its exec, or a recycled pid, do not).
func watchHWM(pid int, every time.Duration) func() int64 {
	stop := make(chan struct{})
	done := make(chan int64)
	name := filepath.Base(testBin)
	go func() {
		var peak int64
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if kb, ok := vmHWM(pid, name); ok && kb > peak {
				peak = kb
			}
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		return <-done
	}
}

// vmHWM reads the peak RSS of pid in KiB, if it is a live process called name.
func vmHWM(pid int, name string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	var kb int64
	named := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "Name:":
			named = f[1] == name
		case len(f) >= 2 && f[0] == "VmHWM:":
			kb, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return kb, named && kb > 0
}

// freeBytes is the free space of the filesystem at path (df's "Avail"):
// a jail that fills its /tmp or /dev/shm must not take it from the host.
func freeBytes(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// ---- witnesses on the host ----

// hostCanary is a process on the host, outside every jail, that must
// survive a jail's attack: whether it lives is judged from outside, where
// the jail cannot fake it.
type hostCanary struct {
	cmd   *exec.Cmd
	ended chan struct{}
}

// startHostCanary starts cmd as a canary; it is killed when the test ends.
func startHostCanary(t testing.TB, cmd *exec.Cmd) *hostCanary {
	t.Helper()
	c := &hostCanary{cmd: cmd, ended: make(chan struct{})}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start the canary: %v", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.ended)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.ended
	})
	return c
}

func (c *hostCanary) pid() int { return c.cmd.Process.Pid }

// alive fails the test if the canary has died.
func (c *hostCanary) alive(t testing.TB) {
	t.Helper()
	select {
	case <-c.ended:
		t.Errorf("the canary process on the host (%s, pid %d) died during the run: %v", filepath.Base(c.cmd.Path), c.pid(), c.cmd.ProcessState)
	default:
	}
}

// hostForkProbe forks a process on the host (`true`) every 50 ms until it
// is stopped: a jail's fork bomb must leave the host able to fork.
type hostForkProbe struct {
	stop chan struct{}
	done chan struct{}
	// Set by the probe; read them only after finish.
	forks, fails int
	lastFailure  string // the error and output of the last failed fork
}

// startHostForkProbe starts probing at once: start it before the bomb, so
// that the host is seen forking before, during and after it.
func startHostForkProbe() *hostForkProbe {
	p := &hostForkProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			p.forks++
			if out, err := exec.Command("true").CombinedOutput(); err != nil {
				p.fails++
				p.lastFailure = fmt.Sprintf("%v %s", err, out)
			}
		}
	}()
	return p
}

// finish stops the probe and waits for it: its counts are final then.
func (p *hostForkProbe) finish() {
	close(p.stop)
	<-p.done
}

// check fails the test if a fork of the host failed while the probe ran.
func (p *hostForkProbe) check(t testing.TB) {
	t.Helper()
	if p.fails > 0 {
		t.Errorf("the host could not fork during the bomb: %d of %d forks failed (%s)", p.fails, p.forks, p.lastFailure)
	}
}

// countConnections accepts every connection to ln, counting it in n and
// closing it, until ln is closed: ln stands for a host service a jail must
// not reach, and the count says from outside whether it did. The goroutine
// is in wg: after ln.Close and wg.Wait the count is final.
func countConnections(ln net.Listener, n *atomic.Int64, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
}

// ---- terminals ----

// openPty opens a new pseudo-terminal pair with /dev/ptmx: the master and
// the unlocked slave (neither becomes the test's controlling terminal).
func openPty() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %v", err)
	}
	unlock := 0
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("TIOCSPTLCK: %v", e)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("TIOCGPTN: %v", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("open %s: %v", name, err)
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), os.NewFile(uintptr(sfd), name), nil
}

// readTerminal plays the terminal of a pty the test opened: it copies all
// that reaches master (what the terminal shows) into screen until a read
// fails (the slave closed everywhere), calling answer, when not nil, after
// each read with all shown so far (a terminal that replies to queries).
// The channel it returns is closed when it stops.
func readTerminal(master *os.File, screen *syncBuffer, answer func(master *os.File, shown []byte)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			screen.Write(b[:n])
			if n > 0 && answer != nil {
				answer(master, []byte(screen.String()))
			}
			if err != nil {
				return
			}
		}
	}()
	return done
}

// ptyRun is what one run of rljail on a terminal left behind.
type ptyRun struct {
	out    string // everything the terminal showed (read on the master side)
	err    error  // rljail's end, from Wait
	inq    int    // bytes left in the terminal's input queue after the run
	qerr   error  // of the TIOCINQ that counted them
	queued []byte // those bytes, as far as they could be read
}

// runOnPty runs rljail as mode with args on a new pseudo-terminal that is
// its stdin, stdout, stderr and controlling terminal, as from an
// interactive shell: there an injection into the terminal (TIOCSTI) would
// reach the host's session, so the TIOCSTI tests judge it from the
// terminal's side. The payload must end by printing a line END. The test
// is skipped when there is no pty; it fails when rljail does not end
// within 60 s, and stops when the payload's output never reached the
// terminal.
func runOnPty(t testing.TB, m mode, args ...string) ptyRun {
	t.Helper()
	master, slave, err := openPty()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	cmd := exec.Command(testBin, args...)
	cmd.Dir = newDir(t)
	cmd.Env = modeEnv(m)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if m == asRootless {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)}
	}
	var seen syncBuffer
	readTerminal(master, &seen, nil)
	if err := cmd.Start(); err != nil {
		slave.Close()
		t.Fatalf("start rljail on the terminal %s: %v", slave.Name(), err)
	}
	var r ptyRun
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case r.err = <-waitErr:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		r.err = <-waitErr
		t.Errorf("rljail did not end")
	}
	// Anything injected would now be in the slave's input queue.
	r.inq, r.qerr = unix.IoctlGetInt(int(slave.Fd()), unix.TIOCINQ)
	if r.qerr == nil && r.inq > 0 {
		b := make([]byte, r.inq)
		_ = unix.SetNonblock(int(slave.Fd()), true)
		n, _ := unix.Read(int(slave.Fd()), b)
		r.queued = b[:max(n, 0)]
	}
	seen.waitFor("END", 2*time.Second)
	time.Sleep(100 * time.Millisecond)
	slave.Close()
	r.out = seen.String()
	t.Logf("terminal (rljail: %v):\n%s", r.err, r.out)
	if !strings.Contains(r.out, "END") {
		t.Fatalf("the payload's output did not reach the terminal (rljail: %v):\n%s", r.err, r.out)
	}
	return r
}

// checkNoInjection fails the test if input was injected into the
// terminal: the marker, which the payload only tried to inject and never
// prints, echoed on the terminal, or bytes left in its input queue.
func (r ptyRun) checkNoInjection(t testing.TB, marker string) {
	t.Helper()
	if strings.Contains(r.out, marker) {
		t.Errorf("the injected characters reached the terminal (echoed on the master side):\n%s", r.out)
	}
	if r.qerr != nil {
		t.Errorf("TIOCINQ on the slave: %v", r.qerr)
	} else if r.inq != 0 {
		t.Errorf("%d bytes wait in the terminal's input queue after the run: injected: %q", r.inq, r.queued)
	}
}

// ---- payloads ----

// pySyscallLib is the Python prelude that makes raw system calls with
// ctypes: sc(nr, *args) returns (rc, errno), ints passed as longs and bytes
// as char pointers. No library wrapper stands between the payload and the
// kernel, and the attack suite and the seccomp tests, which both start
// their probes with it, read the errno the same way.
const pySyscallLib = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def _arg(x):
    if isinstance(x, int):
        return ctypes.c_long(x)
    if isinstance(x, bytes):
        return ctypes.c_char_p(x)
    return x
def sc(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    return rc, ctypes.get_errno()
`
