package rootfs

import (
	"path"
	"regexp"
	"strings"
	"sync"
)

// A rootfs with CPython's own regression tests (BuildOptions.TestSuites,
// `rljail rootfs build --test-suites`): the standard library's test
// packages (test, ctypes/test, unittest/test, ...) and the test-only
// extension modules (_testcapi, _testbuffer, ...) that an ordinary
// rootfs leaves out, so that `python3 -m test` runs in the jail as on the
// host and the two can be compared test by test (integration's
// TestCPythonRegressionTests). Such a rootfs is for that comparison: the
// test modules expose the interpreter's internals and are no part of
// what model code needs.

// testSuiteDirs matches, as compileall's -x and inTestSuite use it, a
// path inside a test package of the standard library. Those are not
// compiled ahead of time: some of their files are invalid on purpose
// (badsyntax_*.py), and CPython compiles the rest in memory as it
// imports them.
const testSuiteDirs = `/lib/python3[^/]*/(?:[^/]+/)*tests?/`

// testSuiteDirsRE is compiled at its first use, as namePattern: compiled
// at package init it cost every run 54 allocations, 0.06 ms (inittrace).
var testSuiteDirsRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(testSuiteDirs) })

// inTestSuite reports whether the file at p is inside a test package.
func inTestSuite(p string) bool { return testSuiteDirsRE().MatchString(p) }

// stdlibFilter is what leaves the standard library: excludedFromStdlib,
// or, with tests, the same less the test packages and test modules.
func stdlibFilter(tests bool) func(rel string, isDir bool) bool {
	if !tests {
		return excludedFromStdlib
	}
	return excludedKeepingTests
}

// testOnlyModules are the test-only extension modules that
// excludedFromStdlib leaves out and a test rootfs keeps.
var testOnlyModules = []string{"_test", "_ctypes_test", "_xxtestfuzz", "xxlimited"}

func excludedKeepingTests(rel string, isDir bool) bool {
	name := path.Base(rel)
	if isDir && (name == "test" || name == "tests") {
		return false
	}
	if !isDir && strings.Contains(name, ".so") {
		for _, prefix := range testOnlyModules {
			if strings.HasPrefix(name, prefix) {
				return false
			}
		}
	}
	return excludedFromStdlib(rel, isDir)
}
