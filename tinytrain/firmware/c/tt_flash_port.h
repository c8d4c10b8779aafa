/* tt_flash_port.h — the board's flash region for the persistent state (one implementation per board:
 * tt_flash_semihost.c, tt_flash_stm32f7.c, tt_flash_nrf52840.c). */
#ifndef TT_FLASH_PORT_H
#define TT_FLASH_PORT_H

#include <stdint.h>

#include "tt_flash.h"

/* Set up f for the board's region of size bytes (tt_persist_region_bytes): 0, or -1 when it is unavailable. */
int tt_flash_open(tt_flash *f, uint32_t size);

#endif /* TT_FLASH_PORT_H */
