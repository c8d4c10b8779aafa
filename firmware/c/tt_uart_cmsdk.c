/* tt_uart_cmsdk.c — the Arm CMSDK APB UART driver of the serial harness (the MPS2 FPGA images' UARTs: AN385 UART0
 * at 0x40004000, which QEMU's mps2-an385 connects to its first -serial). Register level; the base address and the
 * peripheral clock come from tt_board.h (TT_CMSDK_UART, TT_CMSDK_CLOCK_HZ). Polling only.
 * Registers: DATA 0x00, STATE 0x04 (bit 0 TX full, bit 1 RX full, bits 2-3 overruns: write 1 to clear),
 * CTRL 0x08 (bit 0 TX enable, bit 1 RX enable), BAUDDIV 0x10 (at least 16).
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define UART_DATA TT_REG(TT_CMSDK_UART + 0x00u)
#define UART_STATE TT_REG(TT_CMSDK_UART + 0x04u)
#define UART_CTRL TT_REG(TT_CMSDK_UART + 0x08u)
#define UART_BAUDDIV TT_REG(TT_CMSDK_UART + 0x10u)
#define SCB_AIRCR TT_REG(0xE000ED0Cu)
#define STATE_TX_FULL (1u << 0)
#define STATE_RX_FULL (1u << 1)
#define STATE_OVERRUNS (3u << 2)

void tt_serial_init(void)
{
    UART_CTRL = 0;
    UART_BAUDDIV = (TT_CMSDK_CLOCK_HZ + TT_BAUD / 2u) / TT_BAUD;
    UART_STATE = STATE_OVERRUNS;
    UART_CTRL = 3u;  /* TX and RX enabled */
}

uint8_t tt_serial_getc(void)
{
    for (;;) {
        const uint32_t state = UART_STATE;
        if (state & STATE_RX_FULL) {
            return (uint8_t)UART_DATA;
        }
        if (state & STATE_OVERRUNS) {
            UART_STATE = state & STATE_OVERRUNS;
        }
    }
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        while (UART_STATE & STATE_TX_FULL) {
        }
        UART_DATA = data[i];
    }
}

void tt_serial_flush(void)
{
    while (UART_STATE & STATE_TX_FULL) {  /* the last byte has left the buffer (no shift-register flag) */
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
