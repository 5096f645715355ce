package integration

// The attack suite of issue 5: named attacks from inside the jail, in five
// groups (secrets, filesystem, network, processes and kernel, denial of
// service), each run as root and rootless where that means something, and
// each decided from outside the jail wherever that is possible: a listener
// that must see no connection, a marker secret that must never appear in
// the output, the report or any file, a host file's hash and mode, the
// host's process table, the wall clock, the cgroup directories.
//
// `make attack` runs only TestAttacks and prints "N passed, N failed".
// Every case is an entry of attackCases (one block per group below), with
// a one-line mechanism and the layer that stops it, so that the attack
// surface reads as a list.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rljail/rljail/integration/bombs"
	"golang.org/x/sys/unix"
)

// attackCase is one named attack.
type attackCase struct {
	name      string
	group     string // secrets, filesystem, network, processes, dos
	mechanism string // one line: what the attack does
	layer     string // one line: what stops it
	// modes the case runs in; nil: root and rootless.
	modes []mode
	// serial cases run alone, before the parallel ones: they change
	// host-wide state (core_pattern) or measure wall-clock and CPU bounds
	// that a busy machine would blur.
	serial bool
	run    func(t *testing.T, m mode)
}

const (
	groupSecrets    = "secrets"
	groupFilesystem = "filesystem"
	groupNetwork    = "network"
	groupProcesses  = "processes"
	groupDoS        = "dos"
)

var attackGroups = []string{groupSecrets, groupFilesystem, groupNetwork, groupProcesses, groupDoS}

var rootOnly = []mode{asRoot}

// attackTally counts the outcome of every (case, mode) run.
type attackTally struct {
	mu      sync.Mutex
	passed  map[string]int
	failed  map[string]int
	skipped map[string]int
	fails   []string
}

func (a *attackTally) record(t *testing.T, group, name string) {
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case t.Failed():
			a.failed[group]++
			a.fails = append(a.fails, group+"/"+name)
		case t.Skipped():
			a.skipped[group]++
		default:
			a.passed[group]++
		}
	})
}

func (a *attackTally) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	p, f, s := 0, 0, 0
	for _, g := range attackGroups {
		p += a.passed[g]
		f += a.failed[g]
		s += a.skipped[g]
		fmt.Fprintf(&b, "  %-11s %d passed, %d failed", g, a.passed[g], a.failed[g])
		if a.skipped[g] > 0 {
			fmt.Fprintf(&b, ", %d skipped", a.skipped[g])
		}
		b.WriteByte('\n')
	}
	sort.Strings(a.fails)
	for _, n := range a.fails {
		fmt.Fprintf(&b, "  FAILED %s\n", n)
	}
	head := fmt.Sprintf("attack suite: %d passed, %d failed", p, f)
	if s > 0 {
		head += fmt.Sprintf(", %d skipped", s)
	}
	return head + "\n" + b.String()
}

// TestAttacks runs every attack of attackCases as root and rootless. It is
// not parallel itself, so that no other test of the package runs beside
// it (the core dump case changes core_pattern for the whole host); its
// cases run two at a time after the serial ones.
func TestAttacks(t *testing.T) {
	tally := &attackTally{passed: map[string]int{}, failed: map[string]int{}, skipped: map[string]int{}}
	seen := map[string]bool{}
	for _, c := range attackCases {
		if seen[c.name] || c.name == "" || c.mechanism == "" || c.layer == "" || !slices.Contains(attackGroups, c.group) {
			t.Fatalf("attack case %q: duplicate or incomplete (group %q)", c.name, c.group)
		}
		seen[c.name] = true
	}
	if len(attackCases) < 50 {
		t.Errorf("the attack suite has %d cases, issue 5 wants at least 50", len(attackCases))
	}
	t.Cleanup(func() {
		s := tally.summary()
		t.Log(s)
		if os.Getenv("RLJAIL_ATTACK_SUMMARY") != "" {
			fmt.Print(s)
		}
	})
	for _, c := range attackCases {
		t.Run(c.group+"/"+c.name, func(t *testing.T) {
			if !c.serial {
				t.Parallel()
			}
			t.Logf("mechanism: %s", c.mechanism)
			t.Logf("layer:     %s", c.layer)
			modes := c.modes
			if modes == nil {
				modes = bothModes
			}
			for _, m := range modes {
				t.Run(string(m), func(t *testing.T) {
					tally.record(t, c.group, c.name+"/"+string(m))
					c.run(t, m)
				})
			}
		})
	}
}

// ---- running a payload and watching it from the host ----

// attackRun is one finished rljail run of an attack.
type attackRun struct {
	p       *jailProc
	stdout  string
	stderr  string
	exit    int
	res     map[string]any
	resRaw  []byte
	payload proc // the payload as seen in the host's /proc (pid 0: never seen)
	// ns is its PID namespace, held open for the rest of the test (by a
	// cleanup's descriptor): a namespace's inode number is given to a new
	// one once it is freed, so that a jail another test starts later would
	// otherwise pass for a survivor of this one.
	ns      string
	tracked []proc // every process seen below rljail while it ran
	hwmKiB  int64  // the supervisor's peak RSS, sampled
}

func (r *attackRun) String() string {
	return fmt.Sprintf("%s\nexit %d (signal %v) after %v\nstdout: %s\nstderr: %s\nreport: %s",
		r.p, r.exit, r.p.signaled, r.p.wall.Round(time.Millisecond), attackClip(r.stdout), attackClip(r.stderr), attackClip(string(r.resRaw)))
}

// all is everything of the run that reached the host: stdout, stderr and
// the result report.
func (r *attackRun) all() string {
	return r.stdout + "\n" + r.stderr + "\n" + string(r.resRaw)
}

func (r *attackRun) status() string {
	s, _ := r.res["status"].(string)
	return s
}

func attackClip(s string) string {
	if len(s) > 4000 {
		return fmt.Sprintf("%q ... (%d bytes)", s[:4000], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// attackWatch options.
type attackWatchOpts struct {
	// marker is a token in the payload's argv: it finds the payload in the
	// host's /proc. Empty: a fresh one is made.
	marker string
	// ready, when set, is a stdout line the payload prints when it is
	// ready to be looked at from outside; during then runs.
	ready  string
	during func(pl proc)
	// hwm samples the supervisor's peak RSS.
	hwm bool
}

// attackPython is argv for rljail's flags, then python3 -c code args...;
// the marker is the last argument (code must ignore it).
func attackPython(flags []string, code, marker string, args ...string) []string {
	return append(append([]string(nil), flags...), python(code, append(args, marker)...)...)
}

// attackWatch starts rljail as mode with args, follows its processes from
// the host while it runs and returns the finished run.
func attackWatch(t *testing.T, m mode, o runOpts, w attackWatchOpts, args ...string) *attackRun {
	t.Helper()
	p := startJail(t, m, o, args...)
	r := &attackRun{p: p}
	var stopHWM func() int64
	if w.hwm {
		stopHWM = watchHWM(p.cmd.Process.Pid, 2*time.Millisecond)
	}
	ended := make(chan struct{})
	go func() {
		p.wait()
		close(ended)
	}()
	found := false
	calledDuring := w.during == nil
	seen := map[string]bool{}
	track := func(ps ...proc) {
		for _, q := range ps {
			if !seen[q.key()] {
				seen[q.key()] = true
				r.tracked = append(r.tracked, q)
			}
		}
	}
	// The test's own PID namespace, which launchers and rljail's first step
	// share: /proc/1 may be unreadable here (a sandbox's init), and an empty
	// hostNS would let a launcher's fork (a hosts-file launch's sh, on its way
	// to mount, the marker in its cmdline) pass for the payload.
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
watch:
	for {
		track(descendants(p.cmd.Process.Pid)...)
		if !found && w.marker != "" {
			for _, q := range allProcs() {
				if q.pid != p.cmd.Process.Pid && q.exe != testBin && strings.Contains(q.cmdline, w.marker) && q.pidNS != "" && q.pidNS != hostNS {
					if f, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", q.pid)); err == nil {
						// Only a namespace held while the process was still
						// the payload (the same start time) is its own. (A
						// payload gone before it was held leaves the number
						// unheld, as it was before: a rare, short payload.)
						if again, ok := readProc(q.pid); ok && again.key() == q.key() && again.pidNS == q.pidNS {
							t.Cleanup(func() { f.Close() })
						} else {
							f.Close()
						}
					}
					r.payload, r.ns, found = q, q.pidNS, true
					track(q)
					break
				}
			}
		}
		if !calledDuring && (found || w.marker == "") && (w.ready == "" || strings.Contains(p.stdout.String(), w.ready)) {
			calledDuring = true
			w.during(r.payload)
		}
		select {
		case <-ended:
			break watch
		case <-time.After(15 * time.Millisecond):
		}
	}
	if !calledDuring && w.ready != "" && strings.Contains(p.stdout.String(), w.ready) && (found || w.marker == "") {
		// It got ready and ended between two looks: late, but the hook
		// still sees what is left (a hook that needs the live payload
		// then fails on its own).
		calledDuring = true
		w.during(r.payload)
	}
	if !calledDuring {
		t.Errorf("the payload never became ready to be watched (ready line %q, payload seen: %v)", w.ready, found)
	}
	if stopHWM != nil {
		r.hwmKiB = stopHWM()
	}
	r.stdout, r.stderr, r.exit = p.stdout.String(), p.stderr.String(), p.exit
	if p.resultPath != "" {
		r.resRaw, _ = os.ReadFile(p.resultPath)
		res, err := p.result()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		r.res = res
	}
	return r
}

// attackPy runs `python3 -c code args... marker` with flags in the jail,
// watched from the host, and returns the finished run (it does not judge
// the exit status).
func attackPy(t *testing.T, m mode, o runOpts, flags []string, code string, args ...string) *attackRun {
	t.Helper()
	marker := randomToken("atk")
	return attackWatch(t, m, o, attackWatchOpts{marker: marker}, attackPython(flags, code, marker, args...)...)
}

// attackPyOK is attackPy that requires exit 0.
func attackPyOK(t *testing.T, m mode, o runOpts, flags []string, code string, args ...string) *attackRun {
	t.Helper()
	r := attackPy(t, m, o, flags, code, args...)
	if r.exit != 0 {
		t.Fatalf("the jailed python failed:\n%s", r)
	}
	return r
}

// attackNoSecrets fails for every secret found in what the run returned
// to the host (stdout, stderr, the report) and in the extra strings.
func attackNoSecrets(t *testing.T, r *attackRun, secrets map[string]string, extra ...string) {
	t.Helper()
	all := r.all() + strings.Join(extra, "\n")
	var names []string
	for name := range secrets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if s := secrets[name]; s != "" && strings.Contains(all, s) {
			t.Errorf("LEAK: %s reached the host through the jail's output or report", name)
		}
	}
}

// attackNoSurvivors checks that nothing of the run is left: no live
// process in the payload's PID namespace or carrying the marker (given 1 s
// to die), and, as root, no cgroup directory of the run.
func attackNoSurvivors(t *testing.T, m mode, r *attackRun, marker string) {
	t.Helper()
	var alive []proc
	deadline := time.Now().Add(time.Second)
	for {
		alive = nil
		keys := map[string]bool{}
		for _, q := range r.tracked {
			keys[q.key()] = true
		}
		for _, q := range allProcs() {
			if q.zombie() {
				continue
			}
			if (marker != "" && strings.Contains(q.cmdline, marker)) || (r.ns != "" && q.pidNS == r.ns) || keys[q.key()] {
				alive = append(alive, q)
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(alive) > 0 {
		t.Errorf("processes of the run are alive 1 s after rljail returned:%s", procList(alive))
	}
	if m == asRoot && r.res != nil {
		if id, _ := r.res["run_id"].(string); id != "" {
			if left := attackCgroupsNamed("rljail-" + id); len(left) > 0 {
				t.Errorf("the run's cgroup directories are left: %v", left)
			}
		}
	}
}

// attackCgroupsNamed lists directories called name in every cgroup
// hierarchy of the host.
func attackCgroupsNamed(name string) []string {
	var out []string
	for _, root := range attackCgroupRoots() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == name {
				out = append(out, p)
				return fs.SkipDir
			}
			return nil
		})
	}
	return out
}

// attackCgroupRoots are the test process's own cgroup directories in
// every hierarchy (ownCgroupDirs): where the jails it starts make their
// cgroups, and what a check of what they left judges.
func attackCgroupRoots() []string { return ownCgroupDirs() }

// attackPlant writes a secret file at path (mode 0644: only the jail, not
// the file's mode, may hide it), creating missing parents; everything it
// created is removed when the test ends. It returns false when path
// already exists (it is then left alone).
func attackPlant(t *testing.T, path, content string) bool {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		return false
	}
	var created []string
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := os.Mkdir(created[i], 0o755); err != nil {
			t.Fatalf("create %s: %v", created[i], err)
		}
	}
	writeFile(t, path, content, 0o644)
	t.Cleanup(func() {
		os.Remove(path)
		for _, d := range created {
			os.Remove(d)
		}
	})
	return true
}

// attackPlantInHostRoot plants a file with a random name and a fresh
// secret (prefix<random>) in the host's /, for the attacks that try to
// climb out of the jail's root to it; it returns the name and the secret.
func attackPlantInHostRoot(t *testing.T, prefix string) (name, secret string) {
	t.Helper()
	name = randomToken("rljail-it-hostroot-")
	secret = randomToken(prefix)
	if !attackPlant(t, "/"+name, secret) {
		t.Fatalf("could not plant /%s", name)
	}
	return name, secret
}

// attackSHA256 hashes a host file ("" if unreadable).
func attackSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// attackTreeFingerprint hashes the names, types, modes, sizes, mtimes
// and link targets of a host tree, and the content of its files when
// withContent.
func attackTreeFingerprint(t *testing.T, root string, withContent bool) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00%d.%d\x00%d:%d\x00", p, st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Uid, st.Gid)
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			fmt.Fprintf(h, "->%s\x00", target)
		} else if withContent && fi.Mode().IsRegular() {
			fmt.Fprintf(h, "=%s\x00", attackSHA256(p))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("fingerprint %s: %v", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// attackCanary is a host process outside every jail carrying a secret in
// its argv and its environment: the jail must neither see nor hurt it.
type attackCanary struct {
	*hostCanary
	argvSecret string
	envSecret  string
}

func attackStartCanary(t *testing.T) *attackCanary {
	t.Helper()
	c := &attackCanary{argvSecret: randomToken("canaryargv"), envSecret: randomToken("canaryenv")}
	// sh stays (no exec) so that its argv keeps the secret.
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", "sleep 600; :", c.argvSecret}}
	cmd.Env = []string{"PATH=" + hostPath, "RLJAIL_IT_CANARY_SECRET=" + c.envSecret}
	c.hostCanary = startHostCanary(t, cmd)
	return c
}

// attackTracerPid reads TracerPid of a host process.
func attackTracerPid(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	v, _ := lineValue(strings.ReplaceAll(string(b), "\t", " "), "TracerPid: ")
	return strings.TrimSpace(v)
}

// attackProcStatus reads a field of /proc/PID/status.
func attackProcStatus(pid int, field string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// attackErrorLines are the lines of stderr but the limit fallback warning.
func attackErrorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, fallbackWarning) {
			out = append(out, l)
		}
	}
	return out
}

// attackPyLib is the prelude of payloads that make raw system calls:
// sc(nr, *args) (pySyscallLib) returns (rc, errno); res(...) names the
// outcome ("OK" or the errno's name).
const attackPyLib = pySyscallLib + `
def res(r):
    rc, e = r
    return "OK" if rc != -1 else errno.errorcode.get(e, str(e))
def attempt(name, fn):
    try:
        out = fn()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], int):
            out = res(out)
        print("ATTEMPT", name, out if out is not None else "OK", flush=True)
    except OSError as e:
        print("ATTEMPT", name, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
    except Exception as e:
        print("ATTEMPT", name, "EXC:" + type(e).__name__, flush=True)
`

// attackAttempts reads the "ATTEMPT name result" lines of a payload.
func attackAttempts(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "ATTEMPT" {
			m[f[1]] = f[2]
		}
	}
	return m
}

// attackAttemptNames lists the attempts a payload made, sorted.
func attackAttemptNames(out string) []string {
	var names []string
	for k := range attackAttempts(out) {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// attackExpectAllFailed requires every attempt of the run to have failed,
// and at least atLeast attempts to have been made: a probe that made fewer
// is broken, and its failures prove nothing.
func attackExpectAllFailed(t *testing.T, r *attackRun, atLeast int) {
	t.Helper()
	names := attackAttemptNames(r.stdout)
	attackExpectFailed(t, r.stdout, names...)
	if len(names) < atLeast {
		t.Fatalf("the probe made only %d attempts:\n%s", len(names), r)
	}
}

// attackExpectFailed requires every named attempt to have failed (any
// result but OK) and to have been made at all.
func attackExpectFailed(t *testing.T, out string, names ...string) {
	t.Helper()
	got := attackAttempts(out)
	for _, n := range names {
		switch v, ok := got[n]; {
		case !ok:
			t.Errorf("attempt %s was not made (payload output: %s)", n, attackClip(out))
		case v == "OK":
			t.Errorf("attempt %s SUCCEEDED in the jail", n)
		}
	}
}

// attackExpectErrno requires named attempts to fail with one errno.
func attackExpectErrno(t *testing.T, out, errname string, names ...string) {
	t.Helper()
	got := attackAttempts(out)
	for _, n := range names {
		if v, ok := got[n]; !ok {
			t.Errorf("attempt %s was not made (payload output: %s)", n, attackClip(out))
		} else if v != errname {
			t.Errorf("attempt %s: %s, want %s", n, v, errname)
		}
	}
}

// attackLines hashes every line (trimmed, at least minLen bytes) of a
// host file; the lines themselves are never logged.
func attackLines(path string, minLen int) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if len(l) >= minLen {
			s := sha256.Sum256([]byte(l))
			out[hex.EncodeToString(s[:])] = true
		}
	}
	return out
}

// attackCountLeaked counts the lines of text whose hash is in lines.
func attackCountLeaked(text string, lines map[string]bool) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		for _, part := range []string{strings.TrimSpace(l)} {
			s := sha256.Sum256([]byte(part))
			if lines[hex.EncodeToString(s[:])] {
				n++
			}
		}
	}
	return n
}

// attackHostAddrs are the host's own non-loopback IP addresses (no
// link-local ones, which need a zone).
func attackHostAddrs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP)
		}
	}
	return out
}

// attackLocalHosts are 127.0.0.1, ::1 and the host's own addresses: where
// a host service the jail must not reach may listen.
func attackLocalHosts() []string {
	hosts := []string{"127.0.0.1", "::1"}
	for _, ip := range attackHostAddrs() {
		hosts = append(hosts, ip.String())
	}
	return hosts
}

// attackListeners are host sockets, TCP listeners or UDP sockets, that
// the jail must not reach; hits counts the connections accepted or the
// datagrams received.
type attackListeners struct {
	socks []io.Closer
	bound []string // their addresses, host:port
	hits  atomic.Int64
	wg    sync.WaitGroup
}

// attackListenTCP listens on TCP port on each of hosts (those it cannot
// listen on are logged and skipped) and counts the connections accepted.
func attackListenTCP(t *testing.T, hosts []string, port string) *attackListeners {
	t.Helper()
	l := &attackListeners{}
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, port))
		if err != nil {
			t.Logf("listen on %s: %v (skipped)", net.JoinHostPort(h, port), err)
			continue
		}
		l.socks = append(l.socks, ln)
		l.bound = append(l.bound, ln.Addr().String())
		countConnections(ln, &l.hits, &l.wg)
	}
	t.Cleanup(l.close)
	return l
}

// attackListenUDP receives datagrams on UDP port of each of hosts (those
// it cannot bind are logged and skipped) and counts them.
func attackListenUDP(t *testing.T, hosts []string, port string) *attackListeners {
	t.Helper()
	l := &attackListeners{}
	for _, h := range hosts {
		c, err := net.ListenPacket("udp", net.JoinHostPort(h, port))
		if err != nil {
			t.Logf("listen on udp %s:%s: %v (skipped)", h, port, err)
			continue
		}
		l.socks = append(l.socks, c)
		l.bound = append(l.bound, c.LocalAddr().String())
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			b := make([]byte, 2048)
			for {
				if _, _, err := c.ReadFrom(b); err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				l.hits.Add(1)
			}
		}()
	}
	t.Cleanup(l.close)
	return l
}

func (l *attackListeners) addrs() []string {
	return slices.Clone(l.bound)
}

// close closes the sockets and waits for their goroutines: hits is final
// then.
func (l *attackListeners) close() {
	for _, s := range l.socks {
		s.Close()
	}
	l.wg.Wait()
}

// attackDmesgCount counts kernel log lines containing s (-1 when the log
// cannot be read).
func attackDmesgCount(s string) int {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), s)
}

// attackMountinfoRoots parses mountinfo text: for each line, the mount's
// root within its filesystem, its mount point and its filesystem type.
func attackMountinfoRoots(text string) [][3]string {
	var out [][3]string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if ok && len(pf) >= 5 && len(qf) >= 1 {
			out = append(out, [3]string{pf[3], pf[4], qf[0]})
		}
	}
	return out
}

// ---- the cases ----

// attackCases is the attack suite: every case, its mechanism and the
// layer that stops it.
var attackCases = []attackCase{
	// Secrets.
	{name: "rljail_environment", group: groupSecrets,
		mechanism: "dump os.environ, /proc/self/environ and every readable /proc/*/environ and cmdline for the secrets in rljail's own environment",
		layer:     "environment allowlist (PATH, HOME, LANG, PYTHONDONTWRITEBYTECODE, TERM, -e); init re-executed with a fixed environment, non-dumpable",
		run:       attackRljailEnvironment},
	{name: "parent_environment", group: groupSecrets,
		mechanism: "look for the environment and command line of the process that started rljail (a shell holding a secret it did not pass on)",
		layer:     "PID namespace (the parent is invisible) and the environment allowlist",
		run:       attackParentEnvironment},
	{name: "host_process_environ_cmdline", group: groupSecrets,
		mechanism: "read /proc/1/environ and /proc/1/cmdline and those of a host process that carries secrets in its argv and environment",
		layer:     "PID namespace and a fresh /proc: PID 1 is rljail-init, host processes do not exist in the jail",
		run:       attackHostProcessSecrets},
	{name: "shadow_and_host_keys", group: groupSecrets,
		mechanism: "read /etc/shadow, /etc/gshadow, /etc/sudoers and the SSH host keys",
		layer:     "mount namespace: the jail's /etc is generated; the host's /etc is not mounted",
		run:       attackShadow},
	{name: "ssh_private_keys", group: groupSecrets,
		mechanism: "read ~/.ssh and /root/.ssh (a planted world-readable key) of root and of the invoking user",
		layer:     "mount namespace: no host home directory is mounted; the home directory is never the workspace",
		run:       attackSSHKeys},
	{name: "cloud_credentials", group: groupSecrets,
		mechanism: "read ~/.aws/credentials, gcloud, azure, docker, kube, .netrc and .git-credentials files (planted, world-readable)",
		layer:     "mount namespace: only the rootfs, the workspace and -v grants are visible",
		run:       attackCloudCredentials},
	{name: "marker_file_search", group: groupSecrets,
		mechanism: "open planted marker files by name (/, /root, /tmp, /var/tmp, /etc, /dev/shm, a sibling of the rootfs) and walk the whole visible tree for their contents",
		layer:     "mount namespace with pivot_root: the host tree is detached; /tmp and /dev/shm are private tmpfs",
		run:       attackMarkerSearch},
	{name: "mountinfo_host_paths", group: groupSecrets,
		mechanism: "read /proc/self/mountinfo, mounts and mountstats for host paths and names next to a granted directory",
		layer:     "read-only directory grants and the rootfs are presented through overlayfs (root /, layers named /proc/self/fd/N); only writable volumes and single files show their own path (SECURITY.md)",
		run:       attackMountinfo},
	{name: "supervisor_memory", group: groupSecrets,
		mechanism: "read the memory of rljail and its init (/proc/PID/mem, process_vm_readv, ptrace) for a secret in rljail's environment and argv",
		layer:     "PID namespace (the supervisor is invisible); init non-dumpable; ptrace and process_vm_* denied by seccomp",
		run:       attackSupervisorMemory},
	{name: "host_identity", group: groupSecrets,
		mechanism: "read the host's /etc/machine-id, /etc/hostname and the UTS nodename",
		layer:     "UTS namespace (hostname rljail) and the generated /etc",
		run:       attackHostIdentity},
}

// attackProcDumpCode prints the environment and every readable environ
// and cmdline in the jail's /proc.
const attackProcDumpCode = `
import os, sys
print("ENV", dict(os.environ), flush=True)
pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
print("PIDS", pids)
for pid in pids + ["self", "thread-self"]:
    for f in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, f), "rb") as fh:
                print("PROC", pid, f, fh.read())
        except Exception as e:
            print("PROC", pid, f, "ERR", type(e).__name__)
for pid in sys.argv[1:-1]:
    for f in ("environ", "cmdline", "status"):
        try:
            with open("/proc/%s/%s" % (pid, f), "rb") as fh:
                print("DIRECT", pid, f, fh.read())
        except Exception as e:
            print("DIRECT", pid, f, "ERR", type(e).__name__)
`

func attackRljailEnvironment(t *testing.T, m mode) {
	secrets := map[string]string{}
	var env []string
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RLJAIL_IT_SECRET"} {
		v := randomToken("envsecret")
		secrets["rljail's $"+k] = v
		env = append(env, k+"="+v)
	}
	granted := randomToken("granted")
	r := attackPyOK(t, m, runOpts{env: env}, []string{"-e", "GRANTED=" + granted}, attackProcDumpCode)
	if !strings.Contains(r.stdout, granted) {
		t.Fatalf("the probe does not see even the -e variable it was granted: it did not run as expected\n%s", r)
	}
	attackNoSecrets(t, r, secrets)
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		if strings.Contains(r.stdout, k) {
			t.Errorf("the variable name %s appears in the jail's output", k)
		}
	}
	attackNoSurvivors(t, m, r, "")
}

// attackExec runs a command as mode (rootless: as the test user) and
// returns its output and exit status (-1 on a signal).
func attackExec(t *testing.T, m mode, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if m == asRootless {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	killer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	killer.Stop()
	exit := -1
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && !ws.Signaled() {
		exit = ws.ExitStatus()
	}
	return stdout.String(), stderr.String(), exit
}

func attackParentEnvironment(t *testing.T, m mode) {
	envSecret, argvSecret := randomToken("parentenv"), randomToken("parentargv")
	args := append([]string{"--rootfs", rootfsDir}, python(attackProcDumpCode, "1", "0")...)
	// The shell stays rljail's parent (no exec), holds the secret in its
	// environment and its command line, and does not pass it on.
	script := "P=" + argvSecret + `; env -u RLJAIL_IT_PARENT_SECRET "$0" "$@"; exit $?`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, testBin}, args...)...)
	cmd.Env = append(modeEnv(m), "RLJAIL_IT_PARENT_SECRET="+envSecret)
	cmd.Dir = newDir(t)
	stdout, stderr, exit := attackExec(t, m, cmd)
	if exit != 0 || !strings.Contains(stdout, "PIDS") {
		t.Fatalf("the probe failed: exit %d\nstdout %s\nstderr %s", exit, attackClip(stdout), attackClip(stderr))
	}
	for name, s := range map[string]string{"the parent shell's environment": envSecret, "the parent shell's command line": argvSecret} {
		if strings.Contains(stdout+stderr, s) {
			t.Errorf("LEAK: %s reached the jail's output", name)
		}
	}
}

func attackHostProcessSecrets(t *testing.T, m mode) {
	c := attackStartCanary(t)
	time.Sleep(50 * time.Millisecond)
	r := attackPyOK(t, m, runOpts{}, nil, attackProcDumpCode, strconv.Itoa(c.pid()), "1")
	attackNoSecrets(t, r, map[string]string{"the host process's argv": c.argvSecret, "the host process's environment": c.envSecret})
	if !strings.Contains(r.stdout, "PROC 1 cmdline b'rljail-init") {
		t.Errorf("/proc/1/cmdline in the jail is not rljail-init's: %s", attackClip(r.stdout))
	}
	if v, _ := lineValue(r.stdout, "DIRECT 1 environ "); !strings.HasPrefix(v, "ERR") && v != "b''" {
		t.Errorf("/proc/1/environ of the jail's init is readable: %s", v)
	}
	for _, f := range []string{"environ", "cmdline", "status"} {
		if v, _ := lineValue(r.stdout, "DIRECT "+strconv.Itoa(c.pid())+" "+f+" "); !strings.HasPrefix(v, "ERR FileNotFoundError") {
			t.Errorf("/proc/%d/%s (a host process) in the jail: %q, want FileNotFoundError", c.pid(), f, v)
		}
	}
	c.alive(t)
}

const attackReadFilesCode = `
import glob, os, sys
paths = []
for pat in sys.argv[1:-1]:
    paths += glob.glob(pat, recursive=True) or [pat]
for p in paths:
    try:
        if os.path.isdir(p):
            print("DIR", p, sorted(os.listdir(p)))
            continue
        with open(p, "rb") as f:
            data = f.read(1 << 16)
        print("FILE", p, len(data))
        print(data.decode("latin-1"))
    except Exception as e:
        print("ERR", p, type(e).__name__)
`

func attackShadow(t *testing.T, m mode) {
	host := map[string]map[string]bool{}
	for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers"} {
		host[p] = attackLines(p, 8)
	}
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*_key")
	for _, p := range keys {
		host[p] = attackLines(p, 20)
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackReadFilesCode,
		"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d/*", "/etc/ssh/*", "/etc/*", "/etc/ssh/ssh_host_*_key")
	checked := 0
	for p, lines := range host {
		checked += len(lines)
		if n := attackCountLeaked(r.stdout+"\n"+r.stderr, lines); n > 0 {
			t.Errorf("LEAK: %d line(s) of the host's %s appear in the jail's output (not shown)", n, p)
		}
	}
	t.Logf("compared %d host lines (by hash) of %d files", checked, len(host))
}

func attackSSHKeys(t *testing.T, m mode) {
	secrets := map[string]string{}
	var paths []string
	for _, home := range []string{"/root", testHome} {
		p := filepath.Join(home, ".ssh", randomToken("id_rljail_it_"))
		s := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + randomToken("sshkey") + "\n-----END OPENSSH PRIVATE KEY-----\n"
		if attackPlant(t, p, s) {
			secrets[p] = s[36:70]
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		t.Fatal("could not plant a key")
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackReadFilesCode,
		append(paths, "/root/.ssh/*", "/home/*/.ssh/*", "~/.ssh/*", "/tmp/.ssh/*", filepath.Join(testHome, ".ssh/*"))...)
	attackNoSecrets(t, r, secrets)
}

func attackCloudCredentials(t *testing.T, m mode) {
	names := []string{".aws/credentials", ".aws/config", ".config/gcloud/application_default_credentials.json",
		".azure/msal_token_cache.json", ".docker/config.json", ".kube/config", ".netrc", ".git-credentials",
		".config/gh/hosts.yml", ".npmrc", ".pypirc"}
	secrets := map[string]string{}
	var paths []string
	for _, home := range []string{"/root", testHome} {
		for _, n := range names {
			p := filepath.Join(home, n)
			s := randomToken("cloudsecret")
			if !attackPlant(t, p, "secret = "+s+"\n") {
				// A real file: never overwritten; its content must not leak either.
				if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) >= 16 {
					secrets["the existing "+p] = string(bytes.TrimSpace(b))
				}
				continue
			}
			secrets[p] = s
			paths = append(paths, p)
		}
	}
	r := attackPyOK(t, m, runOpts{env: []string{"AWS_SHARED_CREDENTIALS_FILE=/root/.aws/credentials"}}, nil, attackReadFilesCode,
		append(paths, "/root/.*/**", "/home/**/.*", "~/.aws/*", "/root/.aws/*")...)
	attackNoSecrets(t, r, secrets)
}

// attackWalkCode opens the files named in argv, then walks the whole
// visible tree (not /proc) and prints every file that contains the prefix.
const attackWalkCode = `
import os, stat, sys
prefix = sys.argv[1].encode()
for p in sys.argv[2:-1]:
    try:
        print("OPEN", p, open(p, "rb").read(4096))
    except Exception as e:
        print("OPEN-ERR", p, type(e).__name__)
n = 0
for root, dirs, files in os.walk("/", onerror=lambda e: None):
    if root == "/":
        dirs[:] = [d for d in dirs if d != "proc"]
    for f in files:
        p = os.path.join(root, f)
        n += 1
        try:
            # regular files only: a pipe (/dev/stdin) would block the walk
            if not stat.S_ISREG(os.lstat(p).st_mode):
                continue
            with open(p, "rb") as fh:
                data = fh.read(1 << 16)
        except Exception:
            continue
        if prefix in data:
            print("FOUND", p, data[:200])
print("WALKED", n, flush=True)
`

func attackMarkerSearch(t *testing.T, m mode) {
	const prefix = "rljailitsecret"
	secrets := map[string]string{}
	var paths []string
	rootfsParent := filepath.Dir(rootfsDir)
	dirs := []string{"/", "/root", "/tmp", "/var/tmp", "/etc", "/dev/shm", "/opt", "/srv", testHome,
		filepath.Join(rootfsParent, randomToken("rljail-it-sibling-")), filepath.Dir(rootfsParent)}
	for _, d := range dirs {
		p := filepath.Join(d, randomToken("rljail-it-marker-"))
		s := randomToken(prefix)
		if attackPlant(t, p, s+"\n") {
			secrets["the marker file "+p] = s
			paths = append(paths, p)
		}
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackWalkCode, append([]string{prefix}, paths...)...)
	if !strings.Contains(r.stdout, "WALKED") {
		t.Fatalf("the walk did not finish:\n%s", r)
	}
	attackNoSecrets(t, r, secrets)
	for _, p := range paths {
		if strings.Contains(r.stdout, "FOUND "+p) {
			t.Errorf("LEAK: the planted %s was found in the jail", p)
		}
	}
	v, _ := lineValue(r.stdout, "WALKED ")
	t.Logf("the payload walked %s files", v)
}

func attackMountinfo(t *testing.T, m mode) {
	// Every granted path carries a token of its own: a read-only grant's
	// token must not appear anywhere the jail can read about its mounts.
	wsToken, volToken := randomToken("wsname"), randomToken("volname")
	ws := filepath.Join(newDir(t), wsToken)
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// The granted volume lives next to secrets: under /root as root (the
	// usual `sudo rljail -v ~/data:/data`), in a test directory rootless.
	parent := newDir(t)
	if m == asRoot {
		parent = filepath.Join("/root", randomToken("rljail-it-mnt-"))
		if err := os.Mkdir(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(parent) })
	}
	vol := filepath.Join(parent, volToken)
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	// A writable volume and a single file: their paths within the host's
	// filesystem are the documented exception (SECURITY.md).
	rwVol := filepath.Join(newOpenDir(t), randomToken("rwname"))
	if err := os.Mkdir(rwVol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rwVol, 0o777); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(newDir(t), randomToken("filename"))
	writeFile(t, file, "x", 0o644)
	siblingName := randomToken("rljail-it-sibling-")
	siblingSecret := randomToken("siblingsecret")
	writeFile(t, filepath.Join(parent, siblingName), siblingSecret, 0o644)
	r := attackPyOK(t, m, runOpts{dir: ws}, []string{"-v", vol + ":/data", "-v", rwVol + ":/rw:rw", "-v", file + ":/file"}, `
for p in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/self/mountstats", "/proc/1/mountinfo", "/proc/thread-self/mountinfo"):
    try:
        print("BEGIN", p)
        print(open(p).read())
        print("END", p)
    except Exception as e:
        print("ERR", p, type(e).__name__)
import os
for d in ("/data/..", "/workspace/..", "/data/../.."):
    print("LIST", d, sorted(os.listdir(d)))
print("DATA", sorted(os.listdir("/data")), sorted(os.listdir("/usr")))
`)
	attackNoSecrets(t, r, map[string]string{"the content of a file next to the granted directory": siblingSecret,
		"the name of a file next to the granted directory": siblingName,
		"the host name of the workspace":                   wsToken,
		"the host name of a read-only volume":              volToken,
		"the rootfs's host path":                           rootfsDir})
	if !strings.Contains(r.stdout, "DATA [] ['bin', 'lib") {
		t.Fatalf("the read-only grants do not read as their host directories:\n%s", r)
	}
	_, body, _ := strings.Cut(r.stdout, "BEGIN /proc/self/mountinfo\n")
	body, _, _ = strings.Cut(body, "END /proc/self/mountinfo")
	rows := attackMountinfoRoots(body)
	if len(rows) < 5 {
		t.Fatalf("could not read the jail's mountinfo:\n%s", r)
	}
	canon := func(p string) string {
		if c, err := filepath.EvalSymlinks(p); err == nil {
			return c
		}
		return p
	}
	allowedIn := map[string][]string{
		"devtmpfs": {"/null", "/zero", "/full", "/random", "/urandom"},
		"proc":     {"/", "/sys", "/bus", "/fs", "/irq"},
	}
	var shown []string
	for _, row := range rows {
		root, point, fstype := row[0], row[1], row[2]
		if root == "/" || slices.Contains(allowedIn[fstype], root) {
			continue
		}
		// The root is the path within its filesystem: a suffix of the
		// host path when that lies on a filesystem mounted below /.
		if (point == "/rw" && strings.HasSuffix(canon(rwVol), root)) || (point == "/file" && strings.HasSuffix(canon(file), root)) {
			shown = append(shown, root+" at "+point)
			continue
		}
		t.Errorf("the jail's mountinfo shows a host path: %s mounted at %s (%s)", root, point, fstype)
	}
	t.Logf("host paths the jail sees (a writable volume and a single file, the documented exception): %v", shown)
}

func attackSupervisorMemory(t *testing.T, m mode) {
	envSecret := randomToken("supervisorenv")
	argvSecret := randomToken("supervisorargv")
	auditDir := newOpenDir(t)
	audit := filepath.Join(auditDir, argvSecret+".log")
	marker := randomToken("atk")
	var tracers []string
	var mu sync.Mutex
	r := attackWatch(t, m, runOpts{env: []string{"RLJAIL_IT_SUPERVISOR_SECRET=" + envSecret}},
		attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
			mu.Lock()
			defer mu.Unlock()
			if init, ok := readProc(pl.ppid); ok {
				tracers = append(tracers, "init:"+attackTracerPid(init.pid))
				if sup, ok := readProc(init.ppid); ok {
					tracers = append(tracers, "rljail:"+attackTracerPid(sup.pid))
				}
			}
		}},
		attackPython([]string{"--audit-log", audit}, attackPyLib+`
import re, time
prefix = b"supervisor"
def scan_mem(pid):
    found = []
    with open("/proc/%s/maps" % pid) as maps, open("/proc/%s/mem" % pid, "rb", 0) as mem:
        for l in maps:
            a, b = [int(x, 16) for x in l.split()[0].split("-")]
            try:
                mem.seek(a)
                data = mem.read(min(b - a, 1 << 24))
            except Exception:
                continue
            for mm in re.finditer(prefix + rb"(env|argv)[0-9a-f]{24}", data):
                found.append(mm.group(0))
    return found
me = str(os.getpid())
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    if pid == me:
        continue
    attempt("mem:" + pid, lambda: print("FOUND", scan_mem(pid)))
    attempt("environ:" + pid, lambda: print("ENVIRON", open("/proc/%s/environ" % pid, "rb").read()))
    for t in os.listdir("/proc/%s/task" % pid):
        attempt("taskmem:%s/%s" % (pid, t), lambda: open("/proc/%s/task/%s/mem" % (pid, t), "rb").read(1))
    attempt("fds:" + pid, lambda: print("FDS", os.listdir("/proc/%s/fd" % pid)))
iov = (ctypes.c_char * 64)()
class IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local = IOV(ctypes.cast(iov, ctypes.c_void_p), 64)
remote = IOV(0x400000, 64)
attempt("process_vm_readv:1", lambda: sc(310, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
attempt("ptrace_attach:1", lambda: sc(101, 16, 1, 0, 0))
attempt("ptrace_seize:1", lambda: sc(101, 0x4206, 1, 0, 0))
attempt("pidfd_getfd:1", lambda: sc(438, sc(434, 1, 0)[0], 0, 0))
# the supervisor is not in the jail's PID namespace: try every pid anyway
alive = [p for p in range(2, 1 << 15) if p != os.getpid() and sc(62, p, 0) == (0, 0)]
print("SIGNALABLE", alive)
print("READY", flush=True)
time.sleep(0.5)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the probe failed:\n%s", r)
	}
	attackNoSecrets(t, r, map[string]string{"rljail's environment": envSecret, "rljail's argv (--audit-log path)": argvSecret})
	attackExpectFailed(t, r.stdout, "process_vm_readv:1", "ptrace_attach:1", "ptrace_seize:1", "pidfd_getfd:1", "mem:1", "environ:1", "fds:1")
	if v, _ := lineValue(r.stdout, "SIGNALABLE "); v != "[]" {
		t.Errorf("the payload can signal pids other than its own and init's: %s", v)
	}
	mu.Lock()
	t.Logf("TracerPid while the payload probed: %v", tracers)
	for _, tr := range tracers {
		if !strings.HasSuffix(tr, ":0") {
			t.Errorf("a process of rljail is being traced: %s", tr)
		}
	}
	mu.Unlock()
	attackNoSurvivors(t, m, r, marker)
}

func attackHostIdentity(t *testing.T, m mode) {
	secrets := map[string]string{}
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(b)) >= 16 {
			secrets["the host's "+p] = string(bytes.TrimSpace(b))
		}
	}
	host, _ := os.Hostname()
	if len(host) >= 6 && host != "rljail" && host != "localhost" {
		secrets["the host's hostname "+host] = host
	} else {
		t.Logf("the host's hostname %q is too generic to search for", host)
	}
	r := attackPyOK(t, m, runOpts{}, nil, `
import os, socket
for p in ("/etc/machine-id", "/var/lib/dbus/machine-id", "/etc/hostname", "/proc/sys/kernel/hostname", "/etc/hosts"):
    try:
        print("FILE", p, open(p).read())
    except Exception as e:
        print("ERR", p, type(e).__name__)
print("UNAME", os.uname())
print("HOSTNAME", socket.gethostname())
`)
	attackNoSecrets(t, r, secrets)
	if v, _ := lineValue(r.stdout, "HOSTNAME "); v != "rljail" {
		t.Errorf("the jail's hostname is %q, want rljail", v)
	}
	if len(secrets) == 0 {
		t.Logf("the host has no machine-id and a generic hostname: only the jail's hostname was checked")
	}
}

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "write_readonly_mounts", group: groupFilesystem,
			mechanism: "create, append, truncate, chmod, utime, unlink and rename in /, /usr, /etc, /dev, /workspace, a read-only volume and /proc/sys",
			layer:     "read-only mounts (rootfs, workspace, ro volumes, the root tmpfs after setup, /dev, /proc/sys)",
			run:       attackWriteReadonly},
		{name: "remount_readwrite", group: groupFilesystem,
			mechanism: "remount /, /usr, /workspace and a volume read-write (mount MS_REMOUNT, mount_setattr), detach them, or clone a tree over them",
			layer:     "seccomp denies every mount call; no capabilities; locked mount flags",
			run:       attackRemount},
		{name: "unmask_proc", group: groupFilesystem,
			mechanism: "unmount the /dev/null masks over /proc/kcore and /proc/sys, or mount a fresh procfs, then read kcore and write sysctls",
			layer:     "seccomp denies umount2 and mount; masks are locked into the jail's mount namespace",
			run:       attackUnmaskProc},
		{name: "mknod_devices", group: groupFilesystem,
			mechanism: "mknod block and character devices (sda, mem, kmsg) in /tmp and in a read-write volume",
			layer:     "seccomp allows mknod only for FIFOs; no CAP_MKNOD; nodev mounts",
			run:       attackMknod},
		{name: "setuid_plant", group: groupFilesystem,
			mechanism: "leave a setuid/setgid executable in a read-write volume (chmod, fchmod, fchmodat, open/creat modes, chown to root)",
			layer:     "seccomp argument filters on mode bits; the jail's uid maps to an unprivileged host uid; nosuid",
			run:       attackSetuidPlant},
		{name: "file_capabilities", group: groupFilesystem,
			mechanism: "set security.capability, trusted.* and security.* xattrs on a file in a read-write volume",
			layer:     "no CAP_SETFCAP/CAP_SYS_ADMIN in any namespace that owns the host file",
			run:       attackFileCaps},
		{name: "planted_symlink_volume_source", group: groupFilesystem,
			mechanism: "run 1 plants symlinks in a read-write volume to a host secret directory; run 2 grants the symlinked path (and .. through it) with -v",
			layer:     "-v sources resolved on the host: a symlink the jail planted must not redirect a later grant (unless the user typed the target)",
			run:       attackPlantedSymlinkSource},
		{name: "planted_report_targets", group: groupFilesystem,
			mechanism: "run 1 plants, in a read-write volume, symlinks to host files and FIFOs under the names a later run's --result, --audit-log and --env-file use; run 2 names them; run 3 names such a file inside the volume it grants",
			layer:     "the report, the log and the env file are opened without following a planted link and without blocking on a FIFO; such a file inside a writable volume is refused",
			run:       attackPlantedReportTargets},
		{name: "host_user_counters", group: groupDoS,
			mechanism: "queue thousands of blocked real-time signals to itself and to PID 1, and open inotify instances: both count against the host user who owns the jail's user namespace (root as root), whose limits are host-wide",
			layer:     "RLIMIT_SIGPENDING of 256 for the payload and for init; inotify is not in any profile",
			run:       attackHostUserCounters},
		{name: "symlinks_inside_volume", group: groupFilesystem,
			mechanism: "follow absolute and relative symlinks inside a granted directory that point at host secrets and at /",
			layer:     "symlinks resolve inside the jail's own mount namespace, where the host tree does not exist",
			run:       attackSymlinksInsideVolume},
		{name: "hardlink_across_mounts", group: groupFilesystem,
			mechanism: "hard-link a read-only volume's file, the rootfs's python and /etc/passwd into a read-write volume (link, linkat AT_EMPTY_PATH, /proc/self/fd)",
			layer:     "the kernel refuses links across mounts (EXDEV); no CAP_DAC_READ_SEARCH for AT_EMPTY_PATH",
			run:       attackHardlinks},
		{name: "proc_exe_overwrite", group: groupFilesystem,
			mechanism: "CVE-2019-5736: open /proc/self/exe, /proc/1/exe (rljail's binary) and every /proc/PID/exe for writing, directly and through an O_PATH fd",
			layer:     "init is non-dumpable (no /proc/1/exe); the rootfs is read-only; rljail's binary is never reachable for writing",
			run:       attackProcExe},
		{name: "leaked_fds_and_cwd", group: groupFilesystem,
			mechanism: "CVE-2024-21626: look for inherited descriptors (/proc/self/fd, fstat 3..1023) and a host cwd; checked from the host too",
			layer:     "descriptor hygiene: only the pumped pipes 0-2 reach the payload; cwd is inside the jail",
			run:       attackLeakedFDs},
		{name: "workdir_through_proc", group: groupFilesystem,
			mechanism: "CVE-2024-21626 variant: -w /proc/self/fd/N, /proc/1/cwd, /proc/1/root to land the payload in a host directory",
			layer:     "the workdir is resolved inside the finished jail after every host descriptor is closed",
			run:       attackWorkdirProc},
		{name: "proc_sys_and_sysrq", group: groupFilesystem,
			mechanism: "write core_pattern, modprobe, hostname, sysrq and drop_caches in /proc/sys, and 'h' to /proc/sysrq-trigger",
			layer:     "/proc is mounted read-only as a whole, /proc/sys with it; /proc/sysrq-trigger is masked; the jail has no capability over the host",
			run:       attackProcSys},
		{name: "proc_kernel_memory", group: groupFilesystem,
			mechanism: "read /proc/kcore, kallsyms, kmsg, timer_list, sched_debug, keys, kpageflags, slabinfo, vmallocinfo and /dev/mem; list /proc/acpi, driver, tty and the other hardware directories",
			layer:     "masked with /dev/null, the directories with one empty tmpfs; /dev holds five harmless nodes",
			run:       attackProcKernelMemory},
		{name: "proc_root_traversal", group: groupFilesystem,
			mechanism: "walk out through /proc/1/root, /proc/self/root/.., /proc/1/cwd and the magic links of pipes to a marker in the host's /",
			layer:     "a fresh procfs of the jail's PID namespace; init non-dumpable; pivot_root detached the host root",
			run:       attackProcRootTraversal},
		{name: "chroot_escape", group: groupFilesystem,
			mechanism: "classic chroot escape: chroot into a subdirectory, fchdir out, chdir .. 64 times, chroot .",
			layer:     "seccomp denies chroot; pivot_root and an unmounted host root leave nothing above /",
			run:       attackChrootEscape},
		{name: "open_by_handle_shocker", group: groupFilesystem,
			mechanism: "the 'shocker' escape: name_to_handle_at, then open_by_handle_at with guessed handles of the host's root inode",
			layer:     "seccomp denies both calls; no CAP_DAC_READ_SEARCH",
			run:       attackShocker},
		{name: "volume_destination_escape", group: groupFilesystem,
			mechanism: "-v destinations with .., relative paths, //, /proc and /dev to mount outside the jail's tree or over its masks",
			layer:     "destinations are validated as clean absolute paths outside reserved trees and resolved inside the new root (RESOLVE_IN_ROOT)",
			run:       attackVolumeDest},
	}...)
}

func attackWriteReadonly(t *testing.T, m mode) {
	ws, vol := newDir(t), newOpenDir(t)
	writeFile(t, filepath.Join(ws, "ws.txt"), randomToken("ws"), 0o666)
	writeFile(t, filepath.Join(vol, "vol.txt"), randomToken("vol"), 0o666)
	rootfsBefore := attackTreeFingerprint(t, rootfsDir, false)
	pyBefore := attackSHA256(filepath.Join(rootfsDir, "usr/bin/python3.11"))
	wsBefore, volBefore := attackTreeFingerprint(t, ws, true), attackTreeFingerprint(t, vol, true)
	r := attackPyOK(t, m, runOpts{dir: ws}, []string{"-v", vol + ":/data"}, attackPyLib+`
dirs = ["/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/dev", "/workspace", "/data", "/proc/sys/kernel", "/bin", "/lib"]
for d in dirs:
    attempt("create:" + d, lambda: os.close(os.open(d.rstrip("/") + "/rljail-it-w", os.O_WRONLY | os.O_CREAT, 0o644)))
    attempt("mkdir:" + d, lambda: os.mkdir(d.rstrip("/") + "/rljail-it-d"))
    attempt("symlink:" + d, lambda: os.symlink("/x", d.rstrip("/") + "/rljail-it-l"))
    attempt("chmod:" + d, lambda: os.chmod(d, 0o777))
files = ["/usr/bin/python3.11", "/etc/passwd", "/etc/hosts", "/workspace/ws.txt", "/data/vol.txt", "/dev/null"]
for f in files:
    if f != "/dev/null":
        attempt("append:" + f, lambda: open(f, "ab").write(b"x"))
        attempt("truncate:" + f, lambda: os.truncate(f, 0))
    attempt("chmod:" + f, lambda: os.chmod(f, 0o777))
    attempt("utime:" + f, lambda: os.utime(f, (0, 0)))
    attempt("rename:" + f, lambda: os.rename(f, f + ".x"))
    attempt("unlink:" + f, lambda: os.unlink(f))
`)
	attackExpectAllFailed(t, r, 60)
	if attackTreeFingerprint(t, rootfsDir, false) != rootfsBefore || attackSHA256(filepath.Join(rootfsDir, "usr/bin/python3.11")) != pyBefore {
		t.Errorf("the rootfs %s changed on the host", rootfsDir)
	}
	if attackTreeFingerprint(t, ws, true) != wsBefore {
		t.Errorf("the read-only workspace %s changed on the host", ws)
	}
	if attackTreeFingerprint(t, vol, true) != volBefore {
		t.Errorf("the read-only volume %s changed on the host", vol)
	}
}

func attackRemount(t *testing.T, m mode) {
	ws, vol := newDir(t), newOpenDir(t)
	rootfsBefore := attackTreeFingerprint(t, rootfsDir, false)
	wsBefore, volBefore := attackTreeFingerprint(t, ws, true), attackTreeFingerprint(t, vol, true)
	r := attackPyOK(t, m, runOpts{dir: ws}, []string{"-v", vol + ":/data"}, attackPyLib+`
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
clr = MountAttr(0, 1, 0, 0)  # clear MOUNT_ATTR_RDONLY
targets = ["/", "/usr", "/workspace", "/data", "/etc", "/proc/sys", "/dev"]
for d in targets:
    attempt("remount:" + d, lambda: sc(165, 0, d.encode(), 0, MS_REMOUNT | MS_BIND, 0))
    attempt("remount_plain:" + d, lambda: sc(165, b"none", d.encode(), 0, MS_REMOUNT, 0))
    attempt("mount_setattr:" + d, lambda: sc(442, -100, d.encode(), 0, ctypes.byref(clr), ctypes.sizeof(clr)))
    attempt("bind_tmp_over:" + d, lambda: sc(165, b"/tmp", d.encode(), 0, MS_BIND, 0))
    attempt("umount_detach:" + d, lambda: sc(166, d.encode(), 2))
attempt("open_tree_clone", lambda: sc(428, -100, b"/tmp", 1))
attempt("fsopen_tmpfs", lambda: sc(430, b"tmpfs", 0))
for d in ("/usr", "/workspace", "/data", "/"):
    attempt("write_after:" + d, lambda: open(d.rstrip("/") + "/rljail-it-remount", "w").write("x"))
`)
	attackExpectAllFailed(t, r, 30)
	if attackTreeFingerprint(t, rootfsDir, false) != rootfsBefore {
		t.Errorf("the rootfs changed on the host")
	}
	if attackTreeFingerprint(t, ws, true) != wsBefore || attackTreeFingerprint(t, vol, true) != volBefore {
		t.Errorf("the workspace or the read-only volume changed on the host")
	}
}

func attackUnmaskProc(t *testing.T, m mode) {
	host, _ := os.Hostname()
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
for p in ("/proc/kcore", "/proc/kallsyms", "/proc/sys", "/proc/sysrq-trigger", "/proc/acpi", "/proc"):
    attempt("umount:" + p, lambda: sc(166, p.encode(), 2))
os.mkdir("/tmp/p")
attempt("mount_proc", lambda: sc(165, b"proc", b"/tmp/p", b"proc", 0, 0))
attempt("mount_sysfs", lambda: sc(165, b"sysfs", b"/tmp/p", b"sysfs", 0, 0))
attempt("mount_devtmpfs", lambda: sc(165, b"devtmpfs", b"/tmp/p", b"devtmpfs", 0, 0))
attempt("kcore_nonempty", lambda: (0, 0) if len(open("/proc/kcore", "rb").read(4096)) > 0 else (-1, errno.ENODATA))
attempt("write_hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("rljail-it-pwned"))
print("FRESH", os.listdir("/tmp/p"))
`)
	attackExpectFailed(t, r.stdout, "umount:/proc/kcore", "umount:/proc/kallsyms", "umount:/proc/sys", "umount:/proc/sysrq-trigger",
		"umount:/proc/acpi", "umount:/proc", "mount_proc", "mount_sysfs", "mount_devtmpfs", "kcore_nonempty", "write_hostname")
	if v, _ := lineValue(r.stdout, "FRESH "); v != "[]" {
		t.Errorf("a filesystem was mounted at /tmp/p in the jail: %s", v)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host's hostname changed from %q to %q", host, h)
	}
}

// attackVolumeScan walks a host directory for what a jail must never leave
// there: device nodes, setuid/setgid files, root-owned entries, file
// capabilities.
func attackVolumeScan(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&fs.ModeDevice != 0:
			t.Errorf("the jail left a device node on the host: %s (%v, rdev %d:%d)", p, fi.Mode(), unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case fi.Mode().IsRegular() && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0:
			t.Errorf("the jail left a setuid/setgid file on the host: %s (%v, owner %d:%d)", p, fi.Mode(), st.Uid, st.Gid)
		case st.Uid == 0 || (st.Gid == 0 && fi.Mode()&fs.ModeSetgid != 0):
			t.Errorf("the jail created a root-owned entry on the host: %s (%v, owner %d:%d)", p, fi.Mode(), st.Uid, st.Gid)
		}
		if fi.Mode().IsRegular() {
			buf := make([]byte, 256)
			if n, err := unix.Lgetxattr(p, "security.capability", buf); err == nil {
				t.Errorf("the jail left file capabilities on the host: %s (%d bytes of security.capability)", p, n)
			}
		}
		return nil
	})
}

func attackMknod(t *testing.T, m mode) {
	vol := newOpenDir(t)
	r := attackPyOK(t, m, runOpts{}, []string{"-v", vol + ":/out:rw"}, attackPyLib+`
import stat
nodes = {"sda": (stat.S_IFBLK, 8, 0), "mem": (stat.S_IFCHR, 1, 1), "kmsg": (stat.S_IFCHR, 1, 11), "console": (stat.S_IFCHR, 5, 1), "sock": (stat.S_IFSOCK, 0, 0), "reg": (stat.S_IFREG, 0, 0)}
for d in ("/tmp", "/out", "/dev/shm"):
    for name, (kind, ma, mi) in nodes.items():
        attempt("mknod:%s/%s" % (d, name), lambda: os.mknod("%s/%s" % (d, name), kind | 0o666, os.makedev(ma, mi)))
        attempt("mknodat:%s/%s2" % (d, name), lambda: sc(259, -100, ("%s/%s2" % (d, name)).encode(), kind | 0o666, os.makedev(ma, mi)))
    attempt("fifo:" + d, lambda: os.mkfifo(d + "/fifo"))
for dev in ("/tmp/sda", "/out/mem", "/dev/shm/kmsg"):
    attempt("open:" + dev, lambda: os.close(os.open(dev, os.O_RDONLY)))
`)
	var names []string
	for k, v := range attackAttempts(r.stdout) {
		if strings.HasPrefix(k, "fifo:") {
			if v != "OK" {
				t.Errorf("%s: %s, want OK (FIFOs are allowed; the probe is broken otherwise)", k, v)
			}
			continue
		}
		if strings.Contains(k, "/sock") || strings.Contains(k, "/reg") {
			continue // sockets and regular files are not devices; mknod may allow them
		}
		names = append(names, k)
	}
	attackExpectFailed(t, r.stdout, names...)
	attackVolumeScan(t, vol)
}

func attackSetuidPlant(t *testing.T, m mode) {
	vol := newOpenDir(t)
	r := attackPyOK(t, m, runOpts{}, []string{"-v", vol + ":/out:rw"}, attackPyLib+`
import shutil
shutil.copy("/usr/bin/python3.11", "/out/prog")
for mode in (0o4755, 0o2755, 0o6755):
    attempt("chmod:%o" % mode, lambda: os.chmod("/out/prog", mode))
    fd = os.open("/out/prog", os.O_RDONLY)
    attempt("fchmod:%o" % mode, lambda: os.fchmod(fd, mode))
    os.close(fd)
    attempt("fchmodat:%o" % mode, lambda: sc(268, -100, b"/out/prog", mode))
    attempt("fchmodat2:%o" % mode, lambda: sc(452, -100, b"/out/prog", mode, 0))
    attempt("open_creat:%o" % mode, lambda: os.close(os.open("/out/o%o" % mode, os.O_WRONLY | os.O_CREAT, mode)))
    attempt("openat_creat:%o" % mode, lambda: sc(257, -100, ("/out/a%o" % mode).encode(), os.O_WRONLY | os.O_CREAT, mode))
    attempt("creat:%o" % mode, lambda: sc(85, ("/out/c%o" % mode).encode(), mode))
    attempt("mkfifo:%o" % mode, lambda: os.mkfifo("/out/f%o" % mode, mode))
    attempt("mknod_fifo:%o" % mode, lambda: os.mknod("/out/n%o" % mode, 0o010000 | mode))
    attempt("mknodat_fifo:%o" % mode, lambda: sc(259, -100, ("/out/m%o" % mode).encode(), 0o010000 | mode, 0))
attempt("chown_root", lambda: os.chown("/out/prog", 0, 0))
attempt("lchown_root", lambda: os.lchown("/out/prog", 0, 0))
os.mkdir("/out/dir")
attempt("chmod_dir:2777", lambda: os.chmod("/out/dir", 0o2777))
`)
	attackExpectAllFailed(t, r, 29)
	attackVolumeScan(t, vol)
}

func attackFileCaps(t *testing.T, m mode) {
	vol := newOpenDir(t)
	r := attackPyOK(t, m, runOpts{}, []string{"-v", vol + ":/out:rw"}, attackPyLib+`
import shutil, struct
shutil.copy("/usr/bin/python3.11", "/out/prog")
# VFS_CAP_REVISION_2, effective; every permitted bit
cap = struct.pack("<IIIII", 0x02000001, 0xffffffff, 0, 0xffffffff, 0)
cap3 = struct.pack("<IIIIII", 0x03000001, 0xffffffff, 0, 0xffffffff, 0, 0)
attempt("setxattr_cap_v2", lambda: os.setxattr("/out/prog", "security.capability", cap))
attempt("setxattr_cap_v3", lambda: os.setxattr("/out/prog", "security.capability", cap3))
attempt("setxattr_trusted", lambda: os.setxattr("/out/prog", "trusted.rljail", b"x"))
attempt("setxattr_selinux", lambda: os.setxattr("/out/prog", "security.selinux", b"system_u:object_r:shell_exec_t:s0"))
attempt("setxattr_user", lambda: os.setxattr("/out/prog", "user.rljail", b"harmless"))
`)
	attackExpectFailed(t, r.stdout, "setxattr_cap_v2", "setxattr_cap_v3", "setxattr_trusted")
	attackVolumeScan(t, vol)
	buf := make([]byte, 256)
	for _, name := range []string{"trusted.rljail", "security.selinux"} {
		if n, err := unix.Lgetxattr(filepath.Join(vol, "prog"), name, buf); err == nil {
			t.Errorf("the jail set %s on the host file: %q", name, buf[:n])
		}
	}
}

// attackListCode lists every directory in argv recursively and prints the
// content of each regular file.
const attackListCode = `
import os, stat, sys
for top in sys.argv[1:-1]:
    try:
        print("REAL", top, os.path.realpath(top))
        for root, dirs, files in os.walk(top, onerror=lambda e: print("WALKERR", e)):
            for f in files:
                p = os.path.join(root, f)
                try:
                    if stat.S_ISREG(os.stat(p).st_mode):
                        print("CONTENT", p, open(p, "rb").read(4096))
                except Exception as e:
                    print("ERR", p, type(e).__name__)
        if os.path.isfile(top):
            print("CONTENT", top, open(top, "rb").read(4096))
    except Exception as e:
        print("ERR", top, type(e).__name__, e)
`

func attackPlantedSymlinkSource(t *testing.T, m mode) {
	secretDir := newDir(t)
	secret := randomToken("plantedsecret")
	writeFile(t, filepath.Join(secretDir, "s.txt"), secret, 0o644)
	rw := newOpenDir(t)
	rel, err := filepath.Rel(rw, secretDir)
	if err != nil {
		t.Fatal(err)
	}
	// Run 1: the jail, given a read-write volume, plants symlinks there.
	plant := attackPyOK(t, m, runOpts{}, []string{"-v", rw + ":/out:rw"}, `
import os, sys
secret_dir, rel = sys.argv[1], sys.argv[2]
os.symlink(secret_dir, "/out/link")
os.symlink(rel, "/out/rel")
os.mkdir("/out/sub")
os.symlink(secret_dir, "/out/sub/inner")
os.symlink(secret_dir + "/s.txt", "/out/file")
print("PLANTED", sorted(os.listdir("/out")))
`, secretDir, rel)
	for _, l := range []string{"link", "rel", "sub/inner", "file"} {
		if fi, err := os.Lstat(filepath.Join(rw, l)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("run 1 did not plant %s (%v):\n%s", l, err, plant)
		}
	}
	// Control: typed by the user, the secret directory is granted.
	ctl := attackPy(t, m, runOpts{}, []string{"-v", secretDir + ":/data"}, attackListCode, "/data")
	if !strings.Contains(ctl.stdout, secret) {
		t.Fatalf("control: granting %s itself does not show its file: the probe is broken\n%s", secretDir, ctl)
	}
	// Run 2: the user grants paths inside the volume the jail wrote to.
	var decisions []string
	for _, src := range []string{"link", "rel", "sub/inner", "file", "link/..", "sub/inner/..", "sub/inner/../.."} {
		spec := filepath.Join(rw, src)
		if strings.Contains(src, "..") {
			spec = rw + "/" + src // unclean on purpose: as typed
		}
		r := attackPy(t, m, runOpts{}, []string{"-v", spec + ":/data"}, attackListCode, "/data")
		decisions = append(decisions, fmt.Sprintf("-v %s: exit %d %s", strings.TrimPrefix(spec, rw), r.exit, strings.TrimSpace(r.stderr)))
		if strings.Contains(r.all(), secret) {
			t.Errorf("LEAK: -v %s:/data (a symlink the jail planted in a rw volume, pointing at %s) exposed the host secret directory to the jail (exit %d)", spec, secretDir, r.exit)
		}
	}
	t.Logf("what rljail did with the planted paths:\n\t%s", strings.Join(decisions, "\n\t"))
}

func attackSymlinksInsideVolume(t *testing.T, m mode) {
	secretDir := newDir(t)
	secret := randomToken("linksecret")
	writeFile(t, filepath.Join(secretDir, "s.txt"), secret, 0o644)
	vol := newDir(t)
	rel, _ := filepath.Rel(vol, filepath.Join(secretDir, "s.txt"))
	for name, target := range map[string]string{
		"abs": filepath.Join(secretDir, "s.txt"), "rel": rel, "dirlink": secretDir, "rootlink": "/",
		"up": "../../../../../../../..", "proc": "/proc/1/root" + secretDir,
	} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := attackPy(t, m, runOpts{}, []string{"-v", vol + ":/data"}, `
import os, sys
print("LIST", sorted(os.listdir("/data")))
for name in sorted(os.listdir("/data")):
    p = "/data/" + name
    try:
        print("LINK", name, os.readlink(p), "->", os.path.realpath(p))
    except Exception as e:
        print("LINKERR", name, type(e).__name__)
for p in ("/data/abs", "/data/rel", "/data/dirlink/s.txt", "/data/rootlink" + sys.argv[1] + "/s.txt",
          "/data/up" + sys.argv[1] + "/s.txt", "/data/proc", "/data/proc/s.txt"):
    try:
        print("READ", p, open(p, "rb").read())
    except Exception as e:
        print("READERR", p, type(e).__name__)
for p in ("/data/dirlink", "/data/rootlink", "/data/up"):
    try:
        print("DIR", p, sorted(os.listdir(p)))
    except Exception as e:
        print("DIRERR", p, type(e).__name__)
`, secretDir)
	if r.exit != 0 {
		t.Fatalf("the probe failed:\n%s", r)
	}
	attackNoSecrets(t, r, map[string]string{"a host file behind a symlink in a granted directory": secret})
}

func attackHardlinks(t *testing.T, m mode) {
	ro, rw := newDir(t), newOpenDir(t)
	secretFile := filepath.Join(ro, "f.txt")
	writeFile(t, secretFile, randomToken("hl"), 0o644)
	var before syscall.Stat_t
	if err := syscall.Stat(secretFile, &before); err != nil {
		t.Fatal(err)
	}
	r := attackPyOK(t, m, runOpts{}, []string{"-v", ro + ":/data", "-v", rw + ":/out:rw"}, attackPyLib+`
for src, dst in (("/data/f.txt", "/out/f"), ("/usr/bin/python3.11", "/out/py"), ("/etc/passwd", "/out/passwd"),
                 ("/usr/bin/python3.11", "/tmp/py"), ("/data/f.txt", "/tmp/f")):
    attempt("link:%s>%s" % (src, dst), lambda: os.link(src, dst))
fd = os.open("/data/f.txt", os.O_RDONLY)
attempt("linkat_empty_path", lambda: sc(265, fd, b"", -100, b"/out/g", 0x1000))
attempt("linkat_proc_fd", lambda: os.link("/proc/self/fd/%d" % fd, "/out/h", follow_symlinks=True))
attempt("rename_across", lambda: os.rename("/data/f.txt", "/out/r"))
pfd = os.open("/data/f.txt", os.O_PATH)
attempt("linkat_opath", lambda: sc(265, pfd, b"", -100, b"/out/p", 0x1000))
`)
	attackExpectFailed(t, r.stdout, attackAttemptNames(r.stdout)...)
	var after syscall.Stat_t
	_ = syscall.Stat(secretFile, &after)
	if after.Nlink != before.Nlink {
		t.Errorf("the link count of the read-only volume's file changed: %d -> %d", before.Nlink, after.Nlink)
	}
	_ = filepath.WalkDir(rw, func(p string, d fs.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && syscall.Lstat(p, &st) == nil && st.Ino == before.Ino && st.Dev == before.Dev {
			t.Errorf("the rw volume holds a hard link to the read-only volume's file: %s", p)
		}
		return nil
	})
	attackVolumeScan(t, rw)
}

func attackProcExe(t *testing.T, m mode) {
	binBefore := attackSHA256(testBin)
	pyBefore := attackSHA256(filepath.Join(rootfsDir, "usr/bin/python3.11"))
	origBin := os.Getenv("RLJAIL_BIN")
	origBefore := ""
	if origBin != "" {
		origBefore = attackSHA256(origBin)
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
import subprocess, time
child = subprocess.Popen(["python3", "-c", "import time; time.sleep(3)"])
time.sleep(0.2)
pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
for pid in pids + ["self", "thread-self", str(child.pid)]:
    exe = "/proc/%s/exe" % pid
    for name, flags in (("wronly", os.O_WRONLY), ("rdwr", os.O_RDWR), ("trunc", os.O_WRONLY | os.O_TRUNC)):
        attempt("%s:%s" % (name, pid), lambda: os.close(os.open(exe, flags)))
    def via_opath():
        fd = os.open(exe, os.O_PATH)
        os.close(os.open("/proc/self/fd/%d" % fd, os.O_WRONLY))
    attempt("opath_reopen:%s" % pid, via_opath)
    def via_rdonly():
        fd = os.open(exe, os.O_RDONLY)
        os.close(os.open("/proc/self/fd/%d" % fd, os.O_WRONLY))
    attempt("rdonly_reopen:%s" % pid, via_rdonly)
attempt("write_python", lambda: open("/usr/bin/python3.11", "r+b").write(b"\x7fELF"))
for f in os.listdir("/proc/1/map_files") if os.access("/proc/1/map_files", os.R_OK) else []:
    attempt("map_files:" + f, lambda: os.close(os.open("/proc/1/map_files/" + f, os.O_WRONLY)))
attempt("map_files_dir", lambda: os.listdir("/proc/1/map_files"))
child.kill()
child.wait()
`)
	attackExpectAllFailed(t, r, 15)
	if attackSHA256(testBin) != binBefore {
		t.Errorf("CVE-2019-5736: rljail's binary %s (the init's /proc/1/exe) changed on the host", testBin)
	}
	if origBin != "" && attackSHA256(origBin) != origBefore {
		t.Errorf("$RLJAIL_BIN %s changed on the host", origBin)
	}
	if attackSHA256(filepath.Join(rootfsDir, "usr/bin/python3.11")) != pyBefore {
		t.Errorf("the rootfs's python3.11 changed on the host")
	}
}

func attackLeakedFDs(t *testing.T, m mode) {
	ws := newDir(t)
	marker := randomToken("atk")
	var hostFDs []string
	var hostCwd string
	r := attackWatch(t, m, runOpts{dir: ws}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		dir := "/proc/" + strconv.Itoa(pl.pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			hostFDs = append(hostFDs, "ERR "+err.Error())
		}
		for _, e := range ents {
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			hostFDs = append(hostFDs, e.Name()+"="+target)
		}
		hostCwd, _ = os.Readlink("/proc/" + strconv.Itoa(pl.pid) + "/cwd")
	}}, attackPython(nil, `
import os, time
listing = sorted(int(x) for x in os.listdir("/proc/self/fd"))
print("LISTED", listing)
for fd in listing:
    try:
        print("LINK", fd, os.readlink("/proc/self/fd/%d" % fd))
    except Exception as e:
        print("LINK", fd, "ERR", type(e).__name__)
open_ = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        open_.append(fd)
    except OSError:
        pass
print("FSTAT", open_)
print("CWD", os.getcwd(), os.readlink("/proc/self/cwd"))
for fd in range(3, 64):
    try:
        os.fchdir(fd)
        print("FCHDIR", fd, os.getcwd())
    except OSError:
        pass
print("READY", flush=True)
time.sleep(1)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the probe failed:\n%s", r)
	}
	if v, _ := lineValue(r.stdout, "FSTAT "); v != "[]" {
		t.Errorf("descriptors above 2 are open in the payload: %s\n%s", v, r.stdout)
	}
	var listed []int
	if v, ok := lineValue(r.stdout, "LISTED "); ok {
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == '[' || r == ']' || r == ',' || r == ' ' }) {
			n, _ := strconv.Atoi(f)
			listed = append(listed, n)
		}
	}
	if len(listed) < 3 || listed[0] != 0 || listed[1] != 1 || listed[2] != 2 || len(listed) > 4 {
		t.Errorf("/proc/self/fd lists %v: want 0, 1, 2 and at most the directory listdir opened", listed)
	}
	for _, fd := range []string{"0", "1", "2"} {
		if v, _ := lineValue(r.stdout, "LINK "+fd+" "); !strings.HasPrefix(v, "pipe:[") {
			t.Errorf("fd %s of the payload is %q, want a pipe pumped by rljail", fd, v)
		}
	}
	if strings.Contains(r.stdout, "FCHDIR") {
		t.Errorf("the payload could fchdir to an inherited descriptor:\n%s", r.stdout)
	}
	if v, _ := lineValue(r.stdout, "CWD "); v != "/workspace /workspace" {
		t.Errorf("the payload's cwd is %q, want /workspace", v)
	}
	// From the host: the payload's descriptors and cwd.
	sort.Strings(hostFDs)
	t.Logf("the payload's descriptors seen from the host: %v; cwd %s", hostFDs, hostCwd)
	if len(hostFDs) != 3 {
		t.Errorf("the payload holds %d descriptors (seen from the host): %v, want 0, 1, 2", len(hostFDs), hostFDs)
	}
	for _, f := range hostFDs {
		if _, target, _ := strings.Cut(f, "="); !strings.HasPrefix(target, "pipe:[") {
			t.Errorf("the payload holds %s (seen from the host): want only pipes", f)
		}
	}
	// The kernel shows the cwd relative to the payload's own root.
	if canon, _ := filepath.EvalSymlinks(ws); hostCwd != "/workspace" && hostCwd != canon {
		t.Errorf("the payload's cwd seen from the host is %q, want /workspace (the workspace %s)", hostCwd, ws)
	}
}

func attackWorkdirProc(t *testing.T, m mode) {
	dir := newDir(t)
	hostName := randomToken("rljail-it-cwdmarker-")
	writeFile(t, filepath.Join(dir, hostName), "x", 0o644)
	rootName := "/" + randomToken("rljail-it-rootmarker-")
	if err := os.WriteFile(rootName, []byte("x"), 0o644); err == nil {
		t.Cleanup(func() { os.Remove(rootName) })
	}
	var outcomes []string
	for _, w := range []string{"/proc/self/fd/3", "/proc/self/fd/4", "/proc/self/fd/5", "/proc/self/fd/6", "/proc/self/fd/7",
		"/proc/self/fd/8", "/proc/self/fd/9", "/proc/self/fd/10", "/proc/1/cwd", "/proc/1/root", "/proc/self/cwd", "/proc/self/root/.."} {
		r := attackPy(t, m, runOpts{dir: dir}, []string{"--no-workspace", "-w", w}, `
import os
print("CWD", os.getcwd())
for d in (".", "..", "../..", "../../../../../.."):
    try:
        print("LIST", d, sorted(os.listdir(d)))
    except Exception as e:
        print("LISTERR", d, type(e).__name__)
`)
		outcomes = append(outcomes, fmt.Sprintf("%s: exit %d", w, r.exit))
		if strings.Contains(r.all(), hostName) || strings.Contains(r.all(), strings.TrimPrefix(rootName, "/")) {
			t.Errorf("LEAK: -w %s put the payload in a host directory (a host marker is listed): exit %d\n%s", w, r.exit, r.stdout)
		}
		if r.exit != 0 && r.exit != 125 {
			t.Errorf("-w %s: exit %d, want 0 (a directory of the jail) or 125 (refused)\n%s", w, r.exit, r)
		}
		if r.exit == 125 && len(attackErrorLines(r.stderr)) != 1 {
			t.Errorf("-w %s: refused with more than one line: %q", w, r.stderr)
		}
	}
	t.Logf("%s", strings.Join(outcomes, "; "))
}

func attackProcSys(t *testing.T, m mode) {
	files := []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hostname",
		"/proc/sys/kernel/sysrq", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/panic", "/proc/sys/kernel/randomize_va_space"}
	before := map[string]string{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		before[f] = string(b)
	}
	t.Cleanup(func() {
		// Should a write have got through, put the host back.
		for _, f := range files {
			if b, _ := os.ReadFile(f); string(b) != before[f] && f != "/proc/sys/vm/drop_caches" {
				_ = os.WriteFile(f, []byte(before[f]), 0)
			}
		}
	})
	sysrqBefore := attackDmesgCount("sysrq: HELP")
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
writes = {"/proc/sys/kernel/core_pattern": "|/bin/false rljail-it", "/proc/sys/kernel/modprobe": "/tmp/rljail-it-modprobe",
          "/proc/sys/kernel/hostname": "rljail-it-pwned", "/proc/sys/kernel/sysrq": "1", "/proc/sys/vm/drop_caches": "3",
          "/proc/sys/kernel/panic": "1", "/proc/sys/kernel/randomize_va_space": "0", "/proc/sysrq-trigger": "h"}
for p, v in writes.items():
    attempt("write:" + p, lambda: open(p, "w").write(v))
`)
	attackExpectFailed(t, r.stdout, attackAttemptNames(r.stdout)...)
	for _, f := range files {
		if f == "/proc/sys/vm/drop_caches" {
			continue
		}
		if b, _ := os.ReadFile(f); string(b) != before[f] {
			t.Errorf("the host's %s changed from %q to %q", f, before[f], b)
		}
	}
	if after := attackDmesgCount("sysrq: HELP"); sysrqBefore >= 0 && after != sysrqBefore {
		t.Errorf("the host's kernel log shows a new sysrq HELP (%d -> %d): the jail reached /proc/sysrq-trigger", sysrqBefore, after)
	}
}

func attackProcKernelMemory(t *testing.T, m mode) {
	paths := []string{"/proc/kcore", "/proc/kallsyms", "/proc/kmsg", "/proc/timer_list", "/proc/sched_debug", "/proc/keys",
		"/proc/key-users", "/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup", "/proc/slabinfo", "/proc/vmallocinfo",
		"/proc/pagetypeinfo", "/proc/config.gz", "/dev/mem", "/dev/kmem", "/dev/port", "/proc/latency_stats"}
	r := attackPyOK(t, m, runOpts{}, nil, `
import os, sys
for p in sys.argv[1:-1]:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        print("READ", p, len(data))
    except Exception as e:
        print("READERR", p, type(e).__name__)
`, paths...)
	for _, p := range paths {
		v, ok := lineValue(r.stdout, "READ "+p+" ")
		if ok && v != "0" {
			t.Errorf("%s in the jail reads %s bytes, want nothing (masked or absent)", p, v)
		}
		if !ok && !strings.Contains(r.stdout, "READERR "+p+" ") {
			t.Errorf("%s: the probe printed nothing for it", p)
		}
	}
	// The masked directories this kernel has: init covers the first with an
	// empty tmpfs and the others with clones of that mount. Each must be an
	// empty tmpfs in the jail; the host's have entries (one at least), so
	// an empty listing is the mask's doing.
	var dirs []string
	hostEntries := 0
	for _, d := range []string{"acpi", "asound", "scsi", "firmware", "driver", "tty", "dynamic_debug"} {
		if entries, err := os.ReadDir("/proc/" + d); err == nil {
			dirs = append(dirs, "/proc/"+d)
			hostEntries += len(entries)
		}
	}
	if len(dirs) < 2 || hostEntries == 0 {
		t.Fatalf("the host's /proc has %v among the masked directories, %d entries in all; want two or more (the first mask and a clone), not all empty", dirs, hostEntries)
	}
	r = attackPyOK(t, m, runOpts{}, nil, `
import os, sys
mounts = {l.split()[4]: l.split(" - ")[1].split()[0] for l in open("/proc/self/mountinfo")}
for p in sys.argv[1:-1]:
    try:
        print("LIST", p, len(os.listdir(p)), mounts.get(p, "none"))
    except Exception as e:
        print("LISTERR", p, type(e).__name__)
`, dirs...)
	for _, p := range dirs {
		if v, ok := lineValue(r.stdout, "LIST "+p+" "); !ok || v != "0 tmpfs" {
			t.Errorf("%s in the jail: %q (entries, filesystem), want \"0 tmpfs\"\nstdout:\n%s", p, v, r.stdout)
		}
	}
}

func attackProcRootTraversal(t *testing.T, m mode) {
	name, secret := attackPlantInHostRoot(t, "hostrootsecret")
	r := attackPyOK(t, m, runOpts{}, nil, `
import os, sys
name = sys.argv[1]
for d in ("/proc/1/root", "/proc/self/root/../..", "/proc/1/cwd", "/proc/self/fd/0/..", "/proc/self/fd/1/../..",
          "/proc/thread-self/root/..", "/proc/1/task/1/root", "/..", "/../../../..", "/proc/self/ns", "/proc/1/ns"):
    try:
        print("LIST", d, sorted(os.listdir(d)))
    except Exception as e:
        print("LISTERR", d, type(e).__name__)
    try:
        print("READ", d, open(d + "/" + name).read())
    except Exception as e:
        print("READERR", d, type(e).__name__)
`, name)
	attackNoSecrets(t, r, map[string]string{"the name of a file in the host's /": name, "the content of a file in the host's /": secret})
}

func attackChrootEscape(t *testing.T, m mode) {
	name, secret := attackPlantInHostRoot(t, "chrootsecret")
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
name = sys.argv[1]
os.makedirs("/tmp/c/d")
root = os.open("/", os.O_RDONLY)
attempt("chroot", lambda: os.chroot("/tmp/c"))
os.fchdir(root)
for _ in range(64):
    os.chdir("..")
attempt("chroot_dot", lambda: os.chroot("."))
attempt("unshare_then_chroot", lambda: sc(272, 0x10000000))
for i, p in enumerate(("/" + name, "../../../../" + name)):
    try:
        print("READ", i, open(p).read())
    except Exception as e:
        print("READERR", i, type(e).__name__)
print("TOP", sorted(os.listdir(".")))
`, name)
	attackExpectErrno(t, r.stdout, "EPERM", "chroot", "chroot_dot", "unshare_then_chroot")
	attackNoSecrets(t, r, map[string]string{"the name of a file in the host's /": name, "the content of a file in the host's /": secret})
}

func attackShocker(t *testing.T, m mode) {
	_, secret := attackPlantInHostRoot(t, "shockersecret")
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
import struct
class Handle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]
h = Handle(128, 0)
mnt = ctypes.c_int(0)
attempt("name_to_handle_at", lambda: sc(303, -100, b"/tmp", ctypes.byref(h), ctypes.byref(mnt), 0))
fd = os.open("/usr", os.O_RDONLY)
for ino in (2, 11, 128, 2048):
    g = Handle(8, 1)  # FILEID_INO32_GEN: inode, generation
    struct.pack_into("<II", g.f, 0, ino, 0)
    attempt("open_by_handle_at:%d" % ino, lambda: sc(304, fd, ctypes.byref(g), os.O_RDONLY))
`)
	attackExpectErrno(t, r.stdout, "EPERM", "name_to_handle_at", "open_by_handle_at:2", "open_by_handle_at:11", "open_by_handle_at:128", "open_by_handle_at:2048")
	attackNoSecrets(t, r, map[string]string{"the content of a file in the host's /": secret})
}

func attackHostMounts(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, row := range attackMountinfoRoots(string(b)) {
		out[row[1]+" "+row[0]+" "+row[2]]++
	}
	return out
}

func attackVolumeDest(t *testing.T, m mode) {
	src := newOpenDir(t)
	before := attackHostMounts(t)
	for _, dest := range []string{"/../../etc", "data", "//x", "/x/../../y", "/proc", "/proc/1/root", "/proc/sys/kernel",
		"/dev", "/dev/null", "/dev/shm/x", "/.", "/x/.", "/"} {
		r := attackPy(t, m, runOpts{}, []string{"-v", src + ":" + dest + ":rw"}, `
import os
print("ROOT", sorted(os.listdir("/")))
`)
		if r.exit == 0 {
			t.Logf("-v SRC:%s accepted; the jail's / is %s", dest, strings.TrimSpace(r.stdout))
			if dest == "/" {
				t.Errorf("-v SRC:/ replaced the jail's root with a host directory")
			}
			continue
		}
		if r.exit != 125 || len(attackErrorLines(r.stderr)) != 1 {
			t.Errorf("-v SRC:%s: exit %d, want 125 with one line: %q", dest, r.exit, r.stderr)
		}
	}
	after := attackHostMounts(t)
	for k, n := range after {
		if n > before[k] {
			t.Errorf("a mount appeared on the host: %s", k)
		}
	}
	attackVolumeScan(t, src)
}

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "tcp_host_listeners", group: groupNetwork,
			mechanism: "connect over TCP to listeners on the host's 127.0.0.1, ::1 and every host address",
			layer:     "network namespace with only its own lo: the host's loopback and interfaces do not exist in the jail",
			run:       attackTCPHost},
		{name: "udp_host_listeners", group: groupNetwork,
			mechanism: "send UDP datagrams to listeners on the host's 127.0.0.1, ::1 and every host address",
			layer:     "network namespace",
			run:       attackUDPHost},
		{name: "dns_resolution", group: groupNetwork,
			mechanism: "resolve names with getaddrinfo and send raw DNS queries to the host's 127.0.0.1:53, 127.0.0.53 and public resolvers",
			layer:     "network namespace (no route, no host loopback) and no /etc/resolv.conf",
			run:       attackDNS},
		{name: "external_and_metadata", group: groupNetwork,
			mechanism: "reach public addresses, the cloud metadata service 169.254.169.254 and the host's gateway over IPv4 and IPv6",
			layer:     "network namespace without routes: ENETUNREACH",
			run:       attackExternal},
		{name: "raw_sockets", group: groupNetwork,
			mechanism: "open raw IPv4/IPv6 sockets and ping sockets to forge packets or ping the host",
			layer:     "no CAP_NET_RAW; ping_group_range of the new namespace; only lo",
			run:       attackRawSockets},
		{name: "packet_sockets", group: groupNetwork,
			mechanism: "open AF_PACKET sockets (and SOCK_PACKET) to sniff or inject frames",
			layer:     "seccomp allows socket() only for AF_UNIX, AF_INET, AF_INET6; no CAP_NET_RAW",
			run:       attackPacketSockets},
		{name: "netlink_and_other_families", group: groupNetwork,
			mechanism: "open netlink (route, audit, uevent, netfilter, sock_diag), AF_KEY, AF_ALG, AF_XDP, AF_CAN, AF_TIPC, AF_BLUETOOTH sockets",
			layer:     "seccomp socket family filter (EPERM before the kernel can autoload a protocol module)",
			run:       attackNetlink},
		{name: "socketpair_families", group: groupNetwork,
			mechanism: "create sockets of other families through socketpair() (netlink, packet, TIPC, RDS, ALG, vsock, ...), which the socket() filter does not see",
			layer:     "seccomp: the family filter must hold for socketpair as for socket (else the kernel's per-family code and module autoload are reachable)",
			run:       attackSocketpairFamilies},
		{name: "vsock_host", group: groupNetwork,
			mechanism: "open an AF_VSOCK socket to reach the hypervisor's host side (CID 2), which network namespaces do not isolate",
			layer:     "seccomp socket family filter",
			run:       attackVsock},
		{name: "abstract_unix_host", group: groupNetwork,
			mechanism: "connect to an abstract Unix socket (stream and datagram) bound by a host process",
			layer:     "abstract Unix sockets are scoped to the network namespace",
			run:       attackAbstractUnix},
		{name: "unix_socket_file_host", group: groupNetwork,
			mechanism: "connect to host Unix socket files (in /tmp, /run, a test directory) that were not mounted into the jail",
			layer:     "mount namespace: the socket files are not in the jail's tree",
			run:       attackUnixSocketFile},
		{name: "jail_listener_from_host", group: groupNetwork,
			mechanism: "listen on the jail's 127.0.0.1 and [::] and hope the host (or another jail) connects: a service exposed to the host",
			layer:     "network namespace: the jail's lo is its own",
			run:       attackJailListener},
	}...)
}

// attackConnectCode connects to every host:port in argv (TCP) and reports.
const attackConnectCode = `
import socket, sys
for addr in sys.argv[1:-1]:
    host, port = addr.rsplit(":", 1)
    host = host.strip("[]")
    try:
        s = socket.create_connection((host, int(port)), timeout=1)
        s.sendall(b"hello from the jail")
        print("CONNECTED", addr, flush=True)
        s.close()
    except Exception as e:
        print("FAILED", addr, type(e).__name__, e, flush=True)
# the jail's own loopback works: the failures above are not a broken stack
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=1)
print("SELF-LOOPBACK", "ok" if srv.accept() else "no")
`

func attackTCPHost(t *testing.T, m mode) {
	l := attackListenTCP(t, attackLocalHosts(), "0")
	if len(l.addrs()) == 0 {
		t.Fatal("no host listener")
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackConnectCode, l.addrs()...)
	l.close()
	if n := l.hits.Load(); n != 0 {
		t.Errorf("the host's listeners (%v) accepted %d connection(s) from the jail", l.addrs(), n)
	}
	if strings.Contains(r.stdout, "CONNECTED") {
		t.Errorf("the jail connected to a host listener:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "SELF-LOOPBACK ok") {
		t.Errorf("the jail's own loopback does not work (the probe is not meaningful):\n%s", r)
	}
}

func attackUDPHost(t *testing.T, m mode) {
	l := attackListenUDP(t, attackLocalHosts(), "0")
	r := attackPyOK(t, m, runOpts{}, nil, `
import socket, sys
for addr in sys.argv[1:-1]:
    host, port = addr.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    sent = 0
    for _ in range(5):
        try:
            s.sendto(b"hello from the jail", (host, int(port)))
            sent += 1
        except Exception as e:
            err = type(e).__name__
    print("SENT", addr, sent, flush=True)
`, l.addrs()...)
	time.Sleep(300 * time.Millisecond)
	l.close()
	if n := l.hits.Load(); n != 0 {
		t.Errorf("the host's UDP listeners (%v) received %d datagram(s) from the jail", l.addrs(), n)
	}
	t.Logf("%s", strings.TrimSpace(r.stdout))
}

func attackDNS(t *testing.T, m mode) {
	udp := attackListenUDP(t, []string{"127.0.0.1", "::1", "127.0.0.53"}, "53")
	tcp := attackListenTCP(t, []string{"127.0.0.1", "::1"}, "53")
	if len(udp.addrs())+len(tcp.addrs()) == 0 {
		t.Logf("port 53 is taken on the host: the outside check is skipped, the inside one stays")
	}
	r := attackPyOK(t, m, runOpts{}, nil, `
import os, socket, struct
for name in ("example.com", "test.example.org", "metadata.google.internal"):
    try:
        print("RESOLVED", name, socket.getaddrinfo(name, 443))
    except Exception as e:
        print("DNS-FAILED", name, type(e).__name__)
print("RESOLV-CONF", os.path.exists("/etc/resolv.conf"))
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00" + struct.pack(">HH", 1, 1)
for host in ("127.0.0.1", "127.0.0.53", "8.8.8.8", "1.1.1.1", "::1", "2001:4860:4860::8888"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    try:
        s.sendto(query, (host, 53))
        print("ANSWER", host, s.recv(512))
    except Exception as e:
        print("NOANSWER", host, type(e).__name__)
    try:
        c = socket.create_connection((host, 53), timeout=0.5)
        print("TCP53", host, "connected")
    except Exception as e:
        print("TCP53-FAILED", host, type(e).__name__)
`)
	time.Sleep(200 * time.Millisecond)
	udp.close()
	tcp.close()
	if n := udp.hits.Load() + tcp.hits.Load(); n != 0 {
		t.Errorf("the host's DNS listeners (udp %v, tcp %d) saw %d request(s) from the jail", udp.addrs(), len(tcp.addrs()), n)
	}
	for _, l := range []string{"RESOLVED ", "ANSWER ", "TCP53 "} {
		if strings.Contains("\n"+r.stdout, "\n"+l) {
			t.Errorf("a DNS lookup from the jail succeeded (%s):\n%s", l, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "DNS-FAILED example.com") {
		t.Errorf("getaddrinfo(example.com) did not fail:\n%s", r.stdout)
	}
}

func attackExternal(t *testing.T, m mode) {
	targets := []string{"1.1.1.1:443", "8.8.8.8:53", "169.254.169.254:80", "[fd00:ec2::254]:80", "[2606:4700:4700::1111]:443", "100.100.100.200:80"}
	for _, ip := range attackHostAddrs() {
		if v4 := ip.To4(); v4 != nil {
			gw := net.IPv4(v4[0], v4[1], v4[2], 1)
			targets = append(targets, gw.String()+":80")
		}
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackConnectCode+`
routes = open("/proc/net/route").read().splitlines()[1:]
print("ROUTES4", [l.split()[:2] for l in routes])
routes6 = [l.split() for l in open("/proc/net/ipv6_route").read().splitlines()]
print("ROUTES6", [r[0] + "/" + r[1] + " " + r[9] for r in routes6])
`, targets...)
	if strings.Contains(r.stdout, "CONNECTED") {
		t.Errorf("the jail reached a network outside it:\n%s", r.stdout)
	}
	v, _ := lineValue(r.stdout, "ROUTES4 ")
	if v != "[]" {
		t.Errorf("the jail has IPv4 routes: %s", v)
	}
	v6, _ := lineValue(r.stdout, "ROUTES6 ")
	for _, rt := range strings.Split(strings.Trim(v6, "[]"), ",") {
		if strings.TrimSpace(rt) != "" && !strings.Contains(rt, " lo") {
			t.Errorf("the jail has an IPv6 route not on lo: %s", rt)
		}
	}
}

func attackRawSockets(t *testing.T, m mode) {
	var hostIPs []string
	for _, ip := range attackHostAddrs() {
		hostIPs = append(hostIPs, ip.String())
	}
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
import socket
attempt("raw4_icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("raw4_raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))
attempt("raw4_tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
attempt("raw6_icmp", lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))
attempt("raw6_raw", lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW))
def ping(host):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if fam == socket.AF_INET6 else socket.IPPROTO_ICMP
    s = socket.socket(fam, socket.SOCK_DGRAM, proto)
    s.settimeout(0.5)
    s.sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01" if fam == socket.AF_INET else b"\x80\x00\x00\x00\x00\x01\x00\x01", (host, 0))
    s.recv(64)
for h in sys.argv[1:-1]:
    attempt("ping:" + h, lambda: ping(h))
`, hostIPs...)
	names := []string{"raw4_icmp", "raw4_raw", "raw4_tcp", "raw6_icmp", "raw6_raw"}
	for _, h := range hostIPs {
		names = append(names, "ping:"+h)
	}
	attackExpectFailed(t, r.stdout, names...)
}

func attackPacketSockets(t *testing.T, m mode) {
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
attempt("packet_raw", lambda: sc(41, 17, 3, 0x0300))
attempt("packet_dgram", lambda: sc(41, 17, 2, 0x0300))
attempt("inet_sock_packet", lambda: sc(41, 2, 10, 0x0300))
`)
	attackExpectErrno(t, r.stdout, "EPERM", "packet_raw", "packet_dgram")
	attackExpectFailed(t, r.stdout, "inet_sock_packet")
}

func attackModules() map[string]bool {
	b, _ := os.ReadFile("/proc/modules")
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out[f[0]] = true
		}
	}
	return out
}

func attackInterfaces() string {
	ifs, _ := net.Interfaces()
	var out []string
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		out = append(out, fmt.Sprintf("%s %v %v %d", i.Name, i.Flags, addrs, i.MTU))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func attackNetlink(t *testing.T, m mode) {
	ifBefore, modsBefore := attackInterfaces(), attackModules()
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
for name, proto in (("route", 0), ("sock_diag", 4), ("audit", 9), ("netfilter", 12), ("uevent", 15), ("generic", 16), ("xfrm", 6)):
    attempt("netlink_" + name, lambda: sc(41, 16, 3, proto))
for name, fam, typ in (("key", 15, 3), ("alg", 38, 5), ("xdp", 44, 3), ("can", 29, 3), ("tipc", 30, 5), ("bluetooth", 31, 3),
                       ("rds", 21, 5), ("llc", 26, 2), ("atmpvc", 8, 2), ("ax25", 3, 5), ("appletalk", 5, 2), ("x25", 9, 5),
                       ("nfc", 39, 5), ("rxrpc", 33, 2), ("caif", 37, 1), ("ieee802154", 36, 2), ("smc", 43, 1), ("mctp", 45, 2),
                       ("qipcrtr", 42, 2), ("kcm", 41, 5), ("pppox", 24, 1), ("isdn", 34, 2), ("phonet", 35, 2)):
    attempt("family_" + name, lambda: sc(41, fam, typ, 0))
`)
	names := attackAttemptNames(r.stdout)
	attackExpectErrno(t, r.stdout, "EPERM", names...)
	if len(names) < 25 {
		t.Fatalf("only %d attempts:\n%s", len(names), r)
	}
	if after := attackInterfaces(); after != ifBefore {
		t.Errorf("the host's interfaces changed during the run:\nbefore %s\nafter  %s", ifBefore, after)
	}
	for mod := range attackModules() {
		if !modsBefore[mod] {
			t.Errorf("a kernel module was loaded during the run: %s (protocol autoload from the jail?)", mod)
		}
	}
}

func attackSocketpairFamilies(t *testing.T, m mode) {
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
fds = (ctypes.c_int * 2)()
for name, fam, typ in (("netlink", 16, 3), ("packet", 17, 3), ("tipc", 30, 5), ("rds", 21, 5), ("alg", 38, 5), ("vsock", 40, 1),
                       ("key", 15, 3), ("xdp", 44, 3), ("can", 29, 3), ("bluetooth", 31, 5),
                       ("smc", 43, 1), ("kcm", 41, 5), ("llc", 26, 2)):
    attempt("socketpair_" + name, lambda: sc(53, fam, typ, 0, ctypes.byref(fds)))
attempt("unix_control", lambda: sc(53, 1, 1, 0, ctypes.byref(fds)))
`)
	got := attackAttempts(r.stdout)
	if got["unix_control"] != "OK" {
		t.Fatalf("socketpair(AF_UNIX) failed (%s): the probe is broken\n%s", got["unix_control"], r)
	}
	var names []string
	for k := range got {
		if k != "unix_control" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	attackExpectErrno(t, r.stdout, "EPERM", names...)
}

func attackVsock(t *testing.T, m mode) {
	// Only socket() is tried: were it allowed, the payload could reach the
	// hypervisor's host side; the test never connects anywhere.
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
attempt("vsock_stream", lambda: sc(41, 40, 1, 0))
attempt("vsock_dgram", lambda: sc(41, 40, 2, 0))
attempt("vsock_seqpacket", lambda: sc(41, 40, 5, 0))
`)
	attackExpectErrno(t, r.stdout, "EPERM", "vsock_stream", "vsock_dgram", "vsock_seqpacket")
}

func attackAbstractUnix(t *testing.T, m mode) {
	name := "@" + randomToken("rljail-it-abstract-")
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	var accepted, received atomic.Int64
	var wg sync.WaitGroup
	countConnections(ln, &accepted, &wg)
	dname := name + "-dgram"
	pc, err := net.ListenPacket("unixgram", dname)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := make([]byte, 256)
		for {
			if _, _, err := pc.ReadFrom(b); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	r := attackPyOK(t, m, runOpts{}, nil, `
import socket, sys
name, dname = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + name[1:])
    print("CONNECTED", flush=True)
except Exception as e:
    print("CONNECT-FAILED", type(e).__name__)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendto(b"hello", "\0" + dname[1:])
    print("SENT", flush=True)
except Exception as e:
    print("SEND-FAILED", type(e).__name__)
print("ABSTRACT", [l.split()[-1] for l in open("/proc/net/unix").read().splitlines()[1:] if l.split()[-1].startswith("@")])
`, name, dname)
	time.Sleep(200 * time.Millisecond)
	ln.Close()
	pc.Close()
	wg.Wait()
	if accepted.Load() != 0 || received.Load() != 0 {
		t.Errorf("the host's abstract sockets %s got %d connection(s) and %d datagram(s) from the jail", name, accepted.Load(), received.Load())
	}
	if strings.Contains(r.stdout, "CONNECTED") || strings.Contains(r.stdout, "SENT") {
		t.Errorf("the jail reached a host abstract socket:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, name[1:]) && strings.Contains(r.stdout, "ABSTRACT") {
		if v, _ := lineValue(r.stdout, "ABSTRACT "); strings.Contains(v, name[1:]) {
			t.Errorf("the jail's /proc/net/unix lists the host's abstract socket: %s", v)
		}
	}
}

func attackUnixSocketFile(t *testing.T, m mode) {
	var paths []string
	var lns []net.Listener
	var accepted atomic.Int64
	var wg sync.WaitGroup
	short, err := os.MkdirTemp("/tmp", "rjs")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(short, 0o777)
	t.Cleanup(func() { os.RemoveAll(short) })
	for _, dir := range []string{"/tmp", "/run", short} {
		p := filepath.Join(dir, randomToken("rljail-it-")+".sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Logf("listen %s: %v (skipped)", p, err)
			continue
		}
		os.Chmod(p, 0o777)
		paths = append(paths, p)
		lns = append(lns, ln)
		countConnections(ln, &accepted, &wg)
	}
	t.Cleanup(func() {
		for i, ln := range lns {
			ln.Close()
			os.Remove(paths[i])
		}
		wg.Wait()
	})
	r := attackPyOK(t, m, runOpts{}, nil, `
import glob, socket, sys
targets = sys.argv[1:-1] + glob.glob("/run/**/*.sock", recursive=True) + glob.glob("/var/run/*.sock") + ["/run/systemd/private", "/var/run/docker.sock", "/run/dbus/system_bus_socket"]
for p in targets:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        print("CONNECTED", p, flush=True)
    except Exception as e:
        print("FAILED", p, type(e).__name__)
`, paths...)
	for _, ln := range lns {
		ln.Close()
	}
	if accepted.Load() != 0 {
		t.Errorf("the host's Unix sockets %v accepted %d connection(s) from the jail", paths, accepted.Load())
	}
	if strings.Contains(r.stdout, "CONNECTED") {
		t.Errorf("the jail connected to a host Unix socket:\n%s", r.stdout)
	}
}

func attackJailListener(t *testing.T, m mode) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	marker := randomToken("atk")
	var dials []string
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "LISTENING", during: func(pl proc) {
		for _, addr := range []string{"127.0.0.1", "::1"} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(port)), 500*time.Millisecond)
			if err == nil {
				c.Close()
				dials = append(dials, addr+" CONNECTED")
			} else {
				dials = append(dials, addr+" "+err.Error())
			}
		}
	}}, attackPython(nil, `
import socket, sys, time
port = int(sys.argv[1])
s4 = socket.socket()
s4.bind(("127.0.0.1", port))
s4.listen(8)
s6 = socket.socket(socket.AF_INET6)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
s6.bind(("::", port))
s6.listen(8)
s4.settimeout(1.5)
print("LISTENING", flush=True)
try:
    c, a = s4.accept()
    print("ACCEPTED", a, flush=True)
except Exception as e:
    print("NO-CONNECTION", type(e).__name__)
`, marker, strconv.Itoa(port))...)
	if r.exit != 0 {
		t.Fatalf("the probe failed:\n%s", r)
	}
	for _, d := range dials {
		if strings.HasSuffix(d, "CONNECTED") {
			t.Errorf("the host reached the jail's listener: %s:%d", d, port)
		}
	}
	if strings.Contains(r.stdout, "ACCEPTED") {
		t.Errorf("the jail's listener accepted a connection:\n%s", r.stdout)
	}
	t.Logf("host dials: %v", dials)
}

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "signal_host_processes", group: groupProcesses,
			mechanism: "kill a host process by its PID, every PID from 2 to 32768, and kill(-1)",
			layer:     "PID namespace: host processes have no PID in the jail",
			run:       attackSignalHost},
		{name: "ptrace_host_process", group: groupProcesses,
			mechanism: "PTRACE_ATTACH/SEIZE and process_vm_readv on a host process by its PID",
			layer:     "seccomp denies ptrace and process_vm_*; PID namespace",
			run:       attackPtraceHost},
		{name: "host_pids_invisible", group: groupProcesses,
			mechanism: "list /proc, stat and pidfd_open a host process's PID, look for its command line",
			layer:     "PID namespace with a fresh /proc",
			run:       attackHostPIDs},
		{name: "ptrace_jail_init", group: groupProcesses,
			mechanism: "take over the jail's init: ptrace it, open /proc/1/mem, process_vm_readv/writev, pidfd_getfd its descriptors",
			layer:     "init is non-dumpable and runs as another uid view; seccomp denies ptrace, process_vm_*, pidfd_getfd",
			run:       attackPtraceInit},
		{name: "signal_jail_init", group: groupProcesses,
			mechanism: "send every signal 1..64 (SIGSTOP, SIGKILL included) to the jail's init to stop it or end the run early",
			layer:     "init ignores every signal from inside its PID namespace (SIGKILL/SIGSTOP cannot reach a namespace init from within)",
			run:       attackSignalInit},
		{name: "setuid_root_inside", group: groupProcesses,
			mechanism: "become root: setuid(0), setresuid, setgid, setgroups([0]), capset, raise ambient capabilities",
			layer:     "single-id user namespace map; all capabilities dropped; securebits locked; no_new_privs",
			run:       attackSetuidRoot},
		{name: "nested_user_namespace", group: groupProcesses,
			mechanism: "create a nested user namespace (unshare, clone with CLONE_NEWUSER, clone3) to regain capabilities, or setns into init's",
			layer:     "seccomp denies unshare, setns and CLONE_NEW* flags; clone3 gets ENOSYS",
			run:       attackNestedUserns},
		{name: "denied_syscalls_sample", group: groupProcesses,
			mechanism: "call a sample of the always-denied system calls (mount, bpf, perf_event_open, keyctl, io_uring, userfaultfd, kexec, reboot, ...)",
			layer:     "seccomp allowlist: EPERM from the filter (arguments chosen so that the kernel itself would answer differently)",
			run:       attackDeniedSyscalls},
		{name: "host_clock_and_hostname", group: groupProcesses,
			mechanism: "set the host's clock (settimeofday, clock_settime, adjtimex) and hostname (sethostname, setdomainname)",
			layer:     "seccomp denies the setters; UTS namespace; no CAP_SYS_TIME",
			run:       attackClockHostname},
		{name: "kernel_modules", group: groupProcesses,
			mechanism: "load or unload kernel modules (init_module, finit_module, delete_module) and set /proc/sys/kernel/modprobe",
			layer:     "seccomp denies module calls; /proc/sys read-only",
			run:       attackKernelModules},
		{name: "tiocsti_under_pty", group: groupProcesses,
			mechanism: "rljail runs on a real terminal: inject a command into it with TIOCSTI/TIOCLINUX on fds 0-2 and /dev/tty",
			layer:     "stdio are pipes pumped by rljail (no host terminal in the jail, whose /dev/pts is its own); seccomp denies TIOCSTI and TIOCLINUX",
			run:       attackTIOCSTI},
		{name: "core_dump_pipe_helper", group: groupProcesses, serial: true,
			mechanism: "with core_pattern a pipe helper (run as host root), crash the payload (SIGSEGV, SIGABRT) after trying to raise RLIMIT_CORE",
			layer:     "RLIMIT_CORE hard limit 1: the kernel never calls a pipe helper for such a process",
			run:       attackCoreDump},
		{name: "sysv_ipc_host", group: groupProcesses,
			mechanism: "attach a host System V shared memory segment holding a secret by its key and id, list /proc/sysvipc",
			layer:     "IPC namespace",
			run:       attackSysvIPC},
		{name: "posix_shm_host", group: groupProcesses,
			mechanism: "open the host's /dev/shm (POSIX shared memory) and /dev/mqueue objects holding a secret",
			layer:     "the jail's /dev/shm is its own tmpfs; no mqueue mount; IPC namespace",
			run:       attackPosixShm},
		{name: "cgroup_escape", group: groupProcesses,
			mechanism: "leave the jail's cgroup: mount cgroupfs, write to cgroup.procs, read /proc/self/cgroup for the host path",
			layer:     "cgroup namespace; no /sys; seccomp denies mount; the payload's host cgroup is checked from outside",
			run:       attackCgroupEscape},
		{name: "foreign_abi_syscalls", group: groupProcesses,
			mechanism: "bypass the x86_64 filter with i386 (int 0x80) and x32 system calls",
			layer:     "seccomp kills the process on a foreign architecture or the x32 bit (exit 159)",
			run:       attackForeignABI},
	}...)
}

func attackSignalHost(t *testing.T, m mode) {
	c := attackStartCanary(t)
	r := attackPy(t, m, runOpts{}, nil, attackPyLib+`
import signal
canary = int(sys.argv[1])
attempt("kill_canary", lambda: os.kill(canary, signal.SIGKILL))
attempt("killpg_canary", lambda: os.killpg(canary, signal.SIGKILL))
attempt("tkill_canary", lambda: sc(200, canary, 9))
attempt("pidfd_canary", lambda: sc(434, canary, 0))
me = os.getpid()
found = []
for pid in range(2, 32769):
    if pid != me and sc(62, pid, 0)[0] == 0:
        found.append(pid)
print("FOUND", found, flush=True)
for pid in found:
    attempt("kill:%d" % pid, lambda: os.kill(pid, signal.SIGKILL))
attempt("kill_all", lambda: os.kill(-1, signal.SIGKILL))
print("SURVIVED", flush=True)
`, strconv.Itoa(c.pid()))
	c.alive(t)
	if r.exit != 0 || !strings.Contains(r.stdout, "SURVIVED") {
		t.Errorf("the payload did not survive its own attack: %s", r)
	}
	attackExpectErrno(t, r.stdout, "ESRCH", "kill_canary", "killpg_canary", "tkill_canary", "pidfd_canary")
	if v, _ := lineValue(r.stdout, "FOUND "); v != "[]" {
		t.Errorf("the payload can signal other pids: %s", v)
	}
}

func attackPtraceHost(t *testing.T, m mode) {
	c := attackStartCanary(t)
	marker := randomToken("atk")
	var tracer, state string
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		tracer = attackTracerPid(c.pid())
		state = attackProcStatus(c.pid(), "State")
	}}, attackPython(nil, attackPyLib+`
import time
pid = int(sys.argv[1])
attempt("ptrace_attach", lambda: sc(101, 16, pid, 0, 0))
attempt("ptrace_seize", lambda: sc(101, 0x4206, pid, 0, 0))
attempt("ptrace_traceme", lambda: sc(101, 0, 0, 0, 0))
attempt("process_vm_readv", lambda: sc(310, pid, 0, 0, 0, 0, 0))
for p in range(1, 600):
    if sc(101, 16, p, 0, 0)[0] == 0:
        print("ATTACHED", p)
print("READY", flush=True)
time.sleep(0.5)
`, marker, strconv.Itoa(c.pid()))...)
	attackExpectErrno(t, r.stdout, "EPERM", "ptrace_attach", "ptrace_seize", "ptrace_traceme", "process_vm_readv")
	if strings.Contains(r.stdout, "ATTACHED") {
		t.Errorf("the payload attached to a process:\n%s", r.stdout)
	}
	if tracer != "0" || strings.HasPrefix(state, "t") || strings.HasPrefix(state, "T") {
		t.Errorf("the host canary is traced or stopped: TracerPid %q, State %q", tracer, state)
	}
	c.alive(t)
}

func attackHostPIDs(t *testing.T, m mode) {
	c := attackStartCanary(t)
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
canary = int(sys.argv[1])
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("PIDS", pids)
for p in pids:
    print("CMD", p, open("/proc/%d/cmdline" % p, "rb").read())
attempt("stat_canary", lambda: os.stat("/proc/%d" % canary))
attempt("pidfd_open_canary", lambda: sc(434, canary, 0))
attempt("kill0_canary", lambda: os.kill(canary, 0))
print("NS_LAST_PID", open("/proc/sys/kernel/ns_last_pid").read().strip())
`, strconv.Itoa(c.pid()))
	attackNoSecrets(t, r, map[string]string{"a host process's command line": c.argvSecret})
	attackExpectFailed(t, r.stdout, "stat_canary", "pidfd_open_canary", "kill0_canary")
	v, _ := lineValue(r.stdout, "PIDS ")
	var pids []int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == '[' || r == ']' || r == ',' || r == ' ' }) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	if len(pids) == 0 || len(pids) > 4 || pids[0] != 1 {
		t.Errorf("the jail's /proc lists pids %v: want init (1) and the payload only", pids)
	}
	for _, p := range pids {
		if p == c.pid() {
			t.Errorf("the host canary's pid %d is in the jail's /proc", p)
		}
	}
}

func attackPtraceInit(t *testing.T, m mode) {
	marker := randomToken("atk")
	var initTracer, initState string
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		if init, ok := readProc(pl.ppid); ok && strings.HasPrefix(init.cmdline, "rljail-init") {
			initTracer = attackTracerPid(init.pid)
			initState = attackProcStatus(init.pid, "State")
		}
	}}, attackPython(nil, attackPyLib+`
import time
class IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = (ctypes.c_char * 64)()
local = IOV(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = IOV(0x400000, 64)
attempt("ptrace_attach", lambda: sc(101, 16, 1, 0, 0))
attempt("ptrace_seize", lambda: sc(101, 0x4206, 1, 0, 0))
attempt("mem_rw", lambda: os.close(os.open("/proc/1/mem", os.O_RDWR)))
attempt("mem_ro", lambda: os.close(os.open("/proc/1/mem", os.O_RDONLY)))
attempt("process_vm_readv", lambda: sc(310, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
attempt("process_vm_writev", lambda: sc(311, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
pidfd = sc(434, 1, 0)[0]
print("PIDFD", pidfd)
for fd in range(0, 8):
    attempt("pidfd_getfd:%d" % fd, lambda: sc(438, pidfd, fd, 0))
attempt("kcmp", lambda: sc(312, 1, os.getpid(), 0, 0, 0))
attempt("exe", lambda: os.close(os.open("/proc/1/exe", os.O_RDONLY)))
attempt("environ", lambda: open("/proc/1/environ", "rb").read())
attempt("fd_dir", lambda: os.listdir("/proc/1/fd"))
attempt("setns_init_mnt", lambda: sc(308, os.open("/proc/1/ns/mnt", os.O_RDONLY), 0))
print("READY", flush=True)
time.sleep(0.5)
print("DONE", flush=True)
`, marker)...)
	if r.exit != 0 || r.status() != "ok" || !strings.Contains(r.stdout, "DONE") {
		t.Errorf("the run did not end normally after the attack on init: %s", r)
	}
	names := []string{"ptrace_attach", "ptrace_seize", "mem_rw", "mem_ro", "process_vm_readv", "process_vm_writev", "kcmp", "exe", "environ", "fd_dir", "setns_init_mnt"}
	for i := 0; i < 8; i++ {
		names = append(names, fmt.Sprintf("pidfd_getfd:%d", i))
	}
	attackExpectFailed(t, r.stdout, names...)
	if initTracer != "0" {
		t.Errorf("the jail's init is traced (TracerPid %q, seen from the host)", initTracer)
	}
	if strings.HasPrefix(initState, "t") || strings.HasPrefix(initState, "T") {
		t.Errorf("the jail's init is stopped: %s", initState)
	}
	attackNoSurvivors(t, m, r, marker)
}

func attackSignalInit(t *testing.T, m mode) {
	marker := randomToken("atk")
	var states []string
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "SENT", during: func(pl proc) {
		if init, ok := readProc(pl.ppid); ok {
			states = append(states, attackProcStatus(init.pid, "State"))
		}
	}}, attackPython([]string{"--timeout", "20s"}, `
import os, time
for s in range(1, 65):
    try:
        os.kill(1, s)
    except OSError as e:
        print("kill", s, e.strerror)
print("SENT", flush=True)
time.sleep(0.5)
print("STILL HERE", flush=True)
`, marker)...)
	if r.exit != 0 || r.status() != "ok" || !strings.Contains(r.stdout, "STILL HERE") {
		t.Errorf("after signalling init the run did not end normally: %s", r)
	}
	if r.p.wall > 10*time.Second {
		t.Errorf("the run took %v", r.p.wall)
	}
	for _, s := range states {
		if strings.HasPrefix(s, "T") || strings.HasPrefix(s, "t") || strings.HasPrefix(s, "Z") {
			t.Errorf("the jail's init is %s after the signals", s)
		}
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
		t.Errorf("init crashed: %s", r.stderr)
	}
	attackNoSurvivors(t, m, r, marker)
}

func attackSetuidRoot(t *testing.T, m mode) {
	marker := randomToken("atk")
	status := map[string]string{}
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		// The user rootless; as root ids of the range, the jail's own.
		checkJailHostIDs(t, m, pl)
		for _, f := range []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"} {
			status[f] = attackProcStatus(pl.pid, f)
		}
	}}, attackPython(nil, attackPyLib+`
import time
attempt("setuid0", lambda: os.setuid(0))
attempt("setgid0", lambda: os.setgid(0))
attempt("setresuid0", lambda: os.setresuid(0, 0, 0))
attempt("setresgid0", lambda: os.setresgid(0, 0, 0))
attempt("setgroups0", lambda: os.setgroups([0]))
attempt("setfsuid0", lambda: (0, 0) if libc.setfsuid(0) == 0 and libc.setfsuid(-1) == 0 else (-1, errno.EPERM))
class Hdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
hdr = Hdr(0x20080522, 0)
data = (Data * 2)(Data(0xffffffff, 0xffffffff, 0xffffffff), Data(0xffffffff, 0xffffffff, 0xffffffff))
attempt("capset_all", lambda: sc(126, ctypes.byref(hdr), ctypes.byref(data)))
attempt("ambient_raise", lambda: sc(157, 47, 2, 21, 0, 0))
attempt("securebits", lambda: sc(157, 28, 0, 0, 0, 0))
print("IDS", os.getresuid(), os.getresgid(), os.getgroups())
print("READY", flush=True)
time.sleep(0.5)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the probe failed: %s", r)
	}
	attackExpectFailed(t, r.stdout, "setuid0", "setgid0", "setresuid0", "setresgid0", "setgroups0", "setfsuid0", "capset_all", "ambient_raise", "securebits")
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("seen from the host after the attempts, the payload's %s is %q, want %q", k, status[k], v)
		}
	}
	for _, g := range strings.Fields(status["Groups"]) {
		if g == "0" {
			t.Errorf("the payload is in the host's group 0 (Groups: %s)", status["Groups"])
		}
	}
}

func attackNestedUserns(t *testing.T, m mode) {
	marker := randomToken("atk")
	var nsSeen map[string][]int
	hostUserNS, err := os.Readlink("/proc/self/ns/user") // /proc/1 may be unreadable here
	if err != nil {
		t.Fatal(err)
	}
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		nsSeen = map[string][]int{}
		for _, q := range allProcs() {
			if q.pidNS == pl.pidNS {
				// A process that ends between the two readlinks has no
				// namespace left to count (it would show as "").
				if u, err := os.Readlink("/proc/" + strconv.Itoa(q.pid) + "/ns/user"); err == nil {
					nsSeen[u] = append(nsSeen[u], q.pid)
				}
			}
		}
	}}, attackPython(nil, attackPyLib+`
import time
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP = 0x10000000, 0x20000, 0x40000000, 0x20000000, 0x4000000, 0x8000000, 0x2000000
def clone(flags):
    rc, e = sc(56, flags | 17, 0, 0, 0, 0)
    if rc == 0:
        time.sleep(2)
        os._exit(0)
    return rc, e
def clone3(flags):
    args = ctypes.create_string_buffer(flags.to_bytes(8, "little") + bytes(24) + (17).to_bytes(8, "little") + bytes(48), 88)
    rc, e = sc(435, args, 88)
    if rc == 0:
        time.sleep(2)
        os._exit(0)
    return rc, e
for name, f in (("user", CLONE_NEWUSER), ("user_mnt", CLONE_NEWUSER | CLONE_NEWNS), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID),
                ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC), ("cgroup", CLONE_NEWCGROUP), ("mnt", CLONE_NEWNS)):
    attempt("unshare_" + name, lambda: sc(272, f))
    attempt("clone_" + name, lambda: clone(f))
attempt("clone3_user", lambda: clone3(CLONE_NEWUSER))
attempt("setns_user", lambda: sc(308, os.open("/proc/self/ns/user", os.O_RDONLY), CLONE_NEWUSER))
attempt("setns_pid1_user", lambda: sc(308, os.open("/proc/1/ns/user", os.O_RDONLY), 0))
print("MAX_USER_NS", open("/proc/sys/user/max_user_namespaces").read().strip())
for _ in range(3):
    if os.fork() == 0:
        time.sleep(1.5)
        os._exit(0)
print("READY", flush=True)
time.sleep(0.5)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the probe failed: %s", r)
	}
	var names []string
	for k := range attackAttempts(r.stdout) {
		if k != "clone3_user" && k != "setns_pid1_user" {
			names = append(names, k)
		}
	}
	attackExpectErrno(t, r.stdout, "EPERM", names...)
	attackExpectErrno(t, r.stdout, "ENOSYS", "clone3_user")
	attackExpectFailed(t, r.stdout, "setns_pid1_user")
	if len(nsSeen) != 1 {
		t.Errorf("the jail's processes are in %d user namespaces (seen from the host): %v; want exactly one", len(nsSeen), nsSeen)
	}
	for ns := range nsSeen {
		if ns == hostUserNS {
			t.Errorf("the jail's processes are in the host's user namespace %s", ns)
		}
	}
}

func attackDeniedSyscalls(t *testing.T, m mode) {
	// name: the call with arguments; were it to reach the kernel, it
	// would (mostly) answer something other than EPERM.
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
null = 0
calls = {
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "umount2": (166, b"/nonexistent", 0),
    "pivot_root": (155, b"/nonexistent", b"/nonexistent"),
    "chroot": (161, b"/nonexistent"),
    "swapon": (167, b"/nonexistent", 0),
    "swapoff": (168, b"/nonexistent"),
    "reboot": (169, 0, 0, 0, 0),
    "sethostname": (170, b"x", 1),
    "setdomainname": (171, b"x", 1),
    "iopl": (172, 3),
    "ioperm": (173, 0, 1, 1),
    "init_module": (175, null, 0, b""),
    "finit_module": (313, -1, b"", 0),
    "delete_module": (176, b"rljail_it_nonexistent", 0),
    "quotactl": (179, 0, b"/nonexistent", 0, 0),
    "acct": (163, b"/nonexistent"),
    "kexec_load": (246, 0, 0, 0, 0),
    "kexec_file_load": (320, -1, -1, 0, 0, 0),
    "bpf": (321, 5, null, 0),
    "perf_event_open": (298, null, 0, -1, -1, 0),
    "keyctl": (250, 0, -3, 0),
    "add_key": (248, b"user", b"rljail", b"x", 1, -3),
    "request_key": (249, b"user", b"rljail", 0, 0),
    "io_uring_setup": (425, 1, null),
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),
    "io_uring_register": (427, -1, 0, 0, 0),
    "userfaultfd": (323, 0),
    "fanotify_init": (300, 0, 0),
    "name_to_handle_at": (303, -100, b"/", null, null, 0),
    "open_by_handle_at": (304, -1, null, 0),
    "process_vm_readv": (310, os.getpid(), 0, 0, 0, 0, 0),
    "process_vm_writev": (311, os.getpid(), 0, 0, 0, 0, 0),
    "ptrace_traceme": (101, 0, 0, 0, 0),
    "kcmp": (312, os.getpid(), os.getpid(), 0, 0, 0),
    "pidfd_getfd": (438, -1, 0, 0),
    "lookup_dcookie": (212, 0, null, 0),
    "modify_ldt": (154, 0, null, 0),
    "syslog": (103, 10, 0, 0),
    "seccomp": (317, 2, 0, null),
    "vhangup": (153,),
    "uselib": (134, b"/nonexistent"),
    "ustat": (136, 0, null),
    "sysfs": (139, 3),
    "setns": (308, -1, 0),
    "unshare": (272, 0x20000),
    "settimeofday": (164, null, null),
    "clock_settime": (227, 0, null),
    "clock_adjtime": (305, 0, null),
    "adjtimex": (159, null),
    "open_tree": (428, -100, b"/tmp", 1),
    "move_mount": (429, -1, b"", -1, b"", 0),
    "fsopen": (430, b"tmpfs", 0),
    "fsconfig": (431, -1, 0, null, null, 0),
    "fsmount": (432, -1, 0, 0),
    "fspick": (433, -100, b"/", 0),
    "mount_setattr": (442, -100, b"/", 0, null, 0),
    "quotactl_fd": (443, -1, 0, 0, null),
    "personality_read_implies_exec": (135, 0x0400000),
    "personality_no_aslr": (135, 0x0040000),
    "prctl_set_dumpable": (157, 4, 1, 0, 0, 0),
    "prctl_set_mm": (157, 35, 1, 0, 0, 0),
    "prctl_set_securebits": (157, 28, 0, 0, 0, 0),
    "prctl_set_ptracer": (157, 0x59616d61, -1, 0, 0, 0),
    "prctl_set_seccomp": (157, 22, 0, 0, 0, 0),
}
for name, call in calls.items():
    attempt(name, lambda: sc(*call))
`)
	got := attackAttempts(r.stdout)
	if len(got) < 60 {
		t.Fatalf("only %d calls were tried:\n%s", len(got), r)
	}
	var names []string
	for k := range got {
		names = append(names, k)
	}
	sort.Strings(names)
	attackExpectErrno(t, r.stdout, "EPERM", names...)
}

func attackClockHostname(t *testing.T, m mode) {
	host, _ := os.Hostname()
	domain, _ := os.ReadFile("/proc/sys/kernel/domainname")
	wallBefore, monoBefore := time.Now().Round(0), time.Now()
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
import time, socket
now = int(time.time())
class TV(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
class TS(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
# the current time: harmless even if a call got through; the filter must stop it anyway
attempt("settimeofday", lambda: sc(164, ctypes.byref(TV(now, 0)), 0))
attempt("clock_settime", lambda: sc(227, 0, ctypes.byref(TS(now, 0))))
buf = ctypes.create_string_buffer(256)
attempt("adjtimex", lambda: sc(159, buf))
attempt("sethostname", lambda: sc(170, b"rljail-it-pwned", 15))
attempt("setdomainname", lambda: sc(171, b"rljail-it-pwned", 15))
attempt("proc_hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("rljail-it-pwned"))
print("HOSTNAME", socket.gethostname())
`)
	attackExpectFailed(t, r.stdout, "settimeofday", "clock_settime", "adjtimex", "sethostname", "setdomainname", "proc_hostname")
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host's hostname changed: %q -> %q", host, h)
	}
	if d, _ := os.ReadFile("/proc/sys/kernel/domainname"); string(d) != string(domain) {
		t.Errorf("the host's domainname changed: %q -> %q", domain, d)
	}
	if v, _ := lineValue(r.stdout, "HOSTNAME "); v != "rljail" {
		t.Errorf("the jail's hostname is %q", v)
	}
	// The wall clock must have moved with the monotonic clock.
	if drift := time.Now().Round(0).Sub(wallBefore) - time.Since(monoBefore); drift > time.Second || drift < -time.Second {
		t.Errorf("the host's wall clock jumped by %v during the run", drift)
	}
}

func attackKernelModules(t *testing.T, m mode) {
	before := attackModules()
	modprobe, _ := os.ReadFile("/proc/sys/kernel/modprobe")
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
attempt("init_module", lambda: sc(175, b"\x7fELF" + bytes(60), 64, b""))
fd = os.open("/usr/bin/python3.11", os.O_RDONLY)
attempt("finit_module", lambda: sc(313, fd, b"", 0))
attempt("delete_module", lambda: sc(176, b"rljail_it_nonexistent", 0))
attempt("modprobe_path", lambda: open("/proc/sys/kernel/modprobe", "w").write("/tmp/rljail-it-modprobe"))
`)
	attackExpectErrno(t, r.stdout, "EPERM", "init_module", "finit_module", "delete_module")
	attackExpectFailed(t, r.stdout, "modprobe_path")
	for mod := range attackModules() {
		if !before[mod] {
			t.Errorf("a kernel module was loaded during the run: %s", mod)
		}
	}
	if after, _ := os.ReadFile("/proc/sys/kernel/modprobe"); string(after) != string(modprobe) {
		t.Errorf("the host's modprobe path changed: %q -> %q", modprobe, after)
	}
}

func attackTIOCSTI(t *testing.T, m mode) {
	marker := randomToken("INJ")
	code := `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
marker = sys.argv[1] + "\n"
for fd in (0, 1, 2):
    res = set()
    for ch in marker.encode():
        c = ctypes.c_char(ch)
        ctypes.set_errno(0)
        rc = libc.ioctl(fd, ctypes.c_ulong(0x5412), ctypes.byref(c))
        res.add("ok" if rc == 0 else os.strerror(ctypes.get_errno()))
    sel = (ctypes.c_char * 16)(b"\x02")
    rc = libc.ioctl(fd, ctypes.c_ulong(0x541C), sel)
    print("fd", fd, "isatty", os.isatty(fd), "tiocsti", sorted(res), "tioclinux", rc, ctypes.get_errno(), flush=True)
for p in ("/dev/tty", "/dev/console", "/dev/ptmx", "/dev/pts/0", "/dev/tty0"):
    try:
        os.open(p, os.O_RDWR)
        print("OPENED", p, flush=True)
    except OSError as e:
        print("NOOPEN", p, e.strerror, flush=True)
print("END", flush=True)
`
	r := runOnPty(t, m, append([]string{"--rootfs", rootfsDir}, python(code, marker)...)...)
	r.checkNoInjection(t, marker)
	// /dev/ptmx is the jail's own devpts (issue 23: pty.openpty works);
	// that it holds none of the host's terminals the case
	// pty_tiocsti_host_terminal decides from the host. Any other terminal
	// device opened is a failure.
	for _, l := range strings.Split(r.out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "OPENED ") && l != "OPENED /dev/ptmx" {
			t.Errorf("the payload opened a terminal device: %s\n%s", l, r.out)
		}
	}
	for _, fd := range []string{"0", "1", "2"} {
		if l, _ := lineValue(r.out, "fd "+fd+" "); strings.Contains(l, "'ok'") || strings.Contains(l, "isatty True") {
			t.Errorf("fd %s in the jail: %s", fd, l)
		}
	}
}

func attackCoreDump(t *testing.T, m mode) {
	const patternFile = "/proc/sys/kernel/core_pattern"
	orig, err := os.ReadFile(patternFile)
	if err != nil {
		t.Skipf("read %s: %v", patternFile, err)
	}
	dir := newDir(t)
	marker := filepath.Join(dir, "helper-called")
	helper := filepath.Join(dir, "core-helper.sh")
	writeFile(t, helper, "#!/bin/sh\necho \"$*\" >> "+marker+"\ncat > /dev/null\n", 0o755)
	pattern := "|" + helper + " %P %u %e %s"
	if err := os.WriteFile(patternFile, []byte(pattern), 0); err != nil {
		t.Skipf("set %s: %v", patternFile, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(patternFile, orig, 0); err != nil {
			t.Errorf("RESTORE FAILED: write %q to %s: %v", orig, patternFile, err)
		}
		if now, _ := os.ReadFile(patternFile); string(now) != string(orig) {
			t.Errorf("RESTORE FAILED: %s is %q, was %q", patternFile, now, orig)
		}
	})
	readMarker := func() []string {
		b, _ := os.ReadFile(marker)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	// Sanity: the helper runs for a crash on the host, or the test proves nothing.
	host := exec.Command("/bin/sh", "-c", "ulimit -c unlimited; kill -SEGV $$")
	_ = host.Run()
	deadline := time.Now().Add(3 * time.Second)
	for !exists(marker) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !exists(marker) {
		t.Fatalf("the core_pattern helper was not called for a crash on the host: the test cannot decide (pattern %q)", pattern)
	}
	sane := len(readMarker())
	for _, c := range []struct {
		name, code string
		exit       int
	}{
		{"segv", "ctypes.string_at(0)", 128 + int(syscall.SIGSEGV)},
		{"abort", "os.abort()", 128 + int(syscall.SIGABRT)},
	} {
		r := attackPy(t, m, runOpts{}, nil, `
import ctypes, os, resource
print("CORE", resource.getrlimit(resource.RLIMIT_CORE))
for lim in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (1 << 30, 1 << 30), (1 << 20, resource.getrlimit(resource.RLIMIT_CORE)[1])):
    try:
        resource.setrlimit(resource.RLIMIT_CORE, lim)
        print("RAISED", lim)
    except Exception as e:
        print("NORAISE", lim, type(e).__name__)
try:
    resource.prlimit(1, resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("PRLIMIT-INIT ok")
except Exception as e:
    print("PRLIMIT-INIT", type(e).__name__)
print("CRASHING", flush=True)
`+c.code+"\n")
		if r.exit != c.exit || !strings.Contains(r.stdout, "CRASHING") {
			t.Errorf("%s: exit %d, want %d (the payload must die of the signal): %s", c.name, r.exit, c.exit, r)
		}
		if v, _ := lineValue(r.stdout, "CORE "); v != "(1, 1)" {
			t.Errorf("%s: RLIMIT_CORE in the jail is %s, want (1, 1)", c.name, v)
		}
		if strings.Contains(r.stdout, "RAISED (-1") || strings.Contains(r.stdout, "RAISED (1073741824") {
			t.Errorf("%s: the payload raised its RLIMIT_CORE: %s", c.name, r.stdout)
		}
	}
	time.Sleep(time.Second)
	for _, l := range readMarker()[sane:] {
		f := strings.Fields(l)
		if len(f) >= 3 && (isJailHostUID(m, f[1]) || strings.HasPrefix(f[2], "python")) {
			t.Errorf("the core_pattern pipe helper (root on the host) was called for the jailed payload: %q", l)
		} else {
			t.Logf("the helper was called for another host process meanwhile: %q", l)
		}
	}
}

func attackSysvIPC(t *testing.T, m mode) {
	secret := randomToken("sysvsecret")
	key := int(time.Now().UnixNano()&0x3fffffff) | 0x10000000
	id, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o666)
	if err != nil {
		t.Skipf("shmget on the host: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, secret)
	_ = unix.SysvShmDetach(mem)
	r := attackPyOK(t, m, runOpts{}, nil, attackPyLib+`
key, shmid = int(sys.argv[1]), int(sys.argv[2])
libc.shmat.restype = ctypes.c_void_p
attempt("shmget_key", lambda: sc(29, key, 0, 0o666))
def attach():
    ctypes.set_errno(0)
    p = libc.shmat(shmid, None, 0o10000)
    if p in (None, ctypes.c_void_p(-1).value):
        return -1, ctypes.get_errno()
    print("READ", ctypes.string_at(p, 64))
    return 0, 0
attempt("shmat_id", attach)
for i in range(0, 64):
    ctypes.set_errno(0)
    p = libc.shmat(i, None, 0o10000)
    if p not in (None, ctypes.c_void_p(-1).value):
        print("ATTACHED", i, ctypes.string_at(p, 64))
attempt("msgget_key", lambda: sc(68, key, 0))
attempt("semget_key", lambda: sc(64, key, 0, 0))
print("SYSVIPC", open("/proc/sysvipc/shm").read())
`, strconv.Itoa(key), strconv.Itoa(id))
	attackNoSecrets(t, r, map[string]string{"a host SysV shared memory segment": secret})
	attackExpectFailed(t, r.stdout, "shmget_key", "shmat_id", "msgget_key", "semget_key")
	if strings.Contains(r.stdout, "ATTACHED") {
		t.Errorf("the payload attached a shared memory segment:\n%s", r.stdout)
	}
	var ds unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err == nil && ds.Nattch != 0 {
		t.Errorf("the host segment has %d attachments", ds.Nattch)
	}
}

func attackPosixShm(t *testing.T, m mode) {
	secret := randomToken("shmsecret")
	name := randomToken("rljail-it-shm-")
	if !attackPlant(t, "/dev/shm/"+name, secret) {
		t.Fatal("could not plant in /dev/shm")
	}
	mq := ""
	if exists("/dev/mqueue") {
		mq = "/dev/mqueue/" + randomToken("rljail-it-mq-")
		if attackPlant(t, mq, secret) {
			t.Logf("planted %s", mq)
		}
	}
	r := attackPyOK(t, m, runOpts{}, nil, `
import os, sys
for i, p in enumerate(("/dev/shm/" + sys.argv[1], "/dev/mqueue/" + sys.argv[1])):
    try:
        print("READ", i, open(p).read())
    except Exception as e:
        print("READERR", i, type(e).__name__)
for d in ("/dev/shm", "/dev/mqueue"):
    try:
        print("LIST", d, os.listdir(d))
    except Exception as e:
        print("LISTERR", d, type(e).__name__)
`, name)
	attackNoSecrets(t, r, map[string]string{"a host POSIX shared memory object": secret, "its name": name})
}

func attackCgroupEscape(t *testing.T, m mode) {
	marker := randomToken("atk")
	var payloadCg, supCg map[string]string
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		payloadCg, _ = procCgroup(pl.pid)
		if init, ok := readProc(pl.ppid); ok {
			supCg, _ = procCgroup(init.ppid)
		}
	}}, attackPython(nil, attackPyLib+`
import time
print("SELF", open("/proc/self/cgroup").read().replace("\n", ";"))
os.makedirs("/tmp/cg")
attempt("mount_cgroup2", lambda: sc(165, b"cgroup2", b"/tmp/cg", b"cgroup2", 0, 0))
attempt("mount_cgroup_memory", lambda: sc(165, b"cgroup", b"/tmp/cg", b"cgroup", 0, b"memory"))
attempt("write_procs", lambda: open("/sys/fs/cgroup/cgroup.procs", "w").write(str(os.getpid())))
attempt("write_tasks", lambda: open("/sys/fs/cgroup/memory/tasks", "w").write(str(os.getpid())))
attempt("sys_exists", lambda: (0, 0) if os.path.exists("/sys/fs/cgroup") else (-1, errno.ENOENT))
print("READY", flush=True)
time.sleep(0.5)
`, marker)...)
	if r.exit != 0 {
		t.Fatalf("the probe failed: %s", r)
	}
	attackExpectFailed(t, r.stdout, "mount_cgroup2", "mount_cgroup_memory", "write_procs", "write_tasks", "sys_exists")
	self, _ := lineValue(r.stdout, "SELF ")
	for _, l := range strings.Split(strings.Trim(self, ";"), ";") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[2] != "/" && strings.Contains(parts[1], "memory") {
			t.Errorf("the jail's /proc/self/cgroup shows a host path: %s", l)
		}
	}
	if payloadCg == nil {
		t.Fatalf("could not read the payload's cgroups from the host")
	}
	if m == asRoot {
		id, _ := r.res["run_id"].(string)
		for _, ctl := range []string{"memory", "pids", "cpu"} {
			if filepath.Base(payloadCg[ctl]) != "rljail-"+id {
				t.Errorf("seen from the host, the payload's %s cgroup is %q, want the jail's rljail-%s", ctl, payloadCg[ctl], id)
			}
		}
	} else if fmt.Sprint(payloadCg) != fmt.Sprint(supCg) {
		t.Errorf("rootless (no cgroup), the payload's cgroups %v differ from rljail's %v", payloadCg, supCg)
	}
	attackNoSurvivors(t, m, r, marker)
}

func attackForeignABI(t *testing.T, m mode) {
	const i386 = `
import ctypes, mmap, os
code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (getpid); int 0x80; ret
m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("BEFORE", flush=True)
print("RETURNED", f(), flush=True)
`
	const x32 = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("BEFORE", flush=True)
print("RETURNED", libc.syscall(ctypes.c_long(0x40000000 | 39)), flush=True)
`
	for name, code := range map[string]string{"i386": i386, "x32": x32} {
		r := attackPy(t, m, runOpts{}, nil, code)
		if !strings.Contains(r.stdout, "BEFORE") {
			t.Errorf("%s: the payload did not get to the call: %s", name, r)
			continue
		}
		if strings.Contains(r.stdout, "RETURNED") {
			t.Errorf("%s: the foreign system call returned to the payload: %s", name, r.stdout)
		}
		if r.exit != 128+int(syscall.SIGSYS) {
			t.Errorf("%s: exit %d, want %d (killed by SIGSYS)", name, r.exit, 128+int(syscall.SIGSYS))
		}
	}
}

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "fork_bomb", group: groupDoS, serial: true, modes: rootOnly,
			mechanism: "every process forks without end for 2 s",
			layer:     "cgroup pids.max (64 by default); the host keeps forking (rootless v1 has no pids limit: documented fallback, not run)",
			run:       attackForkBomb},
		{name: "thread_bomb", group: groupDoS, serial: true, modes: rootOnly,
			mechanism: "start threads until the system refuses",
			layer:     "cgroup pids.max counts threads",
			run:       attackThreadBomb},
		{name: "memory_bomb", group: groupDoS, serial: true,
			mechanism: "allocate memory without end under the default limit (512m)",
			layer:     "cgroup memory limit, OOM kill (root); RLIMIT_AS (rootless fallback)",
			run:       attackMemoryBomb},
		{name: "memory_bomb_processes", group: groupDoS, serial: true, modes: rootOnly,
			mechanism: "six processes each allocate 200 MiB: together more than the jail's 512m",
			layer:     "the cgroup memory limit holds the jail's total, not each process's",
			run:       attackMemoryBombProcesses},
		{name: "busy_threads_and_processes", group: groupDoS, serial: true,
			mechanism: "spin in 8 threads and 3 processes until the time limit",
			layer:     "cgroup CPU quota (--cpus 1, root) and the wall-clock kill timer",
			run:       attackBusyLoops},
		{name: "tmp_and_shm_fill", group: groupDoS,
			mechanism: "fill /tmp and /dev/shm until they refuse",
			layer:     "size-limited private tmpfs (64m), counted in the jail's memory",
			run:       attackTmpFill},
		{name: "file_size_limit", group: groupDoS,
			mechanism: "write one 100 MiB file with room to spare in /tmp",
			layer:     "RLIMIT_FSIZE (64m)",
			run:       attackFileSize},
		{name: "output_flood", group: groupDoS, serial: true,
			mechanism: "write 256 MiB to stdout and 256 MiB to stderr at once",
			layer:     "the pump passes 1 MiB per stream, reads and counts the rest, in constant memory",
			run:       attackOutputFlood},
		{name: "ignore_every_signal", group: groupDoS, serial: true,
			mechanism: "ignore and block every signal, start a new session, then spin past the time limit",
			layer:     "the kill timer SIGKILLs init through its pidfd; the PID namespace takes every process with it",
			run:       attackIgnoreSignals},
		{name: "double_fork_setsid", group: groupDoS, serial: true,
			mechanism: "double-fork a daemon in a new session that ignores SIGHUP/SIGTERM, keeps stdout and writes to a volume; the payload exits",
			layer:     "when the payload ends init ends, and the PID namespace kills every process left",
			run:       attackDoubleFork},
		{name: "fork_chain_escape", group: groupDoS, serial: true,
			mechanism: "a chain of processes that each fork and exit at once, changing PID faster than a killer can follow",
			layer:     "the kill timer ends the PID namespace as a whole (no PID chasing)",
			run:       attackForkChain},
		{name: "close_stdio_and_run_on", group: groupDoS, serial: true,
			mechanism: "close stdin, stdout and stderr, then keep running (writing to a volume) past the time limit",
			layer:     "rljail waits for the jail, not for its pipes; the kill timer",
			run:       attackCloseStdioRunOn},
		{name: "close_stdio_and_exit", group: groupDoS,
			mechanism: "close stdout and stderr early, then exit normally",
			layer:     "rljail ends with the payload, not at the time limit",
			run:       attackCloseStdioExit},
		{name: "zombie_storm", group: groupDoS,
			mechanism: "create 400 orphans (grandchildren reparented to init) and 40 unreaped children",
			layer:     "init reaps every orphan; the PID namespace's end reaps the rest",
			run:       attackZombieStorm},
		{name: "stopped_payload", group: groupDoS, serial: true,
			mechanism: "the payload and its child SIGSTOP themselves to wedge the run",
			layer:     "SIGKILL ends stopped processes; the kill timer",
			run:       attackStopped},
		{name: "stdin_never_read", group: groupDoS,
			mechanism: "never read 16 MiB offered on stdin, and exit",
			layer:     "the stdin pump does not hold the run open",
			run:       attackStdinNeverRead},
		{name: "fd_exhaustion", group: groupDoS,
			mechanism: "open descriptors (files, pipes, eventfds, sockets) until refused",
			layer:     "RLIMIT_NOFILE (256)",
			run:       attackFDExhaustion},
	}...)
}

// attackWallBound fails when the run took longer than limit plus a margin.
// The kill timer's precision is TestTimerPrecision's business (100 ms
// target); here the question is whether the attack could prolong the run
// at all (unchecked, each of these payloads would run for a minute or
// more), so the margin is wide enough for a loaded 2-core machine.
func attackWallBound(t *testing.T, r *attackRun, limit time.Duration) {
	t.Helper()
	const margin = 2 * time.Second
	if r.p.wall > limit+margin {
		t.Errorf("rljail returned after %v: more than %v past its limit of %v", r.p.wall.Round(time.Millisecond), margin, limit)
	}
}

// attackTimedOut requires the run to have been ended by its --timeout
// (exit 124, status timeout) within attackWallBound of limit: the payloads
// that check it try to outlive their time limit.
func attackTimedOut(t *testing.T, r *attackRun, limit time.Duration) {
	t.Helper()
	if r.exit != 124 || r.status() != "timeout" {
		t.Errorf("exit %d, status %q; want 124, timeout: %s", r.exit, r.status(), r)
	}
	attackWallBound(t, r, limit)
}

func attackForkBomb(t *testing.T, m mode) {
	hostForks := startHostForkProbe()
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "10s"}, `
import errno, os, time
deadline = time.monotonic() + 2.0
root = os.getpid()
refused = 0
while time.monotonic() < deadline:
    try:
        pid = os.fork()
    except OSError as e:
        refused += 1
        time.sleep(0.01)
        continue
    if pid == 0:
        refused = 0
if os.getpid() == root:
    print("refused", refused, flush=True)
os._exit(0)
`)
	hostForks.finish()
	peak, _ := jsonInt(r.res, "pids_peak")
	t.Logf("pids_peak %d, status %s, exit %d, wall %v, host forks %d (%d failed)", peak, r.status(), r.exit, r.p.wall.Round(time.Millisecond), hostForks.forks, hostForks.fails)
	if peak == 0 || peak > 64 {
		t.Errorf("pids_peak = %d, want at most 64 (the default --pids-limit)", peak)
	}
	if r.status() != "pids_limit" {
		t.Errorf("status %q, want pids_limit: %s", r.status(), r)
	}
	hostForks.check(t)
	attackWallBound(t, r, 10*time.Second)
	attackNoSurvivors(t, m, r, "")
}

func attackThreadBomb(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "10s"}, `
import threading, time
n = 0
ev = threading.Event()
try:
    while n < 10000:
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except RuntimeError as e:
    print("refused after", n, flush=True)
ev.set()
`)
	peak, _ := jsonInt(r.res, "pids_peak")
	t.Logf("%s; pids_peak %d", strings.TrimSpace(r.stdout), peak)
	var n int
	if _, err := fmt.Sscanf(r.stdout, "refused after %d", &n); err != nil || n >= 64 {
		t.Errorf("the thread bomb was not refused below 64 threads: %s", r)
	}
	if peak == 0 || peak > 64 {
		t.Errorf("pids_peak = %d, want at most 64", peak)
	}
	attackNoSurvivors(t, m, r, "")
}

func attackMemoryBomb(t *testing.T, m mode) {
	c := attackStartCanary(t)
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "60s"}, bombs.Memory)
	peak, _ := jsonInt(r.res, "memory_peak_bytes")
	t.Logf("exit %d, status %s, memory peak %.1f MiB, oom_kills %v, wall %v", r.exit, r.status(), float64(peak)/mib, r.res["oom_kills"], r.p.wall.Round(time.Millisecond))
	if m == asRoot {
		if r.exit != 137 || r.status() != "memory_limit" {
			t.Errorf("exit %d, status %q; want 137, memory_limit: %s", r.exit, r.status(), r)
		}
		if peak > 512*mib*102/100 {
			t.Errorf("memory_peak_bytes = %d, above the 512 MiB limit", peak)
		}
	} else {
		var n int
		if _, err := fmt.Sscanf(r.stdout, "MemoryError after %d MiB", &n); err != nil || n >= 512 || r.exit != 3 {
			t.Errorf("rootless (RLIMIT_AS): want MemoryError below 512 MiB and exit 3: %s", r)
		}
	}
	c.alive(t)
	attackNoSurvivors(t, m, r, "")
}

func attackMemoryBombProcesses(t *testing.T, m mode) {
	c := attackStartCanary(t)
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "20s"}, `
import os, time
kids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        try:
            data = [b"\x02" * (1 << 20) for _ in range(200)]
            time.sleep(3)
        finally:
            os._exit(0)
    kids.append(pid)
for pid in kids:
    _, st = os.waitpid(pid, 0)
    print("child", pid, os.waitstatus_to_exitcode(st), flush=True)
`)
	peak, _ := jsonInt(r.res, "memory_peak_bytes")
	ooms, _ := jsonInt(r.res, "oom_kills")
	t.Logf("exit %d, status %s, memory peak %.1f MiB, oom_kills %d, wall %v\n%s", r.exit, r.status(), float64(peak)/mib, ooms, r.p.wall.Round(time.Millisecond), r.stdout)
	if peak == 0 || peak > 512*mib*102/100 {
		t.Errorf("memory_peak_bytes = %d, want at most the 512 MiB limit", peak)
	}
	if ooms < 1 {
		t.Errorf("oom_kills = %d, want at least 1: 1.2 GB were asked for under 512 MiB", ooms)
	}
	c.alive(t)
	attackNoSurvivors(t, m, r, "")
}

func attackBusyLoops(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "2s"}, `
import os, threading
for _ in range(3):
    if os.fork() == 0:
        break
def spin():
    while True:
        pass
for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()
spin()
`)
	wall, _ := jsonInt(r.res, "wall_ms")
	user, _ := jsonInt(r.res, "cpu_user_ms")
	sys, _ := jsonInt(r.res, "cpu_system_ms")
	t.Logf("exit %d after %v; CPU %d ms (user %d, system %d) in %d ms", r.exit, r.p.wall.Round(time.Millisecond), user+sys, user, sys, wall)
	attackTimedOut(t, r, 2*time.Second)
	if m == asRoot && float64(user+sys) > 1.25*float64(wall) {
		t.Errorf("the jail used %d ms of CPU in %d ms: more than its one CPU (--cpus 1)", user+sys, wall)
	}
	attackNoSurvivors(t, m, r, "")
}

func attackTmpFill(t *testing.T, m mode) {
	rootBefore, shmBefore := freeBytes(t, "/"), freeBytes(t, "/dev/shm")
	r := attackPyOK(t, m, runOpts{}, nil, bombs.TmpFill, "/tmp", "/dev/shm")
	for _, d := range []string{"/tmp", "/dev/shm"} {
		v, _ := lineValue(r.stdout, "FILL "+d+" ")
		var errName string
		var total int64
		if _, err := fmt.Sscanf(v, "%s %d", &errName, &total); err != nil || errName != "ENOSPC" || total > 64*mib {
			t.Errorf("filling %s: %q; want ENOSPC at no more than 64 MiB", d, v)
		}
	}
	const margin = 200 * mib
	if rootAfter := freeBytes(t, "/"); rootBefore-rootAfter > margin {
		t.Errorf("the host's / lost %d MiB during the run", (rootBefore-rootAfter)/mib)
	}
	if shmAfter := freeBytes(t, "/dev/shm"); shmBefore-shmAfter > margin {
		t.Errorf("the host's /dev/shm lost %d MiB during the run", (shmBefore-shmAfter)/mib)
	}
}

func attackFileSize(t *testing.T, m mode) {
	r := attackPyOK(t, m, runOpts{}, []string{"--tmp-size", "256m"}, `
import errno, os
fd = os.open("/tmp/big", os.O_WRONLY | os.O_CREAT, 0o600)
total, err = 0, "none"
chunk = b"y" * (1 << 20)
while total < (100 << 20):
    try:
        total += os.write(fd, chunk)
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
print("FSIZE", err, total, os.fstat(fd).st_size)
`)
	v, _ := lineValue(r.stdout, "FSIZE ")
	var errName string
	var total, size int64
	if _, err := fmt.Sscanf(v, "%s %d %d", &errName, &total, &size); err != nil || errName != "EFBIG" || size != 64*mib {
		t.Errorf("writing 100 MiB: %q; want EFBIG at exactly 64 MiB (RLIMIT_FSIZE)", v)
	}
}

func attackOutputFlood(t *testing.T, m mode) {
	marker := randomToken("atk")
	r := attackWatch(t, m, runOpts{deadline: 3 * time.Minute}, attackWatchOpts{marker: marker, hwm: true},
		attackPython([]string{"--timeout", "120s"}, `
import os, threading
def flood(fd, ch):
    b = ch * (1 << 20)
    for _ in range(256):
        n = 0
        while n < len(b):
            n += os.write(fd, b[n:])
t = threading.Thread(target=flood, args=(2, b"e"))
t.start()
flood(1, b"o")
t.join()
`, marker)...)
	const limit = 1 * mib
	t.Logf("exit %d, status %s, wall %v, supervisor VmHWM %d KiB, stdout %d bytes, stderr %d bytes, report stdout_bytes %v stderr_bytes %v",
		r.exit, r.status(), r.p.wall.Round(time.Millisecond), r.hwmKiB, len(r.stdout), len(r.stderr), r.res["stdout_bytes"], r.res["stderr_bytes"])
	if r.exit != 0 || r.status() != "output_truncated" {
		t.Errorf("exit %d, status %q; want 0, output_truncated", r.exit, r.status())
	}
	if len(r.stdout) != limit || strings.Trim(r.stdout, "o") != "" {
		t.Errorf("%d bytes of stdout reached the caller, want exactly the first %d the payload wrote", len(r.stdout), limit)
	}
	payloadErr := r.stderr
	if m == asRootless {
		// The limit fallback warning comes first.
		if i := strings.IndexByte(payloadErr, '\n'); i >= 0 && strings.HasPrefix(payloadErr, fallbackWarning) {
			payloadErr = payloadErr[i+1:]
		}
	}
	if !strings.HasPrefix(payloadErr, strings.Repeat("e", limit)) || strings.Contains(payloadErr[limit:], "eeee") {
		t.Errorf("stderr: want exactly the first %d bytes the payload wrote, then rljail's own lines: %s", limit, attackClip(payloadErr[min(len(payloadErr), limit-100):]))
	}
	note := payloadErr[min(len(payloadErr), limit):]
	t.Logf("rljail's own lines after the payload's stderr: %q", note)
	if strings.Contains(note, "limit of 0 bytes") {
		t.Errorf("rljail's note misstates the output limit (1 MiB): %q", strings.TrimSpace(note))
	}
	for _, k := range []string{"stdout_bytes", "stderr_bytes"} {
		if n, _ := jsonInt(r.res, k); n != 256*mib {
			t.Errorf("%s = %d, want %d", k, n, 256*mib)
		}
	}
	if r.hwmKiB == 0 || r.hwmKiB > 40*kib {
		t.Errorf("the supervisor's peak RSS was %d KiB during the flood, want under 40 MiB (and measured)", r.hwmKiB)
	}
	attackNoSurvivors(t, m, r, marker)
}

func attackIgnoreSignals(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "1s"}, `
import os, signal
for s in range(1, 65):
    try:
        signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError, RuntimeError):
        pass
signal.pthread_sigmask(signal.SIG_BLOCK, range(1, 65))
try:
    os.setsid()
except OSError:
    pass
if os.fork() == 0:
    os.setsid()
print("SPINNING", flush=True)
while True:
    pass
`)
	attackTimedOut(t, r, time.Second)
	attackNoSurvivors(t, m, r, "")
}

func attackDoubleFork(t *testing.T, m mode) {
	vol := newOpenDir(t)
	daemon := randomToken("daemon")
	marker := randomToken("atk")
	var exitedAt time.Time
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "PARENT EXITS", during: func(proc) { exitedAt = time.Now() }},
		attackPython([]string{"--timeout", "30s", "-v", vol + ":/out:rw"}, `
import os, sys, time
daemon = sys.argv[1]
code = """
import os, signal, time
for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
while True:
    with open("/out/tick", "a") as f:
        f.write("x")
    time.sleep(0.05)
"""
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/usr/bin/python3", ["python3", "-c", code, daemon])
    os._exit(0)
os.waitpid(pid, 0)
deadline = time.monotonic() + 15
while not os.path.exists("/out/tick") and time.monotonic() < deadline:
    time.sleep(0.05)
print("PARENT EXITS", flush=True)
`, marker, daemon)...)
	if r.exit != 0 {
		t.Errorf("exit %d, want the payload's 0: %s", r.exit, r)
	}
	if exitedAt.IsZero() {
		t.Fatalf("the payload never got to its exit: %s", r)
	}
	if after := r.p.start.Add(r.p.wall).Sub(exitedAt); after > 5*time.Second {
		t.Errorf("rljail returned %v after the payload exited (the daemon held it?)", after)
	}
	time.Sleep(300 * time.Millisecond)
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(vol, "tick"))
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	s1 := size()
	if s1 <= 0 {
		t.Errorf("the daemon never ran (no ticks): the test proves nothing: %s", r)
	}
	time.Sleep(time.Second)
	if s2 := size(); s2 != s1 {
		t.Errorf("the daemon still writes to the volume after rljail returned: %d -> %d bytes", s1, s2)
	}
	for _, q := range allProcs() {
		if strings.Contains(q.cmdline, daemon) && !q.zombie() {
			t.Errorf("the daemon survived the run: %s", q)
		}
	}
	attackNoSurvivors(t, m, r, daemon)
}

func attackForkChain(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "1s"}, `
import os, time
if os.fork() == 0:
    while True:
        try:
            if os.fork() > 0:
                os._exit(0)
        except OSError:
            pass
time.sleep(60)
`)
	if r.exit != 124 {
		t.Errorf("exit %d, want 124: %s", r.exit, r)
	}
	attackWallBound(t, r, time.Second)
	attackNoSurvivors(t, m, r, "")
}

func attackCloseStdioRunOn(t *testing.T, m mode) {
	vol := newOpenDir(t)
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "2s", "-v", vol + ":/out:rw"}, `
import os, time
os.close(0)
os.close(1)
os.close(2)
while True:
    with open("/out/tick", "a") as f:
        f.write("x")
    time.sleep(0.05)
`)
	attackTimedOut(t, r, 2*time.Second)
	fi1, err := os.Stat(filepath.Join(vol, "tick"))
	if err != nil || fi1.Size() == 0 {
		t.Fatalf("the payload never wrote after closing its stdio: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if fi2, _ := os.Stat(filepath.Join(vol, "tick")); fi2.Size() != fi1.Size() {
		t.Errorf("the payload still writes after rljail returned: %d -> %d", fi1.Size(), fi2.Size())
	}
	attackNoSurvivors(t, m, r, "")
}

func attackCloseStdioExit(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "30s"}, `
import os, time
print("bye", flush=True)
os.close(1)
os.close(2)
time.sleep(0.5)
os._exit(0)
`)
	if r.exit != 0 || r.status() != "ok" || r.stdout != "bye\n" {
		t.Errorf("exit %d, status %q, stdout %q; want 0, ok, \"bye\\n\": %s", r.exit, r.status(), r.stdout, r)
	}
	if r.p.wall > 5*time.Second {
		t.Errorf("rljail took %v: it waited for something other than the payload", r.p.wall)
	}
	attackNoSurvivors(t, m, r, "")
}

func attackZombieStorm(t *testing.T, m mode) {
	marker := randomToken("atk")
	var maxZombies int
	var mu sync.Mutex
	stop := make(chan struct{})
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "STORM", during: func(pl proc) {
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				n := 0
				for _, q := range allProcs() {
					if q.pidNS == pl.pidNS && q.zombie() && q.ppid == pl.ppid {
						n++
					}
				}
				mu.Lock()
				maxZombies = max(maxZombies, n)
				mu.Unlock()
			}
		}()
	}}, attackPython([]string{"--timeout", "30s"}, `
import os, time
print("STORM", flush=True)
eagain = 0
for i in range(400):
    try:
        pid = os.fork()
    except OSError:
        eagain += 1
        time.sleep(0.01)
        continue
    if pid == 0:
        try:
            if os.fork() == 0:
                os._exit(0)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
print("ORPHANS", eagain, flush=True)
for i in range(40):
    if os.fork() == 0:
        os._exit(0)
time.sleep(0.5)
z = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if open("/proc/%s/stat" % p).read().rsplit(") ", 1)[1][0] == "Z":
                z += 1
        except Exception:
            pass
print("OWN-ZOMBIES", z, flush=True)
`, marker)...)
	close(stop)
	mu.Lock()
	t.Logf("%s; at most %d orphan zombies waited on init at once", strings.ReplaceAll(strings.TrimSpace(r.stdout), "\n", "; "), maxZombies)
	mu.Unlock()
	if r.exit != 0 {
		t.Errorf("the storm failed: %s", r)
	}
	if v, _ := lineValue(r.stdout, "ORPHANS "); m == asRoot && v != "0" {
		t.Errorf("%s forks were refused under --pids-limit 64 while at most 3 processes lived: init does not reap orphans fast enough", v)
	}
	attackNoSurvivors(t, m, r, marker)
	time.Sleep(200 * time.Millisecond)
	for _, q := range allProcs() {
		if r.ns != "" && q.pidNS == r.ns {
			t.Errorf("a process of the jail's PID namespace is left (zombie or not): %s", q)
		}
	}
}

func attackStopped(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "1s"}, `
import os, signal
os.fork()
print("STOPPING", os.getpid(), flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
`)
	attackTimedOut(t, r, time.Second)
	attackNoSurvivors(t, m, r, "")
}

func attackStdinNeverRead(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{stdin: strings.Repeat("i", 16*mib)}, []string{"--timeout", "30s"}, `
import time
time.sleep(0.2)
print("done without reading", flush=True)
`)
	if r.exit != 0 || !strings.Contains(r.stdout, "done without reading") {
		t.Errorf("exit %d: %s", r.exit, r)
	}
	if r.p.wall > 5*time.Second {
		t.Errorf("rljail took %v: the unread stdin held the run", r.p.wall)
	}
	attackNoSurvivors(t, m, r, "")
}

func attackFDExhaustion(t *testing.T, m mode) {
	r := attackPyOK(t, m, runOpts{}, nil, `
import errno, os, socket
fds, err = [], "none"
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
        r, w = os.pipe()
        fds += [r, w]
        fds.append(os.eventfd(0))
        fds.append(socket.socket(socket.AF_UNIX).detach())
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
print("FDS", err, len(fds), max(fds))
`)
	v, _ := lineValue(r.stdout, "FDS ")
	var errName string
	var n, highest int
	if _, err := fmt.Sscanf(v, "%s %d %d", &errName, &n, &highest); err != nil || errName != "EMFILE" || highest > 255 {
		t.Errorf("opening descriptors: %q; want EMFILE with none above 255 (RLIMIT_NOFILE 256)", v)
	}
}

func attackPlantedReportTargets(t *testing.T, m mode) {
	// The victim: a file of the host user rljail runs as, outside every
	// grant, that the payload must not be able to change.
	victimDir := newDir(t)
	victim := filepath.Join(victimDir, "victim.txt")
	content := randomToken("victim")
	writeFile(t, victim, content, 0o644)
	if m == asRootless {
		if err := os.Chown(victim, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	// A host env file that holds a secret, which a planted link must not
	// bring into a later jail's environment.
	secret := randomToken("envsecret")
	secretEnv := filepath.Join(victimDir, "secret.env")
	writeFile(t, secretEnv, "SECRET="+secret+"\n", 0o644)
	rw := newOpenDir(t)
	attackPyOK(t, m, runOpts{}, []string{"-v", rw + ":/out:rw"}, `
import os, sys
for name in ("r-link.json", "a-link.log"):
    os.symlink(sys.argv[1], "/out/" + name)
for name in ("r-fifo.json", "a-fifo.log", "e-fifo.env"):
    os.mkfifo("/out/" + name)
os.symlink(sys.argv[2], "/out/e-link.env")
print("PLANTED", sorted(os.listdir("/out")))
`, victim, secretEnv)
	for _, c := range []struct{ flag, name string }{
		{"--result", "r-link.json"}, {"--audit-log", "a-link.log"},
		{"--result", "r-fifo.json"}, {"--audit-log", "a-fifo.log"},
	} {
		cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "5s", c.flag, filepath.Join(rw, c.name), "--", "python3", "-c", "print('RAN')")
		cmd.Dir = newDir(t)
		cmd.Env = modeEnv(m)
		start := time.Now()
		stdout, stderr, exit := attackExec(t, m, cmd)
		took := time.Since(start)
		t.Logf("%s %s (planted): exit %d after %v, stderr %q", c.flag, c.name, exit, took, stderr)
		if took > 10*time.Second {
			t.Errorf("%s %s, a FIFO or link the jail planted: rljail took %v (it blocked on the FIFO's open, before its kill timer)", c.flag, c.name, took)
		}
		if exit != 125 || strings.Contains(stdout, "RAN") {
			t.Errorf("%s %s (planted): exit %d, stdout %q; want 125 before the payload runs", c.flag, c.name, exit, stdout)
		}
		if got, err := os.ReadFile(victim); err != nil || string(got) != content {
			t.Errorf("%s %s: the link the jail planted redirected rljail's write: %s now holds %q (%v)", c.flag, c.name, victim, got, err)
		}
	}
	for _, name := range []string{"e-link.env", "e-fifo.env"} {
		cmd := exec.Command(testBin, "--rootfs", rootfsDir, "--timeout", "5s", "--env-file", filepath.Join(rw, name), "--", "python3", "-c", "import os; print('RAN', os.environ.get('SECRET'))")
		cmd.Dir = newDir(t)
		cmd.Env = modeEnv(m)
		start := time.Now()
		stdout, stderr, exit := attackExec(t, m, cmd)
		took := time.Since(start)
		t.Logf("--env-file %s (planted): exit %d after %v, stdout %q, stderr %q", name, exit, took, stdout, stderr)
		if took > 10*time.Second {
			t.Errorf("--env-file %s, a FIFO or link the jail planted: rljail took %v", name, took)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("LEAK: --env-file %s (a link the jail planted to %s) brought the host secret into the jail", name, secretEnv)
		}
	}
	// A report file inside the volume the run grants read-write.
	writeFile(t, filepath.Join(rw, "ok.env"), "A=1\n", 0o644)
	for _, c := range []struct{ flag, name string }{{"--result", "new.json"}, {"--audit-log", "new.log"}, {"--env-file", "ok.env"}} {
		flag := c.flag
		cmd := exec.Command(testBin, "--rootfs", rootfsDir, "-v", rw+":/out:rw", flag, filepath.Join(rw, c.name), "--", "python3", "-c", "print('RAN')")
		cmd.Dir = newDir(t)
		cmd.Env = modeEnv(m)
		stdout, stderr, exit := attackExec(t, m, cmd)
		if exit != 125 || strings.Contains(stdout, "RAN") || !strings.Contains(stderr, "inside the volume") {
			t.Errorf("%s inside the rw volume: exit %d, stdout %q, stderr %q; want 125 and the reason", flag, exit, stdout, stderr)
		}
	}
	// The volume's directory by another name, a bind mount of it, in a
	// mount namespace of the run's own (so the host's table stays as the
	// other cases compare it).
	if m == asRoot {
		alias := newOpenDir(t)
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" "$1" && shift && exec "$@"`,
			rw, alias, testBin, "--rootfs", rootfsDir, "-v", rw+":/out:rw", "--result", filepath.Join(alias, "new.json"), "--", "python3", "-c", "print('RAN')")
		cmd.Dir = newDir(t)
		cmd.Env = modeEnv(m)
		stdout, stderr, exit := attackExec(t, m, cmd)
		if exit != 125 || strings.Contains(stdout, "RAN") || !strings.Contains(stderr, "inside the volume") {
			t.Errorf("--result through a bind mount of the rw volume: exit %d, stdout %q, stderr %q; want 125 and the reason", exit, stdout, stderr)
		}
	}
}

// sigQueued reads the signals queued for the user of process pid, host
// wide ("SigQ: queued/limit" in /proc/PID/status).
func sigQueued(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigQ:"); ok {
			n, _, _ := strings.Cut(strings.TrimSpace(v), "/")
			q, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("SigQ %q: %v", v, err)
			}
			return q
		}
	}
	t.Fatalf("no SigQ in /proc/%d/status", pid)
	return 0
}

func attackHostUserCounters(t *testing.T, m mode) {
	p := startJail(t, m, runOpts{}, append([]string{"--timeout", "30s"}, python(`
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
sent = {"self": 0, "init": 0}
for target, pid in (("self", os.getpid()), ("init", 1)):
    for i in range(5000):
        try:
            os.kill(pid, signal.SIGRTMIN)
            sent[target] += 1
        except OSError:
            break
fd = libc.inotify_init1(0)
print("INOTIFY", fd, ctypes.get_errno())
print("READY", sent, flush=True)
time.sleep(20)
`)...)...)
	// The host user the jail's queue counts against: root as root (this
	// test process), the invoking user rootless (rljail itself runs so).
	counted := os.Getpid()
	if m == asRootless {
		counted = p.cmd.Process.Pid
	}
	before := sigQueued(t, counted)
	if !p.stdout.waitFor("READY", 20*time.Second) {
		_ = p.cmd.Process.Kill()
		p.wait()
		t.Fatalf("the payload never printed READY: %s %s", p.stdout.String(), p.stderr.String())
	}
	during := sigQueued(t, counted)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait()
	t.Logf("signals queued for the host user: %d before, %d while the jail held its queue; payload said %q", before, during, p.stdout.String())
	if during-before > 2*256+64 {
		t.Errorf("the jail queued %d signals against its host user's host-wide limit (want at most 2 x 256: the payload's and init's RLIMIT_SIGPENDING)", during-before)
	}
	if !strings.Contains(p.stdout.String(), "INOTIFY -1 1") {
		t.Errorf("inotify_init1 did not fail with EPERM in the jail: %q", p.stdout.String())
	}
}
