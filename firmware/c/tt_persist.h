/* tt_persist.h — the training state in two flash slots, A and B, safe against power loss at any moment.
 *
 * The flash region is cut in two halves (whole sectors each): slot A at 0, slot B at size / 2. A slot holds
 *   offset 0   "TTP1"               4 bytes
 *          4   uint32 sequence number (the newer of two valid slots has the larger one, modulo 2^32)
 *          8   uint32 payload bytes (tt_state_size())
 *         12   uint32 position      (what the caller counts: samples consumed when the state was saved)
 *         16   uint32 CRC-32 of the payload
 *         20   uint32 CRC-32 of bytes 0..19
 *         32   the payload: tt_state_save() bytes (the model's own magic, version and layout fingerprint)
 * all little-endian. A save goes to the slot that does not hold the newest valid state: erase its sectors,
 * program the payload (streamed from the model's arrays chunk by chunk, its CRC computed on the way), then the
 * header (one program operation, last), then read the whole slot back and check both CRCs and every byte.
 * Until the header is complete and correct the slot is invalid, so a power cut at any point leaves the newest
 * valid state either the previous one (the other slot, untouched) or the new one. Boot loads the newest valid slot
 * whose payload tt_state_load_from accepts, or keeps tt_init's weights when there is none.
 * Neither direction holds the state in RAM: it streams between the model's arrays and flash in chunks of
 * TT_STATE_CHUNK_BYTES (tinytrain_model.h) on the stack.
 */
#ifndef TT_PERSIST_H
#define TT_PERSIST_H

#include <stdint.h>

#include "tt_flash.h"

#define TT_PERSIST_HEADER_BYTES 32u

/* Bytes of flash two slots of an n-byte state need with sectors of sector_bytes. */
uint32_t tt_persist_region_bytes(uint32_t state_bytes, uint32_t sector_bytes);

/* Boot: load the newest valid state into the model, streamed from flash (tt_state_load_from, chunks of
 * TT_STATE_CHUNK_BYTES: no copy of the state in RAM). Returns 1 and sets *position (and *sequence, both may be NULL)
 * when a state was loaded, 0 when no slot is valid (the model keeps its state; it is tt_init's after a slot changed
 * while it was being loaded), -1 when the region is too small for the state. */
int tt_persist_load(const tt_flash *f, uint32_t *position, uint32_t *sequence);

/* Save the model's state with the caller's position, streamed to flash (tt_state_save_to: each chunk programmed as it
 * comes, the CRC computed on the way, then compared chunk by chunk with a second stream). Returns 0 once the new slot
 * is written and checked, -1 when a flash operation failed or the read-back differs (the previous state stays
 * newest). */
int tt_persist_save(const tt_flash *f, uint32_t position);

/* CRC-32/IEEE (zlib.crc32) of n bytes, continuing from crc (0 to start). */
uint32_t tt_persist_crc32(uint32_t crc, const uint8_t *data, uint32_t n);

#endif /* TT_PERSIST_H */
