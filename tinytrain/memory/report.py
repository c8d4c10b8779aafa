"""SRAM / flash accounting of a planned schedule and the budget check (design.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.errors import BudgetError
from tinytrain.ir import Graph
from tinytrain.memory.lifetimes import BufferUse, activation_lifetimes
from tinytrain.memory.planner import PLANNERS
from tinytrain.sizes import format_size


@dataclass(frozen=True)
class PlannedBuffer:
    use: BufferUse
    offset: int


@dataclass(frozen=True)
class MemoryReport:
    """What the device needs. ``peak_sram_bytes`` = arena + SRAM copies of trainable tensors + runtime."""

    arena_bytes: int
    trainable_sram_bytes: int
    runtime_sram_bytes: int
    flash_bytes: int
    sram_budget_bytes: int
    flash_budget_bytes: int
    max_live_bytes: int
    peak_step: int
    buffers: tuple[PlannedBuffer, ...]
    planner: str

    @property
    def peak_sram_bytes(self) -> int:
        return self.arena_bytes + self.trainable_sram_bytes + self.runtime_sram_bytes

    @property
    def fits(self) -> bool:
        return self.peak_sram_bytes <= self.sram_budget_bytes and self.flash_bytes <= self.flash_budget_bytes

    def alive_at(self, step: int) -> list[PlannedBuffer]:
        alive = [b for b in self.buffers if b.use.first_use <= step <= b.use.last_use]
        return sorted(alive, key=lambda b: -b.use.size)

    def to_json(self) -> dict:
        return {
            "peak_sram_bytes": self.peak_sram_bytes,
            "arena_bytes": self.arena_bytes,
            "trainable_sram_bytes": self.trainable_sram_bytes,
            "runtime_sram_bytes": self.runtime_sram_bytes,
            "flash_bytes": self.flash_bytes,
            "sram_budget_bytes": self.sram_budget_bytes,
            "flash_budget_bytes": self.flash_budget_bytes,
            "fits": self.fits,
            "max_live_bytes": self.max_live_bytes,
            "peak_step": self.peak_step,
            "planner": self.planner,
            "buffers": [
                {"tensor": b.use.tensor, "role": b.use.role, "size": b.use.size, "offset": b.offset,
                 "first_use": b.use.first_use, "last_use": b.use.last_use}
                for b in self.buffers
            ],
        }


def plan_forward(graph: Graph, sram_budget: int, flash_budget: int, planner: str = "greedy",
                 runtime_bytes: int = 0) -> MemoryReport:
    """Plan the arena of the int8 forward pass; frozen weights and biases are counted in flash."""
    uses = activation_lifetimes(graph)
    p = PLANNERS[planner]()
    ids = [p.add_buffer(u.size, u.first_use, u.last_use) for u in uses]
    buffers = tuple(PlannedBuffer(u, p.offset(i)) for u, i in zip(uses, ids))
    steps = range(len(graph.nodes))
    peak_step = max(steps, key=lambda s: sum(u.size for u in uses if u.first_use <= s <= u.last_use))
    flash = sum(t.nbytes for t in graph.constants())
    return MemoryReport(p.total_size(), 0, runtime_bytes, flash, sram_budget, flash_budget,
                        p.max_live_bytes(), peak_step, buffers, planner)


def check_budget(report: MemoryReport, graph: Graph) -> None:
    """Raise a one-line BudgetError naming the peak step, what is alive there and the excess."""
    if report.peak_sram_bytes > report.sram_budget_bytes:
        node = graph.nodes[report.peak_step]
        alive = ", ".join(f"{b.use.tensor} ({format_size(b.use.size)})" for b in report.alive_at(report.peak_step)[:4])
        over = report.peak_sram_bytes - report.sram_budget_bytes
        raise BudgetError(
            f"does not fit: peak SRAM {format_size(report.peak_sram_bytes)} is {format_size(over)} over the "
            f"{format_size(report.sram_budget_bytes)} budget at step {report.peak_step} ({node.op} {node.name}), "
            f"alive: {alive}; try a smaller model or input size, or a larger --sram")
    if report.flash_bytes > report.flash_budget_bytes:
        over = report.flash_bytes - report.flash_budget_bytes
        raise BudgetError(
            f"does not fit: weights need {format_size(report.flash_bytes)} of flash, {format_size(over)} over the "
            f"{format_size(report.flash_budget_bytes)} budget; use a smaller model or a larger --flash")
