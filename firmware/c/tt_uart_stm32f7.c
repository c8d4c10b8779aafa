/* tt_uart_stm32f7.c — STM32F7 USART driver of the serial harness (register level, no vendor HAL).
 *
 * The chip runs on its reset clock, HSI 16 MHz (no PLL, caches off): simple and certain, at the cost of
 * speed; the cycle counts reported are cycles at that clock with 0 flash wait states.
 *   TT_STM32_USART 1: DISCO-F746NG, USART1, TX PA9 / RX PB7 (AF7) — the ST-LINK virtual COM port
 *   TT_STM32_USART 3: NUCLEO-F767ZI, USART3, TX PD8 / RX PD9 (AF7) — the ST-LINK virtual COM port
 * Polling only; the harness is stop-and-wait, so the receiver is always being read when bytes arrive.
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define RCC_AHB1ENR TT_REG(0x40023830u)
#define RCC_APB1ENR TT_REG(0x40023840u)
#define RCC_APB2ENR TT_REG(0x40023844u)
#define GPIO_MODER(port) TT_REG((port) + 0x00u)
#define GPIO_AFRL(port) TT_REG((port) + 0x20u)
#define GPIO_AFRH(port) TT_REG((port) + 0x24u)
#define USART_CR1 TT_REG(TT_USART + 0x00u)
#define USART_BRR TT_REG(TT_USART + 0x0Cu)
#define USART_ISR TT_REG(TT_USART + 0x1Cu)
#define USART_ICR TT_REG(TT_USART + 0x20u)
#define USART_RDR TT_REG(TT_USART + 0x24u)
#define USART_TDR TT_REG(TT_USART + 0x28u)
#define SCB_AIRCR TT_REG(0xE000ED0Cu)
#define TT_HSI_HZ 16000000u
#define GPIOA 0x40020000u
#define GPIOB 0x40020400u
#define GPIOD 0x40020C00u
#define ISR_ERRORS 0xFu  /* PE, FE, NF, ORE (cleared through ICR, same bit positions) */
#define ISR_RXNE (1u << 5)
#define ISR_TC (1u << 6)
#define ISR_TXE (1u << 7)

/* Alternate function af on pin n of a port. */
static void tt_pin_af(uint32_t port, unsigned n, uint32_t af)
{
    GPIO_MODER(port) = (GPIO_MODER(port) & ~(3u << (2 * n))) | (2u << (2 * n));
    if (n < 8) {
        GPIO_AFRL(port) = (GPIO_AFRL(port) & ~(0xFu << (4 * n))) | (af << (4 * n));
    } else {
        GPIO_AFRH(port) = (GPIO_AFRH(port) & ~(0xFu << (4 * (n - 8)))) | (af << (4 * (n - 8)));
    }
}

#if TT_STM32_USART == 1
#define TT_USART 0x40011000u
static void tt_uart_pins(void)
{
    RCC_AHB1ENR |= (1u << 0) | (1u << 1);  /* GPIOA, GPIOB */
    (void)RCC_AHB1ENR;                     /* read back: the clock is on before the first access */
    tt_pin_af(GPIOA, 9, 7);
    tt_pin_af(GPIOB, 7, 7);
    RCC_APB2ENR |= 1u << 4;                /* USART1 (APB2, 16 MHz after reset) */
    (void)RCC_APB2ENR;
}
#elif TT_STM32_USART == 3
#define TT_USART 0x40004800u
static void tt_uart_pins(void)
{
    RCC_AHB1ENR |= 1u << 3;                /* GPIOD */
    (void)RCC_AHB1ENR;
    tt_pin_af(GPIOD, 8, 7);
    tt_pin_af(GPIOD, 9, 7);
    RCC_APB1ENR |= 1u << 18;               /* USART3 (APB1, 16 MHz after reset) */
    (void)RCC_APB1ENR;
}
#else
#error "TT_STM32_USART must be 1 (DISCO-F746NG) or 3 (NUCLEO-F767ZI)"
#endif

void tt_serial_init(void)
{
    tt_uart_pins();
    USART_CR1 = 0;
    USART_BRR = (TT_HSI_HZ + TT_BAUD / 2u) / TT_BAUD;  /* oversampling by 16 */
    USART_CR1 = (1u << 3) | (1u << 2) | 1u;           /* TE | RE | UE */
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
