package integration

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// threadPoolVars are the variables the jail sizes the numeric libraries'
// thread pools by under --cpus (docs/flags.md, --cpus).
var threadPoolVars = []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS"}

// TestThreadPoolHints checks the environment a jail under --cpus gives the
// numeric libraries' thread pools (jail.threadHints): --cpus rounded up in
// OMP_NUM_THREADS and the rest when that is fewer than the CPUs rljail may
// use, nothing when the caller set one of them or the jail gets every CPU,
// and the report's limits.thread_pools saying which. The payload prints its
// environment; the report is the supervisor's.
func TestThreadPoolHints(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatalf("this test needs a machine with two CPUs or more (it has %d)", runtime.NumCPU())
	}
	vars := threadPoolVars
	code := `import json, os; print(json.dumps({k: os.environ.get(k) for k in ` + pyList(vars) + `}))`
	one := func(v string) map[string]any {
		m := map[string]any{}
		for _, k := range vars {
			m[k] = v
		}
		return m
	}
	none := one("")
	for k := range none {
		none[k] = nil
	}
	tests := []struct {
		name  string
		args  []string
		want  map[string]any
		pools int64
	}{
		{"the default one CPU", nil, one("1"), 1},
		{"a fraction rounds up", []string{"--cpus", "0.5"}, one("1"), 1},
		{"every CPU: none", []string{"--cpus", strconv.Itoa(runtime.NumCPU())}, none, 0},
		{"the caller's own wins, and no other is set", []string{"-e", "OPENBLAS_NUM_THREADS=7"},
			map[string]any{"OMP_NUM_THREADS": nil, "OPENBLAS_NUM_THREADS": "7", "MKL_NUM_THREADS": nil, "BLIS_NUM_THREADS": nil, "NUMEXPR_NUM_THREADS": nil}, 0},
	}
	for _, m := range []mode{asRoot, asRootless} {
		for _, tt := range tests {
			t.Run(string(m)+"/"+tt.name, func(t *testing.T) {
				args := append(append([]string{}, tt.args...), python(code)...)
				stdout, stderr, exit, res := runJail(t, m, runOpts{}, args...)
				if exit != 0 {
					t.Fatalf("exit %d, stderr:\n%s", exit, stderr)
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &got); err != nil {
					t.Fatalf("payload output %q: %v", stdout, err)
				}
				for _, k := range vars {
					if got[k] != tt.want[k] {
						t.Errorf("%s = %v in the jail, want %v", k, got[k], tt.want[k])
					}
				}
				limits, _ := res["limits"].(map[string]any)
				n, _ := jsonInt(limits, "thread_pools")
				if n != tt.pools {
					t.Errorf("report limits.thread_pools = %d, want %d (limits: %v)", n, tt.pools, limits)
				}
			})
		}
	}
}
