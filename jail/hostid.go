package jail

// overflowID is the host's nobody: the host id of a root-run jail's user.
const overflowID = 65534

// IsJailHostUID reports whether uid is a host uid that root-run jails run
// as: a file it owns may have been written by a jail (hostfile refuses to
// read such a file for its caller).
func IsJailHostUID(uid uint32) bool { return uid == overflowID }
