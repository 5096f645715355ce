#!/bin/sh
# /init of the rljail test VM (busybox sh, PID 1). This is the VM's own init,
# not rljail's: it prepares a host with a pure cgroup v2 hierarchy, runs every
# test binary under /tests, prints one verdict line for the harness
# (integration/vm) and powers off.
#
# Stage 1 copies the initramfs into a tmpfs and switch_roots into it: the
# initramfs root (rootfs) has no parent mount, so pivot_root(2), which every
# jail does, fails there with EINVAL; on a tmpfs root it works as on a disk.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

if [ "$1" != stage2 ]; then
	mount -t tmpfs -o mode=0755 root /newroot || exec echo "RLJAIL-VM-VERDICT: FAIL stage1-mount"
	for d in /*; do
		case "$d" in /newroot | /proc | /sys | /dev) continue ;; esac
		cp -a "$d" /newroot/ || exec echo "RLJAIL-VM-VERDICT: FAIL stage1-copy"
	done
	mkdir -p /newroot/proc /newroot/sys /newroot/dev
	cp -a /dev/console /newroot/dev/
	# switch_root empties the initramfs (freeing its memory) and execs stage 2.
	exec switch_root /newroot /init stage2
fi

echo "RLJAIL-VM-STAGE2 $(uname -r)"

mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=000 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev,mode=1777 shm /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=1777 tmp /tmp
mkdir -p /run && mount -t tmpfs -o nosuid,nodev,mode=0755 run /run

# The kernel modules the harness put in (overlayfs: rljail presents
# read-only directories through it).
for m in /lib/rljail-vm/*.ko; do
	[ -e "$m" ] || continue
	insmod "$m" || echo "rljail-vm: insmod $m failed"
done

# cgroup2 as systemd mounts it, with every controller the kernel has enabled
# for the children of the root (one by one, so one refusal does not hide the
# others). cgroup_no_v1=all on the kernel command line keeps v1 from claiming
# any controller.
cg=/sys/fs/cgroup
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 "$cg"
for c in $(cat "$cg/cgroup.controllers"); do
	echo "+$c" >"$cg/cgroup.subtree_control" || echo "rljail-vm: cannot enable controller $c"
done
# Like systemd, keep every process in a leaf: init and the tests run in
# init.scope; the root cgroup holds only kernel threads.
mkdir -p "$cg/init.scope"
echo $$ >"$cg/init.scope/cgroup.procs"
echo "rljail-vm: cgroup2 controllers: $(cat "$cg/cgroup.controllers")"
echo "rljail-vm: root subtree_control: $(cat "$cg/cgroup.subtree_control")"

ip link set lo up
hostname rljail-vm

# Users: root, the unprivileged test user (uid 1001) with a home, nobody.
cat >/etc/passwd <<'EOF'
root:x:0:0:root:/root:/bin/sh
rljailtest:x:1001:1001:rljail VM test user:/home/rljailtest:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >/etc/group <<'EOF'
root:x:0:
tty:x:5:
rljailtest:x:1001:
nogroup:x:65534:
EOF
mkdir -p /root /home/rljailtest
chmod 0700 /root
chown 1001:1001 /home/rljailtest
chmod 0700 /home/rljailtest
echo "127.0.0.1 localhost rljail-vm" >/etc/hosts

# Settings the harness wrote: GUEST_TIMEOUT, GUEST_FLAGS.
GUEST_TIMEOUT=5m
GUEST_FLAGS=
[ -f /etc/rljail-vm.conf ] && . /etc/rljail-vm.conf

echo "rljail-vm: up $(cut -d' ' -f1 /proc/uptime) s; $(grep MemTotal /proc/meminfo), $(grep -c ^processor /proc/cpuinfo) CPUs"

# Stage 1 copied the rootfs (cp -a onto tmpfs): its fingerprint is recorded
# anew (run-guests.sh).
. /lib/rljail-vm/run-guests.sh
verify_rootfs /bin/rljail /rootfs/python
run_guests /tests HOME=/root RLJAIL_IN_VM=1 RLJAIL_BIN=/bin/rljail RLJAIL_ROOTFS=/rootfs/python
sync
poweroff -f
