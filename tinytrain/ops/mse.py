"""Mean squared error between the dequantized int8 output and a target (issue 29, ``--loss mse``): the loss and its
gradient (docs/design.md §3).

Inputs: the output int8 (N, ...) (per-tensor quantized) and the target of the same shape: int8 with its own
quantization (reconstruction: the model's input) or float32 (targets given with the data). Per sample, fp32 in this
order, over the D = prod(shape[1:]) elements in C order i = 0..D-1:
    o = s * (q - zp); t = s_t * (x - zt) (an int8 target) or t (float32); d = o - t
    S = ((d0 * d0) + d1 * d1) + ... (each product and sum rounded to float32, no fused multiply-add);
    loss = S / D; grad[i] = d[i] * c with c = float32(2 / D).
The loss of a batch is the per-sample losses (training steps are batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ir import DType
from tinytrain.ops import OpDef, no_macs
from tinytrain.ops.conv2d import input_magnitude

FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class MseAttrs:
    pass


def _check(ins) -> int:
    out, target = ins
    if tuple(out.shape) != tuple(target.shape):
        raise ValueError(f"mse: the target {target.shape} is not the output's shape {out.shape}")
    return int(np.prod(out.shape[1:]))


def grad_scale(d: int) -> np.float32:
    """c = float32(2 / D), the gradient's factor (a constant of the C kernel)."""
    return np.float32(2.0 / d)


def loss_shapes(a: MseAttrs, ins) -> list[tuple[int, ...]]:
    _check(ins)
    return [(ins[0].shape[0],)]


def grad_shapes(a: MseAttrs, ins) -> list[tuple[int, ...]]:
    _check(ins)
    return [ins[0].shape]


def dequantized(array: np.ndarray, t) -> np.ndarray:
    """An int8 tensor's real values, s (q - zp) in float32, or a float32 one's as they are, (N, D): the spec's o and t."""
    n = array.shape[0]
    if t.dtype is DType.FLOAT32:
        return np.asarray(array, np.float32).reshape(n, -1)
    q = t.quant
    return (array.reshape(n, -1).astype(np.int32) - np.int32(q.zp)).astype(np.float32) * np.float32(q.s)


def differences(arrays, ins) -> np.ndarray:
    """d = o - t, float32 (N, D)."""
    return dequantized(arrays[0], ins[0]) - dequantized(arrays[1], ins[1])


def loss_reference(a: MseAttrs, arrays, ins, outs) -> list[np.ndarray]:
    d = differences(arrays, ins)
    s = np.cumsum(d * d, axis=1, dtype=np.float32)[:, -1]  # a running float32 sum in element order
    return [(s / np.float32(d.shape[1])).astype(np.float32)]


def grad_reference(a: MseAttrs, arrays, ins, outs) -> list[np.ndarray]:
    d = differences(arrays, ins)
    return [(d * grad_scale(d.shape[1])).astype(np.float32).reshape(arrays[0].shape)]


def grad_bound(a: MseAttrs, ins, bounds) -> list[float]:
    """|grad| = c |o - t|: o is an int8 value dequantized; t an int8 one, or a float32 target whose square is finite
    whenever the loss is (every partial sum of the loss is finite, so each d * d is)."""
    out, target = ins
    if target.dtype is DType.FLOAT32:
        return [float(grad_scale(_check(ins))) * np.sqrt(FLOAT32_MAX)]
    return [float(grad_scale(_check(ins))) * (input_magnitude(out) + input_magnitude(target))]


LOSS = OpDef("mse", MseAttrs, loss_shapes, loss_reference, no_macs, loss=True)
GRAD = OpDef("mse_grad", MseAttrs, grad_shapes, grad_reference, no_macs, bound=grad_bound)
OPS = (LOSS, GRAD)
