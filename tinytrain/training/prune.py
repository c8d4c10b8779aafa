"""Dead-node elimination of a training graph.

Invariant: a node is kept iff it writes state (an update) or some kept node or graph output reads one of
its outputs; tensors nothing refers to are dropped; SAVED marks exactly the forward activations a
remaining training node reads. Hence, after ``sparse.apply_plan`` + ``qas.add_updates``: no gradient is
computed that no update needs, input-gradient propagation stops at the lowest updated layer, and weight
gradients exist only for the planned channels.
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import Graph
from tinytrain.ops import get_op
from tinytrain.training.autodiff import mark_saved


def prune(graph: Graph) -> Graph:
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if get_op(node.op).writes or any(o in needed for o in node.outputs):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    nodes = tuple(reversed(kept))
    used = set(graph.inputs) | set(graph.outputs) | {i for n in nodes for i in (*n.inputs, *n.outputs) if i}
    tensors = {k: t for k, t in graph.tensors.items() if k in used}
    return mark_saved(replace(graph, tensors=tensors, nodes=nodes))
