/* tt_uart_gd32vf103.c — the USART0 driver of the serial harness on the GD32VF103 (RISC-V Bumblebee core: Sipeed
 * Longan Nano), register level: TX PA9 (alternate push-pull), RX PA10 (floating input), on the chip's reset clock
 * (IRC8M, 8 MHz; no PLL). Its USART is the STM32F1 kind (STAT / DATA / BAUD / CTL0). Polling only.
 * A fault is reported, then the firmware starts again from _start (the core has no system reset register the
 * way Cortex-M has AIRCR; peripherals keep their state, which tt_serial_init sets again).
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define RCU_APB2EN TT_REG(0x40021018u)
#define GPIOA_CTL1 TT_REG(0x40010804u)  /* pins 8..15: 4 bits each, MD[1:0] then CTL[1:0] */
#define USART0_STAT TT_REG(0x40013800u)
#define USART0_DATA TT_REG(0x40013804u)
#define USART0_BAUD TT_REG(0x40013808u)
#define USART0_CTL0 TT_REG(0x4001380Cu)
#define TT_IRC8M_HZ 8000000u
#define STAT_ERRORS 0xFu  /* PERR, FERR, NERR, ORERR: cleared by reading STAT then DATA */
#define STAT_RBNE (1u << 5)
#define STAT_TC (1u << 6)
#define STAT_TBE (1u << 7)

void tt_serial_init(void)
{
    RCU_APB2EN |= (1u << 2) | (1u << 14);  /* PAEN, USART0EN */
    (void)RCU_APB2EN;
    GPIOA_CTL1 = (GPIOA_CTL1 & ~0xFF0u) | (0xBu << 4) | (0x4u << 8);  /* PA9: AF push-pull 50 MHz; PA10: input */
    USART0_CTL0 = 0;
    USART0_BAUD = (TT_IRC8M_HZ + TT_BAUD / 2u) / TT_BAUD;
    USART0_CTL0 = (1u << 13) | (1u << 3) | (1u << 2);  /* UEN | TEN | REN */
}

uint8_t tt_serial_getc(void)
{
    for (;;) {
        const uint32_t stat = USART0_STAT;
        if (stat & STAT_RBNE) {
            return (uint8_t)USART0_DATA;
        }
        if (stat & STAT_ERRORS) {
            (void)USART0_DATA;
        }
    }
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (!(USART0_STAT & STAT_TBE)) {
        }
        USART0_DATA = data[i];
    }
}

void tt_serial_flush(void)
{
    while (!(USART0_STAT & STAT_TC)) {
    }
}

void _exit(int status) __attribute__((noreturn));
void _exit(int status)
{
    tt_serial_fault(status);
    tt_serial_flush();
    __asm volatile("j _start");
    for (;;) {
    }
}
