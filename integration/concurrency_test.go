package integration

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentJailsSeeOwnTmp runs 20 jails at once; each writes a unique
// token to /tmp/token, waits so that all overlap, then lists /tmp: each
// must see only its own token.
func TestConcurrentJailsSeeOwnTmp(t *testing.T) {
	t.Parallel()
	const n = 20
	const code = `
import os, sys, time
open("/tmp/token", "w").write(sys.argv[1])
time.sleep(1.5)
print("LIST", ",".join(sorted(os.listdir("/tmp"))))
print("TOKEN", open("/tmp/token").read())
`
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			tokens := make([]string, n)
			dirs := make([]string, n)
			resultDirs := make([]string, n)
			for i := range tokens {
				tokens[i] = randomToken(fmt.Sprintf("tok%02d-", i))
				dirs[i] = newDir(t)
				resultDirs[i] = newOpenDir(t)
			}
			type outcome struct {
				p   *jailProc
				err error
			}
			outcomes := make([]outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := launch(m, runOpts{dir: dirs[i]}, resultDirs[i], python(code, tokens[i])...)
					if err == nil {
						p.wait()
					}
					outcomes[i] = outcome{p, err}
				}()
			}
			wg.Wait()
			var spans []string
			for i, o := range outcomes {
				if o.err != nil {
					t.Errorf("jail %d: %v", i, o.err)
					continue
				}
				stdout := o.p.stdout.String()
				if o.p.exit != 0 {
					t.Errorf("jail %d: exit %d\nstdout %q\nstderr %q", i, o.p.exit, stdout, o.p.stderr.String())
					continue
				}
				if v, _ := lineValue(stdout, "LIST "); v != "token" {
					t.Errorf("jail %d sees /tmp = [%s], want only its own token file", i, v)
				}
				if v, _ := lineValue(stdout, "TOKEN "); v != tokens[i] {
					t.Errorf("jail %d reads /tmp/token = %q, want its own %q", i, v, tokens[i])
				}
				for j, other := range tokens {
					if j != i && strings.Contains(stdout+o.p.stderr.String(), other) {
						t.Errorf("jail %d sees the token of jail %d", i, j)
					}
				}
				spans = append(spans, fmt.Sprintf("%d:%v", i, o.p.wall.Round(time.Millisecond)))
			}
			t.Logf("wall times: %s", strings.Join(spans, " "))
		})
	}
}

// hostState is what a run could leave behind on the host.
type hostState struct {
	mounts  map[string]int  // "mountpoint fstype source" of the test's mount namespace
	privTmp []string        // entries of the TMPDIR given to rljail
	cgroups map[string]bool // "hierarchy:relative dir" below the test's own cgroups
	procs   map[string]proc // processes of rljail (its binary or the run's marker)
}

// cgroupDirs returns, for every hierarchy of /proc/self/cgroup, the host
// directory of this process's cgroup.
func cgroupDirs(t *testing.T) map[string]string {
	t.Helper()
	type mnt struct{ point, fstype, super string }
	var mounts []mnt
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		if qf[0] == "cgroup" || qf[0] == "cgroup2" {
			mounts = append(mounts, mnt{pf[4], qf[0], qf[2]})
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		for _, mt := range mounts {
			match := false
			if ctrls == "" {
				match = mt.fstype == "cgroup2"
			} else if mt.fstype == "cgroup" {
				match = true
				opts := map[string]bool{}
				for _, o := range strings.Split(mt.super, ",") {
					opts[o] = true
				}
				for _, c := range strings.Split(ctrls, ",") {
					if !opts[c] {
						match = false
					}
				}
			}
			if match {
				name := ctrls
				if name == "" {
					name = "unified"
				}
				dirs[name] = filepath.Join(mt.point, path)
				break
			}
		}
	}
	return dirs
}

func snapshotHost(t *testing.T, marker, privTmp string, cgDirs map[string]string) hostState {
	t.Helper()
	s := hostState{mounts: map[string]int{}, cgroups: map[string]bool{}, procs: map[string]proc{}}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) >= 5 && len(qf) >= 2 {
			s.mounts[pf[4]+" "+qf[0]+" "+qf[1]]++
		}
	}
	priv, _ := os.ReadDir(privTmp)
	for _, e := range priv {
		s.privTmp = append(s.privTmp, e.Name())
	}
	for name, dir := range cgDirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != dir {
				rel, _ := filepath.Rel(dir, p)
				s.cgroups[name+":"+rel] = true
			}
			return nil
		})
	}
	for _, p := range allProcs() {
		// This test's binary (the supervisors, their guards and inits
		// are it) and its payloads: never another program's jails.
		if p.exe == testBin || strings.Contains(p.cmdline, marker) {
			s.procs[p.key()] = p
		}
	}
	return s
}

// TestRepeatedRunsLeaveNothing runs 200 jails in a row, mostly `python3 -c
// pass` with some timeouts, signals and failures mixed in, and compares
// what rljail could have made before and after: mounts, the TMPDIR of the
// test's own it gets, the cgroups below the test's own, and the
// processes of this test's binary. It never judges all of /tmp, where
// other programs of a shared machine come and go.
// Not parallel: it needs the machine to itself.
func TestRepeatedRunsLeaveNothing(t *testing.T) {
	const n = 200
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			marker := randomToken("leakmarker")
			ws := newDir(t)
			privTmp := newOpenDir(t)
			cg := cgroupDirs(t)
			t.Logf("cgroups watched: %v", cg)
			before := snapshotHost(t, marker, privTmp, cg)
			env := []string{"TMPDIR=" + privTmp}
			failures := 0
			start := time.Now()
			for i := 0; i < n && failures < 5; i++ {
				var args []string
				want := 0
				switch i % 20 {
				case 5: // the kill timer
					args, want = append([]string{"--timeout", "300ms"}, python("while True: pass", marker)...), 124
				case 10: // a payload killed by a signal
					args, want = python("import os; os.kill(os.getpid(), 9)", marker), 137
				case 15: // a setup error
					args, want = append([]string{"-v", "/nonexistent-rljail-it:/x"}, python("pass", marker)...), 125
				default:
					args = python("pass", marker)
				}
				stdout, stderr, exit, _ := runJail(t, m, runOpts{dir: ws, noResult: true, env: env}, args...)
				if exit != want {
					failures++
					t.Errorf("run %d: rljail %s: exit %d, want %d\nstdout %q\nstderr %q", i, shellQuote(args), exit, want, stdout, stderr)
				}
			}
			elapsed := time.Since(start)
			t.Logf("%d runs in %v (%v per run)", n, elapsed, elapsed/n)
			after := snapshotHost(t, marker, privTmp, cg)

			for k, c := range after.mounts {
				if c > before.mounts[k] {
					t.Errorf("a mount was left on the host: %s (%d before, %d after)", k, before.mounts[k], c)
				}
			}
			if len(after.privTmp) > 0 {
				t.Errorf("rljail created entries in its TMPDIR %s: %v (it must create no temp dir)", privTmp, after.privTmp)
			}
			var cgLeft []string
			for k := range after.cgroups {
				if !before.cgroups[k] {
					cgLeft = append(cgLeft, k)
				}
			}
			sort.Strings(cgLeft)
			if len(cgLeft) > 0 {
				t.Errorf("cgroups were left below the test's own cgroups: %v", cgLeft)
			}
			var procLeft []proc
			for k, p := range after.procs {
				if _, ok := before.procs[k]; !ok {
					procLeft = append(procLeft, p)
				}
			}
			if len(procLeft) > 0 {
				t.Errorf("processes of the runs are still alive:%s", procList(procLeft))
			}
			if o := orphanedInits(); len(o) > 0 {
				t.Errorf("orphaned rljail-init processes:%s", procList(o))
			}
		})
	}
}
