"""In-place execution: which node outputs may overwrite an input, and how far before it they must start.

Decided from op properties only (``OpDef.min_read``, ``OpDef.overwrites``), never from op names. A kernel
with the first property writes output elements in increasing order, element q after reading its inputs, and
element q reads input k at indices >= min_read[q]. Put the output ``delta`` bytes before the input (offset(out) =
offset(in) - delta): writing element q destroys input bytes up to (q+1) * s_out - 1 - delta, and the later
elements read input bytes from s_in * R(q+1) on (R = the suffix minimum of min_read), so it is safe iff

    delta >= max_q ((q+1) * s_out - s_in * R(q+1))          (``min_gap``)

which is 0 for an elementwise op or a stride-2 depthwise convolution, a row and a pixel for a 3x3 stride-1
depthwise one, and most of the output for an expanding 1x1 convolution (its output ends where its input
ends). The pair then needs max(S_out, delta + S_in) bytes instead of S_in + S_out. A kernel with the second
(``overwrites``: blocks of its input read into its scratch before their outputs are written) puts its output
exactly on the input of the same size: delta 0.

An input can be overwritten only when this node is its last reader (so never a saved activation the
backward still needs, nor a graph input or output, nor a buffer with views). Pairs chain (an in-place
output overwritten in turn by the next node); a chain is placed as one rigid unit, so a link is accepted
only while the chain's extent stays within ``SLACK`` of its largest member — ``GRADIENT_SLACK`` for a chain of
gradients only, whose links drift (a 1x1 or depthwise input gradient some pixels or a row ahead of its output
gradient): an eighth lets the shipped sparse plans' backward chains form (with 1/16 their largest live sets are
8 / 4 KB larger for ProxylessNAS-w0.3 / MCUNet-5fps) while the planner still packs deep backward passes (bias-only)
to within 0.1 % of their largest live set (at 1/4 and above it no longer does: 13 % to 43 % over); links are
considered from the most crowded step down.
"""

from __future__ import annotations

from dataclasses import dataclass


from tinytrain.ir import Graph, Role
from tinytrain.memory.lifetimes import BufferUse
from tinytrain.memory.planner import ALIGNMENT, align
from tinytrain.ops import get_op, min_gap

SLACK = 1 / 16
GRADIENT_SLACK = 1 / 8


@dataclass(frozen=True)
class InPlace:
    """Node ``step`` writes ``output`` over ``input``: offset(output) = offset(input) - delta."""

    step: int
    input: str
    output: str
    delta: int
    saving: int  # bytes saved at that step against separate buffers


def candidates(graph: Graph, uses: list[BufferUse], alignment: int = ALIGNMENT, first_step: int = 0) -> list[InPlace]:
    """Per node from ``first_step`` on (the nodes before it run streamed), the best input its output 0 may
    overwrite (if any), with its delta and saving."""
    by_name = {u.tensor: u for u in uses}
    viewed = {v for u in uses for v in u.views} | {u.tensor for u in uses if u.views}
    result = []
    for k, node in enumerate(graph.nodes):
        if k < first_step:
            continue
        op = get_op(node.op)
        if (op.min_read is None and op.overwrites is None) or len(node.outputs) != 1 or op.view:
            continue
        out = node.outputs[0]
        if out not in by_name or out in viewed or out in graph.outputs:
            continue
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        outs = [graph.tensors[out]]
        s_out = align(outs[0].nbytes, alignment)
        best = None
        for i, name in enumerate(node.inputs):
            u = by_name.get(name)
            if (u is None or u.last_use != k or name in viewed or name in graph.inputs or name in graph.outputs
                    or node.inputs.count(name) != 1):
                continue
            reads = op.min_read(node.attrs, ins, outs, i) if op.min_read is not None else None
            if reads is not None:
                delta = align(max(min_gap(reads, outs[0].dtype.itemsize, ins[i].dtype.itemsize), 0), alignment)
            elif op.overwrites is not None and op.overwrites(node.attrs, ins, outs) == i \
                    and ins[i].nbytes == outs[0].nbytes:
                delta = 0
            else:
                continue
            s_in = align(ins[i].nbytes, alignment)
            saving = s_in + s_out - max(s_out, delta + s_in)
            if saving > 0 and (best is None or saving > best.saving):
                best = InPlace(k, name, out, delta, saving)
        if best is not None:
            result.append(best)
    return result


def choose(graph: Graph, uses: list[BufferUse], alignment: int = ALIGNMENT, slack: float = SLACK,
           gradient_slack: float = GRADIENT_SLACK, first_step: int = 0) -> list[InPlace]:
    """The in-place pairs to use: candidates by decreasing saving, chained while the chain stays compact."""
    sizes = {u.tensor: align(u.size, alignment) for u in uses}
    gradients = {u.tensor for u in uses if u.role == Role.GRADIENT.value}
    group: dict[str, tuple[str, int]] = {}      # tensor -> (chain id, offset in the chain)
    members: dict[str, list[str]] = {}

    def find(name: str) -> tuple[str, int]:
        if name not in group:
            group[name] = (name, 0)
            members[name] = [name]
        return group[name]

    # The most crowded steps first: a saving counts where memory is tight, and an accepted link can block
    # a later one (a chain must stay compact).
    crowd = [0] * (len(graph.nodes) + 1)
    for u in uses:
        for k in range(u.first_use, u.last_use + 1):
            crowd[k] += sizes[u.tensor]
    chosen = []
    for c in sorted(candidates(graph, uses, alignment, first_step), key=lambda c: (-crowd[c.step], -c.saving, c.step)):
        (gi, ri), (go, ro) = find(c.input), find(c.output)
        if gi == go:
            continue
        # offset(out) = offset(in) - delta: shift the output's chain by (ri - delta) - ro
        shift = ri - c.delta - ro
        merged = [(n, group[n][1]) for n in members[gi]] + [(n, group[n][1] + shift) for n in members[go]]
        low = min(r for _, r in merged)
        extent = max(r + sizes[n] for n, r in merged) - low
        allowed = gradient_slack if all(n in gradients for n, _ in merged) else slack
        if extent > (1 + allowed) * max(sizes[n] for n, _ in merged):
            continue
        for n in members.pop(go):
            group[n] = (gi, group[n][1] + shift)
            members[gi].append(n)
        chosen.append(c)
    return sorted(chosen, key=lambda c: c.step)
