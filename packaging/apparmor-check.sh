#!/bin/sh
# apparmor-check.sh: parse contrib/apparmor/rljail with AppArmor 4's own
# parser, as a host that restricts unprivileged user namespaces would load it
# (Debian 12's AppArmor 3 does not know the `userns,` rule). The file must
# define exactly the profiles rljail (with `userns,`) and rljail-host (the one
# hostexec moves host programs to: without it). The parser and
# the C library it needs come from Debian 13's packages (apparmor,
# libapparmor1, libc6), fetched once from deb.debian.org into the cache and
# unpacked, never installed; the parser runs under that C library's own
# loader with -Q (parse and compile, load nothing into a kernel). A profile
# with its rule misspelt must be refused, so the check can fail.
#
# Usage: apparmor-check.sh [PROFILE]   (cache: $RLJAIL_VM_CACHE, else
# /var/cache/rljail-vm as root, $XDG_CACHE_HOME/rljail-vm otherwise)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
profile=${1:-$here/contrib/apparmor/rljail}
if [ -n "${RLJAIL_VM_CACHE:-}" ]; then cache=$RLJAIL_VM_CACHE
elif [ "$(id -u)" = 0 ]; then cache=/var/cache/rljail-vm
else cache=${XDG_CACHE_HOME:-$HOME/.cache}/rljail-vm; fi
mirror=http://deb.debian.org/debian
dir=$cache/apparmor4
root=$dir/root
if ! [ -x "$root/usr/sbin/apparmor_parser" ]; then
	mkdir -p "$dir"
	tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	curl -fsS --retry 3 -o "$tmp/Packages.xz" "$mirror/dists/trixie/main/binary-amd64/Packages.xz" ||
		{ echo "apparmor-check: cannot fetch Debian 13's package index from $mirror" >&2; exit 1; }
	mkdir "$tmp/root"
	for pkg in apparmor libapparmor1 libc6; do
		file=$(xz -dc "$tmp/Packages.xz" | awk -v p="$pkg" '$1=="Package:"{on=($2==p)} on&&$1=="Filename:"{print $2; exit}')
		[ -n "$file" ] || { echo "apparmor-check: no $pkg in Debian 13's index" >&2; exit 1; }
		curl -fsS --retry 3 -o "$tmp/$pkg.deb" "$mirror/$file"
		dpkg-deb -x "$tmp/$pkg.deb" "$tmp/root"
	done
	rm -rf "$root" && mv "$tmp/root" "$root"
fi
lib=$root/usr/lib/x86_64-linux-gnu
parse() {
	"$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/sbin/apparmor_parser" \
		-Q -K --config-file /dev/null --base "$root/etc/apparmor.d" -I "$root/etc/apparmor.d" "$1"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's|@BINDIR@|/usr/bin|' "$profile" > "$work/rljail"
if ! out=$(parse "$work/rljail" 2>&1); then
	echo "apparmor-check: AppArmor 4 refuses $profile:" >&2; echo "$out" >&2; exit 1
fi
names=$("$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/sbin/apparmor_parser" \
	-N --config-file /dev/null --base "$root/etc/apparmor.d" -I "$root/etc/apparmor.d" "$work/rljail" 2>/dev/null | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$names" != "rljail rljail-host" ]; then
	echo "apparmor-check: $profile defines the profiles '$names', want 'rljail rljail-host'" >&2; exit 1
fi
# Each profile's own lines (from its "profile" line to the next "}").
block() { awk -v p="$1" '$1=="profile"&&$2==p{on=1} on{print} on&&/^}/{exit}' "$work/rljail"; }
if ! block rljail | grep -q '^ *userns,'; then
	echo "apparmor-check: the profile rljail in $profile has no userns rule" >&2; exit 1
fi
if block rljail-host | grep -q 'userns'; then
	echo "apparmor-check: the profile rljail-host in $profile allows userns: host programs would keep it" >&2; exit 1
fi
sed 's/^\( *\)userns,/\1usrns,/' "$work/rljail" > "$work/bad"
if parse "$work/bad" >/dev/null 2>&1; then
	echo "apparmor-check: the parser accepted a misspelt rule: this check cannot fail" >&2; exit 1
fi
echo "apparmor-check: $("$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/sbin/apparmor_parser" --version 2>/dev/null | head -1) accepts $(basename "$profile") (profiles $names), refuses it misspelt"
