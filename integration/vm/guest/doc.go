// Package guest holds the self-check that runs inside the rljail test VM
// (integration/vm) before any other test there: it asserts that the VM is
// the host the cgroup v2 tests expect, a pure cgroup v2 hierarchy with the
// memory, pids and cpu controllers, and that rljail runs Python on it as
// root and as the unprivileged user rljailtest (uid 1001).
//
// The tests carry the build tag rljailvm, so `go test ./...` on a
// development machine compiles none of them; the harness builds them with
// `go test -c -tags rljailvm` and boots them. They refuse to run outside the
// VM (RLJAIL_IN_VM=1), where their checks would be about the wrong machine.
package guest
