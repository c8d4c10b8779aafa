"""The human-readable memory report: totals, the largest buffers, and what is alive at the peak."""

from __future__ import annotations

from tinytrain.ir import Graph
from tinytrain.memory.report import MemoryReport
from tinytrain.sizes import format_size


def report_text(report: MemoryReport, graph: Graph, top: int = 8) -> str:
    node = graph.nodes[report.peak_step]
    lines = [
        f"memory report for {graph.name} (planner: {report.planner})",
        f"  peak SRAM  {format_size(report.peak_sram_bytes):>10}  of {format_size(report.sram_budget_bytes)} budget"
        f"  ({'fits' if report.fits else 'DOES NOT FIT'})",
        f"    arena    {format_size(report.arena_bytes):>10}  (largest live set {format_size(report.max_live_bytes)})",
        f"    trainable copies {format_size(report.trainable_sram_bytes)}, runtime {format_size(report.runtime_sram_bytes)}",
        f"  flash      {format_size(report.flash_bytes):>10}  of {format_size(report.flash_budget_bytes)} budget",
        "",
        f"  largest buffers:",
    ]
    for b in sorted(report.buffers, key=lambda b: -b.use.size)[:top]:
        lines.append(f"    {format_size(b.use.size):>10}  @{b.offset:>7}  steps {b.use.first_use:>3}-{b.use.last_use:<3} "
                     f"{b.use.role:<10} {b.use.tensor}")
    lines.append(f"  alive at the peak (step {report.peak_step}, {node.op} {node.name}):")
    for b in report.alive_at(report.peak_step):
        lines.append(f"    {format_size(b.use.size):>10}  {b.use.role:<10} {b.use.tensor}")
    return "\n".join(lines)
