package jail

/*
#include <stdlib.h>
#include "spawn.h"
*/
import "C"

// The payload itself is started by the init stage (init.c) through
// rljail_spawn (spawn.c). What stays in Go are the helpers the supervisor
// shares with it.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

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
