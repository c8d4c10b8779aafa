/* powerloss_main.c — power cut at every erase and program operation of consecutive saves (tests/firmware/test_persist.py).
 *
 * Links the emitted training step (tinytrain_model.c), tt_persist.c and the NOR simulator tt_flash_sim.c: the C of
 * the firmware. For each of SAVES saves (STEPS training steps apart, on pseudo-random images): the flash as it was
 * before the save is restored once per operation k of the save and per mode (power lost before operation k, or
 * during it: torn), the save is run until the cut, then the device boots (tt_init + tt_persist_load) and the
 * state it has is compared with the state before the save ("previous": the last save's, or tt_init's before the
 * first) and the one being saved ("new"). Anything else is a corrupt boot. Then the save is done without a cut
 * and training goes on from the state the next boot loads (so every save is also a resume). Output, one line:
 * "powerloss saves S cuts C erase_cuts E program_cuts P previous A new B corrupt X violations V failed_saves F
 * state_bytes N region_bytes R"; the final state goes to FINAL_STATE (tt_state_save bytes).
 * Usage: powerloss SAVES STEPS SECTOR_BYTES PROGRAM_BYTES FINAL_STATE
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinytrain_model.h"
#include "tt_flash_sim.h"
#include "tt_persist.h"

static uint32_t lcg = 12345u;

static uint32_t next_random(void)
{
    lcg = lcg * 1664525u + 1013904223u;
    return lcg >> 8;
}

static void train(int steps)
{
    static int8_t x[TT_INPUT_BYTES];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < TT_INPUT_BYTES; i++) {
            x[i] = (int8_t)(next_random() & 0xFFu);
        }
        if (tt_train_step(x, (int)(next_random() % TT_NUM_CLASSES), NULL) < 0) {
            abort();
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: powerloss SAVES STEPS SECTOR_BYTES PROGRAM_BYTES FINAL_STATE\n");
        return 2;
    }
    const int saves = atoi(argv[1]), steps = atoi(argv[2]);
    const uint32_t sector = (uint32_t)atol(argv[3]), unit = (uint32_t)atol(argv[4]);
    const uint32_t n = tt_state_size(), region = tt_persist_region_bytes(n, sector);
    uint8_t *flash = malloc(region), *before = malloc(region), *prev = malloc(n),
            *next = malloc(n), *boot = malloc(n);
    if (!flash || !before || !prev || !next || !boot) {
        return 3;
    }
    tt_flash f;
    tt_flash_sim sim;
    tt_flash_sim_init(&f, &sim, flash, region, sector, unit);
    tt_init();
    tt_state_save(prev);
    long cuts = 0, erase_cuts = 0, program_cuts = 0, as_prev = 0, as_new = 0, corrupt = 0, failed = 0;
    for (int i = 0; i < saves; i++) {
        train(steps);
        tt_state_save(next);
        memcpy(before, flash, region);
        tt_flash_sim_arm(&sim, -1, 0);
        if (tt_persist_save(&f, (uint32_t)i + 1u) != 0) {
            failed++;
        }
        const uint32_t ops = sim.ops;
        for (uint32_t k = 0; k < ops; k++) {
            for (int torn = 0; torn < 2; torn++) {
                memcpy(flash, before, region);
                tt_state_load(next);
                tt_flash_sim_arm(&sim, (int64_t)k, torn);
                if (tt_persist_save(&f, (uint32_t)i + 1u) == 0) {
                    failed++;  /* a save that lost power must not report success */
                }
                cuts++;
                erase_cuts += sim.cut_erase;
                program_cuts += !sim.cut_erase;
                tt_flash_sim_arm(&sim, -1, 0);  /* power comes back: boot */
                tt_init();
                uint32_t position = 0;
                const int loaded = tt_persist_load(&f, &position, NULL);
                tt_state_save(boot);
                if (memcmp(boot, prev, n) == 0 && (loaded == 1 ? position == (uint32_t)i : i == 0 && loaded == 0)) {
                    as_prev++;
                } else if (loaded == 1 && position == (uint32_t)i + 1u && memcmp(boot, next, n) == 0) {
                    as_new++;
                } else {
                    corrupt++;
                }
            }
        }
        /* the save without a cut, then a boot must find it */
        memcpy(flash, before, region);
        tt_state_load(next);
        tt_flash_sim_arm(&sim, -1, 0);
        if (tt_persist_save(&f, (uint32_t)i + 1u) != 0) {
            failed++;
        }
        tt_init();
        uint32_t position = 0;
        if (tt_persist_load(&f, &position, NULL) != 1 || position != (uint32_t)i + 1u) {
            corrupt++;
        }
        tt_state_save(boot);
        if (memcmp(boot, next, n) != 0) {
            corrupt++;
        }
        memcpy(prev, next, n);
    }
    printf("powerloss saves %d cuts %ld erase_cuts %ld program_cuts %ld previous %ld new %ld corrupt %ld "
           "violations %lu failed_saves %ld state_bytes %lu region_bytes %lu\n", saves, cuts, erase_cuts,
           program_cuts, as_prev, as_new, corrupt, (unsigned long)sim.violations, failed, (unsigned long)n,
           (unsigned long)region);
    tt_state_save(boot);
    FILE *out = fopen(argv[5], "wb");
    if (out == NULL || fwrite(boot, 1, n, out) != n || fclose(out) != 0) {
        return 3;
    }
    free(flash);
    free(before);
    free(prev);
    free(next);
    free(boot);
    return corrupt == 0 && failed == 0 && sim.violations == 0 ? 0 : 1;
}
