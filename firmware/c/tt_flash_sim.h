/* tt_flash_sim.h — a NOR flash in host memory for tests, with power-cut injection.
 *
 * Operations (erase and program) are numbered from 0 since tt_flash_sim_init or tt_flash_sim_arm. When the
 * armed operation comes, power is cut: with torn = 0 it does not happen at all; with torn = 1 it is left partly
 * done (a program clears only a random part of the bits it should, an erase sets only a random part of its bits
 * to 1). Every later operation fails (-1) until the next arm or reboot. Misuse a driver would get wrong on a
 * real part — a misaligned offset or length, a program that would need a 0 -> 1 change — is counted in
 * violations (and the operation fails).
 */
#ifndef TT_FLASH_SIM_H
#define TT_FLASH_SIM_H

#include <stdint.h>

#include "tt_flash.h"

typedef struct {
    uint8_t *bytes;           /* size bytes, owned by the caller */
    uint32_t ops;             /* erase + program operations since the last arm */
    int64_t cut_at;           /* the operation that loses power (-1: none) */
    int torn;                 /* 1: the cut operation is left partly done */
    int powered;              /* 0 after the cut */
    int cut_erase;            /* the cut operation was an erase (else a program) */
    uint32_t violations;      /* misuse by the caller (see above) */
    uint32_t rng;             /* xorshift state of the torn bits */
} tt_flash_sim;

/* A flash over bytes (size bytes, set to 0xFF: erased) with the given geometry. */
void tt_flash_sim_init(tt_flash *f, tt_flash_sim *sim, uint8_t *bytes, uint32_t size, uint32_t sector_bytes,
                       uint32_t program_bytes);

/* Cut power at operation cut_at from now (-1: never), torn or not; power is on until then. */
void tt_flash_sim_arm(tt_flash_sim *sim, int64_t cut_at, int torn);

#endif /* TT_FLASH_SIM_H */
