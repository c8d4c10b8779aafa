/* tt_flash_nrf52840.c — nRF52840 NVMC (product specification v1.7 §4.3): the persistent-state region is the last
 * TT_FLASH_REGION_BYTES of flash (TT_FLASH_REGION_ORIGIN, from tt_board.h; the linker script keeps the program below
 * it), 4 KB pages, 32-bit word writes (a bit can only go 1 -> 0). Written from the specification, not run on
 * hardware (firmware/README.md). */
#include <string.h>

#include "tt_board.h"
#include "tt_flash_port.h"

#define NVMC_READY     (*(volatile uint32_t *)0x4001E400u)
#define NVMC_CONFIG    (*(volatile uint32_t *)0x4001E504u)
#define NVMC_ERASEPAGE (*(volatile uint32_t *)0x4001E508u)
#define CONFIG_REN 0u
#define CONFIG_WEN 1u
#define CONFIG_EEN 2u

static void tt_nvmc_wait(void)
{
    while ((NVMC_READY & 1u) == 0) {
    }
}

static int tt_nrf_erase(const tt_flash *f, uint32_t offset)
{
    if (offset % f->sector_bytes != 0 || offset >= f->size) {
        return -1;
    }
    tt_nvmc_wait();
    NVMC_CONFIG = CONFIG_EEN;
    NVMC_ERASEPAGE = TT_FLASH_REGION_ORIGIN + offset;
    tt_nvmc_wait();
    NVMC_CONFIG = CONFIG_REN;
    return 0;
}

static int tt_nrf_program(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n)
{
    if (offset % 4u != 0 || n % 4u != 0 || offset > f->size || n > f->size - offset) {
        return -1;
    }
    tt_nvmc_wait();
    NVMC_CONFIG = CONFIG_WEN;
    for (uint32_t i = 0; i < n; i += 4) {
        uint32_t word;
        memcpy(&word, data + i, 4);
        *(volatile uint32_t *)(TT_FLASH_REGION_ORIGIN + offset + i) = word;
        tt_nvmc_wait();
    }
    NVMC_CONFIG = CONFIG_REN;
    return 0;
}

int tt_flash_open(tt_flash *f, uint32_t size)
{
    return tt_flash_mapped_open(f, size, tt_nrf_erase, tt_nrf_program);
}
