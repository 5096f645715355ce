#!/bin/sh
# `make python-test`: the package's unit suite (against the TEST-ONLY fake session server)
# and its real-binary module against $RLJAIL_BIN, as this user and, when this user is
# root, rootless as the user nobody (from a copy of the package and the binary that
# nobody can read).  The three run at once (they mostly wait: on cell timeouts, on jails
# starting); each one's output is kept and printed after, in order: unittest's own
# summary, or the whole output when it failed.  Exits non-zero when any failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-/usr/bin/python3}
: "${RLJAIL_BIN:?RLJAIL_BIN must name the rljail binary to test}"
case $RLJAIL_BIN in /*) ;; *) RLJAIL_BIN=$(pwd)/$RLJAIL_BIN ;; esac
work=$(mktemp -d /tmp/rljail-python-test.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM

# -B: no __pycache__ written into the source tree (or refused to nobody in the copy).
# Each run has a TMPDIR of its own: the tests that count what is left in the temporary
# directory must not see another run's files.
mkdir "$work/tmp-unit" "$work/tmp-real" "$work/tmp-rootless" || exit 1
(cd "$here/tests" && TMPDIR="$work/tmp-unit" "$PY" -B -m unittest test_session test_adapter_rlm test_adapter_dspy \
	test_adapter_smolagents) >"$work/unit.log" 2>&1 &
unit=$!
(cd "$here/tests" && TMPDIR="$work/tmp-real" RLJAIL_BIN=$RLJAIL_BIN "$PY" -B -m unittest test_real_binary) \
	>"$work/real.log" 2>&1 &
real=$!
rootless=
if [ "$(id -u)" = 0 ]; then
	mkdir "$work/nobody"
	cp -R "$here" "$work/nobody/python" && cp "$RLJAIL_BIN" "$work/nobody/rljail" &&
		chmod -R a+rX "$work/nobody" && chmod 755 "$work" &&
		chown nobody "$work/tmp-rootless" || exit 1
	(cd "$work/nobody/python/tests" && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env HOME=/tmp TMPDIR="$work/tmp-rootless" RLJAIL_BIN="$work/nobody/rljail" ${RLJAIL_ROOTFS:+RLJAIL_ROOTFS="$RLJAIL_ROOTFS"} ${RLJAIL_DATA_ROOTFS:+RLJAIL_DATA_ROOTFS="$RLJAIL_DATA_ROOTFS"} \
		"$PY" -B -m unittest test_real_binary) >"$work/rootless.log" 2>&1 &
	rootless=$!
fi

status=0
report() { # name pid log
	if wait "$2"; then
		echo "python-test: $1: $(grep -E '^Ran [0-9]+ tests' "$3") $(tail -n 1 "$3")"
	else
		status=1
		echo "python-test: $1 FAILED:"
		cat "$3"
	fi
}
report "unit suite, fake session server ($PY)" "$unit" "$work/unit.log"
report "real binary as $(id -un) ($RLJAIL_BIN)" "$real" "$work/real.log"
[ -n "$rootless" ] && report "real binary rootless, as nobody" "$rootless" "$work/rootless.log"
exit $status
