/* tt_ticks.h — a 64-bit tick counter on SysTick (processor clock; wraps counted in SysTick_Handler).
 *
 * On hardware a tick is a CPU cycle. Under QEMU with -icount shift=0 every instruction takes 1 ns of
 * virtual time and SysTick counts the board's system clock, so a tick is TT_TICK_NS_NUM / TT_TICK_NS_DEN
 * instructions (40 at 25 MHz): tt_ticks_to_insns() converts (resolution: one tick).
 * Semihosting clocks and DWT CYCCNT do not count anything useful in QEMU.
 */
#ifndef TT_TICKS_H
#define TT_TICKS_H

#include <stdint.h>

void tt_ticks_start(void);
uint64_t tt_ticks(void);

/* Stack bytes used so far (high-water mark of the painted stack, tt_startup.c). */
uint32_t tt_stack_used(void);

#endif /* TT_TICKS_H */
