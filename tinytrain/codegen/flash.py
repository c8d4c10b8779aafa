"""The flash an emitted project links (docs/design.md §5): its constant arrays, counted exactly, and its code, estimated.

The constants are what the emitted model source declares ``static const``: the frozen weights the kernels read, the
tables they derive from them (pointwise rows packed as halfwords, depthwise tap pairs, requantization), and the initial
values of the trainable copies; the source's header states their bytes. A weight that a kernel reads only as a packed
table is not emitted as well (constants are emitted on first use). The code is estimated from the same source: the
schedule, runtime, harness and C library, and each kernel by the length of its C (a kernel specialized for one
layer's shapes unrolls in proportion: a depthwise kernel over a small map clipped at compile time is 10-15 KB of
Cortex-M code).

A project over its flash budget is emitted again with plain kernels (``MemoryReport.plain``) for the convolutions
that derive a table from their weight (halfword rows or taps: twice the weight's bytes, for a few percent fewer
instructions): first those whose weight the backward reads as well (the table is then a second copy of the weight),
then all of them. Calibrated with arm-none-eabi-gcc 12 -O2 on the shipped plans' training firmware for
qemu-m7 and qemu-m55 (tests/firmware/test_persist.py checks the report against the linker on qemu-m55).
"""

from __future__ import annotations

import re
from dataclasses import replace

from tinytrain.codegen.context import MODEL_SOURCE
from tinytrain.codegen.project import render_project
from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport

# Least squares over the 146 kernels of 3 firmware (proxyless-w0.3 on qemu-m7 and m55, mcunet-5fps on qemu-m7): a
# kernel's code = 819 B + 0.105 B per character of its C; the rest (tt_forward / tt_backward, runtime, harness, C
# library) 24.4-25.8 KB. Constants + this estimate are -0.3 to +1.3 % off the linked flash of the 4 shipped plans'
# training firmware on qemu-m7 and qemu-m55 (620-848 KB; arm-none-eabi-gcc 12.2 -O2).
CODE_BASE_BYTES = 25 * 1024     # the schedule, runtime entry points, the firmware harness and the C library's stdio
CODE_PER_KERNEL_BYTES = 820     # a kernel's prologue, loops and epilogue
CODE_PER_KERNEL_CHAR = 0.105    # a kernel's code per character of its C

_CONSTANTS = re.compile(r"constants (\d+) bytes in flash")
_KERNEL = re.compile(r"^static __attribute__\(\(noinline\)\) void \w+\(", re.M)


def constant_bytes(source: str) -> int:
    """The bytes of the emitted model source's constant arrays, as its header states them."""
    m = _CONSTANTS.search(source)
    if m is None:
        raise ValueError("not an emitted tinytrain model source (no constants line in its header)")
    return int(m.group(1))


def code_estimate(source: str) -> int:
    """The code an emitted model source links to, with the firmware around it (see the module docstring)."""
    kernels = [len(source[m.start() : source.index("\n}\n", m.end())]) for m in _KERNEL.finditer(source)]
    return int(CODE_BASE_BYTES + CODE_PER_KERNEL_BYTES * len(kernels) + CODE_PER_KERNEL_CHAR * sum(kernels))


def with_emitted_flash(report: MemoryReport, files: dict[str, str]) -> MemoryReport:
    """The report with its flash = the emitted project's constants + its code estimate."""
    source = files[MODEL_SOURCE]
    code = code_estimate(source)
    return replace(report, flash_bytes=constant_bytes(source) + code, code_bytes=code)


def render_within_flash(graph: Graph, report: MemoryReport,
                        choices: list[str] | None = None) -> tuple[MemoryReport, dict[str, str]]:
    """The emitted project and its report with the emitted flash; plain kernels where the tables would not fit (see
    the module docstring). The caller checks the budget (the last try is returned when none fits)."""

    convs = [n for n in graph.nodes if n.op == "conv2d"]
    read = {i for n in graph.nodes if n.op != "conv2d" for i in n.inputs}  # e.g. the backward's input gradients
    tries = (report.plain, tuple(n.name for n in convs if n.inputs[1] in read), tuple(n.name for n in convs))
    for plain in dict.fromkeys(tries):
        kept: list[str] = []
        planned = replace(report, plain=plain)
        files = render_project(graph, planned, kept)
        planned = with_emitted_flash(planned, files)
        if planned.flash_bytes <= planned.flash_budget_bytes:
            break
    if choices is not None:
        choices.extend(kept)
    return planned, files
