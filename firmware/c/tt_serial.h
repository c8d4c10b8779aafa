/* tt_serial.h — what the serial harness needs from a board's UART driver (tt_uart_*.c). */
#ifndef TT_SERIAL_H
#define TT_SERIAL_H

#include <stddef.h>
#include <stdint.h>

/* Clocks, pins and the UART at TT_BAUD (tt_board.h), 8N1, no flow control. */
void tt_serial_init(void);
/* The next received byte (blocks; receive errors are cleared and the byte stream goes on). */
uint8_t tt_serial_getc(void);
void tt_serial_write(const uint8_t *data, size_t n);
/* Wait until the last byte has left the UART. */
void tt_serial_flush(void);

/* Implemented by the harness: report a fault or exit status to the host (one E frame). The drivers'
 * _exit() calls it, flushes, and resets the board. */
void tt_serial_fault(int status);

#endif /* TT_SERIAL_H */
