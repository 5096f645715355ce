// Package systemd holds the tests that run inside the systemd test VM
// (build tag rljailsystemd): Debian 12 with systemd as PID 1, dbus, logind
// and the unprivileged user rljailtest, booted by integration/vm's
// TestSystemdVM (`make test-systemd-vm`). Without the tag the package is
// empty; its test binary refuses to run outside that VM.
//
// build-image.sh builds the VM's root once (debootstrap, cached);
// init.sh is the VM's /init, which starts systemd; run-tests.sh runs the
// test binaries there and prints the verdict. How to add a case: see
// helpers_test.go.
package systemd
