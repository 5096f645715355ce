package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// actionsAvailPath lists the seccomp filter actions the kernel supports.
// It exists only with CONFIG_SECCOMP_FILTER.
const actionsAvailPath = "/proc/sys/kernel/seccomp/actions_avail"

// seccompActions are the filter actions rljail's policies use. Only
// user_notif is optional: learn mode alone needs it.
func seccompActions() []string {
	return []string{"kill_process", "errno", "trap", "user_notif", "log", "allow"}
}

// parseActionsAvail returns the set of actions in actions_avail
// ("kill_process kill_thread trap errno user_notif trace log allow").
func parseActionsAvail(text string) map[string]bool {
	set := make(map[string]bool)
	for _, a := range strings.Fields(text) {
		set[a] = true
	}
	return set
}

// checkSeccomp reads the available filter actions and asks the kernel for
// this process's seccomp mode, which fails without CONFIG_SECCOMP.
func checkSeccomp() Item {
	var actions string
	b, err := os.ReadFile(actionsAvailPath)
	if err == nil {
		actions = string(b)
	} else {
		err = fmt.Errorf("read %s: %w", actionsAvailPath, err)
	}
	mode, prctlErr := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if prctlErr != nil {
		prctlErr = fmt.Errorf("prctl(PR_GET_SECCOMP): %w", prctlErr)
	}
	return seccompItem(actions, err, mode, prctlErr)
}

// seccompItem judges seccomp from actions_avail (actionsErr when it could
// not be read) and from prctl(PR_GET_SECCOMP).
func seccompItem(actions string, actionsErr error, mode int, prctlErr error) Item {
	it := Item{Name: "seccomp", Fatal: true}
	if prctlErr != nil {
		it.Detail = "no seccomp: " + prctlErr.Error()
		it.Fix = "run a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
		return it
	}
	if actionsErr != nil {
		it.Detail = "no seccomp filters: " + actionsErr.Error()
		if errors.Is(actionsErr, os.ErrNotExist) {
			it.Fix = "run a kernel built with CONFIG_SECCOMP_FILTER=y"
		} else {
			it.Fix = "make " + actionsAvailPath + " readable (is /proc mounted with hidepid or masked?)"
		}
		return it
	}
	avail := parseActionsAvail(actions)
	var have, missing []string
	for _, a := range seccompActions() {
		if avail[a] {
			have = append(have, a)
		} else {
			missing = append(missing, a)
		}
	}
	it.Detail = "filter actions " + strings.Join(have, ", ")
	if mode == 2 {
		// Filters stack: the jail's filter is added to this one.
		it.Detail += "; this process already runs under a seccomp filter"
	}
	switch {
	case len(missing) == 0:
		it.OK = true
	case len(missing) == 1 && missing[0] == "user_notif":
		it.Fatal = false
		it.Detail += "; missing user_notif: learn mode is unavailable, jails run"
		it.Fix = "run a kernel 5.0 or newer for SECCOMP_RET_USER_NOTIF"
	default:
		it.Detail += "; missing " + strings.Join(missing, ", ")
		it.Fix = "run a kernel 5.12 or newer built with CONFIG_SECCOMP_FILTER=y"
	}
	return it
}
