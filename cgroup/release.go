package cgroup

import (
	"errors"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Page cache outlives the processes that read or wrote it, and stays
// charged to the memory cgroup that first touched it: a removed cgroup that
// still holds charged pages lingers as a dying cgroup, invisible under
// /sys/fs/cgroup but counted in /proc/cgroups and kept in the kernel's
// memory, until memory pressure evicts the last of those pages. Every run
// that wrote to a volume left one (the file's pages), and a busy host
// gathers thousands of them, each some hundreds of KiB of kernel memory
// and a cost to every walk of the memory controller (reclaim, statistics).
// The kernel moves a removed cgroup's kernel-memory objects (slab, socket
// buffers) to its parent, not its pages; releaseMemory evicts those pages
// before the cgroup is removed, so that the next reader of the file charges
// its own cgroup. Pages a process of the host still maps stay (reclaim
// skips them), and so does the cgroup then; the kernel's own reparenting
// of pages, where it comes, makes this a no-op.

// releaseMemory evicts the page cache still charged to the jail's memory
// cgroup, when it holds any: memory.force_empty on v1, memory.reclaim on v2
// (Linux 5.19). It is best effort: a refusal (a process still in the
// cgroup, EBUSY; nothing left to reclaim, EAGAIN) leaves the pages to
// memory pressure, as before, and costs the run nothing.
func (c *Cgroup) releaseMemory() {
	switch {
	case c.v2Leaf != "":
		kv, err := readKV(filepath.Join(c.v2Leaf, "memory.stat"))
		if err != nil || kv["file"] <= 0 {
			return // no memory controller here, or no page cache
		}
		_ = writeFile(filepath.Join(c.v2Leaf, "memory.reclaim"), strconv.FormatInt(kv["file"], 10))
	case c.v1Dirs["memory"] != "":
		dir := c.v1Dirs["memory"]
		kv, err := readKV(filepath.Join(dir, "memory.stat"))
		if err != nil || kv["cache"]+kv["rss"] <= 0 {
			return
		}
		// force_empty reclaims every page it can (writing dirty ones back
		// first), which is what its documentation says it is for: "before
		// rmdir".
		if err := writeFile(filepath.Join(dir, "memory.force_empty"), "0"); err != nil && !errors.Is(err, unix.EBUSY) {
			return
		}
	}
}
