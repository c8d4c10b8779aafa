/* tt_uart_posix.c — the serial harness on the host, for tests: the "UART" is file descriptor TT_SERIAL_FD
 * (environment; e.g. a pty master), ticks are nanoseconds of CLOCK_MONOTONIC. Not part of any firmware.
 * Build: cc -std=c99 -D_POSIX_C_SOURCE=200809L -I. tt_harness_serial.c tt_frame.c tt_uart_posix.c tinytrain_model.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tt_serial.h"
#include "tt_ticks.h"

static int tt_fd = -1;

void tt_serial_init(void)
{
    const char *fd = getenv("TT_SERIAL_FD");
    tt_fd = fd ? atoi(fd) : -1;
    if (tt_fd < 0) {
        _exit(2);
    }
}

uint8_t tt_serial_getc(void)
{
    uint8_t b;
    if (read(tt_fd, &b, 1) != 1) {
        _exit(0);  /* the host closed the line: done */
    }
    return b;
}

void tt_serial_write(const uint8_t *data, size_t n)
{
    while (n > 0) {
        const ssize_t k = write(tt_fd, data, n);
        if (k <= 0) {
            _exit(3);
        }
        data += k;
        n -= (size_t)k;
    }
}

void tt_serial_flush(void)
{
}

void tt_ticks_start(void)
{
}

uint64_t tt_ticks(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
