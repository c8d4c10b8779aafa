"""A small builder that extends a graph with new tensors and nodes (used by the passes and backward rules).

Names are made unique by suffixing ``#k``; output shapes come from the op's shape rule, so a node is
created consistent with ``verify``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.ops import get_op


class GraphBuilder:
    """Mutable scratch copy of a graph; ``build()`` returns a new frozen Graph."""

    def __init__(self, graph: Graph, requires_grad: frozenset[str] = frozenset()) -> None:
        self.base = graph
        self.tensors: dict[str, Tensor] = dict(graph.tensors)
        self.nodes: list[Node] = list(graph.nodes)
        self.inputs: list[str] = list(graph.inputs)
        self.outputs: list[str] = list(graph.outputs)
        self._node_names = {n.name for n in graph.nodes}
        self.requires_grad = requires_grad

    # -- queries used by backward rules ------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def needs_grad(self, name: str) -> bool:
        """Whether a gradient of this tensor is wanted (it depends on a parameter being differentiated)."""
        return bool(name) and name in self.requires_grad

    # -- construction --------------------------------------------------------------------------------
    def unique(self, name: str, taken) -> str:
        if name not in taken:
            return name
        k = 1
        while f"{name}#{k}" in taken:
            k += 1
        return f"{name}#{k}"

    def add_tensor(self, name: str, shape: Sequence[int], dtype: DType, role: Role,
                   quant: QuantParams | None = None, data: np.ndarray | None = None) -> str:
        name = self.unique(name, self.tensors)
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype, role, quant, data)
        return name

    def constant(self, name: str, data: np.ndarray, role: Role = Role.CONSTANT) -> str:
        dtype = DType(np.dtype(data.dtype).name)
        return self.add_tensor(name, data.shape, dtype, role, data=np.ascontiguousarray(data))

    def emit(self, op: str, inputs: Sequence[str], attrs, name: str, dtype: DType = DType.FLOAT32,
             role: Role = Role.GRADIENT, out_names: Sequence[str] | None = None) -> list[str]:
        """Append a node; its outputs are new tensors of ``dtype`` / ``role`` shaped by the op's rule."""
        opdef = get_op(op)
        ins = [self.tensors[i] if i else None for i in inputs]
        shapes = opdef.infer_shapes(attrs, ins)
        names = out_names or ([name] if len(shapes) == 1 else [f"{name}:{k}" for k in range(len(shapes))])
        outs = [self.add_tensor(n, s, dtype, role) for n, s in zip(names, shapes, strict=True)]
        node_name = self.unique(name, self._node_names)
        self._node_names.add(node_name)
        self.nodes.append(Node(node_name, op, tuple(inputs), tuple(outs), attrs))
        return outs

    def build(self, **changes) -> Graph:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(n.outputs)
        tensors = {k: t for k, t in self.tensors.items() if k in used}
        fields = dict(name=self.base.name, tensors=tensors, nodes=tuple(self.nodes), inputs=tuple(self.inputs),
                      outputs=tuple(self.outputs), source_sha256=self.base.source_sha256, uint8_io=self.base.uint8_io)
        fields.update(changes)
        return Graph(**fields)
