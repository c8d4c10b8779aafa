"""``tinytrain inspect``: a readable table of a model's ops, shapes, quantization, params, MACs and inference memory."""

from __future__ import annotations

from tinytrain.ir import Graph, Tensor
from tinytrain.layers import NAME_WIDTH, layer_table
from tinytrain.memory.report import forward_memory_report
from tinytrain.memory.short import short_name
from tinytrain.ops import get_op
from tinytrain.sizes import format_size


def _quant(t: Tensor) -> str:
    q = t.quant
    if q is None:
        return "-"
    if q.per_channel:
        return f"per-channel x{len(q.scale)} (axis {q.axis})"
    return f"s={q.s:.6g} zp={q.zp}"


def node_params(graph: Graph, node) -> int:
    return sum(graph.tensors[i].size for i in node.inputs if i and graph.tensors[i].is_constant)


def node_macs(graph: Graph, node) -> int:
    ins = [graph.tensors[i] if i else None for i in node.inputs]
    outs = [graph.tensors[o] for o in node.outputs]
    return get_op(node.op).macs(node.attrs, ins, outs)


def uint8_note(graph: Graph) -> str:
    """Which ends of the source model are uint8 (run as int8: the uint8 value - 128)."""
    ends = [e for e, u in (("input", graph.uint8_input), ("output", graph.uint8_output)) if u]
    return f"  (uint8 {' and '.join(ends)}, run as int8)" if ends else ""


def describe(graph: Graph) -> str:
    """inspect's text: the inputs and outputs, a row per layer (tinytrain/layers.py: its inference arena, weights,
    MACs; the peak marked), the totals."""
    report = forward_memory_report(graph, sram_budget=1 << 40, flash_budget=1 << 40)
    layers = {r.index: r for r in layer_table(graph, graph, report)}
    rows = [("#", "op", "output shape", "params", "MACs", "arena", "weights", "output quant", "name")]
    for k, node in enumerate(graph.nodes):
        out, r = graph.tensors[node.outputs[0]], layers[k]
        rows.append((str(k), node.op, "x".join(map(str, out.shape)), f"{node_params(graph, node):,}",
                     f"{node_macs(graph, node):,}", format_size(r.arena_bytes),
                     format_size(r.flash_bytes) if r.flash_bytes else "-", _quant(out),
                     short_name(node.name, NAME_WIDTH) + ("  <- peak" if r.peak else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"model {graph.name}  sha256 {graph.source_sha256[:16]}…" + uint8_note(graph)]
    for name in graph.inputs:
        t = graph.tensors[name]
        lines.append(f"input  {name}: {t.dtype.value} {t.shape} {_quant(t)}")
    for name in graph.outputs:
        t = graph.tensors[name]
        lines.append(f"output {name}: {t.dtype.value} {t.shape} {_quant(t)}")
    lines.append("")
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i in (0, 3, 4, 5, 6) else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    params = sum(t.size for t in graph.constants())
    macs = sum(node_macs(graph, n) for n in graph.nodes)
    peak = graph.nodes[report.peak_step]
    lines += [
        "",
        f"ops {len(graph.nodes)}   params {params:,}   MACs {macs:,}   weights+biases {format_size(report.flash_bytes)}",
        f"int8 inference peak memory (activation arena, batch 1): {format_size(report.arena_bytes)} "
        f"(largest live set {format_size(report.max_live_bytes)} at step {report.peak_step}, {peak.op} {peak.name})",
    ]
    return "\n".join(lines)
