/* tt_uart_nrf52840.c — nRF52840 UART0 driver of the serial harness (Arduino Nano 33 BLE; register level).
 *
 * The legacy (non-DMA) UART on D1 = P1.03 (TX) and D0 = P1.10 (RX): connect a 3.3 V USB-serial adapter
 * there. The board's own USB port is the nRF52840's USB device, which would need a USB stack; this bare-metal
 * firmware has none. The crystal oscillator (HFXO) is started first so that the baud rate is accurate.
 */
#include <stdint.h>

#include "tt_board.h"
#include "tt_serial.h"

#define TT_REG(address) (*(volatile uint32_t *)(address))
#define CLOCK_TASKS_HFCLKSTART TT_REG(0x40000000u)
#define CLOCK_EVENTS_HFCLKSTARTED TT_REG(0x40000100u)
#define UART0 0x40002000u
#define UART_TASKS_STARTRX TT_REG(UART0 + 0x000u)
#define UART_TASKS_STARTTX TT_REG(UART0 + 0x008u)
#define UART_EVENTS_RXDRDY TT_REG(UART0 + 0x108u)
#define UART_EVENTS_TXDRDY TT_REG(UART0 + 0x11Cu)
#define UART_EVENTS_ERROR TT_REG(UART0 + 0x124u)
#define UART_ERRORSRC TT_REG(UART0 + 0x480u)
#define UART_ENABLE TT_REG(UART0 + 0x500u)
#define UART_PSEL_RTS TT_REG(UART0 + 0x508u)
#define UART_PSEL_TXD TT_REG(UART0 + 0x50Cu)
#define UART_PSEL_CTS TT_REG(UART0 + 0x510u)
#define UART_PSEL_RXD TT_REG(UART0 + 0x514u)
#define UART_RXD TT_REG(UART0 + 0x518u)
#define UART_TXD TT_REG(UART0 + 0x51Cu)
#define UART_BAUDRATE TT_REG(UART0 + 0x524u)
#define UART_CONFIG TT_REG(UART0 + 0x56Cu)
#define P1 0x50000300u
#define GPIO_OUTSET(port) TT_REG((port) + 0x508u)
#define GPIO_DIRSET(port) TT_REG((port) + 0x518u)
#define GPIO_PIN_CNF(port, n) TT_REG((port) + 0x700u + 4u * (n))
#define SCB_AIRCR TT_REG(0xE000ED0Cu)
#define TT_TX_PIN 3u   /* P1.03 */
#define TT_RX_PIN 10u  /* P1.10 */
#define TT_PSEL(port, pin) (((port) << 5) | (pin))

#if TT_BAUD == 115200
#define TT_BAUDRATE 0x01D7E000u
#elif TT_BAUD == 230400
#define TT_BAUDRATE 0x03AFB000u
#elif TT_BAUD == 460800
#define TT_BAUDRATE 0x075F7000u
#elif TT_BAUD == 921600
#define TT_BAUDRATE 0x0EBED000u
#elif TT_BAUD == 1000000
#define TT_BAUDRATE 0x10000000u
#else
#error "nano33ble: TT_BAUD must be 115200, 230400, 460800, 921600 or 1000000"
#endif

void tt_serial_init(void)
{
    CLOCK_EVENTS_HFCLKSTARTED = 0;
    CLOCK_TASKS_HFCLKSTART = 1;
    while (CLOCK_EVENTS_HFCLKSTARTED == 0) {
    }
    GPIO_OUTSET(P1) = 1u << TT_TX_PIN;       /* TX idles high */
    GPIO_DIRSET(P1) = 1u << TT_TX_PIN;
    GPIO_PIN_CNF(P1, TT_RX_PIN) = 0;          /* input, buffer connected, no pull */
    UART_PSEL_TXD = TT_PSEL(1u, TT_TX_PIN);
    UART_PSEL_RXD = TT_PSEL(1u, TT_RX_PIN);
    UART_PSEL_RTS = 0xFFFFFFFFu;              /* disconnected */
    UART_PSEL_CTS = 0xFFFFFFFFu;
    UART_BAUDRATE = TT_BAUDRATE;
    UART_CONFIG = 0;                          /* no parity, no flow control */
    UART_ENABLE = 4;                          /* UART (not UARTE) */
    UART_EVENTS_RXDRDY = 0;
    UART_EVENTS_TXDRDY = 0;
    UART_TASKS_STARTRX = 1;
    UART_TASKS_STARTTX = 1;
}

uint8_t tt_serial_getc(void)
{
    while (UART_EVENTS_RXDRDY == 0) {
        if (UART_EVENTS_ERROR) {
            UART_EVENTS_ERROR = 0;
            UART_ERRORSRC = UART_ERRORSRC;    /* write 1 to clear */
        }
    }
    UART_EVENTS_RXDRDY = 0;                   /* clear before reading RXD (the FIFO moves on) */
    return (uint8_t)UART_RXD;
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        UART_TXD = data[i];
        while (UART_EVENTS_TXDRDY == 0) {
        }
        UART_EVENTS_TXDRDY = 0;
    }
}

void tt_serial_flush(void)
{
}

void _exit(int status) __attribute__((noreturn));
void _exit(int status)
{
    tt_serial_fault(status);
    SCB_AIRCR = 0x05FA0004u;  /* SYSRESETREQ */
    for (;;) {
    }
}
