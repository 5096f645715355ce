package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSessionDataRootfs (issue 30): a session on the data rootfs imports
// what a one-shot run of the same rootfs imports: its cells' sys.path is
// the one-shot `python3 -c`'s (dist-packages, the working directory and a
// granted PYTHONPATH included), and numpy, pandas and matplotlib work in
// a cell, root and rootless. On the default rootfs the path is the
// one-shot's too.
func TestSessionDataRootfs(t *testing.T) {
	data := dataRootfs(t)
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			for _, rootfs := range []string{rootfsDir, data} {
				const printPath = "import sys, json; print(json.dumps(sys.path))"
				args := []string{"--rootfs", rootfs, "-e", "PYTHONPATH=/tmp/lib", "-w", "/tmp"}
				stdout, stderr, exit, _ := runJail(t, m, runOpts{noRootfs: true}, append(append([]string{}, args...), "--", "python3", "-c", printPath)...)
				if exit != 0 {
					t.Fatalf("the one-shot run on %s: exit %d, %s", rootfs, exit, stderr)
				}
				var want []string
				if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &want); err != nil {
					t.Fatalf("the one-shot run's path %q: %v", stdout, err)
				}
				s := startSession(t, m, args...)
				rep := s.exec(t, printPath)
				var got []string
				if err := json.Unmarshal([]byte(strings.TrimSpace(rep["stdout"].(string))), &got); err != nil {
					t.Fatalf("the session's path %v: %v", rep, err)
				}
				if strings.Join(got, ":") != strings.Join(want, ":") {
					t.Errorf("on %s a cell's sys.path is %q, a one-shot run's %q", rootfs, got, want)
				}
				if rootfs == data {
					_, ch := s.send(t, map[string]any{"op": "exec", "code": `import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(5), "y": np.arange(5) ** 2})
plt.plot(df.x, df.y)
plt.savefig("/tmp/plot.png")
print(int(df.y.sum()), np.__name__, pd.__name__)`})
					rep = s.wait(t, ch, 120*time.Second)
					if rep["stdout"] != "30 numpy pandas\n" || rep["error"] != nil {
						t.Errorf("numpy, pandas and matplotlib in a session on the data rootfs: %v", rep)
					}
				}
				s.close(t)
			}
		})
	}
}
