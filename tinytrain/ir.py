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

    ``uint8_input`` / ``uint8_output`` record that the source model's input / outputs are uint8 (TF1 style both;
    NNCF and the TF converter's ``inference_input_type=tf.uint8`` the input alone); inside, everything is int8
    (q_int8 = q_uint8 - 128, zero points shifted alike, exact) and only that boundary converts.
    ``metadata``: the model's key / value strings (ONNX ``metadata_props``; a TFLite model's normalization as
    ``tinytrain.input_mapping``, tinytrain/input_mapping.py), kept by every pass and written back by the exporter.
    """

    name: str
    tensors: Mapping[str, Tensor]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    source_sha256: str = ""
    uint8_input: bool = False
    uint8_output: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", MappingProxyType(dict(self.tensors)))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

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
