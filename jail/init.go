package jail

import (
	"errors"
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
	_ = stageAddress() // links the stage, or fails the build (stagelink_amd64.s)
	if len(os.Args) > 0 && os.Args[0] == initArg0 {
		os.Stderr.WriteString("rljail: this binary has no init stage: it was linked without -E rljail_entry (build it with make)\n")
		os.Exit(ExitSetupError)
	}
}

// enteredByStage is set by the binary's ELF entry (entry_amd64.s) before
// the Go runtime starts; it stays 0 in a binary linked without -E
// rljail_entry (a plain `go build` or `go install`, a test binary).
var enteredByStage uint8

func stageAddress() uintptr

// ErrNoStageEntry is what a run and `rljail check` say of a binary linked
// without its init stage's entry point.
var ErrNoStageEntry = errors.New("this rljail binary was linked without its init stage's entry point (a plain `go build` or `go install`): build it with `make build` (it links with -ldflags '-E rljail_entry'), or install a release or the .deb")

// CheckBinary reports whether this binary can run a jail: it was started
// through its init stage's entry point.
func CheckBinary() error {
	if enteredByStage == 0 {
		return ErrNoStageEntry
	}
	return nil
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
