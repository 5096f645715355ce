// The binary's ELF entry point (the Makefile links with -e rljail_entry).
// It runs before libc's _start: the jail's init stage, which the
// supervisor starts by re-executing this binary with argv[0]
// "rljail-init", runs from here on the process's initial stack and never
// returns; every other start goes on to libc's _start (and from there to
// the Go runtime) with the stack and registers the kernel gave it.
	.text
	.globl rljail_entry
	.type rljail_entry, @function
rljail_entry:
	.cfi_startproc
	.cfi_undefined rip
	endbr64
	xor %ebp, %ebp
	mov %rdx, %r12          // _start's rtld_fini; r12 survives the call
	mov (%rsp), %rdi        // argc
	lea 8(%rsp), %rsi       // argv
	call rljail_stage_select // returns only when this is no init stage
	mov %r12, %rdx
	jmp _start
	.cfi_endproc
	.size rljail_entry, .-rljail_entry
	.section .note.GNU-stack,"",@progbits
