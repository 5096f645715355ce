// rljail_selfreloc applies the stage's own relocations. The stage is
// linked as a position-independent blob (blob.ld) and placed in the Go
// binary's text wherever the Go linker puts it, so the few pointers in its
// initialized data (string tables) hold offsets from the blob's start
// until this adds the start's address to each. The entry (jail/entry_amd64.s)
// calls it first, once its data is writable; it only uses PC-relative
// addressing itself. (The technique is a static PIE's self-relocation, as
// glibc's _dl_relocate_static_pie does it.)
#include "reloc.h"

struct rela {
	unsigned long offset, info;
	long addend;
};

#define R_X86_64_RELATIVE 8

extern char __blob_start[] __attribute__((visibility("hidden")));
extern const struct rela __rela_start[] __attribute__((visibility("hidden")));
extern const struct rela __rela_end[] __attribute__((visibility("hidden")));

int rljail_selfreloc(void)
{
	char *base = __blob_start;
	for (const struct rela *r = __rela_start; r < __rela_end; r++) {
		if ((r->info & 0xffffffff) != R_X86_64_RELATIVE)
			return -1; // build.sh lets no other kind through
		*(unsigned long *)(base + r->offset) = (unsigned long)(base + r->addend);
	}
	return 0;
}
