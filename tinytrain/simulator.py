"""The numpy simulator of the int8 forward pass: the runnable spec every other engine is checked against.

Runs a graph on a batch of any size (graphs are built for batch 1) in chunks, each node through its
op's reference implementation.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from tinytrain.ir import DType, Graph
from tinytrain.ops import get_op


def forward(graph: Graph, inputs: Mapping[str, np.ndarray], chunk: int = 64) -> dict[str, np.ndarray]:
    """Graph outputs for internal (int8) inputs whose dimension 0 is the batch."""
    n = len(next(iter(inputs.values())))
    parts = [_forward_chunk(graph, {k: v[i : i + chunk] for k, v in inputs.items()}) for i in range(0, n, chunk)]
    return {name: np.concatenate([p[name] for p in parts]) for name in graph.outputs}


def _forward_chunk(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        x = np.asarray(inputs[name])
        if x.dtype != t.dtype.np or x.shape[1:] != t.shape[1:]:
            raise ValueError(f"input {name}: expected {t.dtype.value} (N,{','.join(map(str, t.shape[1:]))}), got {x.dtype} {x.shape}")
        values[name] = x
    last_use = {i: k for k, node in enumerate(graph.nodes) for i in node.inputs}
    keep = set(graph.outputs)
    for k, node in enumerate(graph.nodes):
        op = get_op(node.op)
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        arrays = [(graph.tensors[i].data if graph.tensors[i].is_constant else values[i]) if i else None for i in node.inputs]
        outs = [graph.tensors[o] for o in node.outputs]
        for name, value in zip(node.outputs, op.reference(node.attrs, arrays, ins, outs), strict=True):
            values[name] = value
        for i in node.inputs:
            if i in values and last_use.get(i) == k and i not in keep:
                del values[i]
    return {name: values[name] for name in graph.outputs}


def to_internal(graph: Graph, x: np.ndarray) -> np.ndarray:
    """A user's quantized input (the model's own dtype) -> the internal int8 form."""
    if graph.uint8_io:
        if x.dtype != np.uint8:
            raise ValueError(f"this model takes uint8 input, got {x.dtype}")
        return (x.astype(np.int16) - 128).astype(np.int8)
    return x


def to_external(graph: Graph, y: np.ndarray) -> np.ndarray:
    """An internal int8 output -> the model's own output dtype."""
    if graph.uint8_io and y.dtype == np.int8:
        return (y.astype(np.int16) + 128).astype(np.uint8)
    return y


def external_input_dtype(graph: Graph) -> np.dtype:
    t = graph.tensors[graph.inputs[0]]
    return np.dtype(np.uint8) if graph.uint8_io and t.dtype == DType.INT8 else t.dtype.np
