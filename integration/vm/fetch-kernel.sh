#!/bin/sh
# fetch-kernel.sh puts the kernel of Debian's linux-image-amd64 into the VM
# harness's cache, without installing it: `apt-get download` the versioned
# package linux-image-amd64 depends on, unpack its /boot only, and point
# $RLJAIL_VM_CACHE/vmlinuz (and .../config) at it. Idempotent: once that
# package is cached, nothing is downloaded; when the archive cannot be reached
# but an older kernel is cached, that one stays in use.
#
# Cache: $RLJAIL_VM_CACHE, else /var/cache/rljail-vm for root,
# ${XDG_CACHE_HOME:-$HOME/.cache}/rljail-vm for anyone else. The Go harness
# (integration/vm) looks in the same place.
set -eu

if [ -n "${RLJAIL_VM_CACHE:-}" ]; then
	cache=$RLJAIL_VM_CACHE
elif [ "$(id -u)" = 0 ]; then
	cache=/var/cache/rljail-vm
else
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/rljail-vm
fi
mkdir -p "$cache"

# kernelPackage prints the versioned image package (linux-image-6.1.0-NN-amd64).
kernelPackage() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n 1
}

link() {
	ln -sfn "$1/boot/$(basename "$(ls "$cache/$1"/boot/vmlinuz-*)")" "$cache/vmlinuz"
	ln -sfn "$1/boot/$(basename "$(ls "$cache/$1"/boot/config-*)")" "$cache/config"
	ln -sfn "$1/modules" "$cache/modules"
	echo "vm kernel: $cache/vmlinuz -> $(readlink "$cache/vmlinuz")"
}

pkg=$(kernelPackage)
if [ -z "$pkg" ]; then
	# No package lists yet (a fresh container): fetch them once.
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || true
	pkg=$(kernelPackage)
fi
if [ -z "$pkg" ]; then
	if [ -e "$cache/vmlinuz" ]; then
		echo "fetch-kernel: apt knows no linux-image-amd64; keeping $(readlink "$cache/vmlinuz")" >&2
		exit 0
	fi
	echo "fetch-kernel: apt-cache knows no package linux-image-amd64 (is this Debian with main in sources.list?); set RLJAIL_VM_KERNEL to a bzImage instead" >&2
	exit 1
fi

# A cache from before the overlay module was kept is fetched again.
if ls "$cache/$pkg"/boot/vmlinuz-* "$cache/$pkg"/modules/overlay.ko >/dev/null 2>&1; then
	link "$pkg"
	exit 0
fi

tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"
# apt-get download writes into the current directory; as root it warns that
# _apt cannot write there, which is harmless.
(cd "$tmp" && apt-get download -q "$pkg") 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
	if [ -e "$cache/vmlinuz" ]; then
		echo "fetch-kernel: could not download $pkg; keeping $(readlink "$cache/vmlinuz")" >&2
		exit 0
	fi
	echo "fetch-kernel: apt-get download $pkg failed" >&2
	exit 1
fi
mkdir "$tmp/x"
# Only ./boot (vmlinuz, config, System.map) and overlayfs, the one module the
# VM needs: Debian builds the rest of what it runs on (8250 console,
# initramfs, cgroup2, namespaces, tmpfs) into the image, but overlayfs, which
# rljail presents read-only directories through, is a module. The harness
# puts modules/*.ko into the initramfs and init.sh loads them.
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" ./boot --wildcards './lib/modules/*/kernel/fs/overlayfs/overlay.ko'
ls "$tmp/x/boot"/vmlinuz-* >/dev/null
mkdir "$tmp/x/modules"
mv "$tmp/x"/lib/modules/*/kernel/fs/overlayfs/overlay.ko "$tmp/x/modules/"
rm -rf "$tmp/x/lib"
rm -rf "${cache:?}/$pkg"
mv "$tmp/x" "$cache/$pkg"
link "$pkg"
