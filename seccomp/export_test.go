package seccomp

// PrologueLen is the length of every program's prologue, in instructions,
// for the external tests.
var PrologueLen = len(prologue(ViolationErrno, MaxKnown()))
