"""The budget check: a footprint against the SRAM and flash budgets, and its one-line refusal (docs/design.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.errors import BudgetError
from tinytrain.ir import Graph
from tinytrain.memory.footprint import Footprint
from tinytrain.memory.arena import ArenaLayout
from tinytrain.memory.short import short_name
from tinytrain.sizes import format_size


@dataclass(frozen=True)
class BudgetCheck:
    """A footprint's peak SRAM and flash against the budgets."""

    sram_budget_bytes: int
    flash_budget_bytes: int
    peak_sram_bytes: int
    flash_bytes: int

    @classmethod
    def of(cls, footprint: Footprint, sram_budget_bytes: int, flash_budget_bytes: int) -> BudgetCheck:
        return cls(sram_budget_bytes, flash_budget_bytes, footprint.peak_sram_bytes, footprint.flash_bytes)

    @property
    def sram_fits(self) -> bool:
        return self.peak_sram_bytes <= self.sram_budget_bytes

    @property
    def flash_fits(self) -> bool:
        return self.flash_bytes <= self.flash_budget_bytes

    @property
    def fits(self) -> bool:
        return self.sram_fits and self.flash_fits


def refuse(check: BudgetCheck, layout: ArenaLayout, footprint: Footprint, graph: Graph) -> None:
    """Raise a one-line BudgetError naming the peak step, what is alive there and the excess, unless ``check`` fits."""
    if not check.sram_fits:
        node = graph.nodes[layout.peak_step]
        alive = layout.alive_at(layout.peak_step)
        names = ", ".join(f"{short_name(b.use.tensor, 48)} ({b.use.role}, {format_size(b.use.size)})"
                          for b in alive[:4])
        if len(alive) > 4:
            names += f" and {len(alive) - 4} more"
        over = check.peak_sram_bytes - check.sram_budget_bytes
        statics = (f" + {format_size(footprint.static_sram_bytes)} outside the arena (trainable copies "
                   f"{format_size(footprint.trainable_sram_bytes)}, optimizer "
                   f"{format_size(footprint.optimizer_state_bytes)}, runtime + stack "
                   f"{format_size(footprint.runtime_sram_bytes + footprint.stack_bytes)})")
        hint = ("try a smaller plan (fewer layers or lower ratios in --plan, or --update bias-only) or a larger --sram"
                if footprint.trainable else "try a smaller model or input size, or a larger --sram")
        raise BudgetError(
            f"does not fit: peak SRAM {format_size(check.peak_sram_bytes)} is {format_size(over)} over the "
            f"{format_size(check.sram_budget_bytes)} budget at step {layout.peak_step} ({node.op} {node.name}): "
            f"{format_size(layout.max_live_bytes)} alive in the arena"
            f"{statics if footprint.static_sram_bytes else ''}, largest: {names}; {hint}")
    if not check.flash_fits:
        over = check.flash_bytes - check.flash_budget_bytes
        raise BudgetError(
            f"does not fit: weights and code need {format_size(check.flash_bytes)} of flash, {format_size(over)} over "
            f"the {format_size(check.flash_budget_bytes)} budget; use a smaller model or a larger --flash")
