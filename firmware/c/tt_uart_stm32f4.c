/* tt_uart_stm32f4.c — STM32F2/F4 USART driver of the serial harness (register level, no vendor HAL).
 *
 * The F2/F4 USART has one status register (SR) and one data register (DR), unlike the F7's ISR / RDR / TDR
 * (tt_uart_stm32.c); RCC and GPIO are at the same addresses (RM0090 2.3, 6.3, 8.4, 30.6).
 * The chip runs on its reset clock, HSI 16 MHz (no PLL): simple and certain, at the cost of speed.
 *   TT_STM32_USART 1: USART1, TX PA9 / RX PA10 (AF7) — the USART QEMU's netduinoplus2 connects to its first
 *   -serial (hw/arm/stm32f405_soc.c).
 * Polling only; the harness is stop-and-wait, so the receiver is always being read when bytes arrive.
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define RCC_AHB1ENR TT_REG(0x40023830u)
#define RCC_APB2ENR TT_REG(0x40023844u)
#define GPIO_MODER(port) TT_REG((port) + 0x00u)
#define GPIO_AFRH(port) TT_REG((port) + 0x24u)
#define USART_SR TT_REG(TT_USART + 0x00u)
#define USART_DR TT_REG(TT_USART + 0x04u)
#define USART_BRR TT_REG(TT_USART + 0x08u)
#define USART_CR1 TT_REG(TT_USART + 0x0Cu)
#define SCB_AIRCR TT_REG(0xE000ED0Cu)
#define TT_HSI_HZ 16000000u
#define GPIOA 0x40020000u
#define SR_ERRORS 0xFu  /* PE, FE, NE, ORE: cleared by reading SR, then DR */
#define SR_RXNE (1u << 5)
#define SR_TC (1u << 6)
#define SR_TXE (1u << 7)
#define CR1_UE (1u << 13)  /* F2/F4: UE is bit 13 (the F7's bit 0) */
#define CR1_TE (1u << 3)
#define CR1_RE (1u << 2)

#if TT_STM32_USART == 1
#define TT_USART 0x40011000u
/* Alternate function 7 on pin n (8..15) of GPIOA. */
static void tt_pin_af7(unsigned n)
{
    GPIO_MODER(GPIOA) = (GPIO_MODER(GPIOA) & ~(3u << (2 * n))) | (2u << (2 * n));
    GPIO_AFRH(GPIOA) = (GPIO_AFRH(GPIOA) & ~(0xFu << (4 * (n - 8)))) | (7u << (4 * (n - 8)));
}

static void tt_uart_pins(void)
{
    RCC_AHB1ENR |= 1u << 0;   /* GPIOA */
    (void)RCC_AHB1ENR;        /* read back: the clock is on before the first access */
    tt_pin_af7(9);
    tt_pin_af7(10);
    RCC_APB2ENR |= 1u << 4;   /* USART1 (APB2, 16 MHz after reset) */
    (void)RCC_APB2ENR;
}
#else
#error "TT_STM32_USART must be 1 (netduinoplus2: USART1)"
#endif

void tt_serial_init(void)
{
    tt_uart_pins();
    USART_CR1 = 0;
    USART_BRR = (TT_HSI_HZ + TT_BAUD / 2u) / TT_BAUD;  /* oversampling by 16: mantissa.fraction in 1/16 */
    USART_CR1 = CR1_UE | CR1_TE | CR1_RE;
}

uint8_t tt_serial_getc(void)
{
    for (;;) {
        const uint32_t sr = USART_SR;
        if (sr & SR_RXNE) {
            return (uint8_t)USART_DR;
        }
        if (sr & SR_ERRORS) {
            (void)USART_DR;  /* the SR read above and this DR read clear the error */
        }
    }
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (!(USART_SR & SR_TXE)) {
        }
        USART_DR = data[i];
    }
}

void tt_serial_flush(void)
{
    while (!(USART_SR & SR_TC)) {
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
