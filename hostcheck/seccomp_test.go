package hostcheck

import (
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseActionsAvail(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"kill_process kill_thread trap errno user_notif trace log allow\n",
			[]string{"allow", "errno", "kill_process", "kill_thread", "log", "trace", "trap", "user_notif"}},
		{"kill_thread trap errno trace allow", []string{"allow", "errno", "kill_thread", "trace", "trap"}},
		{"  errno\tallow \n", []string{"allow", "errno"}},
		{"", nil},
	}
	for _, tt := range tests {
		got := parseActionsAvail(tt.text)
		var names []string
		for a := range got {
			names = append(names, a)
		}
		if len(names) != len(tt.want) {
			t.Errorf("parseActionsAvail(%q) = %v, want %v", tt.text, names, tt.want)
			continue
		}
		for _, a := range tt.want {
			if !got[a] {
				t.Errorf("parseActionsAvail(%q) lacks %q", tt.text, a)
			}
		}
	}
	if !reflect.DeepEqual(seccompActions(), []string{"kill_process", "errno", "trap", "user_notif", "log", "allow"}) {
		t.Errorf("seccompActions() = %v", seccompActions())
	}
}

func TestSeccompItem(t *testing.T) {
	const all = "kill_process kill_thread trap errno user_notif trace log allow"
	notFound := fmt.Errorf("read %s: %w", actionsAvailPath, &fs.PathError{Op: "open", Path: actionsAvailPath, Err: unix.ENOENT})
	denied := fmt.Errorf("read %s: %w", actionsAvailPath, &fs.PathError{Op: "open", Path: actionsAvailPath, Err: unix.EACCES})
	noSeccomp := fmt.Errorf("prctl(PR_GET_SECCOMP): %w", unix.EINVAL)
	tests := []struct {
		name       string
		actions    string
		actionsErr error
		mode       int
		prctlErr   error
		wantOK     bool
		wantFatal  bool
		wantDetail []string
		wantFix    string
	}{
		{"all actions", all, nil, 0, nil, true, true, []string{"kill_process, errno, trap, user_notif, log, allow"}, ""},
		{"under a filter already", all, nil, 2, nil, true, true, []string{"already runs under a seccomp filter"}, ""},
		{"no user_notif", "kill_process kill_thread trap errno trace log allow", nil, 0, nil, false, false,
			[]string{"missing user_notif", "learn mode"}, "5.0"},
		{"no log nor kill_process", "kill_thread trap errno user_notif trace allow", nil, 0, nil, false, true,
			[]string{"missing kill_process, log"}, "CONFIG_SECCOMP_FILTER"},
		{"no kill_process nor user_notif", "kill_thread trap errno trace log allow", nil, 0, nil, false, true,
			[]string{"missing kill_process, user_notif"}, "5.12"},
		{"empty actions file", "", nil, 0, nil, false, true, []string{"missing kill_process, errno, trap, user_notif, log, allow"}, "CONFIG_SECCOMP_FILTER"},
		{"no filter support", "", notFound, 0, nil, false, true, []string{"no seccomp filters", actionsAvailPath}, "CONFIG_SECCOMP_FILTER=y"},
		{"actions unreadable", "", denied, 0, nil, false, true, []string{"permission denied"}, "readable"},
		{"no seccomp at all", "", notFound, 0, noSeccomp, false, true, []string{"no seccomp", "PR_GET_SECCOMP"}, "CONFIG_SECCOMP=y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := seccompItem(tt.actions, tt.actionsErr, tt.mode, tt.prctlErr)
			if it.Name != "seccomp" || it.OK != tt.wantOK || it.Fatal != tt.wantFatal {
				t.Errorf("seccompItem = %+v, want ok=%v fatal=%v", it, tt.wantOK, tt.wantFatal)
			}
			for _, s := range tt.wantDetail {
				if !strings.Contains(it.Detail, s) {
					t.Errorf("detail %q lacks %q", it.Detail, s)
				}
			}
			if !strings.Contains(it.Fix, tt.wantFix) || (tt.wantOK && it.Fix != "") {
				t.Errorf("fix %q, want one containing %q", it.Fix, tt.wantFix)
			}
		})
	}
}

func TestPidfdItem(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantOK     bool
		wantDetail string
		wantFix    string
	}{
		{"works", nil, true, "pidfd_open works", ""},
		{"old kernel", fmt.Errorf("pidfd_open(getpid()): %w", unix.ENOSYS), false, "older than 5.3", "kernel"},
		{"blocked", fmt.Errorf("pidfd_open(getpid()): %w", unix.EPERM), false, "operation not permitted", "seccomp profile"},
	}
	for _, tt := range tests {
		it := pidfdItem(tt.err)
		if it.Name != "pidfd" || !it.Fatal || it.OK != tt.wantOK ||
			!strings.Contains(it.Detail, tt.wantDetail) || !strings.Contains(it.Fix, tt.wantFix) {
			t.Errorf("%s: pidfdItem = %+v, want ok=%v fatal detail~%q fix~%q", tt.name, it, tt.wantOK, tt.wantDetail, tt.wantFix)
		}
	}
}
