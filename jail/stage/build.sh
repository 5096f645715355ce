#!/bin/sh
# build.sh OUT: builds the jail's init stage (init.c, spawn.c, rt.c,
# prestart.c, reloc.c, hostids.c) into the .syso that the jail package links into the
# rljail binary.
#
# The rljail binary is pure Go, linked by Go's own linker, which applies
# no relocations of a foreign object in a static binary. So the stage is
# linked here, by ld, into one position-independent blob (blob.ld) with
# every reference inside it resolved; the .syso holds that blob as one
# text section without relocations, and names a few places in it:
#   rljail_stage          the blob's start
#   rljail_stage_select   called by the binary's entry (jail/entry_amd64.s)
#   rljail_selfreloc      the blob's own relocation (reloc.c)
#   rljail_prestarted     what the prestart left for the supervisor
#   rljail_data_start/end the pages the stage writes
# The build fails when the stage would call anything outside rt.c (it
# runs before the Go runtime, without libc) or needs a relocation other
# than a relative one.
set -eu
out=$(realpath -m "${1:?usage: build.sh OUT.syso}")
cd "$(dirname "$0")"
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -ffreestanding: no libc assumed; no stack protector (its canary lives in
# thread-local storage, which nothing sets up here); no loop turned into a
# call of memset or memcpy inside those very functions.
CFLAGS="-O2 -std=gnu11 -Wall -Wextra -Werror -ffreestanding -fno-stack-protector -fPIE \
	-fno-tree-loop-distribute-patterns -U_FORTIFY_SOURCE -fno-asynchronous-unwind-tables"
objs=
for f in init spawn rt prestart reloc hostids; do
	$CC $CFLAGS -c -o "$tmp/$f.o" "$f.c"
	objs="$objs $tmp/$f.o"
done
LDFLAGS="-static -pie --no-dynamic-linker -z norelro -z noexecstack --no-undefined -e rljail_stage_select"
# shellcheck disable=SC2086 # word splitting is meant
# (A first link without blob.ld, for the checks; the symbols blob.ld
# defines are stand-ins here.)
if ! ld $LDFLAGS --defsym=__blob_start=0 --defsym=__rela_start=0 --defsym=__rela_end=0 \
	-o "$tmp/check.elf" $objs 2>"$tmp/err"; then
	echo "jail/stage: the init stage does not link on its own (it may call only rt.c):" >&2
	cat "$tmp/err" >&2
	exit 1
fi
kinds=$(readelf -rW "$tmp/check.elf" | awk '/^[0-9a-f]+ /{print $3}' | sort -u | tr '\n' ' ')
if [ -n "$kinds" ] && [ "$kinds" != "R_X86_64_RELATIVE " ]; then
	echo "jail/stage: relocations other than relative ones: $kinds" >&2
	exit 1
fi
# shellcheck disable=SC2086
ld $LDFLAGS -T blob.ld -o "$tmp/blob.elf" $objs
objcopy -O binary -j .text -j .rodata -j .data "$tmp/blob.elf" "$tmp/blob.bin"
at() {
	v=$(nm "$tmp/blob.elf" | awk -v s="$1" '$3 == s {print $1}')
	[ -n "$v" ] || { echo "jail/stage: no symbol $1" >&2; exit 1; }
	echo "0x$v"
}
cd "$tmp"
# The empty .note.GNU-stack says that the object needs no executable
# stack: a test binary linked externally (cgo) warned without it.
objcopy -I binary -O elf64-x86-64 -B i386:x86-64 \
	--rename-section .data=.text,alloc,load,readonly,code,contents \
	--set-section-alignment .text=4096 \
	-N _binary_blob_bin_start -N _binary_blob_bin_end -N _binary_blob_bin_size \
	--add-symbol rljail_stage=.text:0,global,function \
	--add-symbol rljail_stage_built_by_make=.text:0,global \
	--add-symbol rljail_stage_select=.text:"$(at rljail_stage_select)",global,function \
	--add-symbol rljail_selfreloc=.text:"$(at rljail_selfreloc)",global,function \
	--add-symbol rljail_prestarted=.text:"$(at rljail_prestarted)",global,object \
	--add-symbol rljail_data_start=.text:"$(at __data_start)",global \
	--add-symbol rljail_data_end=.text:"$(at __data_end)",global \
	--add-section .note.GNU-stack=/dev/null \
	blob.bin "$out"
