/* tt_flash.h — the flash behind the persistent training state (tt_persist.c): a NOR-flash region.
 *
 * NOR semantics, which every implementation keeps (the power-loss test relies on no more):
 *   erase(offset)             sets one whole sector (sector_bytes, offset a multiple of it) to 0xFF;
 *   program(offset, data, n)  may only clear bits (1 -> 0): the result is old & data; offset and n are
 *                             multiples of program_bytes;
 *   read(offset, data, n)     any offset and length.
 * Each returns 0, or -1 when the operation failed (or power was lost: a simulated cut, tt_flash_sim.c).
 * A power cut during an operation may leave it partly done: some bits of the range programmed or erased.
 * Implementations: tt_flash_sim.c (host tests), tt_flash_semihost.c (QEMU boards: a file on the host that
 * survives a reset), tt_flash_stm32f7.c and tt_flash_nrf52840.c (the real boards' flash controllers).
 */
#ifndef TT_FLASH_H
#define TT_FLASH_H

#include <stdint.h>

typedef struct tt_flash tt_flash;

struct tt_flash {
    uint32_t size;           /* bytes of the region (a multiple of sector_bytes) */
    uint32_t sector_bytes;   /* erase granularity */
    uint32_t program_bytes;  /* program alignment and granularity (a power of two, at most 32) */
    int (*erase)(const tt_flash *f, uint32_t offset);
    int (*program)(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n);
    int (*read)(const tt_flash *f, uint32_t offset, uint8_t *data, uint32_t n);
    void *context;           /* the implementation's */
};

#endif /* TT_FLASH_H */
