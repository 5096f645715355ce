package seccomp

// PrologueLen is the length of every program's prologue, in instructions,
// for the external tests.
var PrologueLen = len(prologue(ViolationErrno, MaxKnown()))

// RecordCall makes s record one denied call, as if its filter had sent
// the notification.
func RecordCall(s *Supervisor, nr int, args [6]uint64) {
	s.record(&seccompNotif{Data: seccompData{Nr: int32(nr), Arch: auditArchX86_64, Args: args}})
}
