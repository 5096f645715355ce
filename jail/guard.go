package jail

import (
	"fmt"
	"os"
	"strings"
)

// cgroupGuard removes the jail's cgroup even if the supervisor is killed
// with SIGKILL, which leaves it no chance to. The guardian is the init
// stage's first step (stage1_main in stage/init.c, then rljail_guardian in
// stage/spawn.c): a small process with no Go runtime that outlives its work of
// making the init and then holds the read end of a pipe. Each cgroup
// directory is announced to it before it is created, so there is no moment
// at which a killed supervisor leaves one behind; release sends it home,
// and the supervisor's death (EOF) makes it kill what is left and remove
// the directories.
type cgroupGuard struct {
	w *os.File
}

// announce tells the guardian about directories about to be created, in
// one write (the guardian wakes once).
func (g *cgroupGuard) announce(dirs ...string) error {
	var b strings.Builder
	for _, dir := range dirs {
		if strings.ContainsAny(dir, "\n\x00") {
			return fmt.Errorf("cgroup directory %q cannot be guarded", dir)
		}
		b.WriteString("dir " + dir + "\n")
	}
	if _, err := g.w.WriteString(b.String()); err != nil {
		return fmt.Errorf("tell the cgroup guard: %w", err)
	}
	return nil
}

// release tells the guardian that the supervisor removed the cgroup
// itself (or made none); the guardian then exits.
func (g *cgroupGuard) release() {
	if g.w == nil {
		return
	}
	_, _ = g.w.WriteString("done\n")
	g.w.Close()
	g.w = nil
}
