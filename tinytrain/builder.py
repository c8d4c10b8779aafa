"""The one graph builder: a graph under construction, from scratch or extending a graph, frozen by ``build()``.

The training passes and the ops' backward rules extend a graph with it, the ONNX frontend builds the imported model
on it (``frontends/onnx_emit.IRBuilder``), and the tests' small graphs are built on it. Names are made unique by
suffixing ``<separator>k`` (``#k`` by default); output shapes come from the op's shape rule, so a node is created
consistent with ``verify``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.names import unique_name
from tinytrain.ops import get_op


class GraphBuilder:
    """Mutable scratch copy of a graph (an empty one named ``name`` without ``graph``); ``build()`` returns a new
    frozen Graph."""

    def __init__(self, graph: Graph | None = None, requires_grad: frozenset[str] = frozenset(), *,
                 name: str = "graph", separator: str = "#") -> None:
        graph = Graph(name, {}, (), (), ()) if graph is None else graph
        self.base = graph
        self.separator = separator
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
        return unique_name(name, taken, self.separator)

    def add_tensor(self, name: str, shape: Sequence[int], dtype: DType, role: Role,
                   quant: QuantParams | None = None, data: np.ndarray | None = None) -> str:
        name = self.unique(name, self.tensors)
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype, role, quant, data)
        return name

    def constant(self, name: str, data: np.ndarray, role: Role = Role.CONSTANT) -> str:
        dtype = DType(np.dtype(data.dtype).name)
        return self.add_tensor(name, data.shape, dtype, role, data=np.ascontiguousarray(data))

    def emit(self, op: str, inputs: Sequence[str], attrs, name: str, dtype: DType = DType.FLOAT32,
             role: Role = Role.GRADIENT, out_names: Sequence[str] | None = None,
             quant: QuantParams | None = None) -> list[str]:
        """Append a node; its outputs are new tensors of ``dtype`` / ``role`` (and ``quant``) shaped by the op's
        rule."""
        opdef = get_op(op)
        ins = [self.tensors[i] if i else None for i in inputs]
        shapes = opdef.infer_shapes(attrs, ins)
        names = out_names or ([name] if len(shapes) == 1 else [f"{name}:{k}" for k in range(len(shapes))])
        outs = [self.add_tensor(n, s, dtype, role, quant) for n, s in zip(names, shapes, strict=True)]
        self.append(Node(name, op, tuple(inputs), tuple(outs), attrs))
        return outs

    def append(self, node: Node) -> str:
        """Append ``node`` (its outputs already added), under a unique name; returns the name."""
        name = self.unique(node.name, self._node_names)
        self._node_names.add(name)
        self.nodes.append(replace(node, name=name) if name != node.name else node)
        return name

    def build(self, **changes) -> Graph:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(n.outputs)
        tensors = {k: t for k, t in self.tensors.items() if k in used}
        fields = dict(name=self.base.name, tensors=tensors, nodes=tuple(self.nodes), inputs=tuple(self.inputs),
                      outputs=tuple(self.outputs), source_sha256=self.base.source_sha256, uint8_input=self.base.uint8_input, uint8_output=self.base.uint8_output,
                      metadata=self.base.metadata)
        fields.update(changes)
        return Graph(**fields)
