#ifndef RLJAIL_RELOC_H
#define RLJAIL_RELOC_H

// rljail_selfreloc relocates the stage for the address it was placed at;
// 0, or -1 for a relocation it cannot apply.
int rljail_selfreloc(void);

#endif
