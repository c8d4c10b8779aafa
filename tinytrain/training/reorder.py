"""Schedule + reorder of a training step (docs/design.md §2): updates as early as possible, buffers freed early.

``reorder`` is a pass (Graph in -> Graph out) on the graph ``training.build_training_graph`` returns, whose
backward runs in reverse forward order and whose updates all come at the end — so every weight gradient is
alive until the end of the backward pass. Here the nodes are list-scheduled:

- the forward nodes keep their order (the forward is a fixed int8 pipeline);
- an update (an op with ``OpDef.writes``) runs as soon as it is ready: its gradient (and other inputs)
  exist and every reader of the parameter it writes has run (e.g. the input gradient of the same layer,
  which reads the pre-update weight). Its gradient buffer is freed right there;
- among the other ready nodes, the one that grows the arena least runs first: bytes of its new buffers
  minus bytes of the buffers it reads last (so a layer's bias gradient runs before its input gradient,
  which then is the last reader of the masked output gradient and may overwrite it); ties keep the
  original order.

Saved activations end at their last backward reader and gradients at their update: lifetimes follow from
the order (memory/lifetimes.py). In-place execution is decided by the memory plan (memory/inplace.py).

Invariant: the same nodes and tensors; the order is topological; every reader of a parameter runs before
its update (``verify`` holds); forward nodes keep their relative order; the result is deterministic.
"""

from __future__ import annotations

from dataclasses import replace

from tinytrain.ir import Graph
from tinytrain.memory.planner import align
from tinytrain.ops import get_op
from tinytrain.training.autodiff import is_forward


def reorder(graph: Graph) -> Graph:
    ops = [get_op(node.op) for node in graph.nodes]
    root = _view_roots(graph, ops)
    deps, readers = _dependencies(graph, ops, root)
    order = _list_schedule(graph, ops, root, deps, readers)
    if len(order) != len(graph.nodes):
        raise ValueError(f"graph {graph.name}: the nodes have a dependency cycle; cannot schedule them")
    return replace(graph, nodes=tuple(graph.nodes[k] for k in order))


def _view_roots(graph: Graph, ops) -> dict[str, str]:
    """A view's output -> the buffer it views (views of views followed to the end)."""
    root: dict[str, str] = {}
    for k, node in enumerate(graph.nodes):
        if ops[k].view:
            root[node.outputs[0]] = root.get(node.inputs[0], node.inputs[0])
    return root


def _dependencies(graph: Graph, ops, root: dict[str, str]) -> tuple[list[set[int]], dict[str, set[int]]]:
    """(the nodes each node waits for: producers, the previous forward node, and for an update every reader of the
    parameter it writes; computed buffer -> the nodes that read it)."""
    nodes = graph.nodes
    producer = {o: k for k, node in enumerate(nodes) for o in node.outputs}
    deps: list[set[int]] = [set() for _ in nodes]
    readers: dict[str, set[int]] = {}
    param_readers: dict[str, set[int]] = {}
    previous_forward = None
    for k, node in enumerate(nodes):
        for i in node.inputs:
            if not i:
                continue
            if i in producer:
                deps[k].add(producer[i])
            if i in producer or i in graph.inputs:
                readers.setdefault(root.get(i, i), set()).add(k)
            elif not ops[k].writes:
                param_readers.setdefault(i, set()).add(k)
        if is_forward(graph, node):
            if previous_forward is not None:
                deps[k].add(previous_forward)
            previous_forward = k
    for k, node in enumerate(nodes):
        for w in ops[k].writes:
            if w < len(node.inputs) and node.inputs[w]:
                deps[k] |= param_readers.get(node.inputs[w], set())
    return [d - {k} for k, d in enumerate(deps)], readers


def _list_schedule(graph: Graph, ops, root: dict[str, str], deps: list[set[int]],
                   readers: dict[str, set[int]]) -> list[int]:
    """The list schedule: a ready update first, else the ready node that grows the arena least (ties: the
    original order)."""
    nodes = graph.nodes
    users: list[list[int]] = [[] for _ in nodes]
    for k, d in enumerate(deps):
        for j in d:
            users[j].append(k)
    waiting = [len(d) for d in deps]
    remaining = {r: len(ks) for r, ks in readers.items()}
    kept = {root.get(o, o) for o in graph.outputs}
    size = {name: align(t.nbytes) for name, t in graph.tensors.items()}

    def growth(k: int) -> int:
        new = 0 if ops[k].view else sum(size[o] for o in nodes[k].outputs)
        freed = sum(size[r] for r in {root.get(i, i) for i in nodes[k].inputs if i}
                    if remaining.get(r) == 1 and r not in kept)
        return new - freed

    ready = [k for k in range(len(nodes)) if waiting[k] == 0]
    order: list[int] = []
    while ready:
        updates = [k for k in ready if ops[k].writes]
        k = min(updates) if updates else min(ready, key=lambda j: (growth(j), j))
        ready.remove(k)
        order.append(k)
        for r in {root.get(i, i) for i in nodes[k].inputs if i}:
            if r in remaining:
                remaining[r] -= 1
        for j in users[k]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    return order


def update_steps(graph: Graph) -> list[int]:
    """The steps of the update nodes (for reports: how early the gradients are consumed)."""
    return [k for k, node in enumerate(graph.nodes) if get_op(node.op).writes]
