/* tt_autosave.c — load at boot, save every TT_PERSIST_SAVE_EVERY samples (tt_autosave.h). */
#include "tinytrain_model.h"
#include "tt_autosave.h"
#include "tt_board.h"
#include "tt_flash_port.h"
#include "tt_persist.h"

static tt_flash tt_autosave_flash;
static int tt_autosave_ready;

int tt_autosave_boot(uint32_t *position, uint32_t *sequence)
{
    if (tt_flash_open(&tt_autosave_flash, tt_persist_region_bytes(tt_state_size(), TT_FLASH_SECTOR_BYTES)) != 0) {
        return -1;
    }
    tt_autosave_ready = 1;
    return tt_persist_load(&tt_autosave_flash, position, sequence);
}

int tt_autosave_step(uint32_t position, int force)
{
    if (!force && position % TT_PERSIST_SAVE_EVERY != 0) {
        return 0;
    }
    if (!tt_autosave_ready) {
        return -1;
    }
    return tt_persist_save(&tt_autosave_flash, position) == 0 ? 1 : -1;
}
