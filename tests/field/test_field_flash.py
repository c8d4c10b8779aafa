"""The replay buffer in flash (codegen/templates/field_flash*.j2), log-structured on the NOR simulator of
firmware/c/tt_flash_sim.c: a power cut at every erase and program of a stream of buffer writes (each both torn and
not),
then a reboot: every boot succeeds, every slot holds its last completed write or the one in flight, the log goes on
working, and sectors are erased in turn."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tinytrain.field_runtime.emit import flash_store
from tinytrain.csources import firmware_sources

WORKLOAD = r"""
static uint32_t draw(void) { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }
static int same(const int8_t (*x)[W], const int16_t *y)
{
    for (int k = 0; k < SLOTS; k++) {
        if (fy[k] != y[k]) return 0;
        if (y[k] >= 0 && memcmp(fx[k], x[k], W) != 0) return 0;
    }
    return 1;
}
/* The j-th write of the workload: slots fill in order, then random ones are replaced. */
static void write_of(int j, uint32_t *slot, int *label, int8_t *x)
{
    rng = 777u + 7919u * (uint32_t)j;
    *slot = j < SLOTS ? (uint32_t)j : draw() % SLOTS;
    *label = (int)(draw() % 10);
    for (int i = 0; i < W; i++) x[i] = (int8_t)draw();
}
"""  # the C both programs share: the draws, the comparison, the j-th write

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "tt_field_flash.h"
#include "tt_flash_sim.h"
#define SLOTS 24
#define W TT_FSTORE_WIDTH
#define PUTS 400
static uint8_t bytes[8 * 256];
static int8_t fx[SLOTS][W], mx[SLOTS][W], px[SLOTS][W];
static int16_t fy[SLOTS], my[SLOTS], py[SLOTS];
static uint32_t rng = 12345;
static uint32_t wear[8];
static tt_flash inner;
static int counted_erase(const tt_flash *f, uint32_t offset) { (void)f; wear[offset / 256]++; return inner.erase(&inner, offset); }
static int counted_program(const tt_flash *f, uint32_t o, const uint8_t *d, uint32_t n) { (void)f; return inner.program(&inner, o, d, n); }
static int counted_read(const tt_flash *f, uint32_t o, uint8_t *d, uint32_t n) { (void)f; return inner.read(&inner, o, d, n); }
/* WORKLOAD */
int main(void)
{
    tt_flash f; tt_flash_sim sim; tt_fstore s;
    uint32_t filled, cuts = 0, corrupt = 0, wrong = 0;
    for (int64_t cut = 0;; cut++) {
        memset(bytes, 0x5A, sizeof bytes);  /* never formatted */
        tt_flash_sim_init(&inner, &sim, bytes, sizeof bytes, 256, 8);
        f = inner; f.erase = counted_erase; f.program = counted_program; f.read = counted_read;
        memset(wear, 0, sizeof wear);
        tt_flash_sim_arm(&sim, cut / 2, (int)(cut % 2));  /* every operation cut, torn and not */
        memset(my, 0xff, sizeof my); memset(py, 0xff, sizeof py);
        int j = 0, ok = tt_fstore_open(&s, &f, SLOTS, fx, fy, &filled) == 0;
        for (; ok && j < PUTS; j++) {
            uint32_t slot; int label; int8_t x[W];
            write_of(j, &slot, &label, x);
            memcpy(px, mx, sizeof mx); memcpy(py, my, sizeof my);
            memcpy(mx[slot], x, W); my[slot] = (int16_t)label;
            memcpy(fx[slot], x, W); fy[slot] = (int16_t)label;
            ok = tt_fstore_put(&s, slot, label, x, (const int8_t (*)[W])fx, fy, SLOTS) == 0;
        }
        if (ok) {  /* the cut came after the last operation: an uninterrupted run */
            uint32_t lo = wear[0], hi = wear[0];
            for (int k = 1; k < 8; k++) { lo = wear[k] < lo ? wear[k] : lo; hi = wear[k] > hi ? wear[k] : hi; }
            printf("erases %u wear %u..%u per sector for %d writes\n", s.erases, lo, hi, PUTS);
            break;
        }
        cuts++;
        tt_flash_sim_arm(&sim, -1, 0);
        if (tt_fstore_open(&s, &f, SLOTS, fx, fy, &filled) != 0) { corrupt++; continue; }
        if (!same((const int8_t (*)[W])mx, my) && !same((const int8_t (*)[W])px, py)) { wrong++; continue; }
        for (int k = 0; k < 40; k++) {  /* the log works on after the cut */
            uint32_t slot; int label; int8_t x[W];
            write_of(PUTS + k, &slot, &label, x);
            memcpy(fx[slot], x, W); fy[slot] = (int16_t)label;
            memcpy(mx[slot], x, W); my[slot] = (int16_t)label;
            if (tt_fstore_put(&s, slot, label, x, (const int8_t (*)[W])fx, fy, SLOTS) != 0) { corrupt++; break; }
        }
        memcpy(mx, fx, sizeof fx); memcpy(my, fy, sizeof fy);
        if (tt_fstore_open(&s, &f, SLOTS, fx, fy, &filled) != 0 || !same((const int8_t (*)[W])mx, my)) wrong++;
    }
    printf("cuts %u corrupt %u wrong %u violations %u\n", cuts, corrupt, wrong, sim.violations);
    return 0;
}
"""


def _build_and_run(work, program: str) -> str:
    """The flash store and the NOR simulator built with ``program`` (its workload filled in) in ``work``: its stdout."""
    for name, text in flash_store(24, 20).items():
        (work / name).write_text(text)
    for name in ("tt_flash_sim.h", "tt_flash_sim.c"):
        shutil.copy(firmware_sources() / name, work / name)
    (work / "main.c").write_text(program.replace("/* WORKLOAD */", WORKLOAD))
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-o", "t", "main.c", "tt_field_flash.c",
                    "tt_flash_sim.c"], cwd=work, check=True)
    return subprocess.run(["./t"], cwd=work, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_power_cuts_during_buffer_writes(tmp_path):
    out = _build_and_run(tmp_path, PROGRAM)
    cuts, corrupt, wrong, violations = map(int, re.search(r"cuts (\d+) corrupt (\d+) wrong (\d+) violations (\d+)",
                                                          out).groups())
    assert cuts >= 1000 and corrupt == 0 and wrong == 0 and violations == 0, out
    lo, hi = map(int, re.search(r"wear (\d+)\.\.(\d+)", out).groups())
    assert hi - lo <= 1, out  # sectors are erased in turn


BOTH = r"""
#include <stdio.h>
#include <string.h>
#include "tt_field_flash.h"
#include "tt_flash_sim.h"
#define SLOTS 24
#define W TT_FSTORE_WIDTH
#define SB 256
#define BUF_SECTORS 8
#define STATE 700           /* 3 sectors a frame */
#define STATE_SECTORS 9     /* a ring of 3 frames */
#define PUTS 200
#define SAVE_EVERY 4
static uint8_t bytes[(BUF_SECTORS + STATE_SECTORS) * SB];
static int8_t fx[SLOTS][W], mx[SLOTS][W], px[SLOTS][W];
static int16_t fy[SLOTS], my[SLOTS], py[SLOTS];
static uint8_t st[STATE], got[STATE];
static uint32_t rng;
static tt_flash inner;
typedef struct { uint32_t base; } view;
static view vb = {0}, vs = {BUF_SECTORS * SB};
static int v_erase(const tt_flash *f, uint32_t o) { return inner.erase(&inner, ((view *)f->context)->base + o); }
static int v_program(const tt_flash *f, uint32_t o, const uint8_t *d, uint32_t n)
{ return inner.program(&inner, ((view *)f->context)->base + o, d, n); }
static int v_read(const tt_flash *f, uint32_t o, uint8_t *d, uint32_t n)
{ return inner.read(&inner, ((view *)f->context)->base + o, d, n); }
static tt_flash region(view *v, uint32_t sectors)
{
    tt_flash f = inner;
    f.size = sectors * SB; f.erase = v_erase; f.program = v_program; f.read = v_read; f.context = v;
    return f;
}
/* WORKLOAD */
static void state_of(int g, uint8_t *s) { for (int i = 0; i < STATE; i++) s[i] = (uint8_t)(g * 31 + i * 7 + (i >> 5)); }
/* After a reboot: the buffer at its last write or the one in flight, the state at its last save or the one in
 * flight (saved: the last completed save's number, -1: none). */
static int consistent(tt_fstore *s, tt_fstate *g, tt_flash *fb, tt_flash *fs, int saved)
{
    uint32_t filled;
    uint8_t a[STATE], b[STATE];
    if (tt_fstore_open(s, fb, SLOTS, fx, fy, &filled) != 0 || tt_fstate_open(g, fs, STATE) != 0) return -1;
    if (!same((const int8_t (*)[W])mx, my) && !same((const int8_t (*)[W])px, py)) return 0;
    const int r = tt_fstate_load(g, got);
    if (r < 0) return -1;
    state_of(saved, a); state_of(saved + 1, b);
    if (r == 0) return saved < 0 && g->newest == 0xFFFFFFFFu;
    return memcmp(got, b, STATE) == 0 || (saved >= 0 && memcmp(got, a, STATE) == 0);
}
int main(void)
{
    tt_flash_sim sim; tt_fstore s; tt_fstate g;
    uint32_t filled, cuts = 0, state_cuts = 0, corrupt = 0, wrong = 0;
    for (int64_t cut = 0;; cut++) {
        tt_flash_sim_init(&inner, &sim, bytes, sizeof bytes, SB, 8);
        tt_flash fb = region(&vb, BUF_SECTORS), fs = region(&vs, STATE_SECTORS);
        tt_flash_sim_arm(&sim, cut / 2, (int)(cut % 2));
        memset(my, 0xff, sizeof my); memset(py, 0xff, sizeof py);
        int j = 0, saved = -1, in_state = 0;
        int ok = tt_fstore_open(&s, &fb, SLOTS, fx, fy, &filled) == 0 && tt_fstate_open(&g, &fs, STATE) == 0;
        for (; ok && j < PUTS; j++) {
            uint32_t slot; int label; int8_t x[W];
            write_of(j, &slot, &label, x);
            memcpy(px, mx, sizeof mx); memcpy(py, my, sizeof my);
            memcpy(mx[slot], x, W); my[slot] = (int16_t)label;
            memcpy(fx[slot], x, W); fy[slot] = (int16_t)label;
            ok = tt_fstore_put(&s, slot, label, x, (const int8_t (*)[W])fx, fy, SLOTS) == 0;
            if (ok && j % SAVE_EVERY == 0) {  /* a guard checkpoint: the buffer stays as it is while the state goes */
                memcpy(px, mx, sizeof mx); memcpy(py, my, sizeof my);
                state_of(saved + 1, st);
                in_state = 1;
                ok = tt_fstate_save(&g, st) == 0 && tt_fstate_save(&g, st) == 0;  /* the second writes nothing */
                if (ok) { saved += 1; in_state = 0; }
            }
        }
        if (ok) {
            printf("buffer erases %u state erases %u for %d writes and %d saves\n", s.erases, g.erases, PUTS,
                   saved + 1);
            break;
        }
        cuts++;
        state_cuts += (uint32_t)in_state;
        tt_flash_sim_arm(&sim, -1, 0);
        const int c = consistent(&s, &g, &fb, &fs, saved);
        if (c < 0) { corrupt++; continue; }
        if (c == 0) { wrong++; continue; }
        for (int k = 0; k < 30; k++) {  /* both logs work on after the cut */
            uint32_t slot; int label; int8_t x[W];
            write_of(PUTS + k, &slot, &label, x);
            memcpy(fx[slot], x, W); fy[slot] = (int16_t)label;
            if (tt_fstore_put(&s, slot, label, x, (const int8_t (*)[W])fx, fy, SLOTS) != 0) { corrupt++; break; }
        }
        memcpy(mx, fx, sizeof fx); memcpy(my, fy, sizeof fy); memcpy(px, fx, sizeof fx); memcpy(py, fy, sizeof fy);
        state_of(1000, st);
        if (tt_fstate_save(&g, st) != 0 || consistent(&s, &g, &fb, &fs, 999) != 1) wrong++;
    }
    printf("cuts %u state %u corrupt %u wrong %u violations %u\n", cuts, state_cuts, corrupt, wrong, sim.violations);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_power_cuts_during_buffer_and_state_writes(tmp_path):
    """The buffer's log and the last good state's ring on one flash, a power cut at every erase and program of
    both (torn and not): every boot opens both, the buffer at its last write or the one in flight and the state at
    its last save or the one in flight, both go on working; an unchanged state is not written again."""
    out = _build_and_run(tmp_path, BOTH)
    cuts, state, corrupt, wrong, violations = map(int, re.search(
        r"cuts (\d+) state (\d+) corrupt (\d+) wrong (\d+) violations (\d+)", out).groups())
    assert cuts >= 1000 and state >= 1000 and corrupt == 0 and wrong == 0 and violations == 0, out
    saves, erases = map(int, re.search(r"state erases (\d+) for \d+ writes and (\d+) saves", out).groups()[::-1])
    assert erases == 3 * saves, out  # one frame erased per save, none for the repeated save
