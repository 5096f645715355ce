package jail

import (
	"os"
)

// The jail's init stage is C (stage/), entered through the binary's ELF
// entry point (entry_amd64.s) when argv[0] is "rljail-init", before the Go
// runtime starts; it never returns. Only the probe of `rljail
// check` runs in Go.

// A binary linked without that entry point (a plain `go build` or `go
// test`: only the Makefile links with -E rljail_entry) reaches Go when it
// is re-executed as an init stage. It must stop here: it would otherwise
// take its argv for a run of its own and start another init stage, which
// would do the same.
func init() {
	if len(os.Args) > 0 && os.Args[0] == initArg0 {
		os.Stderr.WriteString("rljail: this binary has no init stage: it was linked without -E rljail_entry (build it with make)\n")
		os.Exit(ExitSetupError)
	}
}

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
