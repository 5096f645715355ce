package jail

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spawnStepNames name the child's steps for error messages.
var spawnStepNames = map[int]string{
	C.RLJAIL_STEP_SIGNALS:      "reset signal handlers",
	C.RLJAIL_STEP_SETSID:       "setsid",
	C.RLJAIL_STEP_CLOSE_FDS:    "close inherited descriptors",
	C.RLJAIL_STEP_CHDIR:        "chdir to the working directory",
	C.RLJAIL_STEP_RLIMIT:       "set the resource limits",
	C.RLJAIL_STEP_SECUREBITS:   "lock securebits",
	C.RLJAIL_STEP_BOUNDING:     "drop the capability bounding set",
	C.RLJAIL_STEP_AMBIENT:      "clear ambient capabilities",
	C.RLJAIL_STEP_CAPSET:       "drop capabilities",
	C.RLJAIL_STEP_NO_NEW_PRIVS: "set no_new_privs",
	C.RLJAIL_STEP_SECCOMP:      "load the seccomp filter",
	C.RLJAIL_STEP_NOTIFY_SEND:  "send the seccomp listener to the supervisor",
	C.RLJAIL_STEP_EXECVE:       "execve",
}

// stepChdir is the child's chdir step, reported as a bad working directory.
const stepChdir = int(C.RLJAIL_STEP_CHDIR)

// spawnError is a failure of the payload's child before or at execve.
type spawnError struct {
	StepNum int
	Step    string
	Errno   unix.Errno
	exec    bool
}

func (e *spawnError) Error() string { return e.Step + ": " + e.Errno.Error() }

// payloadProcess describes the payload to start.
type payloadProcess struct {
	Path    string
	Argv    []string
	Env     []string
	Workdir string
	// CapLast is the highest capability number (read before pivot_root).
	CapLast int
	// Filter is a seccomp BPF program (struct sock_filter entries, 8 bytes
	// each); nil installs none.
	Filter []byte
	// NotifySock, when >= 0, receives the filter's user-notification
	// listener.
	NotifySock int
	// Rlimits are set (lowered) before the capabilities are dropped.
	Rlimits []rlimit
}

// spawnPayload forks the payload, which confines itself (see spawn.c) and
// execs. It returns the payload's pid once execve has succeeded.
func spawnPayload(p payloadProcess) (int, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("create the exec error pipe: %w", err)
	}
	defer unix.Close(fds[0])

	cPath := C.CString(p.Path)
	defer C.free(unsafe.Pointer(cPath))
	cWorkdir := C.CString(p.Workdir)
	defer C.free(unsafe.Pointer(cWorkdir))
	argv := cStrings(p.Argv)
	defer freeCStrings(argv, len(p.Argv))
	envp := cStrings(p.Env)
	defer freeCStrings(envp, len(p.Env))

	s := (*C.struct_rljail_spawn)(C.calloc(1, C.sizeof_struct_rljail_spawn))
	defer C.free(unsafe.Pointer(s))
	s.path = cPath
	s.argv = argv
	s.envp = envp
	s.workdir = cWorkdir
	s.errfd = C.int(fds[1])
	s.cap_last = C.int(p.CapLast)
	if n := len(p.Rlimits); n > 0 {
		rl := (*C.struct_rljail_rlimit)(C.calloc(C.size_t(n), C.sizeof_struct_rljail_rlimit))
		defer C.free(unsafe.Pointer(rl))
		for i, r := range p.Rlimits {
			e := (*C.struct_rljail_rlimit)(unsafe.Add(unsafe.Pointer(rl), i*C.sizeof_struct_rljail_rlimit))
			e.resource = C.int(r.Resource)
			e.soft = C.ulonglong(r.Soft)
			e.hard = C.ulonglong(r.Hard)
		}
		s.nrlimits = C.int(n)
		s.rlimits = rl
	}
	s.notify_sock = C.int(p.NotifySock)
	if len(p.Filter) > 0 {
		if len(p.Filter)%8 != 0 {
			unix.Close(fds[1])
			return 0, errors.New("seccomp filter is not a whole number of instructions")
		}
		prog := (*C.struct_sock_fprog)(C.calloc(1, C.sizeof_struct_sock_fprog))
		defer C.free(unsafe.Pointer(prog))
		insns := C.CBytes(p.Filter)
		defer C.free(insns)
		prog.len = C.ushort(len(p.Filter) / 8)
		prog.filter = (*C.struct_sock_filter)(insns)
		s.filter = prog
	}

	pid := int(C.rljail_spawn(s))
	unix.Close(fds[1])
	if pid < 0 {
		return 0, fmt.Errorf("fork the payload: %w", unix.Errno(-pid))
	}
	var buf [8]byte
	n, err := readFull(fds[0], buf[:])
	if err != nil {
		return pid, fmt.Errorf("read the payload's exec report: %w", err)
	}
	if n == 0 {
		return pid, nil // execve succeeded and closed the pipe
	}
	step := int(int32(binary.NativeEndian.Uint32(buf[0:4])))
	errno := unix.Errno(binary.NativeEndian.Uint32(buf[4:8]))
	// The child exits 127 after reporting; reap it so that no zombie stays.
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil)
	return 0, &spawnError{StepNum: step, Step: spawnStepNames[step], Errno: errno, exec: step == C.RLJAIL_STEP_EXECVE}
}

func readFull(fd int, buf []byte) (int, error) {
	total := 0
	for total < len(buf) {
		n, err := unix.Read(fd, buf[total:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// cStrings returns a NULL-terminated array in C memory (cgo forbids Go
// pointers stored in C memory); free it with freeCStrings.
func cStrings(ss []string) **C.char {
	arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	elems := unsafe.Slice(arr, len(ss)+1)
	for i, s := range ss {
		elems[i] = C.CString(s)
	}
	return arr
}

func freeCStrings(arr **C.char, n int) {
	for _, c := range unsafe.Slice(arr, n) {
		C.free(unsafe.Pointer(c))
	}
	C.free(unsafe.Pointer(arr))
}

// readCapLast reads the highest capability number this kernel knows.
func readCapLast() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return n, nil
}
