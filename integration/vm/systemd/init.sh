#!/rljail-vm/busybox sh
# /init of the systemd test VM (PID 1 until it execs systemd). The kernel
# unpacked the cached Debian root (build-image.sh) and the run's archive
# into its initramfs; this script loads overlayfs (rljail presents
# read-only directories through it; Debian builds it as a module and the
# image has no /lib/modules for this kernel) and starts systemd on a bind
# mount of that root: the initramfs root itself has no parent mount, so
# every jail's pivot_root(2) would fail there with EINVAL; a bind mount moved
# over / has one. No copy: the files stay where the kernel unpacked them.
bb=/rljail-vm/busybox
for m in /rljail-vm/modules/*.ko; do
	[ -e "$m" ] || continue
	$bb insmod "$m" || echo "rljail-vm: insmod $m failed"
done
$bb mkdir -p /rljail-vm/newroot
$bb mount -o bind / /rljail-vm/newroot || exec echo "RLJAIL-VM-VERDICT: FAIL stage1-bind"
cd /rljail-vm/newroot || exec echo "RLJAIL-VM-VERDICT: FAIL stage1-cd"
$bb mount -o move . / || exec echo "RLJAIL-VM-VERDICT: FAIL stage1-move"
exec $bb chroot . /lib/systemd/systemd "$@"
