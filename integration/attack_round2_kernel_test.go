package integration

// Attack cases of issue 18 (second red-team pass): kernel memory the jail
// causes but is not charged for, memory cgroups left dying, a report
// fooled about why the run ended, and the host's identity read from /proc.

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "socket_buffers_host_memory", group: groupDoS,
			mechanism: "hold 100 loopback TCP connections (some with SO_RCVBUF/SO_SNDBUF raised) and 40 UDP sockets full of unread data under -m 64m: socket buffers count against the host-wide tcp_mem and udp_mem, where every socket of the host stalls",
			layer:     "cgroup v1 memory.kmem.tcp.limit_in_bytes (16 MiB) charges the jail's TCP and UDP buffers to a limit of its own; tcp_rmem/tcp_wmem of the jail's network namespace cap autotuning",
			modes:     rootOnly, serial: true,
			run: attackSocketBuffers},
		{name: "dying_memory_cgroups", group: groupDoS,
			mechanism: "write files to a volume, whose page cache stays charged to the jail's memory cgroup and keeps it alive, dying, after rljail removed it: one kernel cgroup more per run",
			layer:     "the jail's page cache is evicted before its cgroup is removed (memory.force_empty on v1, memory.reclaim on v2)",
			modes:     rootOnly,
			run:       attackDyingCgroups},
		{name: "sigxcpu_self_report", group: groupProcesses,
			mechanism: "send itself SIGXCPU after a few ms of CPU, so that the report blames the CPU-time limit (cpu_limit) for an end the payload chose",
			layer:     "the supervisor counts a SIGXCPU as cpu_limit only when the CPU time it measured (cgroup, or the rusage of every process init reaped) reached --cpu-time",
			run:       attackSigxcpuSelf},
		{name: "cpu_of_killed_children", group: groupProcesses,
			mechanism: "burn CPU in a forked child until the kill timer, so that its CPU time, released unreaped with the killed init, is missing from the report (rootless it showed 0 ms)",
			layer:     "without cgroup accounting the timer asks init to kill and reap every process before it is killed itself; with a cgroup, its accounting",
			run:       attackCPUOfKilledChildren},
		{name: "host_boot_and_cmdline", group: groupSecrets,
			mechanism: "read the host's boot id (/proc/sys/kernel/random/boot_id) and kernel command line (/proc/cmdline), which name the host and its boot",
			layer:     "both are masked with /dev/null in the jail's /proc",
			run:       attackHostBootCmdline},
	}...)
}

// sockstatPages sums the memory, in pages, that the host's /proc/net/sockstat
// counts for TCP and UDP: what tcp_mem and udp_mem limit.
func sockstatPages(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || (f[0] != "TCP:" && f[0] != "UDP:") {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "mem" {
				n, _ := strconv.ParseInt(f[i+1], 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// v1MemoryDir is the host directory of the memory cgroup (v1) of pid, or "".
func v1MemoryDir(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "memory" {
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	return ""
}

const attackSocketBuffersCode = `
import socket, sys
held, sent = [], 0
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(512)
for i in range(100):
    c = socket.socket()
    if i % 2:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 24)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    if i % 2:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    c.setblocking(False)
    try:
        while True:
            sent += c.send(b"x" * 65536)
    except OSError:
        pass
    held += [c, s]
w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); w.setblocking(False)
for i in range(40):
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    r.bind(("127.0.0.1", 0)); held.append(r)
    for j in range(2000):
        try:
            sent += w.sendto(b"x" * 60000, r.getsockname())
        except OSError:
            break
print("READY", sent, flush=True)
sys.stdin.read()
`

func attackSocketBuffers(t *testing.T, m mode) {
	before := sockstatPages(t)
	marker := randomToken("sock")
	var during, kmemTCP int64 = -1, -1
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	r := attackWatch(t, m, runOpts{stdinFile: stdinR}, attackWatchOpts{marker: marker, ready: "READY", during: func(pl proc) {
		time.Sleep(200 * time.Millisecond) // the last segments land
		during = sockstatPages(t)
		if dir := v1MemoryDir(pl.pid); dir != "" {
			if b, err := os.ReadFile(filepath.Join(dir, "memory.kmem.tcp.usage_in_bytes")); err == nil {
				kmemTCP, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			}
		}
		stdinW.Close()
	}}, attackPython([]string{"-m", "64m", "--timeout", "60s"}, attackSocketBuffersCode, marker)...)
	grew := (during - before) * int64(os.Getpagesize())
	t.Logf("host TCP+UDP memory: %d pages before, %d while the jail held its buffers (+%d MiB); the jail's memory.kmem.tcp.usage_in_bytes %d; payload: %q",
		before, during, grew>>20, kmemTCP, attackClip(r.stdout))
	if !strings.Contains(r.stdout, "READY") {
		t.Fatalf("the payload never held its buffers:\n%s", r)
	}
	// 16 MiB, which the kernel overshoots by what it must not refuse, and
	// room for what the rest of the host does meanwhile.
	if grew > 48<<20 {
		t.Errorf("the jail held %d MiB of the host's TCP and UDP memory under -m 64m (want at most its 16 MiB socket limit and slack)", grew>>20)
	}
}

const attackDyingCgroupsCode = `
import os, sys
with open(os.path.join("/data", sys.argv[1]), "wb") as f:
    f.write(os.urandom(4 << 20))
print("WROTE", flush=True)
`

// memcgInodes are the inode numbers of every live v1 memory cgroup: what
// /proc/kpagecgroup names a page's cgroup by.
func memcgInodes(t *testing.T) map[uint64]bool {
	t.Helper()
	live := map[uint64]bool{}
	err := filepath.WalkDir("/sys/fs/cgroup/memory", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a cgroup removed during the walk
		}
		if d.IsDir() {
			var st unix.Stat_t
			if unix.Stat(path, &st) == nil {
				live[st.Ino] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// pageCgroups maps the page cache of the file at path (touched in, read
// only) to the memory cgroup each page is charged to, by inode number:
// /proc/self/pagemap gives each page's frame, /proc/kpagecgroup the frame's
// cgroup. Pages not in the page cache are read in by the touch and charged
// to this process's cgroup.
func pageCgroups(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		pageSink += mem[i]
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer pagemap.Close()
	kpc, err := os.Open("/proc/kpagecgroup")
	if err != nil {
		t.Skipf("no /proc/kpagecgroup: %v", err)
	}
	defer kpc.Close()
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	var out []uint64
	buf := make([]byte, 8)
	for i := 0; i < len(mem); i += page {
		if _, err := pagemap.ReadAt(buf, int64((base+uint64(i))/uint64(page)*8)); err != nil {
			t.Fatal(err)
		}
		e := binary.LittleEndian.Uint64(buf)
		pfn := e & (1<<55 - 1)
		if e&(1<<63) == 0 || pfn == 0 {
			continue
		}
		if _, err := kpc.ReadAt(buf, int64(pfn*8)); err != nil {
			t.Fatal(err)
		}
		out = append(out, binary.LittleEndian.Uint64(buf))
	}
	return out
}

// pageSink keeps the compiler from dropping pageCgroups's touch of each page.
var pageSink byte

func attackDyingCgroups(t *testing.T, m mode) {
	vol := newOpenDir(t)
	const runs = 3
	for i := 0; i < runs; i++ {
		name := "f" + strconv.Itoa(i)
		stdout, stderr, exit, _ := runJail(t, m, runOpts{}, append([]string{"-v", vol + ":/data:rw"}, python(attackDyingCgroupsCode, name)...)...)
		if exit != 0 || !strings.Contains(stdout, "WROTE") {
			t.Fatalf("run %d: exit %d\n%s\n%s", i, exit, stdout, stderr)
		}
	}
	live := memcgInodes(t)
	dead, total := 0, 0
	for i := 0; i < runs; i++ {
		for _, ino := range pageCgroups(t, filepath.Join(vol, "f"+strconv.Itoa(i))) {
			total++
			if ino != 0 && !live[ino] {
				dead++
			}
		}
	}
	t.Logf("%d of the %d pages the jails wrote are charged to a removed (dying) memory cgroup", dead, total)
	if total == 0 {
		t.Fatal("no page of the written files could be looked at")
	}
	if dead > 0 {
		t.Errorf("%d of %d pages written in %d runs are still charged to removed memory cgroups, which they keep alive", dead, total, runs)
	}
}

func attackSigxcpuSelf(t *testing.T, m mode) {
	r := attackPy(t, m, runOpts{}, []string{"--timeout", "20s"}, `
import os, signal, time
t = time.process_time()
while time.process_time() - t < 0.05:
    pass
os.kill(os.getpid(), signal.SIGXCPU)
`)
	t.Logf("exit %d, status %s, error %v", r.exit, r.status(), r.res["error"])
	if r.status() == "cpu_limit" {
		t.Errorf("a payload that sent itself SIGXCPU after 50 ms is reported as cpu_limit (of --cpu-time 20s)")
	}
	checkResult(t, "self-sent SIGXCPU", r.res, "signaled", 128+int(syscall.SIGXCPU))
}

func attackCPUOfKilledChildren(t *testing.T, m mode) {
	marker := randomToken("burn")
	var seenTicks int64 = -1
	r := attackWatch(t, m, runOpts{}, attackWatchOpts{marker: marker, ready: "FORKED", during: func(pl proc) {
		// The child, spinning, is the payload's only child: its CPU time
		// as the host's /proc counts it, a second into the run.
		time.Sleep(1500 * time.Millisecond)
		for _, q := range descendants(pl.pid) {
			if q.pid == pl.pid {
				continue
			}
			if ticks := procCPUTicks(q.pid); ticks > seenTicks {
				seenTicks = ticks
			}
		}
	}}, attackPython([]string{"--timeout", "2500ms"}, `
import os, sys, time
if os.fork() == 0:
    while True:
        pass
print("FORKED", flush=True)
time.sleep(60)
`, marker)...)
	seenMS := seenTicks * 1000 / 100 // USER_HZ
	reported, _ := jsonInt(r.res, "cpu_user_ms")
	sys, _ := jsonInt(r.res, "cpu_system_ms")
	t.Logf("the host saw the child use %d ms of CPU; the report says %d ms user, %d ms system (status %s)", seenMS, reported, sys, r.status())
	if r.status() != "timeout" {
		t.Errorf("status %q, want timeout:\n%s", r.status(), r)
	}
	if seenTicks <= 0 {
		t.Fatalf("the host never saw the payload's child use CPU:\n%s", r)
	}
	if reported+sys < seenMS {
		t.Errorf("the report counts %d ms of CPU, less than the %d ms the host saw the child use before the kill timer", reported+sys, seenMS)
	}
}

// procCPUTicks is utime+stime of pid in clock ticks, or -1.
func procCPUTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return -1
	}
	return u + st
}

func attackHostBootCmdline(t *testing.T, m mode) {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"the host's boot_id": strings.TrimSpace(string(bootID))}
	// The command line in pieces too: its longest words are the host's.
	for _, w := range strings.Fields(string(cmdline)) {
		if len(w) >= 12 {
			secrets["the host's kernel command line ("+w+")"] = w
		}
	}
	r := attackPyOK(t, m, runOpts{}, nil, `
import os
for p in ("/proc/sys/kernel/random/boot_id", "/proc/cmdline", "/proc/1/root/proc/cmdline",
          "/proc/self/root/proc/sys/kernel/random/boot_id"):
    try:
        with open(p, "rb") as f:
            print(p, f.read())
    except OSError as e:
        print(p, "ERR", e)
`)
	attackNoSecrets(t, r, secrets)
}
