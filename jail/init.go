package jail

import (
	"os"
)

// The jail's init stage is C (init.c): a constructor takes over the
// re-executed binary when argv[0] is "rljail-init", before the Go runtime
// starts, and never returns. Only the probe of `rljail check` runs in Go.

// IsInit reports whether this process is a helper stage that cmd/rljail
// must hand to InitMain before parsing flags (the probe; the init stage
// itself never reaches Go).
func IsInit() bool {
	return len(os.Args) > 0 && os.Args[0] == probeArg0
}

// InitMain runs the helper stage IsInit recognized. It never returns.
func InitMain() {
	probeMain()
}
