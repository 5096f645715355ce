#!/bin/sh
# build-deb.sh builds rljail's Debian package from the files of
# packaging/install.sh (prefix /usr) and the maintainer scripts beside this
# script, reproducibly: the same binary, version and commit give the same
# bytes. Every mtime is SOURCE_DATE_EPOCH (default: the commit time of HEAD),
# every file is root's (--root-owner-group) with a fixed mode whatever the
# umask, dpkg-deb sorts the members and takes its own timestamps from
# SOURCE_DATE_EPOCH, and nothing names the build directory.
#
#   build-deb.sh --bin PATH --version VERSION [--out DIR] [--compress xz|gzip]
#
# --compress gzip (fastest level) is for the VM tests, which build two
# packages every run: xz takes some ten seconds each; a release is xz.
#
# DEB_MAINTAINER sets the Maintainer field (default: rljail developers
# <rljail@localhost>, a placeholder for a distributor's own).
#
# Relations (control): the binary is static and its maintainer scripts
# use only what Essential packages give (systemctl and apparmor_parser
# only where they are), so there is no Depends. Recommends: python3 and
# netbase, from which `rljail rootfs build` (and so the first run) makes
# the Python root filesystem and its /etc/services and /etc/protocols.
# Suggests: busybox-static (the rootfs's common commands), apparmor (the
# profiles, where AppArmor 4 restricts user namespaces), python3-pip
# (rootfs build --wheels).
#
# The man page is gzipped (-9n: no name or time in it) as Debian's policy
# asks, and usr/share/doc/rljail/copyright is packaging/deb/copyright, in
# Debian's machine-readable format.
#
# Prints the path of the .deb (DIR/rljail_VERSION_amd64.deb) on stdout.
set -eu
umask 022

bin= version= out=. compress=xz
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=$2; shift ;;
	--version) version=$2; shift ;;
	--out) out=$2; shift ;;
	--compress) compress=$2; shift ;;
	*) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$bin" ] && [ -n "$version" ] || { echo "build-deb.sh: --bin PATH and --version VERSION are required" >&2; exit 2; }
case $compress in
xz) zflags="-Zxz" ;;
gzip) zflags="-Zgzip -z1" ;;
*) echo "build-deb.sh: --compress xz|gzip, not $compress" >&2; exit 2 ;;
esac
case $version in [0-9]*) ;; *) echo "build-deb.sh: a Debian version starts with a digit, not $version" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
sh "$src/packaging/install.sh" --bin "$bin" --destdir "$root" --prefix /usr --apparmor no --no-activate
gzip -9n "$root/usr/share/man/man1/rljail.1"
install -m 0644 "$here/copyright" "$root/usr/share/doc/rljail/copyright"

install -d -m 0755 "$root/DEBIAN"
for s in postinst prerm postrm; do
	install -m 0755 "$here/$s" "$root/DEBIAN/$s"
done
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | LC_ALL=C sort | sed 's#^\./##' |
	xargs md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"
size=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)
maint=${DEB_MAINTAINER:-rljail developers <rljail@localhost>}
sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$size/" -e "s|@MAINTAINER@|$maint|" "$here/control" >"$root/DEBIAN/control"
chmod 0644 "$root/DEBIAN/control"
# Directories get their mode from install -d; the stage's own root too.
chmod 0755 "$root"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb=$out/rljail_${version}_amd64.deb
# shellcheck disable=SC2086 # zflags is two words
dpkg-deb --root-owner-group $zflags --build "$root" "$deb.tmp" >/dev/null
mv "$deb.tmp" "$deb"
echo "$deb"
