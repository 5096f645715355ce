#!/usr/bin/env python3
"""`make conformance`: the adapters judged by the runtimes' own test suites.

Unpacks the snapshots of rlm, DSPy and smolagents (unmodified source archives, given by
``--thirdparty DIR``) into a cache, runs each library's tests of its local executor
twice, in the same run: on the library's own executor and with that executor swapped
for the rljail adapter (a pytest plugin of this directory does the swap), against the
real rljail binary (``$RLJAIL_BIN``).  Prints one table per library: what passed on
each, every test that passes on one and not the other with pytest's one-line reason,
and every test not run (skipped) with its reason.  Exits non-zero when a test passes on
the library's executor and not on rljail, unless it is a listed decision of the jail.

Test code only: it needs Debian's pytest (python3-pytest, -asyncio, -mock)."""

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)  # clients/python: the rljail package


def default_cache():
    if os.environ.get("RLJAIL_CONFORMANCE_CACHE"):
        return os.environ["RLJAIL_CONFORMANCE_CACHE"]
    if os.getuid() == 0:
        return "/var/cache/rljail-conformance"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rljail-conformance")


def unpack(archive, cache):
    """The archive unpacked once into cache/<archive name>-<sha256 prefix>/ (a changed
    archive gets a new directory); returns the directory of the library (its one
    top-level directory)."""
    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    stem = os.path.basename(archive)[:-len(".tar.gz")]
    dest = os.path.join(cache, "%s-%s" % (stem, digest))
    if not os.path.isfile(os.path.join(dest, ".unpacked")):
        os.makedirs(cache, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".unpack-", dir=cache)
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():  # the archive's own paths only
                if member.name.startswith("/") or ".." in member.name.split("/"):
                    raise SystemExit("conformance: %s: unsafe path %r" % (archive, member.name))
            tar.extractall(tmp)
        open(os.path.join(tmp, ".unpacked"), "w").close()
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    tops = [d for d in os.listdir(dest) if not d.startswith(".")]
    if len(tops) != 1:
        raise SystemExit("conformance: %s: expected one top-level directory, found %s" % (archive, tops))
    return os.path.join(dest, tops[0]), digest


class Run:
    """One pytest run of a library's tests on one executor, reported as JUnit XML."""

    def __init__(self, label, python, cwd, args, env, plugin, executor, junit):
        self.label = label
        self.junit = junit
        self.env = dict(os.environ)
        self.env.update(env)
        self.env["RLJAIL_CONFORMANCE_EXECUTOR"] = executor
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        paths = [HERE, PACKAGE_ROOT] + env.get("PYTHONPATH", "").split(os.pathsep)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        cmd = [python, "-B", "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "-p", plugin,
               "--junitxml", junit, "-o", "junit_family=xunit1"] + args
        self.log = open(junit + ".log", "w+")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self):
        rc = self.proc.wait()
        self.seconds = time.monotonic() - self.start
        self.log.seek(0)
        self.output = self.log.read()
        self.log.close()
        # pytest: 0 all passed, 1 some failed; anything else (no tests, an error at
        # collection, an internal error) leaves no results to compare.
        if rc not in (0, 1) or not os.path.exists(self.junit):
            raise SystemExit("conformance: %s: pytest exited %d:\n%s" % (self.label, rc, self.output[-4000:]))
        return results(self.junit)


def results(junit):
    """{test id: (outcome, one-line reason)} from pytest's JUnit XML; outcome is passed,
    failed (a failure or an error) or skipped."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("file") or case.get("classname")
        if "conformance/cases/" in path:  # rljail's own cases, outside the library's tree
            path = "rljail:cases/" + path.rsplit("/", 1)[-1]
        key = "%s::%s" % (path, case.get("name"))
        if case.get("classname") and case.get("file"):
            cls = case.get("classname").rsplit(".", 1)[-1]
            if not cls.startswith("test_"):
                key = "%s::%s::%s" % (path, cls, case.get("name"))
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, reason = "failed", one_line(child.get("message") or child.text or child.tag)
                break
            if child.tag == "skipped":
                outcome, reason = "skipped", one_line(child.get("message") or "")
        out[key] = (outcome, reason)
    return out


def one_line(text):
    line = " ".join((text or "").split())
    return line if len(line) <= 200 else line[:197] + "..."


def table(name, version, native_name, native, jailed, decisions):
    """Prints the library's table; returns the number of unexplained regressions."""
    def count(res, what):
        return sum(1 for o, _ in res.values() if o == what)

    ids = sorted(set(native) | set(jailed))
    print()
    print("== %s %s: %d tests" % (name, version, len(ids)))
    print("   %-26s %4d passed  %4d failed  %4d not run" % (
        "on " + native_name + ":", count(native, "passed"), count(native, "failed"), count(native, "skipped")))
    print("   %-26s %4d passed  %4d failed  %4d not run" % (
        "on rljail:", count(jailed, "passed"), count(jailed, "failed"), count(jailed, "skipped")))
    ours = [t for t in ids if t.startswith("rljail:cases/")]
    if ours:
        print("   (of them rljail's own cases, rljail:cases/: %d; passed on %s %d, on rljail %d)" % (
            len(ours), native_name, sum(1 for t in ours if native.get(t, ("",))[0] == "passed"),
            sum(1 for t in ours if jailed.get(t, ("",))[0] == "passed")))
    applicable = [t for t in ids if native.get(t, ("?",))[0] == "passed"]
    on_both = [t for t in applicable if jailed.get(t, ("?",))[0] == "passed"]
    if applicable:
        print("   passing on %s that pass on rljail: %d of %d (%.0f%%)" % (
            native_name, len(on_both), len(applicable), 100.0 * len(on_both) / len(applicable)))
    bad = 0
    differ = [t for t in ids if native.get(t, ("missing", ""))[0] != jailed.get(t, ("missing", ""))[0]]
    # Not run on the library's executor here (DSPy's needs Deno) and passed on rljail:
    # counted, not listed; those that failed on rljail are listed below.
    unjudged_passed = [t for t in differ if native.get(t, ("",))[0] == "skipped" and jailed[t][0] == "passed"]
    if unjudged_passed:
        print("   not run on %s on this host and passed on rljail: %d" % (native_name, len(unjudged_passed)))
    differ = [t for t in differ if t not in unjudged_passed]
    if differ:
        print("   differ:")
    for t in differ:
        n, j = native.get(t, ("missing", "")), jailed.get(t, ("missing", ""))
        if n[0] == "passed" and t in decisions:
            note = "decision of the jail: " + decisions[t]
        elif n[0] == "passed":
            bad += 1
            note = "REGRESSION"
        elif n[0] == "skipped":
            note = "not judged: no reference, not run on %s on this host" % native_name
        else:
            note = ""
        print("     %s" % t)
        print("       %s: %s%s" % (native_name, n[0], (" (" + n[1] + ")") if n[1] else ""))
        print("       rljail: %s%s%s" % (j[0], (" (" + j[1] + ")") if j[1] else "", ("  [" + note + "]") if note else ""))
    both = [t for t in ids if native.get(t, ("",))[0] == "failed" and jailed.get(t, ("",))[0] == "failed"]
    if both:
        print("   failed on both (this host lacks what they need; the %s reason):" % native_name)
        for t in both:
            print("     %s: %s" % (t, native[t][1]))
    skipped = [t for t in ids if native.get(t, ("",))[0] == "skipped" and jailed.get(t, ("",))[0] == "skipped"]
    if skipped:
        print("   not applicable (not run on either):")
        for t in skipped:
            print("     %s: %s" % (t, jailed[t][1] or native[t][1]))
    return bad


# ---------------------------------------------------------------- the libraries

# rlm: the test modules that exercise LocalREPL (directly, or through RLM(environment=
# "local")); the others test the LM clients, the Docker, IPython and cloud REPLs, parsing.
RLM_TESTS = ["tests/test_local_repl.py", "tests/test_local_repl_persistent.py",
             "tests/test_multi_turn_integration.py", "tests/test_rlm_query.py", "tests/test_subcall.py",
             "tests/test_depth_metadata.py", "tests/test_e2e_depth.py", "tests/repl/"]
# rljail's own cases, run on both executors too: the deviations the real library found
# (issue 32) and an end-to-end trajectory with rlm's MockLM.
CASES = os.path.join(HERE, "cases")


def project_version(src):
    """The version in the library's pyproject.toml (static or not given)."""
    try:
        with open(os.path.join(src, "pyproject.toml"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("version") and "=" in line:
                    return line.split("=", 1)[1].strip().strip('"\'')
    except OSError:
        pass
    return "?"


def describe(src, digest, runs):
    archive = os.path.basename(os.path.dirname(src)).rsplit("-", 1)[0]
    return "%s (%s, sha256 %s; %s)" % (project_version(src), archive, digest, ", ".join(
        "%s %.0f s" % (r.label.rsplit(" ", 1)[-1], r.seconds) for r in runs))


def run_library(name, native_name, tests, plugin, src, digest, work, python, pythonpath=(), decisions=None):
    env = {"PYTHONPATH": os.pathsep.join(list(pythonpath) + [src])}
    runs = [Run("%s on %s" % (name, ex), python, src, tests, env, plugin, ex,
                os.path.join(work, "%s-%s.xml" % (name, ex))) for ex in ("native", "rljail")]
    native, jailed = (r.wait() for r in runs)
    return table(name, describe(src, digest, runs), native_name, native, jailed, decisions or {})


def run_rlm(src, digest, work, python):
    return run_library("rlm", "LocalREPL", RLM_TESTS + [os.path.join(CASES, "test_rljail_rlm.py")],
                       "rlm_plugin", src, digest, work, python)


# smolagents: the modules that build CodeAgents (executor_type="local", the default).
# test_local_python_executor.py tests LocalPythonExecutor's own AST evaluator and its
# rules (authorized imports, dunder access) function by function: not the executor
# interface the agent drives.
SMOLAGENTS_TESTS = ["tests/test_agents.py", "tests/test_monitoring.py"]
# What passes on smolagents' executor and not on rljail by a decision of the jail, with
# the place the docs say so.
SMOLAGENTS_DECISIONS = {}


def run_smolagents(src, digest, work, python):
    return run_library("smolagents", "LocalPythonExecutor",
                       SMOLAGENTS_TESTS + [os.path.join(CASES, "test_rljail_smolagents.py")],
                       "smolagents_plugin", src, digest, work, python,
                       pythonpath=[os.path.join(HERE, "stubs"), os.path.join(src, "src")],
                       decisions=SMOLAGENTS_DECISIONS)


# DSPy: its interpreter's tests, and RLM's, ProgramOfThought's and the interpreter
# callbacks' (each makes a PythonInterpreter by default).  DSPy's own interpreter needs
# Deno; where there is none, its deno-marked tests do not run on it (they do on rljail).
DSPY_TESTS = ["tests/primitives/test_python_interpreter.py", "tests/predict/test_rlm.py",
              "tests/predict/test_program_of_thought.py", "tests/callback/test_interpreter_callback.py"]
DSPY_DECISIONS = {}
# What DSPy's tests import that a Python with pydantic 2 (not Debian's) may lack, taken
# from Debian's pure-Python packages (python3-pytest and the rest) through a directory
# of links, one per module the interpreter cannot import itself.
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
DSPY_BORROWED = ["pytest", "_pytest", "pluggy", "iniconfig", "py", "pytest_asyncio", "pytest_mock", "attr",
                 "attrs", "packaging", "exceptiongroup", "tomli", "tqdm", "diskcache", "tenacity", "cachetools",
                 "anyio", "sniffio", "requests", "urllib3", "idna", "certifi", "charset_normalizer", "jinja2",
                 "markupsafe"]


def dspy_python():
    """An interpreter that has pydantic 2 (DSPy needs it; Debian 12's is 1.10), or None."""
    candidates = [os.environ.get("CONFORMANCE_DSPY_PYTHON", "")]
    candidates += [shutil.which(n) or "" for n in ("python3", "python3.11", "python3.12", "python3.13", "python")]
    probe = "import sys, pydantic; sys.exit(0 if int(pydantic.VERSION.split('.')[0]) >= 2 else 1)"
    for c in candidates:
        if c and os.access(c, os.X_OK):
            if subprocess.run([c, "-c", probe], capture_output=True).returncode == 0:
                return c
    return None


def borrowed_modules(python, cache):
    """A directory of links to the Debian modules ``python`` cannot import itself."""
    probe = ("import importlib.util, sys\nfor m in sys.argv[1:]:\n"
             "    print(m, importlib.util.find_spec(m) is not None)")
    out = subprocess.run([python, "-c", probe] + DSPY_BORROWED, capture_output=True, text=True).stdout
    missing = [line.split()[0] for line in out.splitlines() if line.endswith("False")]
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    d = os.path.join(cache, "borrowed-python%s" % version)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for m in missing:
        # The module, and its distribution's metadata: pytest finds its plugins
        # (pytest-asyncio, pytest-mock) by their entry points.
        names = [m, m + ".py"] + glob.glob1(DEBIAN_DIST, m + "-*.dist-info") + glob.glob1(DEBIAN_DIST, m + "-*.egg-info")
        for name in names:
            if os.path.exists(os.path.join(DEBIAN_DIST, name)):
                os.symlink(os.path.join(DEBIAN_DIST, name), os.path.join(d, name))
    return d


def run_dspy(src, digest, work, python, cache):
    interp = dspy_python()
    if interp is None:
        print()
        print("== dspy %s: not run on this host (no Python with pydantic 2 to import DSPy: set "
              "CONFORMANCE_DSPY_PYTHON)" % project_version(src))
        return 0
    env = {"PYTHONPATH": os.pathsep.join([borrowed_modules(interp, cache), src])}
    tests = DSPY_TESTS + [os.path.join(CASES, "test_rljail_dspy.py")]
    native_args = tests + (["--deno"] if shutil.which("deno") else [])
    runs = [Run("dspy on native", interp, src, native_args, env, "dspy_plugin", "native",
                os.path.join(work, "dspy-native.xml")),
            Run("dspy on rljail", interp, src, tests + ["--deno"], env, "dspy_plugin", "rljail",
                os.path.join(work, "dspy-rljail.xml"))]
    native, jailed = (r.wait() for r in runs)
    name = "PythonInterpreter" + ("" if shutil.which("deno") else " (no Deno here)")
    return table("dspy", describe(src, digest, runs) + "; " + interp, name, native, jailed, DSPY_DECISIONS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thirdparty", default=os.environ.get("RLJAIL_THIRDPARTY", ""),
                    help="directory of the snapshots (rlm-*.tar.gz, dspy-*.tar.gz, smolagents-*.tar.gz)")
    ap.add_argument("--cache", default=default_cache())
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter of rlm and smolagents")
    ap.add_argument("--only", action="append", help="rlm, dspy or smolagents (repeatable)")
    args = ap.parse_args()
    if not args.thirdparty or not os.path.isdir(args.thirdparty):
        raise SystemExit("conformance: THIRDPARTY=DIR (or RLJAIL_THIRDPARTY) must name the directory of the "
                         "library snapshots rlm-*.tar.gz, dspy-*.tar.gz, smolagents-*.tar.gz (got %r)"
                         % args.thirdparty)
    if not os.environ.get("RLJAIL_BIN"):
        raise SystemExit("conformance: RLJAIL_BIN must name the rljail binary to test")
    work = tempfile.mkdtemp(prefix="rljail-conformance-")
    bad = 0
    try:
        for lib, fn in (("rlm", run_rlm), ("smolagents", run_smolagents), ("dspy", run_dspy)):
            if args.only and lib not in args.only:
                continue
            found = sorted(glob.glob(os.path.join(args.thirdparty, lib + "-*.tar.gz")))
            if not found:
                raise SystemExit("conformance: no %s-*.tar.gz in %s" % (lib, args.thirdparty))
            src, digest = unpack(found[-1], args.cache)
            if lib == "dspy":
                bad += fn(src, digest, work, args.python, args.cache)
            else:
                bad += fn(src, digest, work, args.python)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("conformance: %s" % ("every test passing on the library's executor passes on rljail or is a listed decision"
                               if not bad else "%d test(s) pass on the library's executor and not on rljail" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
