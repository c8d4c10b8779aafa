/* tt_harness_serial.c — on-board training and evaluation, samples streamed over a UART by `tinytrain stream`.
 *
 * Stop-and-wait over the frames of tt_frame.h (protocol: tinytrain/firmware/protocol.py):
 *   I  -> "board=NAME protocol=1 input=BYTES output=BYTES training=0|1 state=BYTES"
 *   T  -> one tt_train_step on the image and label: float32 loss, uint64 ticks (CPU cycles)
 *   P  -> tt_predict: int16 class, uint64 ticks, the int8 logits
 *   S  -> the state (tt_state_save_to, streamed chunk by chunk into the reply; training firmware only)
 *   L  -> load the state of the request's payload (tt_state_load_from, streamed chunk by chunk from the UART; training
 *         firmware only): an empty L reply, or E when its length, magic, version, fingerprint or CRC is wrong
 * The image is never whole in RAM: the step reads it row by row straight from the UART (tt_train_step_rows,
 * tt_predict_rows; the cycles replied leave out the wait for the rows), so the firmware needs no RAM beyond the compile's plan, a stack and these few statics. The
 * request's CRC is read with the image's last row, before the step changes anything: a mismatch jumps back out of
 * the step (longjmp: the forward pass only writes the arena) and the reply is E. Cycle counts come from SysTick
 * (tt_ticks.h).
 * With TT_PERSIST_SAVE_EVERY > 0 (tinytrain firmware --save-every) the state in flash is loaded at boot and saved
 * every TT_PERSIST_SAVE_EVERY training frames (tt_autosave.h). A step the non-finite guard did not apply replies
 * with its NaN or Inf loss.
 */
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include "tinytrain_model.h"
#include "tt_board.h"
#include "tt_frame.h"
#include "tt_serial.h"
#include "tt_ticks.h"
#if TT_PERSIST_SAVE_EVERY
#include "tt_autosave.h"

static uint32_t tt_position;  /* training frames consumed by the state (loaded from flash at boot) */
#endif

#if !defined(TT_OUTPUT_BYTES) && defined(TT_LOGITS_BYTES)  /* a training project names its output "logits" */
#define TT_OUTPUT_BYTES TT_LOGITS_BYTES
#endif

void tt_board_init(void)
{
}

static void tt_put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* Append text, or a number in decimal, to a bounded string. */
static size_t tt_append(char *s, size_t at, size_t size, const char *text)
{
    while (*text && at + 1 < size) {
        s[at++] = *text++;
    }
    s[at] = '\0';
    return at;
}

static size_t tt_append_u32(char *s, size_t at, size_t size, uint32_t v)
{
    char digits[11];
    int n = 0;
    do {
        digits[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0);
    char text[11];
    for (int i = 0; i < n; i++) {
        text[i] = digits[n - 1 - i];
    }
    text[n] = '\0';
    return tt_append(s, at, size, text);
}

static void tt_reply_info(void)
{
    char s[128];
    size_t n = tt_append(s, 0, sizeof s, "board=" TT_BOARD_NAME " protocol=");
    n = tt_append_u32(s, n, sizeof s, TT_PROTOCOL_VERSION);
    n = tt_append(s, n, sizeof s, " input=");
    n = tt_append_u32(s, n, sizeof s, TT_INPUT_BYTES);
    n = tt_append(s, n, sizeof s, " output=");
    n = tt_append_u32(s, n, sizeof s, TT_OUTPUT_BYTES);
    n = tt_append(s, n, sizeof s, TT_HAS_TRAINING ? " training=1 state=" : " training=0 state=");
#if TT_HAS_TRAINING
    n = tt_append_u32(s, n, sizeof s, tt_state_size());
#else
    n = tt_append_u32(s, n, sizeof s, 0);
#endif
    tt_frame_reply('I', s, n, NULL, 0);
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

/* A T or P request's image as it arrives: the running CRC, the next row on the wire, whether the request's CRC
 * was read (and matched) and where to jump when it does not, or when a row is asked for out of order. */
typedef struct {
    uint32_t crc;
    int next;
    int checked, bad;
    uint64_t io;  /* ticks spent waiting for rows (not counted in the step's cycles) */
    jmp_buf fail;
} tt_image_line;

/* The row source of the *_rows calls: row r, read from the UART; the CRC is checked with the last row. */
static void tt_uart_row(const void *source, int row, int8_t *dst)
{
    tt_image_line *line = (tt_image_line *)source;
    const uint64_t t0 = tt_ticks();
    if (row != line->next) {
        longjmp(line->fail, 1);  /* the forward pass reads each row once, in order: never on a working build */
    }
    line->crc = tt_frame_read(line->crc, (uint8_t *)dst, TT_INPUT_ROW_BYTES);
    if (++line->next == TT_INPUT_ROWS) {
        line->checked = 1;
        line->bad = tt_frame_check(line->crc) != 0;
        if (line->bad) {
            longjmp(line->fail, 1);
        }
    }
    line->io += tt_ticks() - t0;
}

/* Read what the step did not (a bad label: every row; a model that never reads its last rows: those) and the CRC;
 * 0 when it matched. */
static int tt_image_finish(tt_image_line *line)
{
    if (!line->checked) {
        for (; line->next < TT_INPUT_ROWS; line->next++) {
            for (uint32_t left = TT_INPUT_ROW_BYTES; left > 0;) {
                uint8_t rest[64];
                const uint32_t n = left < sizeof rest ? left : (uint32_t)sizeof rest;
                line->crc = tt_frame_read(line->crc, rest, n);
                left -= n;
            }
        }
        line->checked = 1;
        line->bad = tt_frame_check(line->crc) != 0;
    }
    return line->bad ? -1 : 0;
}

static int tt_predict_line(tt_image_line *line, int8_t *logits)
{
    if (setjmp(line->fail) != 0) {
        return -1;
    }
    tt_predict_rows(tt_uart_row, line, logits);
    return 0;
}

static void tt_reply_predict(tt_image_line *line)
{
    int8_t logits[TT_OUTPUT_BYTES];
    uint8_t head[10];
    const uint64_t t0 = tt_ticks();
    const int r = tt_predict_line(line, logits);
    const uint64_t t1 = tt_ticks() - line->io;
    if (tt_image_finish(line) != 0 || r != 0) {
        tt_frame_error("CRC mismatch");
        return;
    }
    tt_put_le(head, (uint64_t)(uint16_t)(int16_t)tt_argmax(logits, TT_OUTPUT_BYTES), 2);
    tt_put_le(head + 2, t1 - t0, 8);
    tt_frame_reply('P', head, sizeof head, logits, sizeof logits);
}

#if TT_HAS_TRAINING
/* tt_train_step_rows, or -2 when the image's CRC did not match (the step jumped out before changing anything). */
static int tt_train_line(tt_image_line *line, int label, float *loss)
{
    if (setjmp(line->fail) != 0) {
        return -2;
    }
    return tt_train_step_rows(tt_uart_row, line, label, loss);
}

/* 0 when the frame was refused for its CRC before the step (not a training frame consumed), else 1. */
static int tt_reply_train(tt_image_line *line, int label)
{
    uint8_t out[12];
    float loss = 0.0f;
    uint32_t bits;
    const uint64_t t0 = tt_ticks();
    const int status = tt_train_line(line, label, &loss);
    const uint64_t t1 = tt_ticks() - line->io;
    if (tt_image_finish(line) != 0) {
        tt_frame_error(status == -2 || status == -1 ? "CRC mismatch: the step was not applied"
                                                    : "CRC mismatch of rows the model does not read");
        return status >= 0;
    }
    if (status < 0) {
        tt_frame_error("label out of range");
        return 1;
    }
    memcpy(&bits, &loss, sizeof bits);
    tt_put_le(out, bits, 4);
    tt_put_le(out + 4, t1 - t0, 8);
    tt_frame_reply('T', out, sizeof out, NULL, 0);
    return 1;
}

/* tt_state_save_to's sink: each chunk goes out as the next part of the S reply (context: the running CRC). */
static int tt_state_part_out(void *context, const uint8_t *bytes, uint32_t n)
{
    uint32_t *crc = (uint32_t *)context;
    *crc = tt_frame_part(*crc, bytes, n);
    return 0;
}

static void tt_reply_state(void)
{
    /* Streamed from the model's arrays in TT_STATE_CHUNK_BYTES chunks: no copy of the state in RAM. */
    uint32_t crc = tt_frame_begin('S', tt_state_size());
    (void)tt_state_save_to(tt_state_part_out, &crc);
    tt_frame_end(crc);
}

/* The L request's payload as it arrives: the running CRC and the bytes not read yet. */
typedef struct {
    uint32_t crc;
    uint32_t left;
} tt_load_line;

/* tt_state_load_from's source: each chunk straight from the UART. */
static int tt_state_part_in(void *context, uint8_t *bytes, uint32_t n)
{
    tt_load_line *line = (tt_load_line *)context;
    line->crc = tt_frame_read(line->crc, bytes, n);
    line->left -= n;
    return 0;
}

static void tt_reply_load(const tt_request *req)
{
    /* Streamed into the model's arrays in TT_STATE_CHUNK_BYTES chunks: no copy of the state in RAM. A state of
     * another model or plan is refused on its first chunk (nothing changes; the rest is read and dropped); a CRC
     * that does not match once the whole state is in puts the model back to tt_init()'s state. */
    if (req->length != tt_state_size()) {
        tt_frame_error("state length is not this model's state size");  /* the payload is skipped: resync */
        return;
    }
    tt_load_line line = {req->crc, req->length};
    const int loaded = tt_state_load_from(tt_state_part_in, &line);
    while (line.left > 0) {
        uint8_t rest[64];
        const uint32_t n = line.left < sizeof rest ? line.left : (uint32_t)sizeof rest;
        (void)tt_state_part_in(&line, rest, n);
    }
    if (tt_frame_check(line.crc) != 0) {
        if (loaded == 0) {
            tt_init();
        }
        tt_frame_error(loaded == 0 ? "CRC mismatch: state not loaded, the model is back at tt_init" : "CRC mismatch");
        return;
    }
    if (loaded != 0) {
        tt_frame_error("the state's magic, version or fingerprint is not this model's: not loaded");
        return;
    }
    tt_frame_reply('L', NULL, 0, NULL, 0);
}
#endif

void tt_serial_fault(int status)
{
    char s[32];
    size_t n = tt_append(s, 0, sizeof s, "exit ");
    n = tt_append_u32(s, n, sizeof s, (uint32_t)status);
    tt_frame_reply('E', s, n, NULL, 0);
}

int main(void)
{
    tt_serial_init();
    tt_ticks_start();
    tt_init();
#if TT_PERSIST_SAVE_EVERY
    if (tt_autosave_boot(&tt_position, NULL) != 1) {
        tt_position = 0;
    }
#endif
    for (;;) {
        tt_request req;
        if (tt_frame_receive(&req, NULL, TT_INPUT_BYTES) != 0) {
            continue;
        }
        tt_image_line line;
        line.crc = req.crc;
        line.next = line.checked = line.bad = 0;
        line.io = 0;
        switch (req.command) {
        case 'I':
            tt_reply_info();
            break;
        case 'P':
            tt_reply_predict(&line);
            break;
#if TT_HAS_TRAINING
        case 'T':
            if (tt_reply_train(&line, req.label)) {
#if TT_PERSIST_SAVE_EVERY
                tt_position++;
                (void)tt_autosave_step(tt_position, 0);  /* a failed save leaves the previous state newest */
#endif
            }
            break;
        case 'S':
            tt_reply_state();
            break;
        case 'L':
            tt_reply_load(&req);
            break;
#endif
        default:
            tt_frame_error("this firmware was built without the training API");
            break;
        }
    }
}
