"""Fuse each weight gradient with its SGD update, so a layer's whole fp32 weight gradient never exists.

A pass (Graph in -> Graph out) on a training graph (``training.build_training_graph``), run before
``training.reorder.reorder`` wherever the device's schedule is made (compile, the C and QEMU engines, the plan
search's memory model, ``train``). Each pair grad-weight node -> ``sgd_update`` becomes one node of the fused op
(ops/grad_weight_sgd_update.py), whose kernel computes and applies the gradient a block of output-channel rows
at a time in a small scratch buffer the memory plan reserves (``OpDef.scratch``).

The integer step's pairs (conv2d_grad_weight_int -> sgd_update_int) are fused the same way.

Invariant: a pair is fused exactly when the update's gradient is the output of a grad-weight op with a fused
form and nothing else reads it (not summed by ``grad_accumulate`` with another gradient of the same weight, not
a graph output); the fused node takes the update's name and place, its inputs are (param, g_z, x, scale[,
momentum[, step]]); the grad-weight node and the gradient tensor disappear; every other node and tensor is kept,
in order. The fused reference composes the two references, so the graph computes the same state; ``verify``
still holds (the update's place is after every reader of the weight). Idempotent.
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import Graph, Node
from tinytrain.ops import sgd_update as sgd
from tinytrain.ops import sgd_update_int as sgd_int
from tinytrain.ops.grad_weight_sgd_update import FUSED, SCRATCH_BYTES, GradWeightSgdUpdateAttrs, block_rows

UPDATES = (sgd.OP.name, sgd_int.OP.name)  # the integer step's: its int32 gradient fused the same way


def fuse_updates(graph: Graph, scratch_bytes: int = SCRATCH_BYTES) -> Graph:
    """Fuse every eligible (grad-weight, sgd_update) pair; blocks sized by ``block_rows(..., scratch_bytes)``."""
    producers, consumers = graph.producers(), graph.consumers()
    fused: dict[str, Node] = {}  # update node name -> the fused node replacing it
    absorbed: set[str] = set()   # grad-weight nodes and gradient tensors that disappear
    for node in graph.nodes:
        if node.op not in UPDATES:
            continue
        g = node.inputs[sgd.GRAD]
        grad = producers.get(g)
        readers = consumers[g]
        if grad is None or grad.op not in FUSED or g in graph.outputs or len(readers) != 1 or readers[0] is not node:
            continue
        if FUSED[grad.op].name != f"{grad.op}_{node.op}":
            continue
        param = node.inputs[sgd.PARAM]
        attrs = GradWeightSgdUpdateAttrs(grad.attrs, node.attrs,
                                         block_rows(graph.tensors[param], graph.tensors[g].shape[0], scratch_bytes))
        fused[node.name] = Node(node.name, FUSED[grad.op].name, (param, *grad.inputs, *node.inputs[sgd.SCALE:]), (),
                                attrs)
        absorbed.update((grad.name, g))
    nodes = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in absorbed)
    tensors = {k: t for k, t in graph.tensors.items() if k not in absorbed}
    return replace(graph, tensors=tensors, nodes=nodes)
