"""The field runtime's C (codegen/templates/field*.j2): ``tt_field.h`` / ``tt_field.c`` beside the cut model's
training step, sized at compile time (tinytrain/field_runtime/ is their spec)."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.codegen.context import environment
from tinytrain.codegen.state import state_layout, state_size
from tinytrain.csources import firmware_sources
from tinytrain.field_runtime.head import DEFAULT_NORM
from tinytrain.field_runtime.prefix import prefix_memory, render_prefix
from tinytrain.field_runtime.program import FieldProgram
from tinytrain.field_runtime.rng import guard_seed
from tinytrain.version import __version__

FIELD_HEADER, FIELD_SOURCE = "tt_field.h", "tt_field.c"
FLASH_SECTOR = 4096  # the sectors the flash figures of the memory report assume
FLASH_FILES = {"tt_field_flash.h": "field_flash.h.j2", "tt_field_flash.c": "field_flash.c.j2"}


@dataclass(frozen=True)
class FieldMemory:
    """Bytes the field runtime adds: SRAM of its statics, by part, and what ``tt_field_save`` writes; flash: the
    smallest regions of FLASH_SECTOR-byte sectors for the buffer's log and the last good state's ring; the frozen
    prefix's arena (and the latent it writes) and weights, for a firmware given raw input (not in ``sram``)."""

    buffer: int
    guard: int
    states: int  # the last good state and a scratch copy
    statistics: int
    save: int
    flash_buffer: int
    flash_state: int
    prefix_arena: int = 0  # the frozen prefix's forward (tt_prefix.c, for raw input): its arena, SRAM
    prefix_weights: int = 0  # and its weights, flash

    @property
    def sram(self) -> int:
        return self.buffer + self.guard + self.states + self.statistics

    def as_dict(self) -> dict:
        return {**self.__dict__, "sram": self.sram}


def field_memory(program: FieldProgram) -> FieldMemory:
    cfg, k, c = program.cfg, program.width, program.classes
    s = state_size(state_layout(program.tg))
    buffer = cfg.replay * (k + 2) + 4 * c + 4
    guard = cfg.guard * (k + 2) + 8
    stats = 12 * k + 40 + 20 + 8 + c * 6  # EMA, reference, spread, drift words, counters, two rngs, seen / count / logits
    save = 8 + 2 * s + buffer + guard + c * 5 + 12 * k + 60
    per = FLASH_SECTOR // (-(-(16 + k) // 8) * 8)  # records of a sector (tt_fstore_record_bytes, 8-byte programs)
    log = (-(-cfg.replay // per) + 2) * FLASH_SECTOR if cfg.replay else 0
    ring = 2 * -(-(32 + s) // FLASH_SECTOR) * FLASH_SECTOR
    pre = prefix_memory(program)
    return FieldMemory(buffer, guard, 2 * s, stats, save, log, ring, pre.arena + k, pre.weights)


def render_field(program: FieldProgram) -> dict[str, str]:
    """File name -> text of the field runtime of ``program``, the frozen prefix's forward and the raw-input calls
    (prefix.py) included."""
    env = environment()
    mem = field_memory(program)
    ctx = dict(version=__version__, cfg=program.cfg, width=program.width, classes=program.classes,
               replay=program.cfg.replay, guard=program.cfg.guard, seed=program.cfg.seed, guard_seed=guard_seed(program.cfg.seed), head=program.head,
               default_norm=DEFAULT_NORM, sram_bytes=mem.sram, save_bytes=mem.save)
    files = {FIELD_HEADER: env.get_template("field.h.j2").render(**ctx),
             FIELD_SOURCE: env.get_template("field.c.j2").render(**ctx)}
    return {**files, **flash_store(program.cfg.replay, program.width), **render_prefix(program)[0]}


def flash_store(slots: int, width: int) -> dict[str, str]:
    """The replay buffer's flash store (tt_field_flash.c / .h, on firmware/c's tt_flash.h) for ``slots`` latents of
    ``width`` bytes."""
    env = environment()
    files = {name: env.get_template(t).render(version=__version__, slots=max(slots, 1), width=width)
             for name, t in FLASH_FILES.items()}
    return {**files, "tt_flash.h": (firmware_sources() / "tt_flash.h").read_text()}
