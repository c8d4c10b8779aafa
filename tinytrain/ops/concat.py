"""Concatenation of int8 activations along one axis (channels in NHWC CNNs: Inception / DenseNet-style blocks).

Each input is copied into its slice of the output, through a 256-entry table when its quantization differs from the
output's (``tables[k]``, else None: a copy). TFLite Micro's int8 kernel requires equal quantization (a copy);
onnxruntime's QLinearConcat and QDQ Concat requantize each input in float32 (tinytrain/tables.py float32_table).

Backward: the real output is the inputs side by side, so input k's gradient is its slice of the output gradient
(``concat_grad``); a requantization that saturates is straight-through.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, RowWindow, no_macs, same_bound


@dataclass(frozen=True)
class ConcatAttrs:
    axis: int  # IR axis (NHWC for rank 4), >= 1
    tables: tuple[tuple[int, ...] | None, ...]  # per input: 256 int8 outputs by input + 128, or None (a copy)


def infer_shapes(a: ConcatAttrs, ins) -> list[tuple[int, ...]]:
    shapes = [t.shape for t in ins]
    rank = len(shapes[0])
    if len(a.tables) != len(shapes) or not 1 <= a.axis < rank:
        raise ValueError(f"concat: axis {a.axis} of rank {rank}, {len(a.tables)} tables for {len(shapes)} inputs")
    for s in shapes:
        if len(s) != rank or any(s[d] != shapes[0][d] for d in range(rank) if d != a.axis):
            raise ValueError(f"concat: shapes {shapes} differ outside axis {a.axis}")
    out = list(shapes[0])
    out[a.axis] = sum(s[a.axis] for s in shapes)
    return [tuple(out)]


def reference(a: ConcatAttrs, arrays, ins, outs) -> list[np.ndarray]:
    parts = [x if t is None else np.asarray(t, np.int8)[x.astype(np.int64) + 128] for x, t in zip(arrays, a.tables)]
    return [np.concatenate(parts, axis=a.axis).astype(np.int8)]


def rows(a: ConcatAttrs, ins, outs, k: int) -> RowWindow | None:
    """Along channels (or width) of an NHWC tensor, output row r is input row r of each input."""
    return RowWindow(1, 0, 1) if len(outs[0].shape) == 4 and a.axis >= 2 else None


def backward(b, node, out_grads) -> list[str | None]:
    a: ConcatAttrs = node.attrs
    grads, begin = [], 0
    for x in node.inputs:
        size = b.tensor(x).shape[a.axis]
        grads.append(b.emit("concat_grad", [out_grads[0]], ConcatGradAttrs(a.axis, begin, size),
                            f"{node.name}.grad_{len(grads)}")[0] if b.needs_grad(x) else None)
        begin += size
    return grads


OP = OpDef("concat", ConcatAttrs, infer_shapes, reference, no_macs, backward=backward, rows=rows)


@dataclass(frozen=True)
class ConcatGradAttrs:
    """One input's gradient: elements [begin, begin + size) of the gradient along ``axis``."""

    axis: int
    begin: int
    size: int


def grad_shapes(a: ConcatGradAttrs, ins) -> list[tuple[int, ...]]:
    shape = list(ins[0].shape)
    if not (0 <= a.begin and a.begin + a.size <= shape[a.axis] and a.size > 0):
        raise ValueError(f"concat_grad: [{a.begin}, {a.begin + a.size}) outside {shape[a.axis]}")
    shape[a.axis] = a.size
    return [tuple(shape)]


def grad_reference(a: ConcatGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    index = [slice(None)] * arrays[0].ndim
    index[a.axis] = slice(a.begin, a.begin + a.size)
    return [np.ascontiguousarray(arrays[0][tuple(index)], np.float32)]


GRAD = OpDef("concat_grad", ConcatGradAttrs, grad_shapes, grad_reference, no_macs, bound=same_bound)
OPS = (OP, GRAD)
