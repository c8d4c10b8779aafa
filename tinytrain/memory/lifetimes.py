"""Buffer lifetimes of a graph's activations over its node schedule (step k = node k)."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.ir import Graph


@dataclass(frozen=True)
class BufferUse:
    """One arena buffer: a tensor alive over the inclusive step range [first_use, last_use]."""

    tensor: str
    role: str
    size: int
    first_use: int
    last_use: int
    views: tuple[str, ...] = ()  # tensors that are these same bytes under another shape (e.g. reshape outputs)


def activation_lifetimes(graph: Graph) -> list[BufferUse]:
    """Every non-constant tensor of a batch-1 forward pass: from its producer to its last reader.

    Graph inputs are alive from step 0; graph outputs stay alive until the last step. The output of a
    view op (``OpDef.view``, e.g. reshape) is no buffer of its own: it is listed in ``views`` of the
    buffer it aliases, whose lifetime extends to the view's last reader.
    """
    from tinytrain.ops import get_op

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
    uses = []
    for name in first:
        t = graph.tensors[name]
        group = [name] + views.get(name, [])
        role = ("input" if name in graph.inputs else
                "output" if any(g in graph.outputs for g in group) else "activation")
        uses.append(BufferUse(name, role, t.nbytes, first[name], final[name], tuple(views.get(name, ()))))
    return uses
