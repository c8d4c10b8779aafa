/* tt_uart_stm32.c — the USART driver of the serial harness on STM32 chips whose USART has the ISR / RDR / TDR
 * layout (STM32F7, STM32G0, STM32U5; register level, no vendor HAL). The chip's addresses come from tt_board.h (the
 * board's defines, tinytrain/firmware/boards.py):
 *   TT_STM32_GPIO_EN / _MASK    the RCC register and bits that clock the pins' GPIO ports
 *   TT_STM32_USART_EN / _BIT    the RCC register and bit that clock the USART
 *   TT_STM32_TX_GPIO, TT_STM32_TX, TT_STM32_RX_GPIO, TT_STM32_RX   the TX and RX pins and their ports
 *   TT_STM32_AF                 the pins' alternate function
 *   TT_STM32_USART              the USART's base address
 *   TT_STM32_CLOCK_HZ           its kernel clock after reset (the chip stays on its reset clock: no PLL, caches off)
 * Polling only; the harness is stop-and-wait, so the receiver is always being read when bytes arrive.
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define GPIO_MODER(port) TT_REG((port) + 0x00u)
#define GPIO_AFRL(port) TT_REG((port) + 0x20u)
#define GPIO_AFRH(port) TT_REG((port) + 0x24u)
#define USART_CR1 TT_REG(TT_STM32_USART + 0x00u)
#define USART_BRR TT_REG(TT_STM32_USART + 0x0Cu)
#define USART_ISR TT_REG(TT_STM32_USART + 0x1Cu)
#define USART_ICR TT_REG(TT_STM32_USART + 0x20u)
#define USART_RDR TT_REG(TT_STM32_USART + 0x24u)
#define USART_TDR TT_REG(TT_STM32_USART + 0x28u)
#define SCB_AIRCR TT_REG(0xE000ED0Cu)
#define ISR_ERRORS 0xFu  /* PE, FE, NF, ORE (cleared through ICR, same bit positions) */
#define ISR_RXNE (1u << 5)
#define ISR_TC (1u << 6)
#define ISR_TXE (1u << 7)

/* The alternate function TT_STM32_AF on pin n of a port. */
static void tt_pin_af(uint32_t port, unsigned n)
{
    GPIO_MODER(port) = (GPIO_MODER(port) & ~(3u << (2 * n))) | (2u << (2 * n));
    if (n < 8) {
        GPIO_AFRL(port) = (GPIO_AFRL(port) & ~(0xFu << (4 * n))) | ((uint32_t)TT_STM32_AF << (4 * n));
    } else {
        GPIO_AFRH(port) = (GPIO_AFRH(port) & ~(0xFu << (4 * (n - 8)))) | ((uint32_t)TT_STM32_AF << (4 * (n - 8)));
    }
}

void tt_serial_init(void)
{
    TT_REG(TT_STM32_GPIO_EN) |= TT_STM32_GPIO_EN_MASK;
    (void)TT_REG(TT_STM32_GPIO_EN);  /* read back: the clock is on before the first access */
    tt_pin_af(TT_STM32_TX_GPIO, TT_STM32_TX);
    tt_pin_af(TT_STM32_RX_GPIO, TT_STM32_RX);
    TT_REG(TT_STM32_USART_EN) |= 1u << TT_STM32_USART_EN_BIT;
    (void)TT_REG(TT_STM32_USART_EN);
    USART_CR1 = 0;
    USART_BRR = (TT_STM32_CLOCK_HZ + TT_BAUD / 2u) / TT_BAUD;  /* oversampling by 16 */
    USART_CR1 = (1u << 3) | (1u << 2) | 1u;                   /* TE | RE | UE */
}

uint8_t tt_serial_getc(void)
{
    for (;;) {
        const uint32_t isr = USART_ISR;
        if (isr & ISR_RXNE) {
            return (uint8_t)USART_RDR;
        }
        if (isr & ISR_ERRORS) {
            USART_ICR = isr & ISR_ERRORS;
        }
    }
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (!(USART_ISR & ISR_TXE)) {
        }
        USART_TDR = data[i];
    }
}

void tt_serial_flush(void)
{
    while (!(USART_ISR & ISR_TC)) {
    }
}

void _exit(int status) __attribute__((noreturn));
void _exit(int status)
{
    tt_serial_fault(status);
    tt_serial_flush();
    SCB_AIRCR = 0x05FA0004u;  /* SYSRESETREQ */
    for (;;) {
    }
}
