/* tt_autosave.h — what a harness calls to keep the training state in flash (tt_persist.h) on its board's flash
 * (tt_flash_port.h): load it at boot, save it every TT_PERSIST_SAVE_EVERY samples (tt_board.h). The state streams
 * between the model's arrays and flash in chunks (tt_persist.h): no copy of it in RAM, neither arena nor heap. */
#ifndef TT_AUTOSAVE_H
#define TT_AUTOSAVE_H

#include <stdint.h>

/* Boot: open the flash region and load the newest valid state. Returns 1 (loaded: *position = the samples consumed
 * when it was saved, *sequence its sequence number), 0 (none: tt_init's weights), -1 (no flash). */
int tt_autosave_boot(uint32_t *position, uint32_t *sequence);

/* After a sample: position = samples consumed so far. Saves when position is a multiple of TT_PERSIST_SAVE_EVERY
 * (or always with force). Returns 1 saved, 0 not due, -1 the save failed (the previous state stays newest). */
int tt_autosave_step(uint32_t position, int force);

#endif /* TT_AUTOSAVE_H */
