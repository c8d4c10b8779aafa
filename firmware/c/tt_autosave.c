/* tt_autosave.c — load at boot, save every TT_PERSIST_SAVE_EVERY samples (tt_autosave.h). */
#include <stdlib.h>

#include "tinytrain_model.h"
#include "tt_autosave.h"
#include "tt_board.h"
#include "tt_flash_port.h"
#include "tt_persist.h"

static tt_flash tt_autosave_flash;
static int tt_autosave_ready;

uint8_t *tt_autosave_buffer(void)
{
    static uint8_t *heap;
    if (tt_state_size() <= TT_ARENA_BYTES) {
        return (uint8_t *)(uintptr_t)tt_arena_base();
    }
    if (heap == NULL) {
        heap = malloc(tt_state_size());
    }
    return heap;
}

int tt_autosave_boot(uint32_t *position, uint32_t *sequence)
{
    uint8_t *buf = tt_autosave_buffer();
    if (buf == NULL || tt_flash_open(&tt_autosave_flash, tt_persist_region_bytes(tt_state_size(), TT_FLASH_SECTOR_BYTES)) != 0) {
        return -1;
    }
    tt_autosave_ready = 1;
    return tt_persist_load(&tt_autosave_flash, buf, position, sequence);
}

int tt_autosave_step(uint32_t position, int force)
{
    if (!force && position % TT_PERSIST_SAVE_EVERY != 0) {
        return 0;
    }
    uint8_t *buf = tt_autosave_buffer();
    if (!tt_autosave_ready || buf == NULL) {
        return -1;
    }
    return tt_persist_save(&tt_autosave_flash, buf, position) == 0 ? 1 : -1;
}
