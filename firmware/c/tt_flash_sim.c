/* tt_flash_sim.c — NOR flash in host memory with power-cut injection (tt_flash_sim.h). */
#include <string.h>

#include "tt_flash_sim.h"

static uint8_t tt_sim_random(tt_flash_sim *s)
{
    uint32_t x = s->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s->rng = x;
    return (uint8_t)(x >> 24);
}

/* 1: do the operation fully; 0: power is lost during this one (torn: do part of it); -1: power is off. */
static int tt_sim_begin(tt_flash_sim *s, int erase)
{
    if (!s->powered) {
        return -1;
    }
    if ((int64_t)s->ops++ == s->cut_at) {
        s->powered = 0;
        s->cut_erase = erase;
        return 0;
    }
    return 1;
}

static int tt_sim_erase(const tt_flash *f, uint32_t offset)
{
    tt_flash_sim *s = f->context;
    if (offset % f->sector_bytes != 0 || offset >= f->size) {
        s->violations++;
        return -1;
    }
    uint8_t *p = s->bytes + offset;
    const int power = tt_sim_begin(s, 1);
    if (power != 1) {
        if (power == 0 && s->torn) {
            for (uint32_t i = 0; i < f->sector_bytes; i++) {
                p[i] |= tt_sim_random(s);
            }
        }
        return -1;
    }
    memset(p, 0xFF, f->sector_bytes);
    return 0;
}

static int tt_sim_program(const tt_flash *f, uint32_t offset, const uint8_t *data, uint32_t n)
{
    tt_flash_sim *s = f->context;
    if (offset % f->program_bytes != 0 || n % f->program_bytes != 0 || offset > f->size || n > f->size - offset) {
        s->violations++;
        return -1;
    }
    uint8_t *p = s->bytes + offset;
    for (uint32_t i = 0; i < n; i++) {
        if ((uint8_t)(data[i] & ~p[i]) != 0) {  /* a 0 -> 1 change: NOR cannot */
            s->violations++;
            return -1;
        }
    }
    const int power = tt_sim_begin(s, 0);
    if (power != 1) {
        if (power == 0 && s->torn) {
            for (uint32_t i = 0; i < n; i++) {
                p[i] &= (uint8_t)(data[i] | tt_sim_random(s));
            }
        }
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        p[i] &= data[i];
    }
    return 0;
}

static int tt_sim_read(const tt_flash *f, uint32_t offset, uint8_t *data, uint32_t n)
{
    tt_flash_sim *s = f->context;
    if (offset > f->size || n > f->size - offset) {
        s->violations++;
        return -1;
    }
    memcpy(data, s->bytes + offset, n);
    return 0;
}

void tt_flash_sim_init(tt_flash *f, tt_flash_sim *sim, uint8_t *bytes, uint32_t size, uint32_t sector_bytes,
                       uint32_t program_bytes)
{
    memset(sim, 0, sizeof *sim);
    memset(bytes, 0xFF, size);
    sim->bytes = bytes;
    sim->cut_at = -1;
    sim->powered = 1;
    sim->rng = 0x2545F491u;
    f->size = size;
    f->sector_bytes = sector_bytes;
    f->program_bytes = program_bytes;
    f->erase = tt_sim_erase;
    f->program = tt_sim_program;
    f->read = tt_sim_read;
    f->context = sim;
}

void tt_flash_sim_arm(tt_flash_sim *sim, int64_t cut_at, int torn)
{
    sim->ops = 0;
    sim->cut_at = cut_at;
    sim->torn = torn;
    sim->powered = 1;
}
