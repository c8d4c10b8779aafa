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


def activation_lifetimes(graph: Graph) -> list[BufferUse]:
    """Every non-constant tensor of a batch-1 forward pass: from its producer to its last reader.

    Graph inputs are alive from step 0; graph outputs stay alive until the last step.
    """
    last = len(graph.nodes) - 1
    first: dict[str, int] = {name: 0 for name in graph.inputs}
    final: dict[str, int] = {name: 0 for name in graph.inputs}
    for k, node in enumerate(graph.nodes):
        for name in node.outputs:
            first[name] = final[name] = k
        for name in node.inputs:
            if name in first:
                final[name] = max(final[name], k)
    for name in graph.outputs:
        final[name] = last
    uses = []
    for name in first:
        t = graph.tensors[name]
        role = "input" if name in graph.inputs else "output" if name in graph.outputs else "activation"
        uses.append(BufferUse(name, role, t.nbytes, first[name], final[name]))
    return uses
