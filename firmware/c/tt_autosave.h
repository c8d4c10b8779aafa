/* tt_autosave.h — what a harness calls to keep the training state in flash (tt_persist.h) on its board's flash
 * (tt_flash_port.h): load it at boot, save it every TT_PERSIST_SAVE_EVERY samples (tt_board.h). The state copy
 * goes through the arena (free between training steps) when it fits, else the heap. */
#ifndef TT_AUTOSAVE_H
#define TT_AUTOSAVE_H

#include <stdint.h>

/* Boot: open the flash region and load the newest valid state. Returns 1 (loaded: *position = the samples consumed
 * when it was saved, *sequence its sequence number), 0 (none: tt_init's weights), -1 (no flash or no memory). */
int tt_autosave_boot(uint32_t *position, uint32_t *sequence);

/* After a sample: position = samples consumed so far. Saves when position is a multiple of TT_PERSIST_SAVE_EVERY
 * (or always with force). Returns 1 saved, 0 not due, -1 the save failed (the previous state stays newest). */
int tt_autosave_step(uint32_t position, int force);

/* The state copy both use (tt_state_size() bytes: the arena, or one heap block), for the harness's own copies too;
 * NULL when the heap has no room. */
uint8_t *tt_autosave_buffer(void);

#endif /* TT_AUTOSAVE_H */
