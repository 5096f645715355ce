#include "textflag.h"

// The binary's ELF entry point: the Makefile links with -E rljail_entry.
// It runs on the stack the kernel gave the process, before the Go runtime
// starts. It makes the init stage's data pages writable and relocates the
// stage (the stage is a blob of C placed in the binary's text, built by
// stage/build.sh), then lets the stage look at argv: as the jail's init
// (argv[0] "rljail-init") the stage runs and never returns; for a run it
// starts the init stage's first step (stage/prestart.c) and returns. Then
// the Go runtime starts as it would have from its own entry, on the stack
// the kernel gave, with one more environment entry for a run (below).
TEXT rljail_entry(SB),NOSPLIT|NOFRAME,$0
	// The binary started here, not at Go's own entry: EnteredByStage
	// tells a run (and rljail check) so. A plain `go build` links
	// without -E rljail_entry, and its runs would fail deep in setup.
	MOVB	$1, ·enteredByStage(SB)
	LEAQ	rljail_data_start(SB), DI
	LEAQ	rljail_data_end(SB), SI
	SUBQ	DI, SI
	MOVQ	$3, DX	// PROT_READ|PROT_WRITE
	MOVQ	$10, AX	// mprotect
	SYSCALL
	CMPQ	AX, $0
	JNE	broken
	CALL	rljail_selfreloc(SB)
	CMPL	AX, $0
	JNE	broken
	MOVQ	0(SP), DI	// argc
	LEAQ	8(SP), SI	// argv
	CALL	rljail_stage_select(SB)	// the stack is 16-byte aligned here, as C wants
	// For a run, the Go runtime gets GOMAXPROCS=1 unless the caller set
	// it: with two Ps, each goroutine made runnable wakes another thread to
	// look for work, and each such wake-up is an inter-processor interrupt
	// and a context switch, dear in a VM; the supervisor waits on I/O and
	// has no work for a second P. The variable goes in as the first
	// environment entry: argc, argv[] and argv's NULL move one word down
	// the stack, and the pointer takes the freed word, just before envp[0].
	// The supervisor drops it from its environment (jail.DropEntryEnv).
	// rljail_stage_select returned it (rljail_entry_env), or NULL.
	CMPQ	AX, $0
	JEQ	populate
	MOVQ	0(SP), CX	// argc
	ADDQ	$2, CX	// words to move: argc, argv[0..argc-1], NULL
	MOVQ	SP, SI
	SUBQ	$8, SP
	MOVQ	SP, DI
moveargs:
	MOVQ	0(SI), R8
	MOVQ	R8, 0(DI)
	ADDQ	$8, SI
	ADDQ	$8, DI
	DECQ	CX
	JNZ	moveargs
	MOVQ	AX, 0(DI)	// the old NULL's word, now envp[0]
populate:
	// The Go runtime reads many of its variables before it first writes
	// them. Each such page would then fault twice, and the second fault
	// (a copy on write) flushes the page's TLB entry on every CPU that runs
	// a thread of this process: an IPI, dear in a VM, once Go has started
	// its threads. Writing every page of the data and bss now, while
	// there is one thread, makes each page private at once. The result is
	// not checked: before Linux 5.14 the pages fault as they would have.
	LEAQ	runtime·noptrdata(SB), DI
	ANDQ	$~4095, DI
	LEAQ	runtime·ebss(SB), SI
	ADDQ	$4095, SI
	ANDQ	$~4095, SI
	SUBQ	DI, SI
	MOVQ	$23, DX	// MADV_POPULATE_WRITE
	MOVQ	$28, AX	// madvise
	SYSCALL
	JMP	_rt0_amd64_linux(SB)
broken:
	MOVQ	$2, DI
	LEAQ	entryFailed<>(SB), SI
	MOVQ	$40, DX
	MOVQ	$1, AX	// write
	SYSCALL
	MOVQ	$125, DI
	MOVQ	$231, AX	// exit_group
	SYSCALL
	INT	$3

DATA	entryFailed<>+0(SB)/8, $"rljail: "
DATA	entryFailed<>+8(SB)/8, $"cannot p"
DATA	entryFailed<>+16(SB)/8, $"repare i"
DATA	entryFailed<>+24(SB)/8, $"ts init "
DATA	entryFailed<>+32(SB)/8, $"stage\n\x00\x00"
GLOBL	entryFailed<>(SB), RODATA|NOPTR, $40

// func prestartRecord() unsafe.Pointer
TEXT ·prestartRecord(SB),NOSPLIT,$0-8
	LEAQ	rljail_prestarted(SB), AX
	MOVQ	AX, ret+0(FP)
	RET

// func usernsChild() (pid, errno int)
//
// A child in a new user namespace that exits at once. CLONE_VM|CLONE_VFORK:
// no copy of the supervisor's page tables, and this thread waits,
// suspended, until the child is gone, so the child runs on this very
// stack; it touches no memory and makes no call, only exit. Every signal
// stays blocked on this thread meanwhile, so no Go handler runs in the
// child. (posix_spawn runs its child the same way.)
TEXT ·usernsChild(SB),NOSPLIT,$16-16
	MOVQ	$-1, 0(SP)	// every signal
	MOVQ	$2, DI	// SIG_SETMASK
	LEAQ	0(SP), SI
	LEAQ	8(SP), DX	// the old mask
	MOVQ	$8, R10
	MOVQ	$14, AX	// rt_sigprocmask
	SYSCALL
	MOVQ	$0x10004111, DI	// CLONE_NEWUSER|CLONE_VFORK|CLONE_VM|SIGCHLD
	XORQ	SI, SI	// the same stack
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$56, AX	// clone
	SYSCALL
	CMPQ	AX, $0
	JNE	parent
	XORQ	DI, DI
	MOVQ	$60, AX	// exit
	SYSCALL
parent:
	MOVQ	AX, R12
	MOVQ	$2, DI
	LEAQ	8(SP), SI
	XORQ	DX, DX
	MOVQ	$8, R10
	MOVQ	$14, AX
	SYSCALL
	CMPQ	R12, $-4095
	JCC	failed	// unsigned >= -4095: -errno
	MOVQ	R12, pid+0(FP)
	MOVQ	$0, errno+8(FP)
	RET
failed:
	NEGQ	R12
	MOVQ	$-1, pid+0(FP)
	MOVQ	R12, errno+8(FP)
	RET
