/* tt_flash_stm32f7.c — STM32F7 embedded flash (RM0385 / RM0410 §3): the persistent-state region is the board's last
 * two sectors (TT_FLASH_REGION_ORIGIN, first sector number TT_FLASH_FIRST_SECTOR, TT_FLASH_SECTOR_BYTES each, from
 * tt_board.h; the linker script keeps the program below them). Single-bank layout, 32-bit parallelism (PSIZE = x32:
 * 2.7-3.6 V), caches off (tt_startup.c leaves them off), so reads are plain loads. Written from the reference
 * manual, not run on hardware (firmware/README.md). */
#include <string.h>

#include "tt_board.h"
#include "tt_flash_port.h"

#define FLASH_KEYR (*(volatile uint32_t *)0x40023C04u)
#define FLASH_SR   (*(volatile uint32_t *)0x40023C0Cu)
#define FLASH_CR   (*(volatile uint32_t *)0x40023C10u)
#define CR_PG      (1u << 0)
#define CR_SER     (1u << 1)
#define CR_SNB(n)  ((uint32_t)(n) << 3)
#define CR_PSIZE32 (2u << 8)
#define CR_STRT    (1u << 16)
#define CR_LOCK    (1u << 31)
#define SR_BSY     (1u << 16)
#define SR_ERRORS  0xF2u  /* OPERR, WRPERR, PGAERR, PGPERR, ERSERR */

static int tt_stm32_wait(void)
{
    while (FLASH_SR & SR_BSY) {
    }
    const uint32_t errors = FLASH_SR & SR_ERRORS;
    FLASH_SR = errors | 1u;  /* clear errors and EOP (write 1 to clear) */
    return errors ? -1 : 0;
}

static void tt_stm32_unlock(void)
{
    if (FLASH_CR & CR_LOCK) {
        FLASH_KEYR = 0x45670123u;
        FLASH_KEYR = 0xCDEF89ABu;
    }
}

static int tt_stm32_erase(const tt_flash *f, uint32_t offset)
{
    if (offset % f->sector_bytes != 0 || offset >= f->size) {
        return -1;
    }
    tt_stm32_unlock();
    if (tt_stm32_wait() != 0) {
        return -1;
    }
    FLASH_CR = CR_SER | CR_SNB(TT_FLASH_FIRST_SECTOR + offset / f->sector_bytes) | CR_PSIZE32;
    FLASH_CR |= CR_STRT;
    __asm volatile("dsb" ::: "memory");
    const int r = tt_stm32_wait();
    FLASH_CR = CR_LOCK;
    return r;
}

static int tt_stm32_program(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n)
{
    if (offset % 4u != 0 || n % 4u != 0 || offset > f->size || n > f->size - offset) {
        return -1;
    }
    tt_stm32_unlock();
    if (tt_stm32_wait() != 0) {
        return -1;
    }
    FLASH_CR = CR_PG | CR_PSIZE32;
    int r = 0;
    for (uint32_t i = 0; i < n && r == 0; i += 4) {
        uint32_t word;
        memcpy(&word, data + i, 4);
        *(volatile uint32_t *)(TT_FLASH_REGION_ORIGIN + offset + i) = word;
        __asm volatile("dsb" ::: "memory");
        r = tt_stm32_wait();
    }
    FLASH_CR = CR_LOCK;
    return r;
}

int tt_flash_open(tt_flash *f, uint32_t size)
{
    return tt_flash_mapped_open(f, size, tt_stm32_erase, tt_stm32_program);
}
