/* tt_flash_port.h — the board's flash region for the persistent state (one implementation per board:
 * tt_flash_semihost.c, tt_flash_stm32f7.c, tt_flash_nrf52840.c). */
#ifndef TT_FLASH_PORT_H
#define TT_FLASH_PORT_H

#include <stdint.h>

#include "tt_flash.h"

/* Set up f for the board's region of size bytes (tt_persist_region_bytes): 0, or -1 when it is unavailable. */
int tt_flash_open(tt_flash *f, uint32_t size);

#if defined(TT_FLASH_REGION_ORIGIN) && defined(TT_FLASH_REGION_BYTES)
#include <string.h>

/* The boards whose flash region is memory-mapped at TT_FLASH_REGION_ORIGIN (tt_board.h; the STM32F7 and nRF52840
 * drivers): reads are plain loads. */
static inline int tt_flash_mapped_read(const tt_flash *f, uint32_t offset, uint8_t *data, uint32_t n)
{
    if (offset > f->size || n > f->size - offset) {
        return -1;
    }
    memcpy(data, (const void *)(TT_FLASH_REGION_ORIGIN + offset), n);
    return 0;
}

/* tt_flash_open of such a board: its geometry from tt_board.h, its controller's erase and program. */
static inline int tt_flash_mapped_open(tt_flash *f, uint32_t size,
                                       int (*erase)(const tt_flash *, uint32_t),
                                       int (*program)(const tt_flash *, uint32_t, const uint8_t *, uint32_t))
{
    f->size = size;
    f->sector_bytes = TT_FLASH_SECTOR_BYTES;
    f->program_bytes = TT_FLASH_PROGRAM_BYTES;
    f->erase = erase;
    f->program = program;
    f->read = tt_flash_mapped_read;
    f->context = NULL;
    return size <= TT_FLASH_REGION_BYTES ? 0 : -1;
}
#endif

#endif /* TT_FLASH_PORT_H */
