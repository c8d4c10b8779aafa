"""The intermediate representation: typed, frozen tensors, nodes and graphs.

One internal layout whatever the source format:
- activations are NHWC (dimension 0 is the batch; graphs are built for batch 1 and the simulator
  runs any batch size),
- convolution weights are (C_out, KH, KW, C_in / groups): a depthwise convolution with channel
  multiplier m has groups = C_in and output channel o reads input channel o // m,
- fully-connected weights are (C_out, K).

Quantization: activations int8 asymmetric per tensor, weights int8 (symmetric, per output channel
along axis 0), biases int32 with scale s_x * s_w. A node's op-specific parameters live in a frozen
attribute dataclass defined in the op's own module (tinytrain/ops/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np


class DType(Enum):
    INT8 = "int8"
    UINT8 = "uint8"
    INT32 = "int32"
    FLOAT32 = "float32"

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize


class Role(Enum):
    INPUT = "input"
    ACTIVATION = "activation"
    OUTPUT = "output"
    WEIGHT = "weight"
    BIAS = "bias"
    CONSTANT = "constant"
    # Training graph (tinytrain/training/): fp32 gradients, forward activations kept alive for the
    # backward pass, optimizer state that persists across steps (momentum; carries its initial data),
    # and temporary buffers of one kernel.
    GRADIENT = "gradient"
    SAVED = "saved"
    OPTIMIZER_STATE = "optimizer_state"
    SCRATCH = "scratch"


CONSTANT_ROLES = frozenset({Role.WEIGHT, Role.BIAS, Role.CONSTANT})
# Tensors that carry their (initial) data in the graph: constants and optimizer state.
DATA_ROLES = CONSTANT_ROLES | {Role.OPTIMIZER_STATE}


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point).

    Per-tensor when ``axis`` is None (one scale, one zero point); per-channel along ``axis`` otherwise.
    Scales are kept as the float32 values of the source file (held in Python floats).
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None

    def __post_init__(self) -> None:
        if len(self.scale) == 0 or len(self.scale) != len(self.zero_point):
            raise ValueError(f"quantization has {len(self.scale)} scales and {len(self.zero_point)} zero points")
        if self.axis is None and len(self.scale) != 1:
            raise ValueError("per-tensor quantization needs exactly one scale")
        for s in self.scale:
            if not (math.isfinite(s) and s > 0):
                raise ValueError(f"quantization scale {s} is not a positive finite number")

    @staticmethod
    def per_tensor(scale: float, zero_point: int) -> QuantParams:
        return QuantParams((float(np.float32(scale)),), (int(zero_point),))

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @property
    def s(self) -> float:
        """The scale of a per-tensor quantization."""
        assert self.axis is None
        return self.scale[0]

    @property
    def zp(self) -> int:
        """The zero point of a per-tensor quantization."""
        assert self.axis is None
        return self.zero_point[0]


@dataclass(frozen=True)
class Tensor:
    """A value in the graph. Constants (weights, biases) carry their data; activations do not."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    role: Role
    quant: QuantParams | None = None
    data: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_constant(self) -> bool:
        return self.role in CONSTANT_ROLES

    @property
    def has_data(self) -> bool:
        """Constants and optimizer state carry their (initial) value; everything else is computed."""
        return self.role in DATA_ROLES


@dataclass(frozen=True)
class Node:
    """One operation. ``attrs`` is the op's own frozen dataclass (see tinytrain/ops/<op>.py)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Any


@dataclass(frozen=True)
class Graph:
    """A whole model: tensors by name, nodes in topological order, graph inputs and outputs.

    ``uint8_io`` records that the source model exchanged uint8 tensors (TF1 style); inside, everything
    is int8 (q_int8 = q_uint8 - 128, zero points shifted alike) and only the boundary converts.
    """

    name: str
    tensors: Mapping[str, Tensor]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    source_sha256: str = ""
    uint8_io: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", MappingProxyType(dict(self.tensors)))

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        result: dict[str, list[Node]] = {name: [] for name in self.tensors}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    result[i].append(n)
        return result

    def constants(self) -> Iterable[Tensor]:
        return (t for t in self.tensors.values() if t.is_constant)


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
    from tinytrain.ops import get_op

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
