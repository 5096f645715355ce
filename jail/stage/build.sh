#!/bin/sh
# build.sh OUT: compiles the jail's init stage (init.c, spawn.c, rt.c,
# entry.S) into one relocatable object for the Go linker, a .syso that the
# jail package links into the rljail binary. Its only global symbols are
# rljail_entry, the binary's ELF entry point (the Makefile links with
# -e rljail_entry), and rljail_prestarted, which the supervisor reads
# (userns.c); all else, its own memcpy and errno among them, is made local,
# so that it cannot meet libc's. The build fails when the stage
# would call anything outside rt.c: it runs before libc's start.
set -eu
out=$(realpath -m "${1:?usage: build.sh OUT.syso}")
cd "$(dirname "$0")"
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -ffreestanding: no libc assumed; no stack protector (its canary lives in
# thread-local storage, which nothing sets up here); no loop turned into a
# call of memset or memcpy inside those very functions.
CFLAGS="-O2 -std=gnu11 -Wall -Wextra -Werror -ffreestanding -fno-stack-protector \
	-fno-tree-loop-distribute-patterns -U_FORTIFY_SOURCE -fno-asynchronous-unwind-tables"
for f in init spawn rt prestart; do
	$CC $CFLAGS -c -o "$tmp/$f.o" "$f.c"
done
$CC -c -o "$tmp/entry.o" entry.S
ld -r -o "$tmp/stage.o" "$tmp/entry.o" "$tmp/init.o" "$tmp/spawn.o" "$tmp/rt.o" "$tmp/prestart.o"
undef=$(nm -u "$tmp/stage.o" | awk '{print $2}' | tr '\n' ' ')
if [ "$undef" != "_start " ]; then
	echo "jail/stage: the init stage calls outside its own runtime (rt.c): $undef" >&2
	exit 1
fi
objcopy -G rljail_entry -G rljail_prestarted "$tmp/stage.o" "$out"
