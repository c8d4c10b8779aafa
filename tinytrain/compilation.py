"""``compile``'s pipeline: the training step of a plan (or the inference forward pass), its memory plan against the
budgets, the finite-gradient proof and the C project (docs/design.md §2)."""

from __future__ import annotations

from tinytrain.codegen.flash import render_within_flash
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport, check_budget, plan_memory
from tinytrain.training.device_step import device_schedule
from tinytrain.training.finite import gradient_bounds
from tinytrain.training.train_graph import build_training_graph


def compile_step(graph: Graph, plan, sram_bytes: int, flash_bytes: int, *, planner: str = "greedy",
                 reorder: bool = True, inplace: bool = True, target: str = "cortex-m7"
                 ) -> tuple[Graph, MemoryReport, dict[str, str], str | None, dict | None, tuple[str, ...]]:
    """(the step the device runs, its memory report, the C project by file name, a note when no C was written,
    the finite-gradient proof (training), each forward convolution's kernel choice). Raises BudgetError when the
    step does not fit the SRAM or, once emitted, the flash budget."""
    step = graph
    if plan is not None:
        step = build_training_graph(graph, plan)
        if reorder:
            step = device_schedule(step)
    report = plan_memory(step, sram_bytes, flash_bytes, planner=planner, inplace=inplace, target=target)
    check_budget(report, step)
    guard = None if plan is None else gradient_bounds(step).to_json()  # the C guard checks the loss only
    choices: list[str] = []
    try:
        (report, files), note = render_within_flash(step, report, choices), None
    except UnsupportedModelError as e:
        if plan is None:
            raise
        files, note = {}, f"note: no C project written for the training step yet ({e})"
    check_budget(report, step)  # the flash of the emitted C
    return step, report, files, note, guard, tuple(choices)
