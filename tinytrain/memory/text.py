"""The human-readable memory report: totals, the largest buffers, and what is alive at the peak."""

from __future__ import annotations

from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport
from tinytrain.memory.short import short_name
from tinytrain.sizes import format_size

NAME_WIDTH = 64  # the longest tensor name a row shows whole (report.json has every name whole)


def _row(b, ties) -> str:
    note = f"  (overwrites {short_name(ties[b.use.tensor], NAME_WIDTH)})" if b.use.tensor in ties else ""
    return (f"    {format_size(b.use.size):>10}  @{b.offset:>8}  steps {b.use.first_use:>3}-{b.use.last_use:<3} "
            f"{b.use.role:<10} {short_name(b.use.tensor, NAME_WIDTH)}{note}")


def _stream_lines(report: MemoryReport, graph: Graph) -> list[str]:
    """The streamed region: its steps, line buffers against the whole tensors they replace, and the input."""
    region = report.stream
    rings = region.rings
    whole = sum(graph.tensors[b.tensor].nbytes for b in rings)
    lines = [f"  streamed     steps 0-{region.steps - 1} row by row: {len(rings)} line buffers, "
             f"{format_size(sum(b.nbytes for b in rings))} instead of {format_size(whole)} of whole tensors"]
    for b in region.buffers:
        if b.source:
            lines.append(f"               the input ({b.tensor}) is read from a row source, {b.rows} of its {b.height} "
                         f"rows at a time ({format_size(b.nbytes)}; tt_predict / tt_train_step copy the rows from the "
                         f"caller's image x, {format_size(graph.tensors[b.tensor].nbytes)})")
    return lines


def report_text(report: MemoryReport, graph: Graph, top: int = 8, notes: tuple[str, ...] = (),
                plain: tuple[str, ...] = ()) -> str:
    """The report; ``notes``: lines after the totals (the boards its firmware links on, firmware/fit.py; the time
    estimate, step_time.py);
    ``plain``: the convolutions codegen emitted with plain kernels (codegen/flash.py)."""
    node = graph.nodes[report.peak_step]
    ties = {p.output: p.input for p in report.inplace}
    lines = [
        f"memory report for {graph.name} ({len(graph.nodes)} steps, planner: {report.planner}"
        f"{', target ' + report.footprint.core if report.footprint.core else ''})",
        f"  peak SRAM  {format_size(report.peak_sram_bytes):>10}  of {format_size(report.sram_budget_bytes)} budget"
        f"  ({'fits' if report.fits else 'DOES NOT FIT'})",
        f"    arena            {format_size(report.arena_bytes):>10}  (largest live set {format_size(report.max_live_bytes)}"
        f" at step {report.peak_step}; {len(report.inplace)} outputs in place)",
        f"    trainable copies {format_size(report.trainable_sram_bytes):>10}  ({len(report.trainable)} parameters)",
        f"    optimizer state  {format_size(report.optimizer_state_bytes):>10}"
        + (f"  (weight remainders {format_size(report.remainder_bytes)})" if report.remainder_bytes else ""),
        f"    runtime + stack  {format_size(report.runtime_sram_bytes + report.stack_bytes):>10}  (runtime statics "
        f"estimated; stack {report.stack_bytes} B measured on qemu-m4/m7/m55 + margin, benchmarks/results/stack.md)",
        f"  flash      {format_size(report.flash_bytes):>10}  of {format_size(report.flash_budget_bytes)} budget"
        f"  (weights and tables {format_size(report.weights_flash_bytes)}, code estimate "
        f"{format_size(report.code_bytes)})",
    ]
    lines.extend(notes)
    if plain:
        lines.append(f"    {len(plain)} convolutions read their int8 weight, no packed table: the tables would "
                     "not fit the flash budget")
    if report.stream is not None:
        lines.extend(_stream_lines(report, graph))
    lines += ["", "  largest buffers:"]
    for b in sorted(report.buffers + report.scratch, key=lambda b: (-b.use.size, b.use.tensor))[:top]:
        lines.append(_row(b, ties))
    alive = report.alive_at(report.peak_step)
    lines.append(f"  alive at the peak (step {report.peak_step}, {node.op} {node.name}): {len(alive)} buffers")
    for b in alive[:top]:
        lines.append(_row(b, ties))
    if len(alive) > top:
        lines.append(f"    ... and {len(alive) - top} smaller ones ({format_size(sum(b.use.size for b in alive[top:]))})")
    return "\n".join(lines)
