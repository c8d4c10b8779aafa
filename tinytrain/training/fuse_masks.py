"""Fuse the mean's broadcast gradient into the packed clamp mask that reads it: the (H,W,C) fp32 broadcast of g / (H*W)
is never stored, the masked gradient is written directly from the (C,) gradient of the mean.

A pass (Graph in -> Graph out) on a training graph after ``training.masks.save_masks`` (``training.device_step``
runs it). Invariant: a ``mean_grad`` node is fused exactly when its output is read by nothing but one
``clamp_mask_packed`` node, as the gradient, and is not a graph output; the pair becomes one ``mean_grad_masked``
node (ops/mean.py) with the clamp node's name, place and output, inputs (g, bits); its values are the pair's
(the same float32 division, then the same mask); every other node and tensor is kept, in order; ``verify`` still
holds. Idempotent.
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import Graph, Node
from tinytrain.ops import clamp_mask_packed, mean


def fuse_mean_masks(graph: Graph) -> Graph:
    producers, consumers = graph.producers(), graph.consumers()
    fused: dict[str, Node] = {}  # clamp node name -> the fused node replacing it
    absorbed: set[str] = set()   # mean_grad nodes and their broadcast outputs
    for node in graph.nodes:
        if node.op != clamp_mask_packed.OP.name:
            continue
        g = node.inputs[0]
        grad = producers.get(g)
        if grad is None or grad.op != mean.GRAD.name or g in graph.outputs or consumers[g] != [node]:
            continue
        attrs = mean.MeanGradMaskedAttrs(grad.attrs.input_hw)
        fused[node.name] = Node(node.name, mean.GRAD_MASKED.name, (grad.inputs[0], node.inputs[1]), node.outputs, attrs)
        absorbed.update((grad.name, g))
    if not fused:
        return graph
    nodes = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in absorbed)
    return replace(graph, tensors={k: t for k, t in graph.tensors.items() if k not in absorbed}, nodes=nodes)
