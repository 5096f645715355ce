package jail

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// IsJailHostUID reports whether uid is a host uid that root-run jails run
// as, or ran as before they had ids of their own (the host's nobody): a
// file it owns may have been written by a jail (hostfile refuses to read
// such a file for its caller). The range is the default one and, when
// /etc/subuid has an entry for the user "rljail", that one too.
func IsJailHostUID(uid uint32) bool {
	if uid == overflowID || (uid >= IDRangeBase && uint64(uid) < uint64(IDRangeBase)+IDRangeCount) {
		return true
	}
	f, err := os.Open("/etc/subuid")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || parts[0] != "rljail" {
			continue
		}
		start, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 == nil && err2 == nil && uint64(uid) >= start && uint64(uid) < start+count {
			return true
		}
	}
	return false
}
