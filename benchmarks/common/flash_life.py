"""Flash life of the field runtime's two flash regions: the replay buffer's log (tt_fstore) and the last good
state's ring (tt_fstate), both from codegen/templates/field_flash*.j2, on the NOR simulator (firmware/c).

The runtime's flash writes depend on the labels alone, not on the model: a labelled sample held back for the guard
writes nothing; one offered to the buffer writes a slot when the class-balanced reservoir takes it (the spec's
``offer_replay``, same draws, ``replay_k`` draws per learn); the last good state is saved at each guard check, each
imprint of a new class's first examples and at boot, and not when unchanged (counted here as saved: a rollback
leaves it unchanged, so this over-counts). ``label_events`` replays that decision logic over a label stream;
``flash_life`` runs the events through the C stores and counts each sector's erases; the life is the most-erased
sector's: 10,000 cycles / its erases a year at one label a minute.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinytrain.csources import firmware_sources
from tinytrain.field_runtime.buffer import Slots, offer_guard, offer_replay
from tinytrain.field_runtime.config import FieldConfig
from tinytrain.field_runtime.emit import flash_store
from tinytrain.field_runtime.rng import Rng

YEAR = 525_600  # labels a year at one a minute
CYCLES = 10_000
SAVE = -1  # an event: the last good state saved (else: the buffer slot written)

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "tt_field_flash.h"
#include "tt_flash_sim.h"
static uint8_t bb[BUF_SECTORS * SECTOR], sb[STATE_SECTORS * SECTOR], state[STATE];
static int8_t x[SLOTS][TT_FSTORE_WIDTH];
static int16_t y[SLOTS];
static uint32_t wear_b[BUF_SECTORS], wear_s[STATE_SECTORS];
static tt_flash ib, is;
static int erase_b(const tt_flash *f, uint32_t o) { (void)f; wear_b[o / SECTOR]++; return ib.erase(&ib, o); }
static int erase_s(const tt_flash *f, uint32_t o) { (void)f; wear_s[o / SECTOR]++; return is.erase(&is, o); }
static uint32_t most(const uint32_t *w, int n) { uint32_t m = 0; for (int k = 0; k < n; k++) m = w[k] > m ? w[k] : m; return m; }
int main(void)
{
    tt_flash_sim simb, sims; tt_fstore s; tt_fstate g; uint32_t filled, saves = 0, puts = 0; int ev;
    tt_flash_sim_init(&ib, &simb, bb, sizeof bb, SECTOR, 8);
    tt_flash_sim_init(&is, &sims, sb, sizeof sb, SECTOR, 8);
    tt_flash fb = ib, fs = is;
    fb.erase = erase_b; fs.erase = erase_s;
    if (tt_fstore_open(&s, &fb, SLOTS, x, y, &filled) != 0 || tt_fstate_open(&g, &fs, STATE) != 0) return 1;
    memset(wear_b, 0, sizeof wear_b); memset(wear_s, 0, sizeof wear_s);  /* formatting is not wear */
    while (fread(&ev, sizeof ev, 1, stdin) == 1) {
        if (ev == -1) {
            saves++;
            memcpy(state, &saves, 4);
            for (int i = 4; i < STATE; i++) state[i] = (uint8_t)(saves * 7u + (uint32_t)i);
            if (tt_fstate_save(&g, state) != 0) return 2;
            continue;
        }
        puts++;
        for (int i = 0; i < TT_FSTORE_WIDTH; i++) x[ev][i] = (int8_t)(puts * 31u + (uint32_t)i);
        y[ev] = (int16_t)(puts % 10);
        if (tt_fstore_put(&s, (uint32_t)ev, y[ev], x[ev], (const int8_t (*)[TT_FSTORE_WIDTH])x, y, SLOTS) != 0) return 3;
    }
    printf("%u %u %u %u %u %u\n", puts, saves, s.erases, most(wear_b, BUF_SECTORS), g.erases, most(wear_s, STATE_SECTORS));
    return violations_of(&simb, &sims);
}
"""


@dataclass(frozen=True)
class Regions:
    """The two regions: ``slots`` latents of ``width`` B in ``buffer_sectors``, a ring of ``state_sectors`` for
    states of ``state_bytes``, sectors of ``sector`` B."""

    slots: int
    width: int
    buffer_sectors: int
    state_bytes: int
    state_sectors: int
    sector: int = 4096

    def as_dict(self) -> dict:
        return {**self.__dict__, "buffer_kb": self.buffer_sectors * self.sector // 1024,
                "state_kb": self.state_sectors * self.sector // 1024}


def label_events(labels: np.ndarray, cfg: FieldConfig, classes: int, n: int) -> np.ndarray:
    """The flash events (slot written, or SAVE) of ``n`` labels: ``labels`` (its labelled samples, in order) over
    and over, through the runtime's decisions of ``cfg`` (tinytrain/field_runtime/runtime.py ``learn``)."""
    stream = np.asarray(labels)[np.asarray(labels) >= 0]
    buf, guard, rng = Slots.empty(cfg.replay, 1, classes), Slots.empty(cfg.guard, 1, 1), Rng(cfg.seed)
    count, seen, learned = np.zeros(classes, np.int64), np.arange(classes) < cfg.known, 0
    out, dummy = [SAVE], np.zeros(1, np.int8)  # the boot's save of the starting state
    for j in range(n):
        label = int(stream[j % len(stream)])
        count[label] += 1
        if cfg.guard and count[label] > cfg.imprint and count[label] % cfg.guard_every == 0:
            offer_guard(guard, rng, dummy, label)  # its draws; the guard set is not in flash
            continue
        slot = offer_replay(buf, rng, dummy, label)
        if slot >= 0:
            out.append(slot)
        if count[label] <= cfg.imprint and label >= cfg.known:
            out += [SAVE] * (1 + bool(cfg.guard and not seen[label]))
            seen[label] = True
        for _ in range(cfg.replay_k if buf.filled else 0):
            rng.below(buf.filled)
        learned += 1
        if cfg.guard and learned % cfg.guard_period == 0:
            out.append(SAVE)
    return np.array(out, np.int32)


def worst_events(slots: int, cfg: FieldConfig, n: int, seed: int = 1) -> np.ndarray:
    """Every label written to a random slot (the slots filled first), the state saved at every guard check."""
    rng = np.random.default_rng(seed)
    slot = np.where(np.arange(n) < slots, np.arange(n), rng.integers(0, slots, n))
    out = np.stack([slot, np.full(n, SAVE)], 1)
    keep = np.stack([np.ones(n, bool), (np.arange(n) + 1) % cfg.guard_period == 0], 1)
    return out[keep].astype(np.int32)


def flash_life(events: np.ndarray, labels: int, regions: Regions, work: Path) -> dict:
    """``events`` of ``labels`` labelled samples through both C stores: writes, erases, the most-erased sector of
    each region, and the years of 10,000-cycle flash each region lasts at one label a minute."""
    work.mkdir(parents=True, exist_ok=True)
    for name, text in flash_store(regions.slots, regions.width).items():
        (work / name).write_text(text)
    for name in ("tt_flash_sim.h", "tt_flash_sim.c"):
        shutil.copy(firmware_sources() / name, work / name)
    check = "static int violations_of(const tt_flash_sim *a, const tt_flash_sim *b) { return a->violations + " \
            "b->violations ? 4 : 0; }\n"
    (work / "life.c").write_text(PROGRAM.replace("int main(void)", check + "int main(void)"))
    r = regions
    defs = [f"-DSLOTS={r.slots}", f"-DBUF_SECTORS={r.buffer_sectors}", f"-DSTATE_SECTORS={r.state_sectors}",
            f"-DSECTOR={r.sector}", f"-DSTATE={r.state_bytes}"]
    subprocess.run(["gcc", "-std=c99", "-O2", *defs, "-o", "life", "life.c", "tt_field_flash.c", "tt_flash_sim.c"],
                   cwd=work, check=True)
    out = subprocess.run(["./life"], cwd=work, input=events.tobytes(), capture_output=True, check=True).stdout
    puts, saves, b_erases, b_most, s_erases, s_most = map(int, out.split())
    per_year = YEAR / labels
    life = [round(CYCLES / (m * per_year), 1) if m else float("inf") for m in (b_most, s_most)]
    return dict(regions=r.as_dict(), labels=labels, buffer_writes=puts, state_saves=saves,
                buffer_erases=b_erases, state_erases=s_erases, buffer_most_erased=b_most, state_most_erased=s_most,
                writes_per_1000=round(1000 * puts / labels, 1), saves_per_1000=round(1000 * saves / labels, 1),
                erases_per_1000=round(1000 * (b_erases + s_erases) / labels, 1),
                buffer_years=life[0], state_years=life[1], years=min(life))


def flash_study(streams: dict[str, tuple[np.ndarray, int]], cfg: FieldConfig, width: int, state_bytes: int, classes: int,
                work: Path, years: float = 1.0) -> list[dict]:
    """The life of each stream's labels (``streams``: name -> (labels, -1 unlabelled; classes known)), repeated for ``years`` at one
    label a minute, and of the worst case, with the buffer in 64 KB (the slots that fit) and the study's
    ``cfg.replay`` slots in the smallest region of whole 4 KB sectors they fit, the state's ring in 64 KB."""
    n, state = int(years * YEAR), 16
    layouts = list(dict.fromkeys([(fitting(16, width), 16), (cfg.replay, smallest(cfg.replay, width))]))
    out = []
    for slots, sectors in layouts:
        regions = Regions(slots, width, sectors, state_bytes, state)
        for name, (labels, known) in [*streams.items(), ("worst case", (None, classes))]:
            c = FieldConfig(**{**cfg.__dict__, "replay": slots, "known": known})
            events = worst_events(slots, c, n) if labels is None else label_events(labels, c, classes, n)
            out.append(dict(stream=name, **flash_life(events, n, regions, work / "flash")))
            print("flash:", out[-1]["stream"], slots, out[-1]["years"], flush=True)
    return out


def per_sector(width: int, sector: int = 4096) -> int:
    return sector // (-(-(16 + width) // 8) * 8)


def fitting(sectors: int, width: int) -> int:
    """The most slots tt_fstore_open takes in ``sectors`` (slots + 2 sectors of records)."""
    return (sectors - 2) * per_sector(width)


def smallest(slots: int, width: int) -> int:
    return -(-slots // per_sector(width)) + 2


def flash_lines(rows: list[dict]) -> list[str]:
    """The markdown of ``flash_study``'s rows."""
    r0 = rows[0]
    lines = [f"Flash (tt_field_flash.c on the NOR simulator, 4 KB sectors, 8-byte programs): the replay buffer's log "
             f"(records of {r0['regions']['width']} B latents) and the last good state's ring "
             f"({r0['regions']['state_bytes']} B states, one frame a sector), each stream's labels over and over for "
             f"{r0['labels']:,} labels (a year at one a minute) through the runtime's decisions (replay+guard: a "
             "buffer write when the class-balanced reservoir takes the sample, a state save at every guard check "
             "and new-class imprint, rollbacks counted as saves); worst case: every label written to a random slot. "
             "Life: 10,000 cycles over the most-erased sector's erases a year, per region; state saves included "
             "(`benchmarks/common/flash_life.py`).", "",
             "| stream | slots | buffer region | state region | buffer writes / 1,000 labels | state saves / 1,000 | "
             "erases / 1,000 | buffer life (years) | state life (years) | life (years) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["regions"]
        lines.append(f"| {r['stream']} | {g['slots']} | {g['buffer_kb']} KB | {g['state_kb']} KB | "
                     f"{r['writes_per_1000']} | {r['saves_per_1000']} | {r['erases_per_1000']} | "
                     f"{r['buffer_years']} | {r['state_years']} | {r['years']} |")
    return lines + [""]
