#!/bin/sh
# install.sh installs rljail's files into a root directory: what `make
# install` and `make uninstall` run, and what packaging/deb/build-deb.sh
# stages the .deb from, so that both install the same files.
#
#   install.sh [--uninstall] --bin PATH [--destdir DIR] [--prefix /usr/local]
#              [--apparmor auto|yes|no] [--no-activate]
#
# Files (PREFIX /usr/local by default; the .deb uses /usr):
#   PREFIX/bin/rljail                              the static binary
#   PREFIX/lib/systemd/system/rljail.slice         slice of the jails' units
#   PREFIX/lib/systemd/system/rljail-runner@.service  one job as a service
#   PREFIX/lib/systemd/system/rljail.socket        the API socket of rljail serve
#   PREFIX/lib/systemd/system/rljail.service       rljail serve, socket-activated
#   PREFIX/lib/tmpfiles.d/rljail.conf              /run/rljail at boot
#   PREFIX/share/rljail/apparmor/rljail            the AppArmor profiles rljail and rljail-host (always)
#   /etc/apparmor.d/rljail                         the same, where AppArmor 4 is
#   PREFIX/share/doc/rljail/examples/rljail-runner.service
#   PREFIX/share/man/man1/rljail.1                 the man page, printed by `rljail man`
#
# The man page is generated from the binary's own flag table (`rljail
# man`), so that it describes the binary installed beside it; the .deb
# compresses it (build-deb.sh).
#
# systemd searches /usr/local/lib/systemd/system and /usr/local/lib/tmpfiles.d
# as well as /usr/lib's. --apparmor auto (the default) installs the profile
# to DESTDIR/etc/apparmor.d only when DESTDIR/etc/apparmor.d/abi/4.0 exists:
# AppArmor 4 is what restricts unprivileged user namespaces (Ubuntu 23.10
# and later), and older parsers (Debian 12's 3.0) reject the profile's userns
# rule. Unless --no-activate or DESTDIR is set, it then reloads what runs:
# systemd (daemon-reload, tmpfiles) and AppArmor (apparmor_parser -r).
set -eu

uninstall=no bin= destdir= prefix=/usr/local apparmor=auto activate=yes
while [ $# -gt 0 ]; do
	case $1 in
	--uninstall) uninstall=yes ;;
	--bin) bin=$2; shift ;;
	--destdir) destdir=$2; shift ;;
	--prefix) prefix=$2; shift ;;
	--apparmor) apparmor=$2; shift ;;
	--no-activate) activate=no ;;
	*) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
case $apparmor in auto | yes | no) ;; *) echo "install.sh: --apparmor auto|yes|no, not $apparmor" >&2; exit 2 ;; esac
# PREFIX goes after DESTDIR and into the units' ExecStart (through sed):
# an absolute path of plain characters only, no "." or ".." element.
case $prefix in
/*) ;;
*)
	printf 'install.sh: PREFIX must be an absolute path (such as /usr/local), not "%s"\n' "$(printf %s "$prefix" | tr -c 'A-Za-z0-9._/+-' '?')" >&2
	exit 2
	;;
esac
case $prefix in
*[!A-Za-z0-9._/+-]* | */./* | */../* | */. | */.. | *//*)
	printf 'install.sh: PREFIX %s may hold only letters, digits and . _ / + - (no "." or ".." element)\n' "$(printf %s "$prefix" | tr -c 'A-Za-z0-9._/+-' '?')" >&2
	exit 2
	;;
esac
[ -z "$destdir" ] || activate=no
src=$(cd "$(dirname "$0")/.." && pwd)
bindir=$prefix/bin
unitdir=$prefix/lib/systemd/system
tmpfilesdir=$prefix/lib/tmpfiles.d
sharedir=$prefix/share/rljail
docdir=$prefix/share/doc/rljail
man1dir=$prefix/share/man/man1
aadir=/etc/apparmor.d

wantAppArmor() {
	case $apparmor in
	yes) return 0 ;;
	no) return 1 ;;
	esac
	[ -e "$destdir$aadir/abi/4.0" ]
}

# subst copies a contrib file with @BINDIR@ replaced.
subst() {
	sed "s#@BINDIR@#$bindir#g" "$1" >"$2.tmp"
	chmod 0644 "$2.tmp"
	mv "$2.tmp" "$2"
}

if [ $uninstall = yes ]; then
	if [ $activate = yes ] && [ -e "$aadir/rljail" ] && command -v apparmor_parser >/dev/null && [ -d /sys/kernel/security/apparmor ]; then
		apparmor_parser -R "$aadir/rljail" 2>/dev/null || true
	fi
	rm -f "$destdir$bindir/rljail" "$destdir$unitdir/rljail.slice" "$destdir$unitdir/rljail-runner@.service" \
		"$destdir$unitdir/rljail.socket" "$destdir$unitdir/rljail.service" \
		"$destdir$tmpfilesdir/rljail.conf" "$destdir$sharedir/apparmor/rljail" "$destdir$aadir/rljail" \
		"$destdir$docdir/examples/rljail-runner.service" "$destdir$man1dir/rljail.1"
	rmdir "$destdir$sharedir/apparmor" "$destdir$sharedir" "$destdir$docdir/examples" "$destdir$docdir" 2>/dev/null || true
	if [ $activate = yes ] && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	exit 0
fi

[ -n "$bin" ] || { echo "install.sh: --bin PATH is required" >&2; exit 2; }
[ -x "$bin" ] || { echo "install.sh: $bin is not an executable (make build)" >&2; exit 1; }
install -d -m 0755 "$destdir$bindir" "$destdir$unitdir" "$destdir$tmpfilesdir" \
	"$destdir$sharedir/apparmor" "$destdir$docdir/examples" "$destdir$man1dir"
install -m 0755 "$bin" "$destdir$bindir/rljail.tmp"
mv "$destdir$bindir/rljail.tmp" "$destdir$bindir/rljail"
install -m 0644 "$src/contrib/systemd/rljail.slice" "$destdir$unitdir/rljail.slice"
subst "$src/contrib/systemd/rljail-runner@.service" "$destdir$unitdir/rljail-runner@.service"
install -m 0644 "$src/contrib/systemd/rljail.socket" "$destdir$unitdir/rljail.socket"
subst "$src/contrib/systemd/rljail.service" "$destdir$unitdir/rljail.service"
install -m 0644 "$src/contrib/tmpfiles.d/rljail.conf" "$destdir$tmpfilesdir/rljail.conf"
subst "$src/contrib/apparmor/rljail" "$destdir$sharedir/apparmor/rljail"
install -m 0644 "$src/contrib/systemd/rljail-runner.service" "$destdir$docdir/examples/rljail-runner.service"
# The man page: what this binary says of its own commands and flags.
"$bin" man >"$destdir$man1dir/rljail.1.tmp" || { rm -f "$destdir$man1dir/rljail.1.tmp"; echo "install.sh: $bin man failed: no man page" >&2; exit 1; }
if ! grep -q '^\.TH RLJAIL 1 ' "$destdir$man1dir/rljail.1.tmp"; then
	rm -f "$destdir$man1dir/rljail.1.tmp"
	echo "install.sh: $bin man printed no man page (an rljail older than the man command?)" >&2
	exit 1
fi
chmod 0644 "$destdir$man1dir/rljail.1.tmp"
mv "$destdir$man1dir/rljail.1.tmp" "$destdir$man1dir/rljail.1"
if wantAppArmor; then
	install -d -m 0755 "$destdir$aadir"
	subst "$src/contrib/apparmor/rljail" "$destdir$aadir/rljail"
fi

if [ $activate = yes ]; then
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || echo "install.sh: systemctl daemon-reload failed" >&2
		systemd-tmpfiles --create "$tmpfilesdir/rljail.conf" || echo "install.sh: systemd-tmpfiles failed" >&2
	fi
	if [ -e "$aadir/rljail" ] && command -v apparmor_parser >/dev/null && [ -d /sys/kernel/security/apparmor ]; then
		apparmor_parser -r -W "$aadir/rljail" || echo "install.sh: apparmor_parser could not load $aadir/rljail" >&2
	fi
fi
