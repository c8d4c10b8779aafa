"""The memory report of a step: its arena layout, its footprint and the budget check, three separate artifacts
(docs/design.md §5).

    arena.arena_layout (Graph -> ArenaLayout)  ->  footprint.footprint (-> Footprint)
      ->  budget.BudgetCheck.of (-> BudgetCheck)  =  MemoryReport (memory_report)

A ``MemoryReport`` is frozen and no later stage edits it: the flash of the emitted C (codegen/flash.py measures it)
makes a new report (``with_emitted_flash``). Codegen's own options (target core, plain kernels, the gradient proof)
are ``codegen.options.EmitOptions``, not part of the report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tinytrain.ir import Graph
from tinytrain.memory.budget import BudgetCheck, refuse
from tinytrain.memory.footprint import RUNTIME_BYTES, Footprint, footprint
from tinytrain.memory.inplace import InPlace
from tinytrain.memory.arena import ArenaLayout, PlannedBuffer, arena_layout
from tinytrain.memory.stream import StreamRegion

__all__ = ["MemoryReport", "PlannedBuffer", "check_budget", "forward_memory_report", "memory_report"]


@dataclass(frozen=True)
class MemoryReport:
    """What the device needs: ``layout`` (the arena, which codegen reads), ``footprint`` (``peak_sram_bytes`` = arena
    + SRAM copies of trainable tensors + optimizer state + runtime + measured stack; flash = constants + code
    estimate) and ``budget`` (the check against the budgets). The other attributes read these three."""

    layout: ArenaLayout
    footprint: Footprint
    budget: BudgetCheck

    def with_emitted_flash(self, weights_flash_bytes: int, code_bytes: int) -> MemoryReport:
        """The report of the same step with the flash of its emitted C (constants, code estimate)."""
        counted = replace(self.footprint, weights_flash_bytes=weights_flash_bytes, code_bytes=code_bytes)
        return MemoryReport(self.layout, counted,
                            BudgetCheck.of(counted, self.budget.sram_budget_bytes, self.budget.flash_budget_bytes))

    # the layout
    @property
    def arena_bytes(self) -> int:
        return self.layout.arena_bytes

    @property
    def max_live_bytes(self) -> int:
        return self.layout.max_live_bytes

    @property
    def peak_step(self) -> int:
        return self.layout.peak_step

    @property
    def buffers(self) -> tuple[PlannedBuffer, ...]:
        return self.layout.buffers

    @property
    def scratch(self) -> tuple[PlannedBuffer, ...]:
        return self.layout.scratch

    @property
    def inplace(self) -> tuple[InPlace, ...]:
        return self.layout.inplace

    @property
    def stream(self) -> StreamRegion | None:
        return self.layout.stream

    @property
    def planner(self) -> str:
        return self.layout.planner

    @property
    def n_steps(self) -> int:
        return self.layout.n_steps

    def alive_at(self, step: int) -> list[PlannedBuffer]:
        return self.layout.alive_at(step)

    def live_by_role(self) -> list[dict[str, int]]:
        return self.layout.live_by_role()

    # the footprint
    @property
    def peak_sram_bytes(self) -> int:
        return self.footprint.peak_sram_bytes

    @property
    def static_sram_bytes(self) -> int:
        return self.footprint.static_sram_bytes

    @property
    def trainable_sram_bytes(self) -> int:
        return self.footprint.trainable_sram_bytes

    @property
    def optimizer_state_bytes(self) -> int:
        return self.footprint.optimizer_state_bytes

    @property
    def remainder_bytes(self) -> int:
        return self.footprint.remainder_bytes

    @property
    def runtime_sram_bytes(self) -> int:
        return self.footprint.runtime_sram_bytes

    @property
    def stack_bytes(self) -> int:
        return self.footprint.stack_bytes

    @property
    def trainable(self) -> tuple[tuple[str, int], ...]:
        return self.footprint.trainable

    @property
    def flash_bytes(self) -> int:
        return self.footprint.flash_bytes

    @property
    def weights_flash_bytes(self) -> int:
        return self.footprint.weights_flash_bytes

    @property
    def code_bytes(self) -> int:
        return self.footprint.code_bytes

    # the budget check
    @property
    def sram_budget_bytes(self) -> int:
        return self.budget.sram_budget_bytes

    @property
    def flash_budget_bytes(self) -> int:
        return self.budget.flash_budget_bytes

    @property
    def fits(self) -> bool:
        return self.budget.fits

    def to_json(self, plain: tuple[str, ...] = ()) -> dict:
        """report.json's memory fields (``plain``: the convolutions codegen emitted with plain kernels)."""
        layout, fp = self.layout, self.footprint
        return {
            "peak_sram_bytes": fp.peak_sram_bytes,
            "arena_bytes": layout.arena_bytes,
            "trainable_sram_bytes": fp.trainable_sram_bytes,
            "optimizer_state_bytes": fp.optimizer_state_bytes,
            "remainder_bytes": fp.remainder_bytes,
            "runtime_sram_bytes": fp.runtime_sram_bytes,
            "stack_bytes": fp.stack_bytes,
            "stack_source": "measured high-water mark + margin (benchmarks/results/stack.md)",
            "flash_bytes": fp.flash_bytes,
            "weights_flash_bytes": fp.weights_flash_bytes,
            "code_bytes_estimate": fp.code_bytes,
            "plain_kernels": list(plain),
            "sram_budget_bytes": self.budget.sram_budget_bytes,
            "flash_budget_bytes": self.budget.flash_budget_bytes,
            "fits": self.budget.fits,
            "max_live_bytes": layout.max_live_bytes,
            "peak_step": layout.peak_step,
            "planner": layout.planner,
            "target": fp.core,
            "trainable": [{"param": p, "sram_bytes": n} for p, n in fp.trainable],
            "in_place": [{"step": p.step, "input": p.input, "output": p.output, "delta": p.delta}
                         for p in layout.inplace],
            "streamed": layout.stream_json(),
            "buffers": layout.buffers_json(),
        }


def memory_report(graph: Graph, sram_budget: int, flash_budget: int, planner: str = "greedy", inplace: bool = True,
                runtime_bytes: int = RUNTIME_BYTES, stack_bytes: int | None = None, code_bytes: int | None = None,
                target: str = "", stream: bool | StreamRegion = True) -> MemoryReport:
    """The arena layout of ``graph`` (``arena.arena_layout``), its footprint on ``target`` (a core of
    tinytrain/cores.py, whose stack it reserves unless ``stack_bytes``; "" a host) and the budget check."""
    layout = arena_layout(graph, planner, inplace, stream)
    counted = footprint(graph, layout.arena_bytes, target, runtime_bytes, stack_bytes, code_bytes)
    return MemoryReport(layout, counted, BudgetCheck.of(counted, sram_budget, flash_budget))


def forward_memory_report(graph: Graph, sram_budget: int, flash_budget: int, planner: str = "greedy",
                 runtime_bytes: int = 0, stream: bool | StreamRegion = True) -> MemoryReport:
    """Plan the arena of the int8 forward pass as separate buffers (no in-place); flash = weights only."""
    return memory_report(graph, sram_budget, flash_budget, planner, inplace=False, runtime_bytes=runtime_bytes,
                       stack_bytes=0, code_bytes=0, stream=stream)


def check_budget(report: MemoryReport, graph: Graph) -> None:
    """Raise a one-line BudgetError naming the peak step, what is alive there and the excess."""
    refuse(report.budget, report.layout, report.footprint, graph)
