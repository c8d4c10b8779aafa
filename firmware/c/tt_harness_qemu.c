/* tt_harness_qemu.c — train and evaluate under QEMU, all I/O through semihosting.
 *
 * Files, relative to QEMU's working directory (format: tt_samples.h):
 *   tt_train.bin   read: the training samples, one per step, in order (absent: no training)
 *   tt_targets.bin read when the model's loss reads float targets (TT_TARGET_FLOATS, an mse loss against targets y):
 *                  each training sample's target, TT_TARGET_FLOATS float32 little-endian, in tt_train.bin's order
 *   tt_test.bin    read: the samples to evaluate after training (absent: no evaluation)
 *   tt_logits.bin  written: TT_OUTPUT_BYTES int8 logits per test sample
 *   tt_state_in.bin  read: a state to resume from (tt_state_load) before training (absent: tt_init's)
 *   tt_state.bin   written: tt_state_save() after training (training firmware only)
 *   tt_flash.bin   read and written when TT_PERSIST_SAVE_EVERY > 0: the board's flash region of the persistent state
 *                  (tt_persist.h, tt_flash_semihost.c); at boot the newest valid state there is loaded and the
 *                  training samples it had consumed are skipped; a save every TT_PERSIST_SAVE_EVERY samples and
 *                  one after the last
 * Standard output, one record a line (parsed by tinytrain/engine_qemu.py):
 *   tt: board NAME input BYTES output BYTES training 0|1 tick_ns NUM/DEN
 *   tt: resumed at step K                                 (when tt_state_in.bin was loaded)
 *   tt: flash resumed sequence S position P step K        (a state loaded from tt_flash.bin; "tt: flash empty" if none)
 *   tt: flash saved position P                            (after each save to tt_flash.bin)
 *   tt: step K label L loss 0xBITS DECIMAL insns N        (per training step; BITS: the float's bits; DECIMAL is
 *                                                          "skipped" for a step the non-finite guard did not apply)
 *   tt: predict K label L class C insns N                 (per test sample)
 *   tt: accuracy CORRECT/TOTAL
 *   tt: state BYTES bytes
 *   tt: stack BYTES bytes used                            (high-water mark of the painted stack)
 *   tt: done
 * The states stream between the model's arrays and the files (or the flash) in chunks of TT_STATE_CHUNK_BYTES:
 * no copy of a whole state is ever in RAM, whatever its size.
 * Instruction counts are SysTick ticks times the tick length (tt_ticks.h), exact to one tick under
 * -icount shift=0. Exit status: 0 done, 2 a sample or state file is unreadable or malformed, 64 + n a fault
 * (exception n, tt_startup.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinytrain_model.h"
#include "tt_board.h"
#if TT_PERSIST_SAVE_EVERY
#include "tt_autosave.h"
#endif
#include "tt_samples.h"
#include "tt_ticks.h"

#define TT_EXIT_IO 2

#if !defined(TT_OUTPUT_BYTES) && defined(TT_LOGITS_BYTES)  /* a training project names its output "logits" */
#define TT_OUTPUT_BYTES TT_LOGITS_BYTES
#endif

#if defined(__PICOLIBC__)
void tt_board_init(void)  /* picolibc's libsemihost: stdio is semihosting's from the start (RISC-V boards) */
{
}
#else
extern void initialise_monitor_handles(void);  /* newlib rdimon: semihosting stdio */

void tt_board_init(void)
{
    initialise_monitor_handles();
}
#endif

/* A sample file opened twice: one handle walks the images, row by row, the other the labels. */
typedef struct {
    const char *path;
    FILE *images, *labels;
    uint32_t count;
    uint32_t sample;  /* the sample the rows are read from */
    long at;          /* the images handle's position */
} tt_sample_file;

/* Ticks spent reading the current sample's rows (not counted in its step's instructions); a static, not a field of
 * tt_sample_file, to keep the training loop's stack frame (under every flash save) as small as before. */
static uint64_t tt_row_ticks;

static void tt_fail(const char *path, const char *what)
{
    printf("tt: error %s: %s\n", path, what);
    exit(TT_EXIT_IO);
}

static uint32_t tt_le32(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

/* 0 when the file does not exist; exits on a malformed one. */
static int tt_open_samples(tt_sample_file *f, const char *path)
{
    uint8_t header[TT_SAMPLES_HEADER_BYTES];
    f->path = path;
    f->images = fopen(path, "rb");
    if (f->images == NULL) {
        return 0;
    }
    setvbuf(f->images, NULL, _IONBF, 0); /* no stdio buffer from the heap: rows are read at once */
    if (fread(header, 1, sizeof header, f->images) != sizeof header || memcmp(header, TT_SAMPLES_MAGIC, 4) != 0) {
        tt_fail(path, "not a tinytrain sample file (magic TTDS)");
    }
    if (tt_le32(header + 4) != TT_SAMPLES_VERSION) {
        tt_fail(path, "unsupported version");
    }
    if (tt_le32(header + 12) != TT_INPUT_BYTES) {
        tt_fail(path, "sample size is not this model's TT_INPUT_BYTES");
    }
    f->count = tt_le32(header + 8);
    const long bytes = (long)(TT_SAMPLES_HEADER_BYTES + (uint64_t)f->count * (TT_INPUT_BYTES + 4u));
    if (fseek(f->images, 0, SEEK_END) != 0 || ftell(f->images) < bytes) {
        tt_fail(path, "truncated");
    }
    f->at = -1;
    f->labels = fopen(path, "rb");
    if (f->labels != NULL) {
        setvbuf(f->labels, NULL, _IONBF, 0);
    }
    if (f->labels == NULL ||
        fseek(f->labels, (long)(TT_SAMPLES_HEADER_BYTES + (uint64_t)f->count * TT_INPUT_BYTES), SEEK_SET) != 0) {
        tt_fail(path, "cannot seek to the labels");
    }
    return 1;
}

/* Go to sample k (the next label: the samples are visited in order) and return its label. */
static int tt_next_sample(tt_sample_file *f, uint32_t k)
{
    uint8_t b[4];
    if (fread(b, 1, 4, f->labels) != 4) {
        tt_fail(f->path, "truncated");
    }
    f->sample = k;
    tt_row_ticks = 0;
    return (int)(int32_t)tt_le32(b);
}

/* The row source of tt_train_step_rows / tt_predict_rows: row r of the current sample, straight from the file into
 * the model's line buffer (or input tensor), so no whole image is ever in RAM; a row out of order seeks. */
static void tt_file_row(const void *source, int row, int8_t *dst)
{
    tt_sample_file *f = (tt_sample_file *)source;
    const uint64_t t0 = tt_ticks();
    const long at = (long)(TT_SAMPLES_HEADER_BYTES + (uint64_t)f->sample * TT_INPUT_BYTES +
                           (uint64_t)row * TT_INPUT_ROW_BYTES);
    if ((at != f->at && fseek(f->images, at, SEEK_SET) != 0) ||
        fread(dst, 1, TT_INPUT_ROW_BYTES, f->images) != TT_INPUT_ROW_BYTES) {
        tt_fail(f->path, "truncated");
    }
    f->at = at + TT_INPUT_ROW_BYTES;
    tt_row_ticks += tt_ticks() - t0;
}

static void tt_close_samples(tt_sample_file *f)
{
    fclose(f->images);
    fclose(f->labels);
}

static int tt_argmax(const int8_t *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            best = i;
        }
    }
    return best;
}

/* "12345678" — a uint64 in decimal (newlib-nano's printf has no 64-bit integers). */
static const char *tt_u64_str(uint64_t v, char buf[21])
{
    char *p = buf + 20;
    *p = '\0';
    do {
        *--p = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0);
    return p;
}

static const char *tt_insns(uint64_t ticks, char buf[21])
{
    return tt_u64_str(ticks * TT_TICK_NS_NUM / TT_TICK_NS_DEN, buf);
}

#if TT_HAS_TRAINING
/* Samples already consumed by the state loaded from flash (0 without persistence). */
static uint32_t tt_flash_position(void)
{
#if TT_PERSIST_SAVE_EVERY
    uint32_t position = 0, sequence = 0;
    const int r = tt_autosave_boot(&position, &sequence);
    if (r < 0) {
        tt_fail("tt_flash.bin", "cannot open the flash region");
    }
    if (r == 0) {
        printf("tt: flash empty\n");
        return 0;
    }
    printf("tt: flash resumed sequence %lu position %lu step %lu\n", (unsigned long)sequence, (unsigned long)position,
           (unsigned long)tt_step_count());
    return position;
#else
    return 0;
#endif
}

static void tt_flash_save(uint32_t position, int force)
{
#if TT_PERSIST_SAVE_EVERY
    const int r = tt_autosave_step(position, force);
    if (r < 0) {
        tt_fail("tt_flash.bin", "a save failed");
    }
    if (r > 0) {
        printf("tt: flash saved position %lu\n", (unsigned long)position);
    }
#else
    (void)position;
    (void)force;
#endif
}

#ifdef TT_TARGET_FLOATS
/* The float targets of the training samples (tt_targets.bin), read one sample's at a time into tt_target_buf. */
static float tt_target_buf[TT_TARGET_FLOATS];

static FILE *tt_open_targets(uint32_t count)
{
    FILE *t = fopen("tt_targets.bin", "rb");
    if (t == NULL || fseek(t, 0, SEEK_END) != 0 || ftell(t) != (long)((uint64_t)count * sizeof tt_target_buf) ||
        fseek(t, 0, SEEK_SET) != 0) {
        tt_fail("tt_targets.bin", "absent, or not TT_TARGET_FLOATS float32 per training sample");
    }
    setvbuf(t, NULL, _IONBF, 0);
    tt_set_target(tt_target_buf);
    return t;
}

static void tt_next_target(FILE *t)
{
    if (fread(tt_target_buf, 1, sizeof tt_target_buf, t) != sizeof tt_target_buf) {
        tt_fail("tt_targets.bin", "truncated");
    }
}
#endif

static void tt_run_training(void)
{
    tt_sample_file f;
    char buf[21];
    const uint32_t start = tt_flash_position();
    if (!tt_open_samples(&f, "tt_train.bin")) {
        return;
    }
#ifdef TT_TARGET_FLOATS
    FILE *targets = tt_open_targets(f.count);
#endif
    for (uint32_t k = 0; k < f.count; k++) {
        const int label = tt_next_sample(&f, k);
#ifdef TT_TARGET_FLOATS
        tt_next_target(targets);
#endif
        if (k < start) {
            continue;  /* consumed before the state in flash was saved */
        }
        float loss = 0.0f;
        const uint64_t t0 = tt_ticks();
        const int status = tt_train_step_rows(tt_file_row, &f, label, &loss);
        const uint64_t t1 = tt_ticks() - tt_row_ticks;
        if (status < 0) {
            tt_fail(f.path, "a label is out of range");
        }
        uint32_t bits;
        memcpy(&bits, &loss, sizeof bits);
        if (status == 1) {  /* NaN or Inf loss: not applied */
            printf("tt: step %lu label %d loss 0x%08lx skipped insns %s\n", (unsigned long)k, label,
                   (unsigned long)bits, tt_insns(t1 - t0, buf));
        } else {
            const long micro = (long)(loss * 1e6f + 0.5f);
            printf("tt: step %lu label %d loss 0x%08lx %ld.%06ld insns %s\n", (unsigned long)k, label,
                   (unsigned long)bits, micro / 1000000L, micro % 1000000L, tt_insns(t1 - t0, buf));
        }
        tt_flash_save(k + 1, k + 1 == f.count);
    }
#ifdef TT_TARGET_FLOATS
    fclose(targets);
#endif
    tt_close_samples(&f);
}

/* tt_state_load_from's source and tt_state_save_to's sink: a semihosting file, one chunk per call (unbuffered: no
 * stdio buffer from the heap, and no copy of the state anywhere). */
static int tt_file_read(void *context, uint8_t *bytes, uint32_t n)
{
    return fread(bytes, 1, n, (FILE *)context) == n ? 0 : -1;
}

static int tt_file_write(void *context, const uint8_t *bytes, uint32_t n)
{
    return fwrite(bytes, 1, n, (FILE *)context) == n ? 0 : -1;
}

/* Resume from tt_state_in.bin when it exists (a state saved by this model and plan). */
static void tt_load_state(void)
{
    FILE *f = fopen("tt_state_in.bin", "rb");
    if (f == NULL) {
        return;
    }
    setvbuf(f, NULL, _IONBF, 0);
    const int r = tt_state_load_from(tt_file_read, f);
    fclose(f);
    if (r == -2) {
        tt_fail("tt_state_in.bin", "shorter than tt_state_size()");
    }
    if (r != 0) {
        tt_fail("tt_state_in.bin", "a state of another model or plan");
    }
    printf("tt: resumed at step %lu\n", (unsigned long)tt_step_count());
}

static void tt_save_state(void)
{
    FILE *f = fopen("tt_state.bin", "wb");
    if (f == NULL) {
        tt_fail("tt_state.bin", "cannot write");
    }
    setvbuf(f, NULL, _IONBF, 0);
    const int r = tt_state_save_to(tt_file_write, f);
    if (fclose(f) != 0 || r != 0) {
        tt_fail("tt_state.bin", "cannot write");
    }
    printf("tt: state %lu bytes\n", (unsigned long)tt_state_size());
}
#endif

static void tt_run_test(void)
{
    tt_sample_file f;
    char buf[21];
    int8_t logits[TT_OUTPUT_BYTES];
    uint32_t correct = 0;
    if (!tt_open_samples(&f, "tt_test.bin")) {
        return;
    }
    FILE *out = fopen("tt_logits.bin", "wb");
    if (out == NULL) {
        tt_fail("tt_logits.bin", "cannot create");
    }
    for (uint32_t k = 0; k < f.count; k++) {
        const int label = tt_next_sample(&f, k);
        const uint64_t t0 = tt_ticks();
        tt_predict_rows(tt_file_row, &f, logits);
        const uint64_t t1 = tt_ticks() - tt_row_ticks;
        const int predicted = tt_argmax(logits, TT_OUTPUT_BYTES);
        correct += predicted == label;
        if (fwrite(logits, 1, TT_OUTPUT_BYTES, out) != TT_OUTPUT_BYTES) {
            tt_fail("tt_logits.bin", "cannot write");
        }
        printf("tt: predict %lu label %d class %d insns %s\n", (unsigned long)k, label, predicted, tt_insns(t1 - t0, buf));
    }
    if (fclose(out) != 0) {
        tt_fail("tt_logits.bin", "cannot write");
    }
    tt_close_samples(&f);
    printf("tt: accuracy %lu/%lu\n", (unsigned long)correct, (unsigned long)f.count);
}

int main(void)
{
    tt_ticks_start();
    tt_init();
    printf("tt: board %s input %d output %d training %d tick_ns %d/%d\n", TT_BOARD_NAME, TT_INPUT_BYTES,
           TT_OUTPUT_BYTES, TT_HAS_TRAINING, TT_TICK_NS_NUM, TT_TICK_NS_DEN);
#if TT_HAS_TRAINING
    tt_load_state();
    tt_run_training();
#endif
    tt_run_test();
#if TT_HAS_TRAINING
    tt_save_state();
#endif
    printf("tt: stack %lu bytes used\n", (unsigned long)tt_stack_used());
    printf("tt: done\n");
    return 0;
}
