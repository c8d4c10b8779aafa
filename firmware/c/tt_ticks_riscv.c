/* tt_ticks_riscv.c — tt_ticks.h on RISC-V: the minstret counter (instructions retired, 64 bits as minstreth:minstret).
 * Under QEMU with -icount shift=0 it counts the instructions executed (a tick is one instruction: TT_TICK_NS_NUM /
 * TT_TICK_NS_DEN = 1/1); on hardware, instructions retired (mcycle would count cycles). */
#include "tt_ticks.h"

/* CSR instructions: GCC 12's rv32imac / rv32imafc (the multilibs' names) leave Zicsr out; the assembler takes them
 * with it enabled around each one. */
#define TT_ZICSR(insn) ".option push\n\t.option arch, +zicsr\n\t" insn "\n\t.option pop"

void tt_ticks_start(void)
{
}

uint64_t tt_ticks(void)
{
    uint32_t hi, lo, again;
    do {  /* a carry into the high half between the reads: read again */
        __asm volatile(TT_ZICSR("csrr %0, minstreth") : "=r"(hi));
        __asm volatile(TT_ZICSR("csrr %0, minstret") : "=r"(lo));
        __asm volatile(TT_ZICSR("csrr %0, minstreth") : "=r"(again));
    } while (hi != again);
    return ((uint64_t)hi << 32) | lo;
}
