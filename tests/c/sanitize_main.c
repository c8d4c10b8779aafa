/* sanitize_main.c — the emitted training step under AddressSanitizer and UndefinedBehaviorSanitizer
 * (tests/codegen/test_sanitize.py): STEPS steps on pseudo-random images and labels (the generator of powerloss_main.c),
 * then the state bytes to STATE_FILE. Usage: sanitize STEPS STATE_FILE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tinytrain_model.h"

static uint32_t lcg = 12345u;

static uint32_t next_random(void)
{
    lcg = lcg * 1664525u + 1013904223u;
    return lcg >> 8;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sanitize STEPS STATE_FILE\n");
        return 2;
    }
    static int8_t x[TT_INPUT_BYTES];
    tt_init();
    for (int s = 0; s < atoi(argv[1]); s++) {
        for (int i = 0; i < TT_INPUT_BYTES; i++) {
            x[i] = (int8_t)(next_random() & 0xFFu);
        }
        if (tt_train_step(x, (int)(next_random() % TT_NUM_CLASSES), NULL) < 0) {
            return 3;
        }
    }
    uint8_t *state = malloc(tt_state_size());
    FILE *f = fopen(argv[2], "wb");
    if (state == NULL || f == NULL) {
        return 4;
    }
    tt_state_save(state);
    const int ok = fwrite(state, 1, tt_state_size(), f) == tt_state_size() && fclose(f) == 0;
    free(state);
    return ok ? 0 : 4;
}
