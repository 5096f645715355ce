#!/bin/sh
# run-tests.sh is ExecStart of rljail-vm-tests.service in the systemd test
# VM: a oneshot ordered after multi-user.target, so systemd, dbus and logind
# are up. It runs every test binary of /rljail-vm/tests/order as root (a
# test that needs the unprivileged user in a login session enters one
# itself: see guest's asLoginUser), prints one verdict line for the harness
# (integration/vm/systemd_test.go) and powers the VM off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

echo "RLJAIL-VM-STAGE2 $(uname -r) systemd $(systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')"
echo "rljail-vm: up $(cut -d' ' -f1 /proc/uptime) s; $(grep MemTotal /proc/meminfo), $(grep -c ^processor /proc/cpuinfo) CPUs"
echo "rljail-vm: cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
failed_units=$(systemctl --failed --no-legend --plain 2>/dev/null | awk '{print $1}' | tr '\n' ' ')
[ -z "$failed_units" ] || echo "rljail-vm: failed units: $failed_units"

GUEST_TIMEOUT=5m
GUEST_FLAGS=
[ -f /rljail-vm/conf ] && . /rljail-vm/conf

# The harness copied the rootfs into the initrd: every inode and ctime is
# new, so runs refuse it until its fingerprint is recorded anew, which
# first checks every file against the build's list (rljail rootfs verify).
if ! /rljail-vm/bin/rljail rootfs verify --update-fingerprint /var/lib/rljail/rootfs/python >/tmp/rljail-vm-rootfs 2>&1; then
	echo "rljail-vm: the rootfs copy is not as built:"
	head -20 /tmp/rljail-vm-rootfs
fi

failed=
ran=0
while read -r name; do
	[ -n "$name" ] || continue
	ran=$((ran + 1))
	echo "RLJAIL-VM-RUN $name"
	run=
	[ -f "/rljail-vm/tests/$name/run" ] && run="-test.run=$(cat "/rljail-vm/tests/$name/run")"
	# shellcheck disable=SC2086 # GUEST_FLAGS is a list of flags
	(cd "/rljail-vm/tests/$name" && exec env HOME=/root RLJAIL_IN_VM=1 RLJAIL_IN_SYSTEMD_VM=1 \
		RLJAIL_BIN=/rljail-vm/bin/rljail RLJAIL_ROOTFS=/var/lib/rljail/rootfs/python \
		RLJAIL_VM_DEBS=/rljail-vm/debs RLJAIL_VM_SRC=/rljail-vm/src "./$name.test" -test.v \
		-test.timeout="$GUEST_TIMEOUT" ${run:+"$run"} $GUEST_FLAGS) </dev/null 2>&1
	rc=$?
	echo "RLJAIL-VM-EXIT $name $rc"
	[ "$rc" = 0 ] || failed="$failed $name"
done </rljail-vm/tests/order

if [ "$ran" = 0 ]; then
	echo "RLJAIL-VM-VERDICT: FAIL no-test-binaries"
elif [ -n "$failed" ]; then
	echo "RLJAIL-VM-VERDICT: FAIL$failed"
else
	echo "RLJAIL-VM-VERDICT: PASS"
fi
sync
# At once: the verdict is out, and an orderly shutdown costs seconds of TCG.
systemctl poweroff --force --force
