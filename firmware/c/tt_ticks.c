/* tt_ticks.c — see tt_ticks.h. */
#include "tt_ticks.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_RELOAD 0xFFFFFFu /* 24-bit down-counter */

static volatile uint32_t tt_systick_wraps;

void SysTick_Handler(void);
void SysTick_Handler(void)
{
    tt_systick_wraps++;
}

void tt_ticks_start(void)
{
    SYST_CSR = 0;
    SYST_RVR = SYST_RELOAD;
    SYST_CVR = 0;            /* any write clears it; it reloads on the next tick */
    tt_systick_wraps = 0;
    SYST_CSR = 7;            /* ENABLE | TICKINT | CLKSOURCE = processor clock */
    while (SYST_CVR == 0) {  /* until the first reload: a 0 would read as a full period */
    }
}

uint64_t tt_ticks(void)
{
    uint32_t wraps, value;
    do {  /* a wrap between the two reads is taken by the handler at once: read again */
        wraps = tt_systick_wraps;
        value = SYST_CVR;
    } while (wraps != tt_systick_wraps);
    return ((uint64_t)wraps * (SYST_RELOAD + 1u)) + (SYST_RELOAD - value);
}
