"""``verify(graph)``: the structural invariants every pass keeps, checked against each op's rules (``tinytrain.ops``).

Kept apart from ``ir.py`` so that the IR does not import the ops (the ops import the IR).
"""

from __future__ import annotations

from tinytrain.ir import Graph, Role
from tinytrain.ops import get_op


def verify(graph: Graph) -> None:
    """Check the structural invariants every pass keeps. Raises ValueError naming the first violation.

    - every node input exists and is a graph input, a constant, or produced by an earlier node
      (so the node order is topological and there is no cycle);
    - every tensor is produced at most once and graph outputs are produced;
    - constants carry data of their declared shape and dtype; activations carry none;
    - per-channel quantization has one scale per channel along its axis;
    - each node's attrs are of its op's attribute type and its output shapes follow the op's shape rule;
    - a tensor an op writes in place (``OpDef.writes``, the training updates) is a weight, bias or optimizer
      state, is written by one node only, and no later node reads it (updates run after every reader).
    """
    available = set(graph.inputs)
    for t in graph.tensors.values():
        if t.has_data:
            if t.data is None:
                raise ValueError(f"constant {t.name} has no data")
            if tuple(t.data.shape) != t.shape or t.data.dtype != t.dtype.np:
                raise ValueError(f"constant {t.name}: data {t.data.dtype}{t.data.shape} != {t.dtype.value}{t.shape}")
            available.add(t.name)
        elif t.data is not None:
            raise ValueError(f"non-constant tensor {t.name} carries data")
        if t.quant is not None and t.quant.axis is not None:
            if not 0 <= t.quant.axis < len(t.shape) or len(t.quant.scale) != t.shape[t.quant.axis]:
                raise ValueError(f"tensor {t.name}: per-channel quantization does not match shape {t.shape}")
    for name in graph.inputs:
        if name not in graph.tensors:
            raise ValueError(f"graph input {name} is not a tensor")
    produced: set[str] = set()
    written: dict[str, str] = {}
    for node in graph.nodes:
        op = get_op(node.op)
        if not isinstance(node.attrs, op.attrs_type):
            raise ValueError(f"node {node.name}: attrs {type(node.attrs).__name__} is not {op.attrs_type.__name__}")
        for i in node.inputs:
            if i and i not in available:
                raise ValueError(f"node {node.name} reads {i} before it is produced (or it does not exist)")
            if i in written:
                raise ValueError(f"node {node.name} reads {i} after {written[i]} updated it")
        for k in op.writes:
            if k >= len(node.inputs) or not node.inputs[k]:
                continue
            target = graph.tensors[node.inputs[k]]
            if target.role not in (Role.WEIGHT, Role.BIAS, Role.OPTIMIZER_STATE):
                raise ValueError(f"node {node.name} writes {target.name}, a {target.role.value} tensor")
            written[target.name] = node.name
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        shapes = op.infer_shapes(node.attrs, ins)
        for out, shape in zip(node.outputs, shapes, strict=True):
            if out not in graph.tensors:
                raise ValueError(f"node {node.name} writes unknown tensor {out}")
            if out in produced or out in graph.inputs or graph.tensors[out].has_data:
                raise ValueError(f"tensor {out} is produced more than once")
            if tuple(graph.tensors[out].shape) != tuple(shape):
                raise ValueError(f"node {node.name}: output {out} has shape {graph.tensors[out].shape}, op says {shape}")
            produced.add(out)
            available.add(out)
    for name in graph.outputs:
        if name not in available:
            raise ValueError(f"graph output {name} is never produced")
