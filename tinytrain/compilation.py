"""``compile``'s pipeline: the training step of a plan (or the inference forward pass), its memory report against the
budgets, the finite-gradient proof (once) and the C project (docs/design.md §2).

    step  ->  memory.report.memory_report (ArenaLayout, Footprint, BudgetCheck)  ->  check_budget (SRAM)
      ->  training.finite.gradient_bounds (GradientProof, once)  ->  codegen.flash.render_within_flash (EmitOptions)
      ->  MemoryReport.with_emitted_flash  ->  check_budget (flash)  ->  Compiled
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tinytrain.codegen.flash import render_within_flash
from tinytrain.codegen.options import EmitOptions
from tinytrain.cores import DEFAULT_CORE
from tinytrain.csources import firmware_sources
from tinytrain.errors import BudgetError, UnsupportedModelError
from tinytrain.firmware.fit import links_json, links_text
from tinytrain.firmware.project import PERSIST_API
from tinytrain.ir import Graph
from tinytrain.layers import layer_table, layer_text
from tinytrain.memory.report import MemoryReport, check_budget, memory_report
from tinytrain.memory.text import report_text
from tinytrain.memory.timeline import write_timeline
from tinytrain.outputs import OutputDir
from tinytrain.search.candidates import deepest_fitting
from tinytrain.search.memory import peak_sram
from tinytrain.search.space import Choice, Space
from tinytrain.sizes import format_size
from tinytrain.step_time import TimeEstimate, check_clock, estimate_time
from tinytrain.training.device_step import device_schedule
from tinytrain.training.finite import gradient_bounds
from tinytrain.training.sparse import DEFAULT_REMAINDER_BITS, Plan
from tinytrain.training.spec import StepSpec
from tinytrain.training.train_graph import build_training_graph
from tinytrain.version import __version__


@dataclass(frozen=True)
class Compiled:
    """What ``compile`` planned: the step (training graph or forward pass), its memory report and C project."""

    graph: Graph                 # the model
    step: Graph                  # what the device runs: the scheduled training step, or the forward pass
    report: MemoryReport
    spec: StepSpec | None        # the step compiled (plan, lrs, schedule, the update's arithmetic); None: inference
    reorder: bool
    files: dict[str, str] = field(repr=False)  # the C project by file name (empty: C not emitted, see note)
    note: str | None = None
    nonfinite_guard: dict | None = None  # training: the proof that a finite loss gives finite gradients
    kernel_choices: tuple[str, ...] = ()  # per forward convolution: the kernel variant and why not the earlier ones
    options: EmitOptions = EmitOptions()  # what the C was emitted for: target core, plain kernels
    clock_mhz: float | None = None  # the time estimate's clock (None: the core's reference clock, tinytrain/cores.py)

    @property
    def plan(self) -> Plan | None:
        return None if self.spec is None else self.spec.plan

    @property
    def time(self) -> TimeEstimate | None:
        """The step's (or the inference's) estimated time on the target core; None for a host build."""
        return estimate_time(self.graph, self.step, self.options.target, self.clock_mhz)

    @property
    def mode(self) -> str:
        return "inference" if self.plan is None else "training"

    def to_json(self) -> dict:
        """report.json (docs/design.md §5)."""
        meta = {"tinytrain_version": __version__, "model": self.graph.name, "model_sha256": self.graph.source_sha256,
                "mode": self.mode}
        if self.plan is not None:
            meta.update(plan=self.spec.to_json(), reorder=self.reorder, nonfinite_guard=self.nonfinite_guard)
        report = self.report.to_json(self.options.plain)
        time = self.time
        return {**meta, **report, "firmware": links_json(report), "time_estimate": time and time.to_json(),
                "layers": [r.to_json() for r in layer_table(self.graph, self.step, self.report)],
                "schedule": [f"{n.op} {n.name}" for n in self.step.nodes]}

    def text(self) -> str:
        lines = (links_text(self.report.to_json()), self.time and self.time.text())
        text = report_text(self.report, self.step, notes=tuple(t for t in lines if t), plain=self.options.plain)
        if self.spec is not None:
            text += f"\nstep: {self.spec.recipe()}"
        return text + "\n\n" + layer_text(layer_table(self.graph, self.step, self.report), self.plan is not None)

    def write(self, out, force: bool = False) -> None:
        """The output folder of ``tinytrain compile`` (a path or a checked ``outputs.OutputDir``): the C project,
        report.json, report.txt, memory_timeline.png (a training build: persist/, the flash persistence of the
        learned state, docs/guide/integration.md), all or nothing; an earlier output is replaced, the files
        tinytrain did not write are kept (tinytrain/outputs)."""
        target = out if isinstance(out, OutputDir) else OutputDir(out, "compile", force=force)
        with target as tmp:
            for name, body in self.files.items():
                (tmp / name).write_bytes(body.encode("utf-8"))
            (tmp / "report.json").write_text(json.dumps(self.to_json(), indent=1) + "\n")
            (tmp / "report.txt").write_text(self.text() + "\n")
            write_timeline(self.report, self.step, tmp / "memory_timeline.png",
                           title=f"{self.graph.name} {self.mode}: SRAM over the schedule")
            if self.plan is not None and self.files:  # the learned state in flash: firmware/c/tt_persist.h
                (tmp / "persist").mkdir()
                for name in PERSIST_API:
                    (tmp / "persist" / name).write_bytes((firmware_sources() / name).read_bytes())




def compile_step(graph: Graph, spec: StepSpec | None, sram_bytes: int, flash_bytes: int, *, planner: str = "greedy",
                 reorder: bool = True, inplace: bool = True, target: str = DEFAULT_CORE,
                 clock_mhz: float | None = None) -> Compiled:
    """What ``compile`` plans for ``graph``: the step the device runs (``spec``'s training step, None: the forward
    pass), its memory report, the C project (or a note when no C was written), the finite-gradient proof (training,
    proven once), each forward convolution's kernel choice and the time estimate at ``clock_mhz`` (MHz). Raises
    BudgetError when the step does not fit the SRAM (naming the deepest presets that do) or, once emitted, the flash
    budget."""
    check_clock(clock_mhz)
    step, plan = graph, None if spec is None else spec.plan
    if spec is not None:
        step = build_training_graph(graph, plan, spec.config)
        if reorder:
            step = device_schedule(step)
    report = memory_report(step, sram_bytes, flash_bytes, planner=planner, inplace=inplace, target=target)
    try:
        check_budget(report, step)
    except BudgetError as e:
        if spec is None or report.peak_sram_bytes <= report.sram_budget_bytes:
            raise
        raise BudgetError(e.message.split("; try ")[0] + "; " + fitting_hint(graph, spec, report.sram_budget_bytes,
                                                                             planner)) from None
    proof = None if plan is None else gradient_bounds(step)  # the C guard checks the loss only
    options, choices = EmitOptions(target, proof=proof), []
    try:
        options, files, flash = render_within_flash(step, report, options, choices)
        report, note = report.with_emitted_flash(flash.constant_bytes, flash.code_bytes), None
    except UnsupportedModelError as e:
        if plan is None:
            raise
        files, note = {}, f"note: no C project written for the training step yet ({e})"
    check_budget(report, step)  # the flash of the emitted C
    return Compiled(graph, step, report, spec, reorder, files, note, None if proof is None else proof.to_json(),
                    tuple(choices), options, clock_mhz)


def fitting_hint(graph: Graph, spec: StepSpec, sram_bytes: int, planner: str = "greedy") -> str:
    """What to try instead of a training step over ``sram_bytes``: the deepest presets that fit, measured (the peak
    SRAM compile reports, search/memory.py; memory is monotone in the depth, so by bisection), with the spec's
    remainder bits and update arithmetic."""
    space, bits, peaks = Space.of(graph), spec.plan.remainder_bits, {}

    def peak(choice) -> int:
        if choice.key() not in peaks:
            peaks[choice.key()] = peak_sram(graph, space.plan(choice, spec.plan.lr), spec.config, planner)
        return peaks[choice.key()]

    def fits(choice) -> bool:
        return peak(choice) <= sram_bytes

    n = space.n_layers
    if not fits(space.last_k(1, bits)):
        return (f"not even classifier-only fits ({format_size(peak(space.last_k(1, bits)))}): try a smaller model "
                "or input size, or a larger --sram")
    m = deepest_fitting(lambda m: fits(space.last_k(m, bits)), 1, n)
    k = deepest_fitting(lambda k: fits(Choice(k, bits=bits)), 1, n)
    named = [("classifier-only" if m == 1 else f"last-k:{m}", space.last_k(m, bits))]
    if k > 1:
        named.append((f"bias-only (last {k})", Choice(k, bits=bits)))
    tag = "" if bits == DEFAULT_REMAINDER_BITS else f" @r{bits}"
    words = [(f"'{name}{tag}'" if " " in name + tag else name, c) for name, c in named]
    return "presets that fit: " + ", ".join(f"--update {w} ({format_size(peak(c))})" for w, c in words) \
        + "; or a larger --sram"
