/* tt_flash_semihost.c — the QEMU boards' flash: a file on the host (tt_flash.bin in QEMU's working folder), read
 * and written through semihosting, so it survives a reset and a killed QEMU. NOR semantics are kept by the code
 * (erase writes 0xFF, program ANDs), as on a real part; sectors of TT_FLASH_SECTOR_BYTES (tt_board.h). */
#include <stdio.h>
#include <string.h>

#include "tt_board.h"
#include "tt_flash_port.h"

static FILE *tt_flash_file;

static int tt_file_read(const tt_flash *f, uint32_t offset, uint8_t *data, uint32_t n)
{
    (void)f;
    return fseek(tt_flash_file, (long)offset, SEEK_SET) == 0 && fread(data, 1, n, tt_flash_file) == n ? 0 : -1;
}

static int tt_file_write(uint32_t offset, const uint8_t *data, uint32_t n)
{
    return fseek(tt_flash_file, (long)offset, SEEK_SET) == 0 && fwrite(data, 1, n, tt_flash_file) == n &&
           fflush(tt_flash_file) == 0 ? 0 : -1;
}

static int tt_file_erase(const tt_flash *f, uint32_t offset)
{
    uint8_t ones[64];
    memset(ones, 0xFF, sizeof ones);
    if (offset % f->sector_bytes != 0 || offset >= f->size) {
        return -1;
    }
    for (uint32_t at = 0; at < f->sector_bytes; at += sizeof ones) {
        if (tt_file_write(offset + at, ones, sizeof ones) != 0) {
            return -1;
        }
    }
    return 0;
}

static int tt_file_program(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n)
{
    uint8_t old[64];
    if (offset % f->program_bytes != 0 || n % f->program_bytes != 0 || offset > f->size || n > f->size - offset) {
        return -1;
    }
    for (uint32_t at = 0; at < n; at += sizeof old) {
        const uint32_t k = n - at < sizeof old ? n - at : (uint32_t)sizeof old;
        if (tt_file_read(f, offset + at, old, k) != 0) {
            return -1;
        }
        for (uint32_t i = 0; i < k; i++) {
            old[i] &= data[at + i];
        }
        if (tt_file_write(offset + at, old, k) != 0) {
            return -1;
        }
    }
    return 0;
}

int tt_flash_open(tt_flash *f, uint32_t size)
{
    f->size = size;
    f->sector_bytes = TT_FLASH_SECTOR_BYTES;
    f->program_bytes = TT_FLASH_PROGRAM_BYTES;
    f->erase = tt_file_erase;
    f->program = tt_file_program;
    f->read = tt_file_read;
    f->context = NULL;
    tt_flash_file = fopen("tt_flash.bin", "r+b");
    if (tt_flash_file == NULL) {  /* a new device: all sectors erased */
        tt_flash_file = fopen("tt_flash.bin", "w+b");
        if (tt_flash_file == NULL) {
            return -1;
        }
        setvbuf(tt_flash_file, NULL, _IONBF, 0);
        for (uint32_t at = 0; at < size; at += f->sector_bytes) {
            if (tt_file_erase(f, at) != 0) {
                return -1;
            }
        }
        return 0;
    }
    setvbuf(tt_flash_file, NULL, _IONBF, 0);
    return 0;
}
