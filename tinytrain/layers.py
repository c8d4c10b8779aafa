"""The per-layer table of ``compile`` and ``inspect`` (as STM32Cube.AI's analyze): for each layer of the model its
arena, flash and MACs, what it trains, and where the peak is.

A layer is a node of the model (``inspect``'s ``#``). Every step of the compiled schedule belongs to one layer: its
own forward node, a node named after it (``NAME.grad_z``, ``NAME.grad_input``), a node reading one of its
parameters (a weight's update), else the layer that produced the step's first input (a loss, a mask). A layer's
arena is the largest live set of the arena over its steps (forward, backward, updates); its flash the constants its
steps read (each counted once, at its first reader); its MACs the forward node's (training: + the backward's);
``trains`` the SRAM its updates keep outside the arena (the copies of the parameters they update, remainders and
momentum). Long names (TFLite's ``a/b/c;d/e``) are shortened in
the text, the full names stay in report.json.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.ir import Graph, Role
from tinytrain.memory.report import MemoryReport
from tinytrain.memory.short import short_name
from tinytrain.ops import get_op
from tinytrain.sizes import format_size

NAME_WIDTH = 36


@dataclass(frozen=True)
class Layer:
    index: int          # the model node's index (inspect's #); -1: steps of no layer
    op: str
    name: str
    arena_bytes: int    # the largest live arena over the layer's steps
    flash_bytes: int    # constants its steps read
    macs: int           # forward
    train_macs: int     # backward and updates (training)
    trains_bytes: int   # SRAM of its training outside the arena: copies of the parameters it updates, their remainders
    peak: bool          # the step of the arena's largest live set is one of the layer's

    def to_json(self) -> dict:
        return {"index": self.index, "op": self.op, "name": self.name, "arena_bytes": self.arena_bytes,
                "flash_bytes": self.flash_bytes, "macs": self.macs, "train_macs": self.train_macs,
                "trains_bytes": self.trains_bytes, "peak": self.peak}


def _macs(graph: Graph, node) -> int:
    ins = [graph.tensors[i] if i else None for i in node.inputs]
    return get_op(node.op).macs(node.attrs, ins, [graph.tensors[o] for o in node.outputs])


def step_layers(model: Graph, step: Graph) -> list[int]:
    """For each node of ``step``, the index of the model layer it belongs to (-1: none), by the rules above."""
    index = {n.name: k for k, n in enumerate(model.nodes)}
    by_length = sorted(index, key=len, reverse=True)
    owner: dict[str, int] = {}  # parameter -> layer (its first reader among the forward nodes)
    for k, n in enumerate(model.nodes):
        for i in n.inputs:
            if i and model.tensors[i].is_constant:
                owner.setdefault(i, k)
    produced: dict[str, int] = {}
    result = []
    for n in step.nodes:
        k = index.get(n.name)
        if k is None:
            k = next((index[name] for name in by_length if n.name.startswith(name + ".")), None)
        if k is None:
            k = next((owner[i] for i in n.inputs if i in owner), None)
        if k is None:
            k = next((produced[i] for i in n.inputs if i in produced), -1)
        result.append(k)
        for o in n.outputs:
            produced[o] = k
    return result


def layer_table(model: Graph, step: Graph, report: MemoryReport) -> list[Layer]:
    """The layers of ``model`` as the schedule ``step`` (the training step or the forward pass) and its ``report``
    use them; a last entry (index -1) for steps of no layer, if any."""
    layers = step_layers(model, step)
    live = [sum(roles.values()) for roles in report.live_by_role()]
    trained = dict(report.trainable)
    k_ids = sorted(set(layers), key=lambda k: (k < 0, k))
    arena = {k: 0 for k in k_ids}
    flash = {k: 0 for k in k_ids}
    macs = {k: 0 for k in k_ids}
    train_macs = {k: 0 for k in k_ids}
    trains = {k: 0 for k in k_ids}
    seen: set[str] = set()
    updated: set[str] = set()
    forward = {n.name for n in model.nodes}
    for s, (n, k) in enumerate(zip(step.nodes, layers)):
        arena[k] = max(arena[k], live[s] if s < len(live) else 0)
        for i in n.inputs:
            if i and i not in seen and step.tensors[i].is_constant:
                seen.add(i)
                flash[k] += step.tensors[i].nbytes
        for w in get_op(n.op).writes:
            t = n.inputs[w] if w < len(n.inputs) else None
            if t and t not in updated and (t in trained or step.tensors[t].role is Role.OPTIMIZER_STATE):
                updated.add(t)
                trains[k] += trained.get(t, step.tensors[t].nbytes)
        (macs if n.name in forward else train_macs)[k] += _macs(step, n)
    peak = layers[report.peak_step] if report.peak_step < len(layers) else None
    rows = []
    for k in k_ids:
        node = model.nodes[k] if k >= 0 else None
        rows.append(Layer(k, node.op if node else "-", node.name if node else "(other steps)", arena[k], flash[k],
                          macs[k], train_macs[k], trains[k], k == peak))
    return rows


def layer_text(layers: list[Layer], training: bool) -> str:
    """The table: one row a layer, sizes in B / KB, the peak marked."""
    head = ["#", "op", "name", "arena", "weights", "MACs"] + (["train MACs", "trains"] if training else [])
    rows = [head]
    for r in layers:
        row = ["" if r.index < 0 else str(r.index), r.op, short_name(r.name, NAME_WIDTH), format_size(r.arena_bytes),
               format_size(r.flash_bytes) if r.flash_bytes else "-", f"{r.macs:,}"]
        if training:
            row += [f"{r.train_macs:,}" if r.train_macs else "-", format_size(r.trains_bytes) if r.trains_bytes else "-"]
        rows.append(row + (["<- peak"] if r.peak else []))
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(head))]
    right = {0, 3, 4, 5, 6, 7}
    lines = ["  " + "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in
                              enumerate(r[:len(head)])).rstrip() + ("  " + r[-1] if len(r) > len(head) else "")
             for r in rows]
    title = ("  per layer (arena: the largest live set over its steps; weights: the flash of the constants it reads, "
             "before the kernels' tables" + ("; trains: SRAM of its updated copies and remainders" if training else "")
             + "):")
    return "\n".join([title, *lines])
