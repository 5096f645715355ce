# run-guests.sh: what both test VMs' runners do once their host is up
# (init.sh in the plain VM, systemd/run-tests.sh in the systemd one), sourced
# by them. The harness puts it in the initramfs beside them.

# verify_rootfs RLJAIL ROOTFS: the harness copied the rootfs into the VM, so
# every inode and ctime is new and runs refuse it until its fingerprint is
# recorded anew, which first checks every file against the build's list
# (rljail rootfs verify).
verify_rootfs() {
	if ! "$1" rootfs verify --update-fingerprint "$2" >/tmp/rljail-vm-rootfs 2>&1; then
		echo "rljail-vm: the rootfs copy is not as built:"
		head -20 /tmp/rljail-vm-rootfs
	fi
}

# run_guests DIR VAR=VALUE...: runs every test binary DIR/order names, in that
# order, each in its own directory DIR/NAME (with the package's testdata, when
# it has one) with the environment VAR=VALUE..., stdin closed, output on the
# console, between the lines the harness follows; a package may name the tests
# that run here (DIR/NAME/run, a -test.run pattern), and GUEST_FLAGS come later
# and win. Then prints the verdict line.
run_guests() {
	dir=$1
	shift
	failed=
	ran=0
	while read -r name; do
		[ -n "$name" ] || continue
		ran=$((ran + 1))
		echo "RLJAIL-VM-RUN $name"
		run=
		[ -f "$dir/$name/run" ] && run="-test.run=$(cat "$dir/$name/run")"
		# shellcheck disable=SC2086 # GUEST_FLAGS is a list of flags
		(cd "$dir/$name" && exec env "$@" "./$name.test" -test.v \
			-test.timeout="$GUEST_TIMEOUT" ${run:+"$run"} $GUEST_FLAGS) </dev/null 2>&1
		rc=$?
		echo "RLJAIL-VM-EXIT $name $rc"
		[ "$rc" = 0 ] || failed="$failed $name"
	done <"$dir/order"
	if [ "$ran" = 0 ]; then
		echo "RLJAIL-VM-VERDICT: FAIL no-test-binaries"
	elif [ -n "$failed" ]; then
		echo "RLJAIL-VM-VERDICT: FAIL$failed"
	else
		echo "RLJAIL-VM-VERDICT: PASS"
	fi
}
