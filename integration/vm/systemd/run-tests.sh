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

. /rljail-vm/run-guests.sh
verify_rootfs /rljail-vm/bin/rljail /var/lib/rljail/rootfs/python
run_guests /rljail-vm/tests HOME=/root RLJAIL_IN_VM=1 RLJAIL_IN_SYSTEMD_VM=1 \
	RLJAIL_BIN=/rljail-vm/bin/rljail RLJAIL_ROOTFS=/var/lib/rljail/rootfs/python \
	RLJAIL_VM_DEBS=/rljail-vm/debs RLJAIL_VM_SRC=/rljail-vm/src
sync
# At once: the verdict is out, and an orderly shutdown costs seconds of TCG.
systemctl poweroff --force --force
