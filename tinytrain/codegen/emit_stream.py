"""The streamed region of a schedule (memory/stream.py) as C: one block that sweeps over the region's nodes.

    {
        int d0 = 0, d1 = 0, ...;        rows of node k's output computed
        int r1 = 0, ...;                first row held by node k's line buffer
        while (d38 < 8) {               until the region's last node is done
            if (d0 < 64 && <node 0's inputs hold the rows its next row reads>) {
                if (d0 - r0 == 3) r0 = tt_line_drop(a1, r0, <lowest row still read>, d0, 1024);
                <node 0's kernel, one output row>
                d0++;
            }
            ...
        }
    }

The same schedule ``memory.stream.sweeps`` runs at compile time to size the line buffers, so a line buffer is never
full when its rows cannot go. Each node's kernel comes from its ordinary binding, through a context that presents
the row: a node whose row windows are all aligned (1x1 stride-1 convolutions, elementwise adds) binds on one-row
views of its tensors (shape (1,1,W,C), pointers at row d_k of each buffer); a windowed node (any other convolution)
binds on the whole tensors and gets a ``Band`` (output rows [d_k, d_k + 1), the first rows its buffers hold).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tinytrain.codegen import cformat
from tinytrain.codegen.context import Band, Call
from tinytrain.ir import Graph, Node, Tensor
from tinytrain.memory.stream import StreamRegion
from tinytrain.ops import RowWindow


class _RowContext:
    """The emitter's context as the binding of node ``k`` of a streamed region sees it (see the module doc)."""

    def __init__(self, ctx, plan: StreamRegion, k: int, row0: dict[str, str]) -> None:
        self._ctx = ctx
        self._plan = plan
        self._k = k
        self._row0 = row0
        self._aligned = all(w.aligned for _, w in plan.windows[k])

    def __getattr__(self, name: str):
        return getattr(self._ctx, name)

    def _row(self, name: str) -> str:
        return f"d{self._k}" if name not in self._row0 else f"(d{self._k} - {self._row0[name]})"

    def extent(self, name: str) -> tuple[int, int]:
        start = self._ctx.offsets[name]
        return start, start + self._plan.buffer(name).nbytes  # a line buffer's rows, or the whole tensor

    def tensor(self, name: str) -> Tensor:
        t = self._ctx.tensor(name)
        if self._aligned and not t.has_data:
            return replace(t, shape=(t.shape[0], 1) + tuple(t.shape[2:]))
        return t

    def act(self, name: str) -> str:
        var = self._ctx.act(name)
        if not self._aligned:
            return var
        return f"{var} + {self._row(name)} * {self._plan.buffer(name).row_bytes}"

    def band(self, node: Node) -> Band | None:
        if self._aligned:
            return None
        k = self._k
        return Band(f"d{k}", f"d{k} + 1", self._row0.get(node.inputs[0], "0"), self._row0.get(node.outputs[0], "0"))


def _ready(j: int, w: RowWindow, k: int, total_j: int) -> str:
    """C: node j has computed the rows of its output that node k's next row reads."""
    if w.aligned:
        return f"d{j} > d{k}"
    end = f"d{k}" + (f" * {w.stride}" if w.stride != 1 else "") + (f" + {w.offset + w.extent}" if w.offset + w.extent else "")
    return f"d{j} >= tt_imin({total_j}, {end})"


def _low(plan: StreamRegion, tensor: str, p: str) -> str:
    """C: the lowest row of ``tensor`` its readers still need when row ``p`` is about to be written
    (memory.stream.low_water)."""
    low = p
    for rd in plan.buffer(tensor).readers:
        w, c = rd.window, rd.step
        first = f"d{c}" + (f" * {w.stride}" if w.stride != 1 else "") + (
            f" + {w.offset}" if w.offset > 0 else f" - {-w.offset}" if w.offset < 0 else "")
        if w.offset < 0:
            first = f"tt_imax(0, {first})"
        low = f"tt_imin({low}, d{c} < {plan.total[c]} ? {first} : {p})"
    return low


def _drop(plan: StreamRegion, tensor: str, p: str, row0: str, pointer: str) -> list[str]:
    """C: before row ``p`` of ``tensor`` is written, when its line buffer is full, drop the rows no reader needs."""
    b = plan.buffer(tensor)
    return [f"    if ({p} - {row0} == {b.rows}) {{  /* full: drop the rows no reader needs */",
            f"        {row0} = tt_line_drop({pointer}, {row0}, {_low(plan, tensor, p)}, {p}, {b.row_bytes});",
            "    }"]


def _pull(plan: StreamRegion, tensor: str, w: RowWindow, k: int, i: str, pointer: str) -> list[str]:
    """C: read the input rows that node k's next output row reads from the row source into their line buffer."""
    b = plan.buffer(tensor)
    end = f"d{k}" + (f" * {w.stride}" if w.stride != 1 else "") + (
        f" + {w.offset + w.extent}" if w.offset + w.extent else "")
    lines = [f"    while (s{i} < tt_imin({b.total}, {end})) {{  /* the rows it reads, from the row source */"]
    lines.extend("    " + line for line in _drop(plan, tensor, f"s{i}", f"q{i}", pointer))
    lines.append(f"        read_row(source, s{i}, {pointer} + (s{i} - q{i}) * {b.row_bytes});")
    lines.append(f"        s{i}++;")
    lines.append("    }")
    return lines


def render_region(graph: Graph, plan: StreamRegion, ctx, bind: Callable[[Node, object], Call],
                  step_comment: Callable[[int, Node], str]) -> tuple[dict, set[str]]:
    """The region as one schedule step (``{"comment", "code"}``) and the pointer variables its code uses."""
    nodes = graph.nodes[: plan.steps]
    produced = {node.outputs[0]: k for k, node in enumerate(nodes)}
    sources = {b.tensor: f"{graph.inputs.index(b.tensor)}" for b in plan.buffers if b.source}
    rings = {b.tensor: b for b in plan.rings}
    row0 = {t: f"r{produced[t]}" if t in produced else f"q{sources[t]}" for t in rings}
    used: set[str] = set()
    body = []
    for k, node in enumerate(nodes):
        call = bind(node, _RowContext(ctx, plan, k, row0))
        used.update(ctx.pointers[t] for t in node.inputs + node.outputs if t in ctx.pointers)
        ready = "".join(f" && {_ready(produced[t], w, k, plan.total[produced[t]])}"
                        for t, w in plan.windows[k] if t in produced)
        out = node.outputs[0]
        lines = [f"/* {step_comment(k, node)}"
                 + (f", line buffer of {rings[out].rows} row(s) */" if out in rings else " */"),
                 f"if (d{k} < {plan.total[k]}{ready}) {{"]
        for t, w in plan.windows[k]:
            if t in sources:
                lines.extend(_pull(plan, t, w, k, sources[t], ctx.pointers[t]))
        if out in rings:
            lines.extend(_drop(plan, out, f"d{k}", f"r{k}", ctx.pointers[out]))
        lines.append(f"    {call.kernel.name}({', '.join(call.args)});")
        lines.append(f"    d{k}++;")
        lines.append("}")
        body.extend(lines)
    last = plan.steps - 1
    declare = [f"int {', '.join(f'd{k} = 0' for k in range(plan.steps))};  /* rows computed, per node */"]
    if sources:
        declare.append(f"int {', '.join(f's{i} = 0' for i in sources.values())};  /* input rows read */")
    declare.append(f"int {', '.join(f'{v} = 0' for v in row0.values())};  /* first row in each line buffer */")
    code = "\n    ".join(["{"] + [f"    {line}" for line in declare]
                     + [f"    while (d{last} < {plan.total[last]}) {{"]
                     + [f"        {line}" for line in body] + ["    }", "}"])
    held = sum(b.nbytes for b in rings.values())
    comment = (f"steps 0..{last}: row-streamed (memory/stream.py), {len(rings)} line buffers of "
               f"{held} bytes instead of whole tensors; the region's output "
               f"{cformat.comment(nodes[-1].outputs[0])} is whole")
    return {"comment": comment, "code": code}, used
