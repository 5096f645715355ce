package jail

// The payload itself is started by the init stage (stage/init.c) through
// rljail_spawn (stage/spawn.c). What stays in Go are the helpers the
// supervisor shares with it.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

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
