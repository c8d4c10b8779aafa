/* tt_persist.c — two-slot power-loss-safe training state (format and protocol: tt_persist.h). */
#include <stddef.h>
#include <string.h>

#include "tinytrain_model.h"
#include "tt_persist.h"

#define TT_PERSIST_CHUNK 256u  /* bytes per program operation of the payload (a NOR page) */
#define TT_PERSIST_MAGIC "TTP1"

typedef struct {
    int valid;
    uint32_t sequence, position, crc;
} tt_slot_info;

uint32_t tt_persist_crc32(uint32_t crc, const uint8_t *data, uint32_t n)
{
    crc = ~crc;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= data[i];
        for (int b = 0; b < 8; b++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

static void tt_le32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t tt_le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

uint32_t tt_persist_region_bytes(uint32_t state_bytes, uint32_t sector_bytes)
{
    const uint32_t need = TT_PERSIST_HEADER_BYTES + state_bytes;
    return 2u * ((need + sector_bytes - 1u) / sector_bytes) * sector_bytes;
}

static uint32_t tt_slot_offset(const tt_flash *f, int slot)
{
    return slot == 0 ? 0u : f->size / 2u;
}

/* Read and check one slot: header fields, header CRC, then the payload's CRC (read in small pieces). */
static tt_slot_info tt_slot_scan(const tt_flash *f, int slot)
{
    tt_slot_info info = {0, 0, 0, 0};
    uint8_t h[TT_PERSIST_HEADER_BYTES];
    const uint32_t base = tt_slot_offset(f, slot);
    const uint32_t n = tt_state_size();
    if (f->read(f, base, h, sizeof h) != 0 || memcmp(h, TT_PERSIST_MAGIC, 4) != 0 || tt_le32_get(h + 8) != n ||
        tt_le32_get(h + 20) != tt_persist_crc32(0, h, 20)) {
        return info;
    }
    uint32_t crc = 0;
    uint8_t piece[64];
    for (uint32_t at = 0; at < n; at += sizeof piece) {
        const uint32_t k = n - at < sizeof piece ? n - at : (uint32_t)sizeof piece;
        if (f->read(f, base + TT_PERSIST_HEADER_BYTES + at, piece, k) != 0) {
            return info;
        }
        crc = tt_persist_crc32(crc, piece, k);
    }
    if (crc != tt_le32_get(h + 16)) {
        return info;
    }
    info.valid = 1;
    info.sequence = tt_le32_get(h + 4);
    info.position = tt_le32_get(h + 12);
    info.crc = crc;
    return info;
}

static int tt_newer(const tt_slot_info *a, const tt_slot_info *b)
{
    return a->valid && (!b->valid || (int32_t)(a->sequence - b->sequence) > 0);
}

static int tt_region_fits(const tt_flash *f)
{
    return f->size % (2u * f->sector_bytes) == 0 &&
           tt_persist_region_bytes(tt_state_size(), f->sector_bytes) <= f->size;
}

/* A tt_state_source reading a slot's payload from flash in order, its CRC-32 computed on the way. */
typedef struct {
    const tt_flash *f;
    uint32_t offset, crc;
} tt_flash_reader;

static int tt_read_chunk(void *context, uint8_t *bytes, uint32_t n)
{
    tt_flash_reader *r = (tt_flash_reader *)context;
    if (r->f->read(r->f, r->offset, bytes, n) != 0) {
        return -1;
    }
    r->offset += n;
    r->crc = tt_persist_crc32(r->crc, bytes, n);
    return 0;
}

int tt_persist_load(const tt_flash *f, uint32_t *position, uint32_t *sequence)
{
    if (!tt_region_fits(f)) {
        return -1;
    }
    tt_slot_info s[2] = {tt_slot_scan(f, 0), tt_slot_scan(f, 1)};
    const int first = tt_newer(&s[1], &s[0]) ? 1 : 0;
    for (int k = 0; k < 2; k++) {
        const int slot = k == 0 ? first : 1 - first;
        if (!s[slot].valid) {
            continue;
        }
        tt_flash_reader r = {f, tt_slot_offset(f, slot) + TT_PERSIST_HEADER_BYTES, 0u};
        const int loaded = tt_state_load_from(tt_read_chunk, &r);
        if (loaded == -1) {
            continue;  /* a state of another model or plan: nothing changed */
        }
        if (loaded != 0 || r.crc != s[slot].crc) {
            tt_init();  /* changed since the scan, and partly loaded: back to tt_init's state, try the other slot */
            continue;
        }
        if (position != NULL) {
            *position = s[slot].position;
        }
        if (sequence != NULL) {
            *sequence = s[slot].sequence;
        }
        return 1;
    }
    return 0;
}

/* Program n bytes at offset: whole chunks from data, the last partial program unit padded with 0xFF. */
static int tt_program(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n)
{
    const uint32_t unit = f->program_bytes;
    uint32_t at = 0;
    while (n - at >= unit) {
        uint32_t k = n - at < TT_PERSIST_CHUNK ? n - at : TT_PERSIST_CHUNK;
        k -= k % unit;
        if (f->program(f, offset + at, data + at, k) != 0) {
            return -1;
        }
        at += k;
    }
    if (at < n) {
        uint8_t tail[32];
        memset(tail, 0xFF, sizeof tail);
        memcpy(tail, data + at, n - at);
        return f->program(f, offset + at, tail, unit);
    }
    return 0;
}

/* A tt_state_sink programming the payload of a slot in order (chunks of TT_STATE_CHUNK_BYTES, a multiple of
 * every program unit), its CRC-32 computed on the way; or, with check, comparing it with what the slot holds. */
typedef struct {
    const tt_flash *f;
    uint32_t offset, crc;
    int check;
} tt_flash_writer;

#if TT_STATE_CHUNK_BYTES % 32u != 0u
#error "TT_STATE_CHUNK_BYTES must be a multiple of the largest program unit (32 bytes)"
#endif

static int tt_write_chunk(void *context, const uint8_t *bytes, uint32_t n)
{
    tt_flash_writer *w = (tt_flash_writer *)context;
    uint8_t piece[64];
    for (uint32_t at = 0; w->check && at < n; at += sizeof piece) {
        const uint32_t k = n - at < sizeof piece ? n - at : (uint32_t)sizeof piece;
        if (w->f->read(w->f, w->offset + at, piece, k) != 0 || memcmp(piece, bytes + at, k) != 0) {
            return -1;
        }
    }
    if (!w->check && tt_program(w->f, w->offset, bytes, n) != 0) {
        return -1;
    }
    w->offset += n;
    w->crc = tt_persist_crc32(w->crc, bytes, n);
    return 0;
}

int tt_persist_save(const tt_flash *f, uint32_t position)
{
    if (!tt_region_fits(f) || f->program_bytes == 0 || f->program_bytes > 32u || TT_PERSIST_HEADER_BYTES % f->program_bytes != 0) {
        return -1;
    }
    const tt_slot_info a = tt_slot_scan(f, 0), b = tt_slot_scan(f, 1);
    const tt_slot_info *newest = tt_newer(&b, &a) ? &b : &a;
    const int slot = newest == &a && a.valid ? 1 : 0;
    const uint32_t base = tt_slot_offset(f, slot), n = tt_state_size();
    const uint32_t used = TT_PERSIST_HEADER_BYTES + n;
    for (uint32_t at = 0; at < used; at += f->sector_bytes) {
        if (f->erase(f, base + at) != 0) {
            return -1;
        }
    }
    tt_flash_writer w = {f, base + TT_PERSIST_HEADER_BYTES, 0u, 0};
    if (tt_state_save_to(tt_write_chunk, &w) != 0) {
        return -1;
    }
    uint8_t h[TT_PERSIST_HEADER_BYTES];
    memset(h, 0xFF, sizeof h);
    memcpy(h, TT_PERSIST_MAGIC, 4);
    tt_le32_put(h + 4, newest->valid ? newest->sequence + 1u : 1u);
    tt_le32_put(h + 8, n);
    tt_le32_put(h + 12, position);
    tt_le32_put(h + 16, w.crc);
    tt_le32_put(h + 20, tt_persist_crc32(0, h, 20));
    if (f->program(f, base, h, sizeof h) != 0) {
        return -1;
    }
    /* Checked before it counts: the slot reads back valid, newest, and byte for byte what the model holds. */
    const tt_slot_info check = tt_slot_scan(f, slot);
    tt_flash_writer c = {f, base + TT_PERSIST_HEADER_BYTES, 0u, 1};
    if (!check.valid || check.crc != w.crc || check.sequence != tt_le32_get(h + 4) ||
        tt_state_save_to(tt_write_chunk, &c) != 0) {
        return -1;
    }
    return 0;
}
