package integration

// Fault tests of issue 5: the supervisor SIGKILLed at random moments of
// setup and run, and every way a run can fail before its payload starts
// (a missing, truncated or unreadable rootfs, a full disk for the rootfs
// build, a --cgroup-parent that does not exist, an unwritable --result, a
// deleted working directory). After each: no process of the run, no
// cgroup, no mount, no temp directory; and for the setup failures one
// clear error line and exit 125.
//
// None of these tests is parallel: they compare the host's state before
// and after, and the kill trials time the cleanup.

import (
	"bytes"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// faultJailCgroup matches the name of a jail's cgroup directory.
var faultJailCgroup = regexp.MustCompile(`^rljail-[0-9a-f]{16}$`)

// faultCgroups lists every jail cgroup directory in every hierarchy.
func faultCgroups() map[string]bool {
	out := map[string]bool{}
	for _, root := range attackCgroupRoots() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && faultJailCgroup.MatchString(d.Name()) {
				out[p] = true
				return fs.SkipDir
			}
			return nil
		})
	}
	return out
}

// faultTempNames lists the entries rljail could have left in the host's
// shared directories: in /run (its own /run/rljail aside), entries whose
// names say rljail. /tmp, /var/tmp and /dev/shm are not judged: other
// programs of a shared machine make rljail-named entries there (a test
// run's own directories), and rljail gets a TMPDIR of the test's own,
// which faultLeftovers judges whole.
func faultTempNames() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/run")
	for _, e := range ents {
		if n := strings.ToLower(e.Name()); strings.Contains(n, "rljail") && n != "rljail" {
			out[filepath.Join("/run", e.Name())] = true
		}
	}
	return out
}

// foreignCgroup reports whether the jail cgroup at p is another
// program's, not this test binary's: it holds live processes and none of
// them is this binary's rljail (a supervisor's guard and a jail's init are
// the binary itself). A machine shared with other programs that run
// rljail has their jails' cgroups beside this test's; an empty one, or one
// with this binary's processes, is judged as this test's.
func foreignCgroup(p string) bool {
	b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
	if err != nil {
		return false
	}
	pids := strings.Fields(string(b))
	if len(pids) == 0 {
		return false
	}
	for _, s := range pids {
		if exe, err := os.Readlink("/proc/" + s + "/exe"); err == nil && exe == testBin {
			return false
		}
	}
	return true
}

// faultHostState is what a run could leave behind.
type faultHostState struct {
	cgroups map[string]bool
	mounts  map[string]int
	temp    map[string]bool
}

func faultSnapshot(t *testing.T) faultHostState {
	t.Helper()
	return faultHostState{cgroups: faultCgroups(), mounts: attackHostMounts(t), temp: faultTempNames()}
}

// faultLeftovers compares the host with an earlier snapshot: new jail
// cgroups, new mounts, new rljail temp entries, entries in the private
// TMPDIR, and live processes carrying marker.
func faultLeftovers(t *testing.T, before faultHostState, privTmp, marker string) []string {
	t.Helper()
	var left []string
	// A new cgroup counts only if it is still there 3 s later: another
	// test's root run, in parallel, makes one below the same cgroup for a
	// moment, empty before its init joins and after it ends (seen in CI:
	// an empty rljail-RUNID at the cpu hierarchy's root beside a rootless
	// fault case, which cannot make one there). One this run left stays.
	var fresh []string
	for p := range faultCgroups() {
		if !before.cgroups[p] && !foreignCgroup(p) {
			fresh = append(fresh, p)
		}
	}
	for deadline := time.Now().Add(3 * time.Second); len(fresh) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		var still []string
		for _, p := range fresh {
			if _, err := os.Stat(p); err == nil {
				still = append(still, p)
			}
		}
		fresh = still
	}
	for _, p := range fresh {
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		left = append(left, fmt.Sprintf("cgroup %s (processes %q)", p, strings.Fields(string(procs))))
	}
	for k, n := range attackHostMounts(t) {
		if point, _, _ := strings.Cut(k, " "); faultOwnMounts[point] {
			continue // a tmpfs the test mounted itself
		}
		if n > before.mounts[k] {
			left = append(left, "mount "+k)
		}
	}
	for p := range faultTempNames() {
		if !before.temp[p] {
			left = append(left, "temp entry "+p)
		}
	}
	if privTmp != "" {
		ents, _ := os.ReadDir(privTmp)
		for _, e := range ents {
			left = append(left, "entry in rljail's TMPDIR: "+e.Name())
		}
	}
	if marker != "" {
		for _, q := range allProcs() {
			if strings.Contains(q.cmdline, marker) && !q.zombie() && inOwnCgroups(q.pid) {
				left = append(left, "process "+q.String())
			}
		}
	}
	sort.Strings(left)
	return left
}

// TestFaultsSupervisorKilled SIGKILLs rljail (as root) 0-150 ms after it
// starts, 100 times: within 1 s no process of the jail may be alive (its
// init, its payload, the cgroup guardian), no cgroup of the run left in any
// hierarchy (the guardian removes it), no mount and no temp directory.
func TestFaultsSupervisorKilled(t *testing.T) {
	const trials = 100
	privTmp := newOpenDir(t)
	before := faultSnapshot(t)
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var phases = map[string]int{}
	var slowest time.Duration
	failures := 0
	start := time.Now()
	for i := 0; i < trials && failures < 5; i++ {
		marker := randomToken("faultkill")
		delay := time.Duration(rng.IntN(151)) * time.Millisecond
		p := startJail(t, asRoot, runOpts{noResult: true, env: []string{"TMPDIR=" + privTmp}},
			"--no-workspace", "--timeout", "60s", "--", "python3", "-c", "import time; print('up', flush=True); time.sleep(30)", marker)
		time.Sleep(time.Until(p.start.Add(delay)))
		tracked := descendants(p.cmd.Process.Pid)
		phase := "setup"
		if strings.Contains(p.stdout.String(), "up") {
			phase = "run"
		}
		if p.cmd.ProcessState != nil {
			phase = "ended"
		}
		phases[phase]++
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		p.wait()
		var alive []proc
		var cgLeft []string
		for {
			alive = alive[:0]
			keys := map[string]bool{}
			for _, q := range tracked {
				keys[q.key()] = true
			}
			for _, q := range allProcs() {
				if !q.zombie() && (strings.Contains(q.cmdline, marker) || keys[q.key()]) {
					alive = append(alive, q)
				}
			}
			alive = append(alive, orphanedInits()...)
			cgLeft = cgLeft[:0]
			for c := range faultCgroups() {
				if !before.cgroups[c] && !foreignCgroup(c) {
					cgLeft = append(cgLeft, c)
				}
			}
			if len(alive) == 0 && len(cgLeft) == 0 {
				break
			}
			if time.Since(killed) > time.Second {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(killed)
		slowest = max(slowest, took)
		if len(alive) > 0 || len(cgLeft) > 0 {
			failures++
			var guards []proc
			for _, q := range allProcs() {
				if strings.HasPrefix(q.cmdline, "rljail-guard") {
					guards = append(guards, q)
				}
			}
			t.Errorf("trial %d (SIGKILL %v after start, during %s): 1 s later, alive:%s\n\tcgroups left: %v%s\n\tguards:%s",
				i, delay, phase, procList(alive), cgLeft, cgroupTasks(cgLeft), procList(guards))
			for _, q := range alive {
				_ = syscall.Kill(q.pid, syscall.SIGKILL)
			}
			time.Sleep(200 * time.Millisecond)
			for _, c := range cgLeft {
				_ = rmdirCgroup(c)
			}
		}
	}
	if left := faultLeftovers(t, before, privTmp, ""); len(left) > 0 {
		t.Errorf("after the kill trials, left on the host:\n\t%s", strings.Join(left, "\n\t"))
	}
	summary := fmt.Sprintf("supervisor kill trials: %d in %v (killed during setup %d, during the run %d, after it ended %d); slowest cleanup %v",
		trials, time.Since(start).Round(time.Millisecond), phases["setup"], phases["run"], phases["ended"], slowest.Round(time.Millisecond))
	t.Log(summary)
	if os.Getenv("RLJAIL_ATTACK_SUMMARY") != "" {
		fmt.Println(summary)
	}
}

// faultCase is one way a run fails before its payload may start.
type faultCase struct {
	name  string
	modes []mode
	run   func(t *testing.T, m mode, env faultEnv) faultOutcome
}

// faultEnv is what a case gets: a read-write volume for the payload's
// marker file (the payload must not run), the private TMPDIR.
type faultEnv struct {
	vol     string
	privTmp string
	marker  string
}

// faultOutcome is what the case observed.
type faultOutcome struct {
	stdout, stderr string
	exit           int
	what           string // the command, for messages
	payloadMayRun  bool   // the failure comes after the payload (the report cannot be written)
}

// faultPayload is the payload of every case: it writes the marker file to
// /out, so that the host can tell it ran.
func faultPayload(env faultEnv) []string {
	return []string{"-v", env.vol + ":/out:rw", "--", "python3", "-c", "open('/out/ran', 'w').write('ran')", env.marker}
}

// faultRun runs rljail (with its own --rootfs when rootfs is set) in dir.
func faultRun(t *testing.T, m mode, dir string, env faultEnv, args ...string) faultOutcome {
	t.Helper()
	return faultRunEnv(t, m, dir, env, nil, args...)
}

// faultRunEnv is faultRun with more environment variables.
func faultRunEnv(t *testing.T, m mode, dir string, env faultEnv, extraEnv []string, args ...string) faultOutcome {
	t.Helper()
	return faultRunCmd(t, m, dir, env, func(c *exec.Cmd) { c.Env = append(c.Env, extraEnv...) }, args...)
}

// faultRunCmd is faultRun with setup applied to the command before it
// starts.
func faultRunCmd(t *testing.T, m mode, dir string, env faultEnv, setup func(*exec.Cmd), args ...string) faultOutcome {
	t.Helper()
	cmd := exec.Command(testBin, args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = newDir(t)
	}
	cmd.Env = append(modeEnv(m), "TMPDIR="+env.privTmp)
	setup(cmd)
	stdout, stderr, exit := attackExec(t, m, cmd)
	return faultOutcome{stdout: stdout, stderr: stderr, exit: exit, what: "rljail " + shellQuote(args)}
}

// faultRootfsCopy copies the rootfs to a fresh directory (readable by the
// rootless user) and returns the copy's path.
func faultRootfsCopy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(newDir(t), "python")
	if out, err := exec.Command("cp", "-a", rootfsDir, dst).CombinedOutput(); err != nil {
		t.Fatalf("copy the rootfs: %v: %s", err, out)
	}
	return dst
}

// faultOwnMounts are the mount points the tests made (not leftovers).
var faultOwnMounts = map[string]bool{}

// faultMountTmpfs mounts a tmpfs with opts on a fresh directory until the
// test ends.
func faultMountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := newDir(t)
	faultOwnMounts[dir] = true
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "rljail-it-fault", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs (%s): %v: %s", opts, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func faultEntries(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

var faultCases = []faultCase{
	{name: "missing_rootfs_unbuildable", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// A named directory that holds no rootfs is refused, never built
		// (only rljail's default place is built on first use): here it is
		// also on a read-only fs.
		ro := faultMountTmpfs(t, "ro,size=1m,mode=0755")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", filepath.Join(ro, "python")}, faultPayload(env)...)...)
		if e := faultEntries(ro); len(e) > 0 {
			t.Errorf("entries appeared on the read-only fs: %v", e)
		}
		return o
	}},
	{name: "missing_rootfs_named", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// A typo in --rootfs: one line that says how to build one there,
		// no build, nothing created (not the directory, not its parents,
		// not a build lock).
		parent := newOpenDir(t)
		rf := filepath.Join(parent, "typo", "python")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if e := faultEntries(parent); len(e) > 0 {
			t.Errorf("rljail created %v in %s for a missing --rootfs", e, parent)
		}
		if strings.Contains(o.stderr, "building it") {
			t.Errorf("rljail started a build for a --rootfs that does not exist: %q", o.stderr)
		}
		if !strings.Contains(o.stderr, rf) || !strings.Contains(o.stderr, "rljail rootfs build --rootfs "+rf) {
			t.Errorf("the error line does not name %s and how to build it there: %q", rf, o.stderr)
		}
		return o
	}},
	{name: "missing_rootfs_env", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		parent := newOpenDir(t)
		rf := filepath.Join(parent, "typo", "python")
		o := faultRunEnv(t, m, "", env, []string{"RLJAIL_ROOTFS=" + rf}, faultPayload(env)...)
		if e := faultEntries(parent); len(e) > 0 {
			t.Errorf("rljail created %v in %s for a missing RLJAIL_ROOTFS", e, parent)
		}
		if !strings.Contains(o.stderr, rf) || !strings.Contains(o.stderr, "RLJAIL_ROOTFS") {
			t.Errorf("the error line does not name %s and RLJAIL_ROOTFS: %q", rf, o.stderr)
		}
		return o
	}},
	{name: "empty_rootfs_named", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		parent := newOpenDir(t)
		rf := filepath.Join(parent, "python")
		if err := os.Mkdir(rf, 0o755); err != nil {
			t.Fatal(err)
		}
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if e := faultEntries(rf); len(e) > 0 {
			t.Errorf("rljail wrote %v into the empty --rootfs", e)
		}
		if e := faultEntries(parent); len(e) != 1 {
			t.Errorf("rljail created entries beside the empty --rootfs: %v", e)
		}
		return o
	}},
	{name: "rootfs_is_a_file", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := filepath.Join(newOpenDir(t), "python")
		if err := os.WriteFile(rf, []byte("not a rootfs"), 0o644); err != nil {
			t.Fatal(err)
		}
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if strings.Contains(o.stderr, "building it") {
			t.Errorf("rljail announced a build into a file: %q", o.stderr)
		}
		return o
	}},
	{name: "missing_interpreter", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := faultRootfsCopy(t)
		if err := os.Remove(filepath.Join(rf, "usr/bin/python3.11")); err != nil {
			t.Fatal(err)
		}
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if !strings.Contains(o.stderr, "interpreter") {
			t.Errorf("the error does not name the missing interpreter: %q", o.stderr)
		}
		return o
	}},
	{name: "truncated_interpreter", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// The manifest is intact, the interpreter cut off. Decision: that
		// is a broken rootfs, rljail's failure (125 naming it), not the
		// payload's (a SIGSEGV or SIGBUS exit with no word of why).
		rf := faultRootfsCopy(t)
		if err := os.Truncate(filepath.Join(rf, "usr/bin/python3.11"), 100000); err != nil {
			t.Fatal(err)
		}
		return faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
	}},
	{name: "truncated_libc", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := faultRootfsCopy(t)
		libc, err := filepath.EvalSymlinks(filepath.Join(rf, "usr/lib/x86_64-linux-gnu/libc.so.6"))
		if err != nil || !strings.HasPrefix(libc, rf) {
			t.Fatalf("libc in the rootfs copy: %v %s", err, libc)
		}
		if err := os.Truncate(libc, 1000); err != nil {
			t.Fatal(err)
		}
		return faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
	}},
	{name: "truncated_manifest", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := faultRootfsCopy(t)
		p := filepath.Join(rf, ".rljail-rootfs.json")
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		return faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
	}},
	{name: "unreadable_rootfs_own_parent", modes: []mode{asRootless}, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// The realistic rootless case: the user's own data directory holds
		// a rootfs that became unreadable (chmod 000).
		rf := faultRootfsCopy(t)
		parent := filepath.Dir(rf)
		if err := os.Chown(parent, testUID, testGID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(rf, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(rf, 0o755) })
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if e := faultEntries(parent); len(e) != 1 {
			t.Errorf("rljail created entries beside the unreadable rootfs (it exists: nothing is to be built): %v", e)
		}
		if strings.Contains(o.stderr, "building it") {
			t.Errorf("rljail took the unreadable rootfs for a missing one and started a build: %q", o.stderr)
		}
		if !strings.Contains(o.stderr, rf) || !strings.Contains(strings.ToLower(o.stderr), "permission denied") {
			t.Errorf("the error line does not say that %s is not readable: %q", rf, o.stderr)
		}
		return o
	}},
	{name: "unreadable_rootfs", modes: []mode{asRootless}, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := faultRootfsCopy(t)
		if err := os.Chmod(rf, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(rf, 0o755) })
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
		if !strings.Contains(strings.ToLower(o.stderr), "permission denied") {
			t.Errorf("the error line does not say permission denied: %q", o.stderr)
		}
		return o
	}},
	{name: "unreadable_rootfs_subtree", modes: []mode{asRootless}, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		rf := faultRootfsCopy(t)
		if err := os.Chmod(filepath.Join(rf, "usr"), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(filepath.Join(rf, "usr"), 0o755) })
		return faultRun(t, m, "", env, append([]string{"--rootfs", rf}, faultPayload(env)...)...)
	}},
	{name: "full_disk_rootfs_build", modes: rootOnly, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		full := faultMountTmpfs(t, "size=10m,mode=0755")
		o := faultRun(t, m, "", env, "rootfs", "build", "--quiet", "--rootfs", filepath.Join(full, "python"))
		o.payloadMayRun = true // nothing runs
		for _, e := range faultEntries(full) {
			// The build lock too: it lives only while held.
			t.Errorf("left in the full tmpfs: %s", e)
		}
		return o
	}},
	{name: "full_disk_rootfs_build_on_first_run", modes: []mode{asRootless}, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// The first run builds the rootfs at the default place (here the
		// rootless user's $XDG_DATA_HOME/rljail/rootfs/python), on a disk
		// too small for it.
		full := faultMountTmpfs(t, "size=10m,mode=0777")
		o := faultRunEnv(t, m, "", env, []string{"XDG_DATA_HOME=" + full}, append([]string{"--quiet"}, faultPayload(env)...)...)
		o.payloadMayRun = false
		// Nothing at all is left, not even the build lock or the data
		// directory the build made (the lock lives only while held).
		for _, e := range faultEntries(full) {
			t.Errorf("left in the full tmpfs: %s", e)
		}
		if def := filepath.Join(full, "rljail", "rootfs", "python"); !strings.Contains(o.stderr, "build the rootfs in "+def+": ") || !strings.Contains(o.stderr, "no space left on device") {
			t.Errorf("no build was tried at the default place %s (or it did not fail for the full disk): %q", def, o.stderr)
		}
		return o
	}},
	{name: "cgroup_parent_missing", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		missing := "/" + randomToken("rljail-it-missing-")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--cgroup-parent", missing}, faultPayload(env)...)...)
		// An absolute --cgroup-parent is read from each hierarchy's root.
		for _, cm := range cgroupMounts(t) {
			if root := cm.point; exists(filepath.Join(root, missing)) {
				t.Errorf("rljail created the missing --cgroup-parent %s", filepath.Join(root, missing))
				_ = rmdirCgroup(filepath.Join(root, missing))
			}
		}
		if !strings.Contains(o.stderr, missing) {
			t.Errorf("the error line does not name %s: %q", missing, o.stderr)
		}
		return o
	}},
	{name: "result_in_missing_dir", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		p := filepath.Join(newDir(t), "missing", "r.json")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result", p}, faultPayload(env)...)...)
		if exists(filepath.Dir(p)) {
			t.Errorf("rljail created %s", filepath.Dir(p))
		}
		return o
	}},
	{name: "result_is_a_directory", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		return faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result", newOpenDir(t)}, faultPayload(env)...)...)
	}},
	{name: "result_on_readonly_fs", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		ro := faultMountTmpfs(t, "ro,size=1m,mode=0777")
		return faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result", filepath.Join(ro, "r.json")}, faultPayload(env)...)...)
	}},
	{name: "result_not_permitted", modes: []mode{asRootless}, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		p := filepath.Join(newDir(t), "r.json") // 0755 root-owned: not writable for the user
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result", p}, faultPayload(env)...)...)
		if exists(p) {
			t.Errorf("%s was created", p)
		}
		return o
	}},
	{name: "result_on_full_fs", modes: rootOnly, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// No room for the report: the run is refused before the payload
		// runs (rljail reserves the report's room at the start), with 125,
		// one line, and no empty report left.
		full := faultMountTmpfs(t, "size=4k,mode=0777")
		if err := os.WriteFile(filepath.Join(full, "fill"), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(full, "r.json")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result", p}, faultPayload(env)...)...)
		if fi, err := os.Stat(p); err == nil {
			t.Errorf("a %d-byte report was left at %s: a reader takes it for a report", fi.Size(), p)
		}
		return o
	}},
	{name: "result_fd_closed", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		// Descriptor 9 is not open in rljail's caller; the number may be
		// one of rljail's own by the time it reads its flags. Refused
		// before the payload runs (which the case checks), not after.
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--result-fd", "9"}, faultPayload(env)...)...)
		if !strings.Contains(o.stderr, "not an open descriptor") {
			t.Errorf("the error line does not say that descriptor 9 is not open: %q", o.stderr)
		}
		return o
	}},
	{name: "result_fd_read_only", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		f, err := os.Open(rootfsDir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return faultRunCmd(t, m, "", env, func(c *exec.Cmd) { c.ExtraFiles = []*os.File{f} },
			append([]string{"--rootfs", rootfsDir, "--result-fd", "3"}, faultPayload(env)...)...)
	}},
	{name: "audit_log_on_full_fs", modes: rootOnly, run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		full := faultMountTmpfs(t, "size=4k,mode=0777")
		if err := os.WriteFile(filepath.Join(full, "fill"), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(full, "audit.log")
		o := faultRun(t, m, "", env, append([]string{"--rootfs", rootfsDir, "--audit-log", p}, faultPayload(env)...)...)
		if _, err := os.Stat(p); err == nil {
			t.Errorf("an empty audit log was left at %s", p)
		}
		return o
	}},
	{name: "deleted_cwd", run: func(t *testing.T, m mode, env faultEnv) faultOutcome {
		parent := newOpenDir(t)
		dir := filepath.Join(parent, "gone")
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--rootfs", rootfsDir}, faultPayload(env)...)
		cmd := exec.Command("/bin/sh", append([]string{"-c", `cd "$1" && rmdir "$1" && shift && exec "$@"`, "sh", dir, testBin}, args...)...)
		cmd.Env = append(modeEnv(m), "TMPDIR="+env.privTmp)
		stdout, stderr, exit := attackExec(t, m, cmd)
		if exists(dir) {
			t.Fatalf("the shell did not remove %s", dir)
		}
		return faultOutcome{stdout: stdout, stderr: stderr, exit: exit, what: "cd DIR && rmdir DIR && rljail " + shellQuote(args)}
	}},
}

// TestFaultsSetup runs every setup fault: exit 125, one clear error line
// ("rljail: ..."; a rootless run's limit fallback warning aside), the
// payload never ran, and nothing is left on the host.
func TestFaultsSetup(t *testing.T) {
	for _, c := range faultCases {
		modes := c.modes
		if modes == nil {
			modes = bothModes
		}
		for _, m := range modes {
			t.Run(c.name+"/"+string(m), func(t *testing.T) {
				env := faultEnv{vol: newOpenDir(t), privTmp: newOpenDir(t), marker: randomToken("fault")}
				before := faultSnapshot(t)
				o := c.run(t, m, env)
				t.Logf("%s\nexit %d\nstderr: %q", o.what, o.exit, o.stderr)
				if o.exit != 125 {
					t.Errorf("exit %d, want 125 (rljail's own failure)", o.exit)
				}
				lines := attackErrorLines(o.stderr)
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "rljail: ") || !strings.HasSuffix(o.stderr, "\n") {
					t.Errorf("stderr must hold exactly one error line starting \"rljail: \", got %d: %q", len(lines), o.stderr)
				}
				if strings.Contains(o.stderr, fallbackWarning) {
					t.Logf("note: besides the error, stderr has the limit fallback warning")
				}
				if ran := exists(filepath.Join(env.vol, "ran")); ran && !o.payloadMayRun {
					t.Errorf("the payload ran although rljail failed with a setup error")
				}
				if left := faultLeftovers(t, before, env.privTmp, env.marker); len(left) > 0 {
					t.Errorf("left on the host:\n\t%s", strings.Join(left, "\n\t"))
				}
			})
		}
	}
}

// cgroupTasks describes what each cgroup still holds: its tasks, with
// their state (a zombie keeps a v1 cgroup busy until reaped).
func cgroupTasks(dirs []string) string {
	var b strings.Builder
	parents := map[string]bool{}
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "tasks"))
		if err != nil {
			fmt.Fprintf(&b, "\n\t%s: %v", d, err)
			continue
		}
		fmt.Fprintf(&b, "\n\t%s: tasks", d)
		for _, f := range strings.Fields(string(data)) {
			stat, _ := os.ReadFile("/proc/" + f + "/stat")
			fmt.Fprintf(&b, " [%s %s]", f, strings.TrimSpace(string(stat)))
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				if fs := strings.Fields(string(stat[i+1:])); len(fs) > 1 {
					parents[fs[1]] = true
				}
			}
		}
	}
	// The parents: the supervisor, if it is not yet gone, and what its
	// threads are doing in the kernel.
	for pp := range parents {
		stat, _ := os.ReadFile("/proc/" + pp + "/stat")
		fmt.Fprintf(&b, "\n\tparent %s: %s", pp, strings.TrimSpace(string(stat)))
		tasks, _ := filepath.Glob("/proc/" + pp + "/task/*")
		for _, td := range tasks {
			st, _ := os.ReadFile(td + "/stat")
			stack, _ := os.ReadFile(td + "/stack")
			fmt.Fprintf(&b, "\n\t  thread %s: %s\n\t    %s", filepath.Base(td), strings.TrimSpace(string(st)), strings.ReplaceAll(strings.TrimSpace(string(stack)), "\n", " | "))
		}
	}
	return b.String()
}
