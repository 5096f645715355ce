package integration

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The data stack (issue 23): a rootfs built with --system-packages from
// Debian's python3-numpy, python3-pandas, python3-scipy and
// python3-matplotlib (and python3-pytest, python3-hypothesis for numpy's
// own suite), named by RLJAIL_DATA_ROOTFS (`make data-rootfs` builds it
// once, /var/lib/rljail/rootfs/data as root). Model code runs in it as root
// and rootless, and its results are compared with the same code run bare
// by the host's /usr/bin/python3, from the outside: the numbers the two
// print, and the PNG the jail wrote into a writable volume, decoded here.

// hostPython is the interpreter the data rootfs is built from and the bare
// runs use: Debian's, whose dist-packages the packages are.
const hostPython = "/usr/bin/python3"

// dataRootfs is $RLJAIL_DATA_ROOTFS, checked to be a rootfs with the data
// packages; the test fails without it (it is not skipped).
func dataRootfs(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RLJAIL_DATA_ROOTFS")
	if dir == "" {
		t.Fatal("RLJAIL_DATA_ROOTFS is not set: `make data-rootfs` builds the data rootfs (rljail rootfs build --system-packages python3-numpy,python3-pandas,python3-scipy,python3-matplotlib,python3-pytest,python3-hypothesis --rootfs DIR)")
	}
	out, err := exec.Command(testBin, "rootfs", "info", "--rootfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("rootfs info --rootfs %s: %v\n%s", dir, err, out)
	}
	// `rootfs info` lists each added package on a line of its own:
	// "  NAME VERSION (SOURCE)".
	for _, p := range []string{"python3-numpy", "python3-pandas", "python3-scipy", "python3-matplotlib", "python3-pytest", "python3-hypothesis"} {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(p) + ` \S+ \(system\)$`).Match(out) {
			t.Fatalf("the data rootfs %s lacks %s...: rebuild it with `make data-rootfs`\n%s", dir, p, out)
		}
	}
	return dir
}

// modelCode is typical model-written data code. Any warning is an error,
// so matplotlib warning at import (an unwritable config or cache
// directory, a missing matplotlibrc) fails it. It prints its results as
// JSON and saves a plot at argv[1].
const modelCode = `
import json, os, sys, warnings
warnings.simplefilter("error")
import numpy as np
import pandas as pd
import scipy.linalg, scipy.fft
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from multiprocessing import Pool

def square(x):
    return x * x

if __name__ == "__main__":
    r = {}
    a = np.arange(12.0).reshape(3, 4)
    r["sum"] = float(a.sum())
    r["gram"] = (a @ a.T).tolist()
    rng = np.random.default_rng(7)
    big = rng.standard_normal((300, 300))   # big enough for OpenBLAS's threads
    r["inv_residual_small"] = bool(np.abs(np.linalg.inv(big) @ big - np.eye(300)).max() < 1e-8)
    r["svd_top"] = round(float(np.linalg.svd(big, compute_uv=False)[0]), 8)
    m = np.array([[4.0, 1, 0], [1, 3, 1], [0, 1, 2]])
    r["solve"] = [round(x, 12) for x in scipy.linalg.solve(m, np.array([1.0, 2, 3])).tolist()]
    r["fft"] = np.round(np.abs(scipy.fft.fft(np.sin(np.arange(16.0)))), 9).tolist()
    df = pd.DataFrame({"k": list("abacbca"), "v": [1, 2, 3, 4, 5, 6, 7], "w": rng.integers(0, 100, 7)})
    g = df.groupby("k").agg(v=("v", "sum"), w=("w", "mean"))
    r["groupby"] = {k: [int(row.v), round(float(row.w), 9)] for k, row in g.iterrows()}
    df.to_csv("/tmp/frame.csv", index=False)
    r["csv_roundtrip"] = pd.read_csv("/tmp/frame.csv").equals(df)
    with Pool(4) as p:
        r["pool"] = p.map(square, range(20))
    fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
    ax.plot(np.arange(10), np.arange(10) ** 2)
    ax.set_title("model")
    fig.savefig(sys.argv[1])
    r["png_bytes_positive"] = os.path.getsize(sys.argv[1]) > 0
    print(json.dumps(r, sort_keys=True))
`

// TestDataStackModelCode runs modelCode in the data rootfs as root and
// rootless and compares with the bare run: the same JSON, a valid PNG on
// the host, nothing on stderr but the rootless fallback notice.
func TestDataStackModelCode(t *testing.T) {
	data := dataRootfs(t)
	dir := newDir(t)
	script := filepath.Join(dir, "model.py")
	writeFile(t, script, modelCode, 0o644)

	bareOut := newOpenDir(t)
	bare := exec.Command(hostPython, script, filepath.Join(bareOut, "plot.png"))
	bare.Env = []string{"PATH=" + hostPath, "HOME=" + bareOut, "MPLCONFIGDIR=" + filepath.Join(bareOut, "mpl")}
	var bareErr bytes.Buffer
	bare.Stderr = &bareErr
	want, err := bare.Output()
	if err != nil {
		t.Fatalf("bare %s model.py: %v\n%s", hostPython, err, bareErr.String())
	}
	var wantJSON map[string]any
	if err := json.Unmarshal(want, &wantJSON); err != nil {
		t.Fatalf("bare output is not JSON: %v\n%s", err, want)
	}

	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			out := newOpenDir(t)
			// --cpus 2, so that OpenBLAS starts more than one thread (the
			// jail sizes the pools to --cpus rounded up, jail.threadHints,
			// where the host has more CPUs).
			args := []string{"--rootfs", data, "--timeout", "100s", "--cpus", "2", "-v", dir + ":/in:ro", "-v", out + ":/out:rw"}
			if m == asRootless {
				// Rootless on this cgroup v1 host --memory falls back to
				// RLIMIT_AS, which counts address space: numpy with
				// OpenBLAS's threads, scipy, pandas and matplotlib (while it
				// builds its font cache) reserve some 520 MB of it, over the
				// default 512m (docs/rootfs.md, "Packages").
				args = append(args, "--memory", "1g")
			}
			stdout, stderr, exit, _ := runJail(t, m, runOpts{noRootfs: true, deadline: 120 * time.Second},
				append(args, "--", "python3", "/in/model.py", "/out/plot.png")...)
			if exit != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", exit, stdout, stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if line != "" && !strings.HasPrefix(line, fallbackWarning) {
					t.Errorf("stderr has %q (matplotlib, numpy or multiprocessing complained)", line)
				}
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("jail output is not JSON: %v\n%s", err, stdout)
			}
			for k, w := range wantJSON {
				if g, _ := json.Marshal(got[k]); string(g) != mustJSON(w) {
					t.Errorf("%s: jail %s, bare %s", k, g, mustJSON(w))
				}
			}
			if len(got) != len(wantJSON) {
				t.Errorf("jail printed %d results, bare %d", len(got), len(wantJSON))
			}
			f, err := os.Open(filepath.Join(out, "plot.png"))
			if err != nil {
				t.Fatalf("the jail wrote no PNG into the volume: %v", err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("the jail's plot.png is not a valid PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != 200 || b.Dy() != 150 {
				t.Errorf("plot.png is %dx%d, want 200x150 (4x3 in at 50 dpi)", b.Dx(), b.Dy())
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// numpyTestModules is the fixed part of numpy's 'fast' suite that runs
// bare and in the jail. The whole suite takes some 9 minutes bare on this
// 2-core machine (and f2py's and distutils' tests compile C and Fortran,
// for which a jail has no compiler), core, lib and random alone some 5: so
// the modules of the array, linear algebra, FFT and random number code
// that model code leans on, about 2 minutes each way (docs/testing.md, "numpy's own
// tests in the jail").
var numpyTestModules = []string{
	"numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial", "numpy.matrixlib",
	"numpy.core.tests.test_multiarray", "numpy.core.tests.test_umath", "numpy.core.tests.test_numeric",
}

// numpyTestCode runs numpy.test() on numpyTestModules, writing pytest's
// JUnit XML to argv[1]; it exits 0 whatever the tests did (the XML tells).
var numpyTestCode = fmt.Sprintf(`
import sys, numpy
root = numpy.__path__[0]  # the same path bare and in the jail: the same test ids
numpy.test(extra_argv=["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
    "--rootdir=" + root, "--junitxml=" + sys.argv[1]], tests=%s)
`, pyList(numpyTestModules))

func pyList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// numpyJailDifferences are the tests of numpyTestModules that pass bare and
// not in the jail, each with the reason (docs/testing.md lists them too).
var numpyJailDifferences = map[string]string{
	"core.tests.test_multiarray.TestNewBufferProtocol::test_no_suboffsets": "skipped: it needs CPython's _testbuffer, a test-only extension module the rootfs leaves out (it exposes raw interpreter internals)",
}

// TestDataStackNumpySuite runs numpyTestModules of numpy's own suite bare
// (as the unprivileged test user, as the jail's payload is one) and in the
// jail (root mode), and requires every test that passes bare to pass in
// the jail, or to be listed in numpyJailDifferences. The results are the
// JUnit XML files pytest wrote, read here.
func TestDataStackNumpySuite(t *testing.T) {
	data := dataRootfs(t)
	dir := newDir(t)
	script := filepath.Join(dir, "numpytest.py")
	writeFile(t, script, numpyTestCode, 0o644)

	bareOut := newOpenDir(t)
	start := time.Now()
	bare := exec.Command(hostPython, script, filepath.Join(bareOut, "bare.xml"))
	bare.Dir = bareOut
	// TMPDIR: pytest's own temporary directories go into the test's, not /tmp.
	bare.Env = []string{"PATH=" + hostPath, "HOME=" + bareOut, "TMPDIR=" + bareOut, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	bare.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID)}}
	if out, err := bare.CombinedOutput(); err != nil {
		t.Fatalf("bare numpy.test(): %v\n%s", err, lastChars(string(out), 3000))
	}
	bareTook := time.Since(start)

	out := newOpenDir(t)
	start = time.Now()
	stdout, stderr, exit, _ := runJail(t, asRoot, runOpts{noRootfs: true, deadline: 15 * time.Minute},
		// Limits the suite needs, as any program its size would: its
		// large-array tests more memory than the default 512m, and
		// TestIO::test_largish_file writes a 64 MiB file to /tmp (the
		// defaults: a 64m /tmp, --file-size 64m).
		"--rootfs", data, "--timeout", "14m", "--memory", "2g", "--tmp-size", "256m", "--file-size", "256m",
		"-v", dir+":/in:ro", "-v", out+":/out:rw",
		"--", "python3", "/in/numpytest.py", "/out/jail.xml")
	jailTook := time.Since(start)
	if exit != 0 {
		t.Fatalf("jailed numpy.test(): exit %d\nstdout: %s\nstderr: %s", exit, lastChars(stdout, 3000), lastChars(stderr, 3000))
	}
	bareRes, err := readPytestJUnit(filepath.Join(bareOut, "bare.xml"))
	if err != nil {
		t.Fatalf("bare results: %v", err)
	}
	jailRes, err := readPytestJUnit(filepath.Join(out, "jail.xml"))
	if err != nil {
		t.Fatalf("jail results: %v", err)
	}
	count := func(res map[string]string, outcome string) int {
		n := 0
		for _, o := range res {
			if o == outcome {
				n++
			}
		}
		return n
	}
	t.Logf("numpy.test(%s): bare %d passed of %d in %v, jail %d passed of %d in %v",
		strings.Join(numpyTestModules, ","), count(bareRes, "passed"), len(bareRes), bareTook.Round(time.Second),
		count(jailRes, "passed"), len(jailRes), jailTook.Round(time.Second))
	if count(bareRes, "passed") < 1000 {
		t.Fatalf("the bare run passed only %d tests: the suite did not run", count(bareRes, "passed"))
	}
	var lost []string
	for id, o := range bareRes {
		if o != "passed" || jailRes[id] == "passed" {
			continue
		}
		if _, known := numpyJailDifferences[id]; known {
			continue
		}
		lost = append(lost, fmt.Sprintf("%s: bare passed, jail %s", id, orMissing(jailRes[id])))
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Errorf("%d numpy tests pass bare but not in the jail (list each in numpyJailDifferences and docs/testing.md with its reason, or fix the jail):\n%s",
			len(lost), strings.Join(lost[:min(len(lost), 60)], "\n"))
	}
}

func orMissing(o string) string {
	if o == "" {
		return "did not run"
	}
	return o
}

func lastChars(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// readPytestJUnit reads pytest's --junit-xml into outcomes ("passed",
// "skipped", "failed") by class::name.
func readPytestJUnit(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	o, err := parseJUnit(raw, func(c junitCase) string { return c.Classname + "::" + c.Name })
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	res := make(map[string]string, len(o))
	for id, v := range o {
		res[id] = v.String()
	}
	return res, nil
}

// makeWheel writes a pure-Python wheel of one module name.py (VALUE =
// value) into dir, as a wheelhouse holds them.
func makeWheel(t *testing.T, dir, name, version, value string) {
	t.Helper()
	files := map[string]string{
		name + "/__init__.py":                        "VALUE = " + value + "\n",
		name + "-" + version + ".dist-info/METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n",
		name + "-" + version + ".dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: rljail-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	record := name + "-" + version + ".dist-info/RECORD"
	var rec strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		w, err := zw.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[p])
		sum := sha256.Sum256([]byte(files[p]))
		fmt.Fprintf(&rec, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[p]))
	}
	fmt.Fprintf(&rec, "%s,,\n", record)
	w, err := zw.Create(record)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, rec.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, name+"-"+version+"-py3-none-any.whl"), buf.String(), 0o644)
}

// TestRootfsPackageSources builds small rootfs from a venv and an offline
// wheel install (pip from Debian's python3-pip, no index): the jail
// imports both, pip stays out, everything has bytecode and nothing is
// writable, and two builds from the same inputs have the same tree hash.
// Bad input is refused with one line, exit 125, and nothing made.
func TestRootfsPackageSources(t *testing.T) {
	dir := newDir(t)
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command(hostPython, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("make a venv: %v\n%s", err, out)
	}
	site := filepath.Join(venv, "lib", "python3.11", "site-packages")
	writeFile(t, filepath.Join(site, "rljvenvmod.py"), "VALUE = 42\n", 0o644)
	// An extension module in the venv whose library (liblz4) the bare
	// rootfs lacks: the build must bring it (Debian's python3-lz4, which
	// python3-pandas pulls in, is the venv's package here).
	if out, err := exec.Command("cp", "-a", "/usr/lib/python3/dist-packages/lz4", site+"/").CombinedOutput(); err != nil {
		t.Fatalf("copy lz4 into the venv (python3-lz4 comes with python3-pandas): %v\n%s", err, out)
	}
	wheels := filepath.Join(dir, "wheels")
	if err := os.Mkdir(wheels, 0o755); err != nil {
		t.Fatal(err)
	}
	makeWheel(t, wheels, "rljwheelmod", "1.0", "7")
	req := filepath.Join(dir, "requirements.txt")
	writeFile(t, req, "rljwheelmod==1.0\n", 0o644)

	build := func(out string, extra ...string) (string, int) {
		args := append([]string{"rootfs", "build", "-q", "--no-commands", "--rootfs", out}, extra...)
		cmd := exec.Command(testBin, args...)
		cmd.Env = modeEnv(asRoot)
		outb, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("rljail rootfs build: %v", err)
		}
		return string(outb), code
	}
	treeHash := func(rootfs string) string {
		out, err := exec.Command(testBin, "rootfs", "info", "--rootfs", rootfs).CombinedOutput()
		if err != nil {
			t.Fatalf("rootfs info: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "tree:") {
				return strings.TrimSpace(strings.TrimPrefix(l, "tree:"))
			}
		}
		t.Fatalf("rootfs info prints no tree line:\n%s", out)
		return ""
	}
	sources := []string{"--venv", venv, "--wheels", wheels, "--requirements", req}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, out := range []string{a, b} {
		if msg, code := build(out, sources...); code != 0 {
			t.Fatalf("build %s: exit %d\n%s", out, code, msg)
		}
	}
	if ha, hb := treeHash(a), treeHash(b); ha != hb {
		t.Errorf("two builds from the same inputs differ: %s and %s", ha, hb)
	}
	purelib := filepath.Join(a, "usr/local/lib/python3.11/dist-packages")
	for _, pyc := range []string{"__pycache__/rljvenvmod.cpython-311.pyc", "rljwheelmod/__pycache__/__init__.cpython-311.pyc"} {
		if _, err := os.Stat(filepath.Join(purelib, pyc)); err != nil {
			t.Errorf("no bytecode %s: %v", pyc, err)
		}
	}
	filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o022 != 0 {
				t.Errorf("%s is writable by others than its owner (%v)", p, fi.Mode())
			}
		}
		return nil
	})
	for _, m := range bothModes {
		stdout, stderr, exit, _ := runJail(t, m, runOpts{noRootfs: true}, "--rootfs", a, "--", "python3", "-c",
			"import importlib.util, rljvenvmod, rljwheelmod, lz4.block; "+
				"print(rljvenvmod.VALUE, rljwheelmod.VALUE, importlib.util.find_spec('pip') is None, lz4.block.decompress(lz4.block.compress(b'abc')))")
		if want := "42 7 True b'abc'"; exit != 0 || strings.TrimSpace(stdout) != want {
			t.Errorf("%s: exit %d, stdout %q (want %q), stderr %s", m, exit, stdout, want, stderr)
		}
	}

	// Refusals: exit 125, one line naming the problem, and nothing left:
	// not the rootfs directory, not a lock or temporary beside it.
	other := filepath.Join(dir, "venv312")
	if err := os.MkdirAll(filepath.Join(other, "lib", "python3.12", "site-packages"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(other, "pyvenv.cfg"), "home = /opt/python3.12/bin\nversion = 3.12.1\n", 0o644)
	// A venv (another user's, say) whose link outside it names a file only
	// root may read: the build, as root, must not publish it in a rootfs
	// every user and jail may read.
	secret := filepath.Join(dir, "secret")
	writeFile(t, secret, "root's secret\n", 0o600)
	leaky := filepath.Join(dir, "venvleak")
	leakySite := filepath.Join(leaky, "lib", "python3.11", "site-packages")
	if err := os.MkdirAll(leakySite, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(leaky, "pyvenv.cfg"), "home = /usr/bin\nversion = 3.11.2\n", 0o644)
	if err := os.Symlink(secret, filepath.Join(leakySite, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	// One whose lib is a link into a directory only root may enter.
	linked := filepath.Join(dir, "venvlink")
	privateLib := filepath.Join(dir, "private", "lib")
	if err := os.MkdirAll(filepath.Join(privateLib, "python3.11", "site-packages"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(privateLib, "python3.11", "site-packages", "rootsmod.py"), "SECRET = 1\n", 0o644)
	if err := os.Chmod(filepath.Join(dir, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(linked, "pyvenv.cfg"), "home = /usr/bin\nversion = 3.11.2\n", 0o644)
	if err := os.Symlink(privateLib, filepath.Join(linked, "lib")); err != nil {
		t.Fatal(err)
	}
	// Requirements that name a wheel on a network (a server this test
	// runs, on the loopback, serving the wheelhouse): --no-index does not
	// stop pip fetching a direct URL or a --find-links URL, and a build
	// must never read the network.
	var fetched atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		http.FileServer(http.Dir(wheels)).ServeHTTP(w, r)
	}))
	defer srv.Close()
	emptyWheels := filepath.Join(dir, "nowheels")
	if err := os.Mkdir(emptyWheels, 0o755); err != nil {
		t.Fatal(err)
	}
	urlReq := filepath.Join(dir, "url-requirements.txt")
	writeFile(t, urlReq, "rljwheelmod @ "+srv.URL+"/rljwheelmod-1.0-py3-none-any.whl\n", 0o644)
	linksReq := filepath.Join(dir, "links-requirements.txt")
	writeFile(t, linksReq, "--find-links "+srv.URL+"/\nrljwheelmod==1.0\n", 0o644)
	// pip builds a VCS checkout, a local source tree or an editable
	// install whatever --only-binary says, running its setup.py: refused
	// before pip runs (the marker shows whether setup.py ran).
	src := filepath.Join(dir, "src")
	marker := filepath.Join(dir, "setup-py-ran")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "setup.py"), "open("+strconv.Quote(marker)+", 'w').close()\nfrom setuptools import setup\nsetup(name='rljsrc', version='1', py_modules=[])\n", 0o644)
	gitReq := filepath.Join(dir, "git-requirements.txt")
	writeFile(t, gitReq, "rljsrc @ git+"+srv.URL+"/src.git\n", 0o644)
	srcReq := filepath.Join(dir, "src-requirements.txt")
	writeFile(t, srcReq, "./src\n", 0o644)
	nestedReq := filepath.Join(dir, "nested-requirements.txt")
	writeFile(t, filepath.Join(dir, "editable.txt"), "-e ./src\n", 0o644)
	writeFile(t, nestedReq, "rljwheelmod==1.0 ; python_version >= '3'  # a comment\n-r editable.txt\n", 0o644)
	badReq := filepath.Join(dir, "bad-requirements.txt")
	writeFile(t, badReq, "rljnosuchwheel==1.0\n", 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--system-packages", "python3-numpy,python3-rljail-no-such-package"}, "python3-rljail-no-such-package is not installed"},
		{[]string{"--system-packages", "libc6"}, "libc6 is not a Python package"},
		// What a rootfs leaves out is refused when named, not built into a
		// rootfs without it.
		{[]string{"--system-packages", "python3-tk"}, "python3-tk needs Tk, which needs a display"},
		{[]string{"--system-packages", "python3-numpy,python3-dev"}, "python3-dev is a -dev package"},
		{[]string{"--system-packages", "python3-pip"}, "python3-pip is pip, which a rootfs holds only with --with-pip"},
		{[]string{"--system-packages", "python3-numpy,"}, "an empty package name"},
		{[]string{"--venv", other}, "was made by Python 3.12.1"},
		{[]string{"--venv", filepath.Join(dir, "wheels")}, "not a virtual environment"},
		{[]string{"--venv", leaky}, "which other users may not read"},
		{[]string{"--venv", linked}, "which other users may not read"},
		{[]string{"--wheels", wheels}, "--wheels DIR and --requirements FILE go together"},
		{[]string{"--wheels", wheels, "--requirements", badReq}, "No matching distribution found for rljnosuchwheel"},
		{[]string{"--wheels", emptyWheels, "--requirements", urlReq}, "is a URL or a direct reference"},
		{[]string{"--wheels", emptyWheels, "--requirements", linksReq}, "names a place on a network"},
		{[]string{"--wheels", emptyWheels, "--requirements", gitReq}, "is a URL or a direct reference"},
		{[]string{"--wheels", emptyWheels, "--requirements", srcReq}, "is a path (a local directory or archive, built from source)"},
		{[]string{"--wheels", emptyWheels, "--requirements", nestedReq}, "is an editable install"},
	} {
		parent := filepath.Join(dir, "refused")
		out := filepath.Join(parent, "rootfs")
		msg, code := build(out, tc.args...)
		if code != 125 || !strings.Contains(msg, tc.want) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("build %v: exit %d, output %q; want exit 125 and one line with %q", tc.args, code, msg, tc.want)
		}
		if _, err := os.Lstat(parent); !errors.Is(err, fs.ErrNotExist) {
			entries, _ := os.ReadDir(parent)
			t.Errorf("build %v left %s behind (%d entries)", tc.args, parent, len(entries))
			os.RemoveAll(parent)
		}
	}
	if exists(marker) {
		t.Errorf("a build ran the setup.py of a source tree the requirements named")
	}
	if n := fetched.Load(); n != 0 {
		t.Errorf("a build with requirements naming %s made %d requests to it: a build must not read the network", srv.URL, n)
	}
}
