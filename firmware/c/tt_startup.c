/* tt_startup.c — reset handler and vector table of every tinytrain firmware (QEMU boards and real ones).
 *
 * Reset: copy .data from flash, zero .bss, paint the stack (for tt_stack_used), point VTOR at this table, enable the FPU (hard-float builds),
 * then main() and exit(). Every fault goes to _exit() with a status that names it (a spinning handler
 * would hang QEMU until its timeout): on the QEMU boards _exit is semihosting's, on the serial boards
 * the harness's own (tt_harness_serial.c reports the fault and resets).
 * Symbols come from the linker script (tinytrain.ld): _sidata _sdata _edata _sbss _ebss _estack.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tt_board.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sstack[], _estack[];
extern int main(void);
extern void _exit(int status) __attribute__((noreturn));
void SysTick_Handler(void);  /* tt_ticks.c */

#define SCB_VTOR  (*(volatile uint32_t *)0xE000ED08u)
#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)

#define TT_STACK_PAINT 0xA5A5A5A5u

/* Exit statuses of a fault: TT_EXIT_FAULT + the exception number (3 HardFault, 4 MemManage, ...). */
#define TT_EXIT_FAULT 64

#define TT_FAULT_HANDLER(name, number) \
    void name(void) __attribute__((noreturn)); \
    void name(void) { _exit(TT_EXIT_FAULT + (number)); }

TT_FAULT_HANDLER(NMI_Handler, 2)
TT_FAULT_HANDLER(HardFault_Handler, 3)
TT_FAULT_HANDLER(MemManage_Handler, 4)
TT_FAULT_HANDLER(BusFault_Handler, 5)
TT_FAULT_HANDLER(UsageFault_Handler, 6)
TT_FAULT_HANDLER(SecureFault_Handler, 7)
TT_FAULT_HANDLER(Unexpected_Handler, 0)  /* SVC, PendSV, DebugMon and any interrupt: nothing uses them */

extern void (*const tt_vectors[16 + TT_VECTOR_IRQS])(void);

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void)
{
    for (uint32_t *src = _sidata, *dst = _sdata; dst < _edata;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = _sbss; dst < _ebss;) {
        *dst++ = 0;
    }
    uint32_t sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *p = _sstack; p < (uint32_t *)(sp - 64u);) {  /* paint the stack: tt_stack_used() */
        *p++ = TT_STACK_PAINT;
    }
    SCB_VTOR = (uint32_t)tt_vectors;  /* a bootloader (nano33ble) may have left its own table there */
#if defined(__ARM_FP)
    SCB_CPACR |= 0xFu << 20;  /* CP10, CP11: full access, before any float instruction */
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
    tt_board_init();
    exit(main());
}

/* 16 system exceptions + TT_VECTOR_IRQS interrupts, all but SysTick routed to a fault exit. */
__attribute__((section(".isr_vector"), used))
void (*const tt_vectors[16 + TT_VECTOR_IRQS])(void) = {
    [0] = (void (*)(void))_estack,
    [1] = Reset_Handler,
    [2] = NMI_Handler,
    [3] = HardFault_Handler,
    [4] = MemManage_Handler,
    [5] = BusFault_Handler,
    [6] = UsageFault_Handler,
    [7] = SecureFault_Handler,
    [11] = Unexpected_Handler,
    [12] = Unexpected_Handler,
    [14] = Unexpected_Handler,
    [15] = SysTick_Handler,
    [16 ... 16 + TT_VECTOR_IRQS - 1] = Unexpected_Handler,
};

uint32_t tt_stack_used(void)
{
    const uint32_t *p = _sstack;
    while (p < _estack && *p == TT_STACK_PAINT) {
        p++;
    }
    return (uint32_t)((uintptr_t)_estack - (uintptr_t)p);
}

/* The heap runs from the end of .bss (linker symbol _sheap) to the end of the RAM region (_eheap): the
 * budget, not the board's RAM. newlib's malloc grows it through here. */
extern char _sheap[], _eheap[];

void *_sbrk(ptrdiff_t increment);
void *_sbrk(ptrdiff_t increment)
{
    static char *brk = _sheap;
    if (increment > _eheap - brk || increment < _sheap - brk) {
        return (void *)-1;
    }
    char *previous = brk;
    brk += increment;
    return previous;
}
