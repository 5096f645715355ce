#include "textflag.h"

// rljail_signal_handler is the handler CatchSignals installs: it writes
// the signal's number, one byte, to the pipe whose write end is
// ·signalPipeFD, and returns. It runs on the signal stack of whichever
// thread the kernel chose (every Go thread has one, and the handler is
// installed with SA_ONSTACK), with every signal blocked (sa_mask); it
// touches nothing of Go's and makes no call but write(2), which is
// async-signal-safe. A full pipe drops the byte (the write end is
// non-blocking). The kernel restores every register on rt_sigreturn.
TEXT rljail_signal_handler(SB),NOSPLIT|NOFRAME,$0
	SUBQ	$16, SP
	MOVB	DI, 0(SP)	// the signal's number
	MOVLQSX	·signalPipeFD(SB), DI	// the pipe's write end
	MOVQ	SP, SI
	MOVQ	$1, DX
	MOVQ	$1, AX	// write
	SYSCALL
	ADDQ	$16, SP
	RET

// rljail_signal_restorer is the handler's return address (SA_RESTORER),
// as x86-64 Linux wants one: it ends the handler with rt_sigreturn.
TEXT rljail_signal_restorer(SB),NOSPLIT|NOFRAME,$0
	MOVQ	$15, AX	// rt_sigreturn
	SYSCALL
	INT	$3

// func signalHandlerPCs() (handler, restorer uintptr)
TEXT ·signalHandlerPCs(SB),NOSPLIT,$0-16
	LEAQ	rljail_signal_handler(SB), AX
	MOVQ	AX, handler+0(FP)
	LEAQ	rljail_signal_restorer(SB), AX
	MOVQ	AX, restorer+8(FP)
	RET
