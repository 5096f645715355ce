#!/bin/sh
# build-image.sh builds the Debian 12 root filesystem of the systemd test VM
# (integration/vm/systemd) once, with debootstrap from deb.debian.org, into
# the VM cache beside the kernel of fetch-kernel.sh:
#
#   $cache/systemd-<key>/root        the configured root tree (kept for reading)
#   $cache/systemd-<key>/image.cpio  that tree as a newc cpio, ownership kept
#   $cache/systemd-image             -> systemd-<key> (what the harness boots)
#   $cache/debootstrap-<pkgkey>      debootstrap's package cache (the .debs)
#   $cache/pvh/<vmlinuz name>.elf    the cached kernel decompressed (below)
#
# <key> is a hash of this script (which holds the package list and every
# setting), so the image is rebuilt only when the script changes; the .deb
# cache is keyed by the package list alone, so a changed setting rebuilds
# without downloading again. Nothing per run goes in here: the harness
# appends rljail, the .deb, the Python rootfs and the test binaries as a
# second cpio archive at every boot (the kernel unpacks concatenated ones).
#
# Cache: $RLJAIL_VM_CACHE, else /var/cache/rljail-vm for root. Needs root
# (debootstrap, chroot) and the packages debootstrap and cpio.
set -eu

# The guest's packages beyond --variant=minbase: systemd as PID 1, the
# system bus, logind through PAM (libpam-systemd) with a user bus for
# `systemd-run --user` (dbus-user-session), ps/pgrep (procps).
PACKAGES="systemd-sysv,dbus,dbus-user-session,libpam-systemd,procps"
SUITE=bookworm
MIRROR=http://deb.debian.org/debian

if [ "$(id -u)" != 0 ]; then
	echo "build-image.sh: needs root (debootstrap, chroot)" >&2
	exit 1
fi
if [ -n "${RLJAIL_VM_CACHE:-}" ]; then
	cache=$RLJAIL_VM_CACHE
else
	cache=/var/cache/rljail-vm
fi
mkdir -p "$cache"

# The kernel of fetch-kernel.sh, decompressed once into its ELF image,
# which qemu boots directly through the PVH entry (Debian builds
# CONFIG_PVH): the bzImage's own xz decompression costs some 15 s of
# emulated CPU at every boot. The harness falls back to the bzImage when
# this file is missing. (The payload of a bzImage starts at the xz magic;
# the kernel's scripts/extract-vmlinux finds it the same way.)
if [ -e "$cache/vmlinuz" ]; then
	kernel=$(readlink -f "$cache/vmlinuz")
	elf=$cache/pvh/$(basename "$kernel").elf
	if [ ! -s "$elf" ]; then
		mkdir -p "$cache/pvh"
		off=$(grep -abo "$(printf '\3757zXZ\000')" "$kernel" | head -n 1 | cut -d: -f1)
		if [ -n "$off" ]; then
			# xz complains of the data after its stream; the result decides.
			tail -c +"$((off + 1))" "$kernel" | xz -dc >"$elf.tmp" 2>/dev/null || true
		fi
		if [ -s "$elf.tmp" ] && [ "$(head -c 4 "$elf.tmp" | od -An -c | tr -d ' ')" = "177ELF" ]; then
			mv "$elf.tmp" "$elf"
			echo "vm kernel for PVH boot: $elf"
		else
			rm -f "$elf.tmp"
			echo "build-image.sh: could not decompress $kernel (the VM boots the bzImage instead)" >&2
		fi
	fi
fi

key=$(sha256sum <"$0" | cut -c1-16)
pkgkey=$(printf '%s %s %s\n' "$SUITE" "$MIRROR" "$PACKAGES" | sha256sum | cut -c1-16)
out=$cache/systemd-$key
if [ -f "$out/image.cpio" ]; then
	ln -sfn "systemd-$key" "$cache/systemd-image"
	echo "vm systemd image: $out (cached)"
	exit 0
fi

debs=$cache/debootstrap-$pkgkey
mkdir -p "$debs"
tmp=$(mktemp -d "$cache/.systemd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
t0=$(date +%s)
debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$debs" \
	"$SUITE" "$root" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 || {
	tail -n 30 "$tmp/debootstrap.log" >&2
	echo "build-image.sh: debootstrap failed (log above)" >&2
	exit 1
}
t1=$(date +%s)
echo "vm systemd image: debootstrap took $((t1 - t0)) s"

# --- configuration -------------------------------------------------------
sd=$root/etc/systemd/system
echo rljail-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost rljail-vm\n::1 localhost\n' >"$root/etc/hosts"
: >"$root/etc/fstab"
# A fixed machine id: an empty one would make every boot a "first boot".
echo 5ef1b0c7d1b84b9e9c4b0a1f7e3d2c10 >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$root/var/lib/dbus/machine-id"

# Units that cost boot time and that no test needs: timers of apt, dpkg,
# man-db, e2scrub, fstrim, tmpfiles cleaning; gettys (the harness reads
# the serial console, and the test runner writes to it); units that wait
# for devices udev would announce (there is no udev in minbase).
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer man-db.timer \
	e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-tmpfiles-clean.timer \
	getty@tty1.service serial-getty@ttyS0.service getty.target console-getty.service \
	systemd-firstboot.service systemd-journal-catalog-update.service systemd-update-done.service \
	systemd-hwdb-update.service ldconfig.service systemd-pstore.service \
	systemd-ask-password-wall.path systemd-ask-password-console.path \
	sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount dev-mqueue.mount \
	sys-fs-fuse-connections.mount sys-kernel-config.mount modprobe@.service \
	systemd-modules-load.service kmod-static-nodes.service systemd-random-seed.service \
	systemd-binfmt.service proc-sys-fs-binfmt_misc.automount systemd-remount-fs.service \
	systemd-sysusers.service; do
	ln -sfn /dev/null "$sd/$u"
done
# The journal in memory only, and quiet.
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nForwardToConsole=no\n' >"$root/etc/systemd/journald.conf.d/rljail-vm.conf"
# No status lines on the console between the test runner's.
mkdir -p "$root/etc/systemd/system.conf.d"
printf '[Manager]\nShowStatus=no\nDefaultTimeoutStartSec=60s\nDefaultTimeoutStopSec=20s\n' \
	>"$root/etc/systemd/system.conf.d/rljail-vm.conf"

# The unprivileged test user (uid and gid 1001), with a password-less
# account that only root can enter (runuser/su from root).
chroot "$root" groupadd -g 1001 rljailtest
chroot "$root" useradd -m -u 1001 -g 1001 -s /bin/bash -c "rljail VM test user" rljailtest
chroot "$root" passwd -q -l rljailtest >/dev/null

# The test runner: a oneshot at the end of the boot (multi-user.target
# reached), writing to the serial console. The script is in the per-run
# archive (integration/vm/systemd/run-tests.sh), so changing it does not
# rebuild the image.
cat >"$sd/rljail-vm-tests.service" <<'UNIT'
[Unit]
Description=rljail VM tests (integration/vm/systemd)
After=multi-user.target systemd-logind.service dbus.service
Wants=systemd-logind.service dbus.service

[Service]
Type=oneshot
ExecStart=/rljail-vm/run-tests.sh
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/console
TTYReset=no
TTYVHangup=no
TimeoutStartSec=infinity
UNIT
mkdir -p "$sd/multi-user.target.wants"
ln -sfn ../rljail-vm-tests.service "$sd/multi-user.target.wants/rljail-vm-tests.service"

# What the VM does not need to carry in memory.
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" \
	"$root/usr/share/locale" "$root/usr/lib/x86_64-linux-gnu/gconv" "$root/var/cache/apt"/*.bin "$root/var/lib/apt/lists"/*_* \
	"$root/var/cache/apt/archives"/*.deb "$root/var/log"/*.log
mkdir -p "$root/rljail-vm"

# --- the archive ----------------------------------------------------------
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc --reproducible) >"$tmp/image.cpio"
t2=$(date +%s)
echo "vm systemd image: configured and archived in $((t2 - t1)) s: $(du -sh "$tmp/image.cpio" | cut -f1)"
rm -rf "$out"
mkdir "$tmp/out"
mv "$root" "$tmp/out/root"
mv "$tmp/image.cpio" "$tmp/debootstrap.log" "$tmp/out/"
mv "$tmp/out" "$out"
ln -sfn "systemd-$key" "$cache/systemd-image"
echo "vm systemd image: $out"
# Images of older versions of this script.
for d in "$cache"/systemd-*; do
	case $d in "$out" | "$cache/systemd-image") ;; *) [ -d "$d" ] && rm -rf "$d" ;; esac
done
