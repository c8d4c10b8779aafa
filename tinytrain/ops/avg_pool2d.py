"""Average pooling, int8 (TFLite reference AveragePool; onnxruntime's for ONNX imports).

Padding cells are not counted; the sum is divided by the number of valid cells. Without ``output``
the quantization is the same in and out and the division rounds half away from zero (TFLite int8),
half up (TFLite models imported from uint8, where it was exact) or, with ``round_half_even``, the
centered average sum(x - zx) / count half to even, plus zx (ONNX: onnxruntime averages in float
and rounds with QuantizeLinear).
With ``output`` (ONNX QLinearAveragePool to another scale) the output has its own quantization and
y = MBQM(sum(x - zx), m[count - 1], shift[count - 1]) + zy: ``output`` holds one multiplier of
s_in / (c * s_out) per count c = 1 .. KH*KW, so the real average is rounded once.
A window without valid cells (padding >= kernel) gives 0 before the clamp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.ops import OpDef, same_bound
from tinytrain.quant import Requant, multiply_by_quantized_multiplier


@dataclass(frozen=True)
class AvgPool2dAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    act_min: int = -128
    act_max: int = 127
    round_half_up: bool = False
    round_half_even: bool = False  # ONNX, same quantization in and out
    output: Requant | None = None  # ONNX, output quantization of its own: multiplier per valid-cell count


def infer_shapes(a: AvgPool2dAttrs, ins) -> list[tuple[int, ...]]:
    n, h, w, c = ins[0].shape
    pt, pl, pb, pr = a.padding
    ho = (h + pt + pb - a.kernel[0]) // a.stride[0] + 1
    wo = (w + pl + pr - a.kernel[1]) // a.stride[1] + 1
    if ho <= 0 or wo <= 0:
        raise ValueError(f"avg_pool2d: kernel {a.kernel} larger than input {ins[0].shape}")
    if a.output is not None and len(a.output.multiplier) != a.kernel[0] * a.kernel[1]:
        raise ValueError(f"avg_pool2d: {len(a.output.multiplier)} output multipliers for a {a.kernel} window "
                         f"(one per valid-cell count is needed)")
    if a.round_half_up + a.round_half_even + (a.output is not None) > 1:
        raise ValueError("avg_pool2d: round_half_up, round_half_even and output exclude each other")
    return [(n, ho, wo, c)]


def divide_rounded(acc: np.ndarray, count, half_up: bool) -> np.ndarray:
    """acc / count rounded as TFLite does: half away from zero, or half up (uint8 origin)."""
    count = np.asarray(count, np.int64)
    half = count // 2
    if half_up:
        return (acc + half) // count
    return np.where(acc > 0, (acc + half) // count, -((half - acc) // count))


def divide_half_even(acc: np.ndarray, count) -> np.ndarray:
    """acc / count (count > 0) rounded half to even."""
    count = np.asarray(count, np.int64)
    q, r = acc // count, acc % count
    return q + ((2 * r > count) | ((2 * r == count) & (q % 2 != 0)))


def _window_sums(x: np.ndarray, a: AvgPool2dAttrs, ho: int, wo: int) -> np.ndarray:
    pt, pl, pb, pr = a.padding
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    win = sliding_window_view(xp, a.kernel, axis=(1, 2))
    win = win[:, : (ho - 1) * a.stride[0] + 1 : a.stride[0], : (wo - 1) * a.stride[1] + 1 : a.stride[1]]
    return win.sum(axis=(-2, -1))


def reference(a: AvgPool2dAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x = arrays[0].astype(np.int64)
    _, ho, wo, _ = outs[0].shape
    sums = _window_sums(x, a, ho, wo)
    counts = _window_sums(np.ones((1,) + x.shape[1:3] + (1,), np.int64), a, ho, wo)
    valid = np.maximum(counts, 1)
    if a.output is not None:
        m, s = a.output.arrays()
        centered = sums - ins[0].quant.zp * counts
        y = multiply_by_quantized_multiplier(centered, m[valid - 1], s[valid - 1], a.output.single_rounding,
                                             a.output.fp32)
        y = y + outs[0].quant.zp
    elif a.round_half_even:
        y = divide_half_even(sums - ins[0].quant.zp * counts, valid) + ins[0].quant.zp
    else:
        y = divide_rounded(sums, valid, a.round_half_up)
    y = np.where(counts > 0, y, 0)
    return [np.clip(y, a.act_min, a.act_max).astype(np.int8)]


def macs(a: AvgPool2dAttrs, ins, outs) -> int:
    return 0



@dataclass(frozen=True)
class AvgPool2dGradAttrs:
    """g_x (N,H,W,C): each output gradient divided by its window's count of valid cells, added to the window."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    input_hw: tuple[int, int]


def grad_shapes(a: AvgPool2dGradAttrs, ins) -> list[tuple[int, ...]]:
    n, ho, wo, c = ins[0].shape
    fwd = AvgPool2dAttrs(a.kernel, a.stride, a.padding)
    if infer_shapes(fwd, [type(ins[0])("x", (n, *a.input_hw, c), ins[0].dtype, ins[0].role)])[0] != ins[0].shape:
        raise ValueError(f"avg_pool2d_grad: input {a.input_hw} does not give gradient {ins[0].shape}")
    return [(n, a.input_hw[0], a.input_hw[1], c)]


def grad_reference(a: AvgPool2dGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0].astype(np.float32)
    n, ho, wo, c = g.shape
    (h, w), (pt, pl, pb, pr) = a.input_hw, a.padding
    fwd = AvgPool2dAttrs(a.kernel, a.stride, a.padding)
    counts = _window_sums(np.ones((1, h, w, 1), np.int64), fwd, ho, wo)
    share = g / counts.astype(np.float32)
    gxp = np.zeros((n, h + pt + pb, w + pl + pr, c), np.float32)
    # float32 additions in the C's window order (oy, ox): a cell's windows come from its last tap (i, j) to its first
    for i in reversed(range(a.kernel[0])):
        for j in reversed(range(a.kernel[1])):
            gxp[:, i : i + (ho - 1) * a.stride[0] + 1 : a.stride[0], j : j + (wo - 1) * a.stride[1] + 1 : a.stride[1]] += share
    return [gxp[:, pt : pt + h, pl : pl + w]]


def backward(b, node, out_grads) -> list[str | None]:
    """No clamp mask unless the clamp range is narrower than int8: an average cannot leave its inputs' range."""
    from tinytrain.ops.clamp_mask import masked_grad

    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: AvgPool2dAttrs = node.attrs
    g = out_grads[0]
    if (a.act_min, a.act_max) != (-128, 127):
        g = masked_grad(b, g, node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    attrs = AvgPool2dGradAttrs(a.kernel, a.stride, a.padding, b.tensor(x).shape[1:3])
    return [b.emit("avg_pool2d_grad", [g], attrs, f"{node.name}.grad_input")[0]]


OP = OpDef("avg_pool2d", AvgPool2dAttrs, infer_shapes, reference, macs, backward=backward)
def grad_bound(a: AvgPool2dGradAttrs, ins, bounds) -> list[float]:
    """An input cell lies in at most ceil(k / stride) windows per axis, each adding g / count with count >= 1."""
    return [bounds[0] * -(-a.kernel[0] // a.stride[0]) * -(-a.kernel[1] // a.stride[1])]


GRAD = OpDef("avg_pool2d_grad", AvgPool2dGradAttrs, grad_shapes, grad_reference, macs, bound=grad_bound)


def is_global(a: AvgPool2dGradAttrs) -> bool:
    """One unpadded window over the whole input (a global average pool)."""
    return tuple(a.kernel) == tuple(a.input_hw) and not any(a.padding)


def grad_int_shapes(a: AvgPool2dGradAttrs, ins) -> list[tuple[int, ...]]:
    if not is_global(a):
        raise ValueError("avg_pool2d_grad_int: only a global average pool's gradient has an integer form")
    return grad_shapes(a, ins)


def grad_int_reference(a: AvgPool2dGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """The integer form (plan "backward": "int"): a global pool's g / (H W) is the same integer g broadcast to every
    cell, its real scale divided by H W (training/integer_step.py): an exact share, no rounding."""
    return [np.broadcast_to(arrays[0], outs[0].shape).astype(np.int32)]


GRAD_INT = OpDef("avg_pool2d_grad_int", AvgPool2dGradAttrs, grad_int_shapes, grad_int_reference, macs,
                 bound=same_bound)
OPS = (OP, GRAD, GRAD_INT)
