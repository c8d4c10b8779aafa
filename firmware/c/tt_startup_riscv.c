/* tt_startup_riscv.c — reset code and trap handler of the RISC-V (rv32) firmware; tt_startup.c's counterpart.
 *
 * _start (placed first in .text, where QEMU's virt machine jumps with -bios none): global pointer, stack pointer,
 * then tt_reset: copy .data (and the thread-local .tdata picolibc's errno lives in) from flash, zero .bss (and
 * .tbss), paint the stack (for tt_stack_used), point tp at the thread-local block, send every trap to the fault
 * exit, turn the FPU on (mstatus.FS, rv32imafc builds), then main() and exit(). A trap exits with
 * TT_EXIT_FAULT + mcause's exception code (2 illegal instruction, 5 load access fault, ...) through semihosting's
 * _exit (picolibc's libsemihost).
 * Symbols come from the linker script (tinytrain.ld): _sidata _sdata _edata _sbss _ebss _sstack _estack __tls_base.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tt_board.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sstack[], _estack[];
extern char __tls_base[];
extern int main(void);
extern void _exit(int status) __attribute__((noreturn));
#if defined(__PICOLIBC__)
extern void _set_tls(void *tls);  /* picolibc: tp = tls (its errno is thread-local) */
#endif

/* CSR instructions: GCC 12's rv32imac / rv32imafc (the multilibs' names) leave Zicsr out; the assembler takes them
 * with it enabled around each one. */
#define TT_ZICSR(insn) ".option push\n\t.option arch, +zicsr\n\t" insn "\n\t.option pop"

#define TT_STACK_PAINT 0xA5A5A5A5u
#define TT_EXIT_FAULT 64

void _start(void) __attribute__((naked, noreturn, section(".text.init.enter")));
void _start(void)
{
    __asm volatile(".option push\n\t"
                   ".option norelax\n\t"
                   "la gp, __global_pointer$\n\t"
                   ".option pop\n\t"
                   "la sp, _estack\n\t"
                   "j tt_reset");
}

void tt_trap(void) __attribute__((noreturn, aligned(4)));
void tt_trap(void)
{
    uint32_t cause;
    __asm volatile(TT_ZICSR("csrr %0, mcause") : "=r"(cause));
    _exit(TT_EXIT_FAULT + (int)(cause & 0x3Fu));
}

void tt_reset(void) __attribute__((noreturn, used));
void tt_reset(void)
{
    for (uint32_t *src = _sidata, *dst = _sdata; dst < _edata;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = _sbss; dst < _ebss;) {
        *dst++ = 0;
    }
    uint32_t sp;
    __asm volatile("mv %0, sp" : "=r"(sp));
    for (uint32_t *p = _sstack; p < (uint32_t *)(sp - 64u);) {  /* paint the stack: tt_stack_used() */
        *p++ = TT_STACK_PAINT;
    }
#if defined(__PICOLIBC__)
    _set_tls(__tls_base);
#endif
    __asm volatile(TT_ZICSR("csrw mtvec, %0") ::"r"((uintptr_t)tt_trap));  /* direct mode: every trap to tt_trap */
#if defined(__riscv_flen)
    __asm volatile(TT_ZICSR("csrs mstatus, %0") ::"r"(1u << 13));  /* FS = Initial: float instructions allowed */
#endif
    tt_board_init();
    exit(main());
}

uint32_t tt_stack_used(void)
{
    const uint32_t *p = _sstack;
    while (p < _estack && *p == TT_STACK_PAINT) {
        p++;
    }
    return (uint32_t)((uintptr_t)_estack - (uintptr_t)p);
}
