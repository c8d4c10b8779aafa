"""Save 1-bit clamp masks instead of int8 outputs the backward pass reads only through ``clamp_mask``.

A pass (Graph in -> Graph out) on a training graph (``training.build_training_graph``, fused or not), run by
``training.device_step`` before the schedule. The backward pass needs, per saved tensor, the int8 activation where a
weight gradient (or anything else) reads its values, and only "was the clamp active" where ``clamp_mask`` alone reads
it (docs/guide/how-it-works.md): a bias-only layer, a frozen layer the gradient flows through, an add. For
such an output y a forward node ``pack_clamp_mask`` (ops/clamp_mask_packed.py) right after y's producer packs the
mask into bits, and each ``clamp_mask(g, y)`` becomes ``clamp_mask_packed(g, bits)``; y is then an ordinary forward
activation, freed at its last forward reader, and the bits (1/8 of its bytes) are what the backward keeps.

Invariant: the masked gradients are exactly the unmasked graph's (same node names, outputs and values); an int8
output is replaced exactly when every reader of it outside the forward pass is a ``clamp_mask`` reading it as the
saved output and it is not a graph output; one pack node per (output, clamp range), placed right after the
output's producer, so the forward nodes stay a prefix in their order; roles SAVED / ACTIVATION are re-derived
(``autodiff.mark_saved``); ``verify`` still holds. Idempotent.
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import DType, Graph, Node, Role, Tensor
from tinytrain.ops import clamp_mask, clamp_mask_packed
from tinytrain.training.autodiff import is_forward, mark_saved

SAVED_OUTPUT = 1  # clamp_mask's inputs: (gradient, saved output)


def _unique(name: str, taken) -> str:
    k, candidate = 1, name
    while candidate in taken:
        candidate, k = f"{name}#{k}", k + 1
    return candidate


def mask_only(graph: Graph, name: str, readers: list[Node]) -> bool:
    """Whether the backward reads tensor ``name`` only as the saved output of ``clamp_mask`` nodes."""
    t = graph.tensors[name]
    if t.dtype != DType.INT8 or t.has_data or name in graph.inputs or name in graph.outputs:
        return False
    training = [n for n in readers if not is_forward(graph, n)]
    return bool(training) and all(
        n.op == clamp_mask.OP.name and n.inputs[SAVED_OUTPUT] == name and name not in n.inputs[:SAVED_OUTPUT]
        for n in training)


def save_masks(graph: Graph) -> Graph:
    """Pack the clamp mask of every output that only ``clamp_mask`` nodes read in the backward pass."""
    consumers, producers = graph.consumers(), graph.producers()
    tensors = dict(graph.tensors)
    node_names = {n.name for n in graph.nodes}
    bits_of: dict[tuple[str, int, int], str] = {}  # (output, act_min, act_max) -> its packed mask
    packs: dict[str, list[Node]] = {}              # producer node -> the pack nodes that follow it
    replaced: dict[str, Node] = {}
    for node in graph.nodes:
        if node.op != clamp_mask.OP.name:
            continue
        y = node.inputs[SAVED_OUTPUT]
        if y not in producers or not mask_only(graph, y, consumers[y]):
            continue
        a: clamp_mask.ClampMaskAttrs = node.attrs
        key = (y, a.act_min, a.act_max)
        if key not in bits_of:
            bits = _unique(f"{y}.mask", tensors)
            tensors[bits] = Tensor(bits, clamp_mask_packed.packed_shape(graph.tensors[y].shape), DType.UINT8,
                                   Role.SAVED)
            pack_name = _unique(f"{y}.pack_mask", node_names)
            node_names.add(pack_name)
            packs.setdefault(producers[y].name, []).append(
                Node(pack_name, clamp_mask_packed.PACK.name, (y,), (bits,), a))
            bits_of[key] = bits
        replaced[node.name] = replace(node, op=clamp_mask_packed.OP.name, inputs=(node.inputs[0], bits_of[key]),
                                      attrs=clamp_mask_packed.ClampMaskPackedAttrs())
    if not replaced:
        return graph
    nodes: list[Node] = []
    for node in graph.nodes:
        nodes.append(replaced.get(node.name, node))
        nodes.extend(packs.get(node.name, ()))
    return mark_saved(replace(graph, tensors=tensors, nodes=tuple(nodes)))
