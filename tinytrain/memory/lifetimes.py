"""Buffer lifetimes of a graph's computed tensors over its node schedule (step k = node k).

Works for a forward graph and for a training step alike: every tensor without data (graph inputs,
activations, saved activations, gradients, the loss) is one arena buffer from its producer to its last
reader. Constants live in flash and trainable copies / optimizer state in static SRAM (memory/footprint.py);
neither is an arena buffer. A saved activation is therefore freed after its last backward use and a
gradient right after the update that consumes it — the schedule (training/reorder.py) decides when that is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytrain.ir import Graph
from tinytrain.ops import get_op

if TYPE_CHECKING:
    from tinytrain.memory.stream import StreamRegion

SCRATCH = "scratch"
RING = "ring"


@dataclass(frozen=True)
class BufferUse:
    """One arena buffer: a tensor alive over the inclusive step range [first_use, last_use]."""

    tensor: str
    role: str
    size: int
    first_use: int
    last_use: int
    views: tuple[str, ...] = ()  # tensors that are these same bytes under another shape (e.g. reshape outputs)


def buffer_lifetimes(graph: Graph, stream: StreamRegion | None = None) -> list[BufferUse]:
    """Every computed tensor of a batch-1 step: from its producer to its last reader, in graph order.

    Graph inputs are alive from step 0; graph outputs stay alive until the last step. The output of a
    view op (``OpDef.view``, e.g. reshape) is no buffer of its own: it is listed in ``views`` of the
    buffer it aliases, whose lifetime extends to the view's last reader. Roles: ``input``, ``output``, or
    the tensor's role (``activation``, ``saved``, ``gradient``).

    With a streamed region (memory/stream.py) its nodes run interleaved, row by row, over steps 0 .. steps - 1:
    a line buffer (role ``ring``) is its ring's rows, alive over the whole region; a whole tensor the region
    computes is alive from step 0 (its rows are computed from the region's start on) to its last reader.
    """

    last = len(graph.nodes) - 1
    first: dict[str, int] = {name: 0 for name in graph.inputs}
    final: dict[str, int] = {name: 0 for name in graph.inputs}
    root: dict[str, str] = {}
    for k, node in enumerate(graph.nodes):
        for name in node.inputs:
            r = root.get(name, name)
            if r in first:
                final[r] = max(final[r], k)
        if get_op(node.op).view and root.get(node.inputs[0], node.inputs[0]) in first:
            root[node.outputs[0]] = root.get(node.inputs[0], node.inputs[0])
            continue
        for name in node.outputs:
            first[name] = final[name] = k
    for name in graph.outputs:
        final[root.get(name, name)] = last
    views: dict[str, list[str]] = {}
    for view, r in root.items():
        views.setdefault(r, []).append(view)
    rings = {b.tensor: b for b in stream.buffers} if stream else {}
    uses = []
    for name in first:
        t = graph.tensors[name]
        group = [name] + views.get(name, [])
        role = ("input" if name in graph.inputs else
                "output" if any(g in graph.outputs for g in group) else t.role.value)
        size, start, end = t.nbytes, first[name], final[name]
        if name in rings:
            start, end = 0, max(end, stream.steps - 1)
            if not rings[name].whole:
                role, size = RING, rings[name].nbytes
        uses.append(BufferUse(name, role, size, start, end, tuple(views.get(name, ()))))
    return uses


def activation_lifetimes(graph: Graph) -> list[BufferUse]:
    """The buffers of a forward graph (the name this module had before training graphs were planned)."""
    return buffer_lifetimes(graph)


def scratch_name(node: str) -> str:
    """The buffer name of node ``node``'s kernel scratch."""
    return f"{node}:{SCRATCH}"


def scratch_requests(graph: Graph, stream: StreamRegion | None = None) -> list[BufferUse]:
    """One buffer per node whose kernel asks for scratch (``OpDef.scratch``), alive at that node's step only
    (over the whole streamed region for a node of it)."""

    uses = []
    for k, node in enumerate(graph.nodes):
        op = get_op(node.op)
        if op.scratch is None:
            continue
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        size = int(op.scratch(node.attrs, ins, [graph.tensors[o] for o in node.outputs]))
        if size > 0:
            region = stream is not None and k < stream.steps
            uses.append(BufferUse(scratch_name(node.name), SCRATCH, size, 0 if region else k,
                                  stream.steps - 1 if region else k))
    return uses
