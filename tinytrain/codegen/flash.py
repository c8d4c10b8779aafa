"""The flash an emitted project links (docs/design.md §5): its constant arrays, counted exactly, and its code, estimated.

The constants are what the emitted model source declares ``static const``: the frozen weights the kernels read, the
tables they derive from them (pointwise rows packed as halfwords, depthwise tap pairs, requantization), and the initial
values of the trainable copies; the source's header states their bytes. A weight that a kernel reads only as a packed
table is not emitted as well (constants are emitted on first use). The code is the memory footprint's one estimate
(memory/footprint.py ``code_estimate``) of the kernels this source defines, each by the length of its C (a kernel
specialized for one layer's shapes unrolls in proportion: a depthwise kernel over a small map clipped at compile time
is 10-15 KB of Cortex-M code).

A project over its flash budget is emitted again with plain kernels (``EmitOptions.plain``) for the convolutions
that derive a table from their weight (halfword rows or taps: twice the weight's bytes, for a few percent fewer
instructions): first those whose weight the backward reads as well (the table is then a second copy of the weight),
then all of them. Calibrated with arm-none-eabi-gcc 12 -O2 on the shipped plans' training firmware for
qemu-m7 and qemu-m55 (tests/firmware/test_persist.py checks the report against the linker on qemu-m55).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tinytrain.codegen.context import MODEL_SOURCE
from tinytrain.codegen.options import EmitOptions
from tinytrain.codegen.project import is_training_graph, render_project
from tinytrain.ir import Graph
from tinytrain.memory.footprint import code_estimate
from tinytrain.memory.report import MemoryReport
from tinytrain.training.finite import gradient_bounds

_CONSTANTS = re.compile(r"constants (\d+) bytes in flash")
_KERNEL = re.compile(r"^static __attribute__\(\(noinline\)\) void \w+\(", re.M)


def constant_bytes(source: str) -> int:
    """The bytes of the emitted model source's constant arrays, as its header states them."""
    m = _CONSTANTS.search(source)
    if m is None:
        raise ValueError("not an emitted tinytrain model source (no constants line in its header)")
    return int(m.group(1))


def emitted_code_bytes(source: str) -> int:
    """The code an emitted model source links to, with the firmware around it: ``code_estimate`` of its kernels."""
    return code_estimate(len(source[m.start() : source.index("\n}\n", m.end())]) for m in _KERNEL.finditer(source))


@dataclass(frozen=True)
class EmittedFlash:
    """The flash of an emitted project: its constant arrays and its code estimate."""

    constant_bytes: int
    code_bytes: int

    @classmethod
    def of(cls, files: dict[str, str]) -> EmittedFlash:
        source = files[MODEL_SOURCE]
        return cls(constant_bytes(source), emitted_code_bytes(source))

    @property
    def total(self) -> int:
        return self.constant_bytes + self.code_bytes


def render_within_flash(graph: Graph, report: MemoryReport, options: EmitOptions = EmitOptions(),
                        choices: list[str] | None = None) -> tuple[EmitOptions, dict[str, str], EmittedFlash]:
    """The options emitted with (plain kernels where the tables would not fit ``report``'s flash budget, see the
    module docstring), the emitted project and its flash. A training step is proven finite once (``options.proof``)
    for every try. The caller counts the flash (``MemoryReport.with_emitted_flash``) and checks the budget (the last
    try is returned when none fits)."""

    if options.proof is None and is_training_graph(graph):
        options = replace(options, proof=gradient_bounds(graph))
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    read = {i for n in graph.nodes if n.op != "conv2d" for i in n.inputs}  # e.g. the backward's input gradients
    tries = (options.plain, tuple(n.name for n in convs if n.inputs[1] in read), tuple(n.name for n in convs))
    for plain in dict.fromkeys(tries):
        kept: list[str] = []
        tried = replace(options, plain=plain)
        files = render_project(graph, report.layout, kept, tried)
        flash = EmittedFlash.of(files)
        if flash.total <= report.flash_budget_bytes:
            break
    if choices is not None:
        choices.extend(kept)
    return tried, files, flash
