"""Max pooling, int8 NHWC (TFLite reference MaxPool; onnxruntime's int8 MaxPool for ONNX imports).

The output has the input's quantization: y = clamp(max of the window's valid cells, act_min, act_max); padding
cells are not candidates (TFLite skips them, ONNX pads with -inf). A window must hold a valid cell (padding <
kernel).

Backward (docs/guide/ops.md): the gradient of an output goes to its window's argmax, the first cell holding the
maximum in the window's row-major order (PyTorch's and TensorFlow's choice). The argmax is recomputed from the
saved int8 input: it costs no tensor of its own, where saved indices would cost Ho*Wo*C bytes (a quarter of the
input for a 2x2/2 pool) and a 1-bit "chosen" mask does not tell which of several overlapping windows chose a
cell. A clamp narrower than int8 masks the output gradient first (clamp_mask on the saved output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.ops import OpDef, RowWindow, no_macs

_BELOW_INT8 = -129  # a padding cell never wins


@dataclass(frozen=True)
class MaxPool2dAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    act_min: int = -128
    act_max: int = 127


def _out_hw(a, h: int, w: int) -> tuple[int, int]:
    pt, pl, pb, pr = a.padding
    return (h + pt + pb - a.kernel[0]) // a.stride[0] + 1, (w + pl + pr - a.kernel[1]) // a.stride[1] + 1


def infer_shapes(a: MaxPool2dAttrs, ins) -> list[tuple[int, ...]]:
    n, h, w, c = ins[0].shape
    ho, wo = _out_hw(a, h, w)
    if ho <= 0 or wo <= 0 or min(a.stride) <= 0:
        raise ValueError(f"max_pool2d: kernel {a.kernel} stride {a.stride} do not fit input {ins[0].shape}")
    pt, pl, pb, pr = a.padding
    if max(pt, pb) >= a.kernel[0] or max(pl, pr) >= a.kernel[1]:
        raise ValueError(f"max_pool2d: padding {a.padding} leaves windows without a valid cell (kernel {a.kernel})")
    return [(n, ho, wo, c)]


def _windows(x: np.ndarray, a, ho: int, wo: int) -> np.ndarray:
    """(N, Ho, Wo, C, KH, KW): each output's window, padding cells -129."""
    pt, pl, pb, pr = a.padding
    xp = np.pad(x.astype(np.int16), ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=_BELOW_INT8)
    win = sliding_window_view(xp, a.kernel, axis=(1, 2))
    return win[:, : (ho - 1) * a.stride[0] + 1 : a.stride[0], : (wo - 1) * a.stride[1] + 1 : a.stride[1]]


def reference(a: MaxPool2dAttrs, arrays, ins, outs) -> list[np.ndarray]:
    _, ho, wo, _ = outs[0].shape
    y = _windows(arrays[0], a, ho, wo).max(axis=(-2, -1))
    return [np.clip(y, a.act_min, a.act_max).astype(np.int8)]


def rows(a: MaxPool2dAttrs, ins, outs, k: int) -> RowWindow:
    """Output row r reads input rows [r * sh - pt, r * sh - pt + kh)."""
    return RowWindow(a.stride[0], -a.padding[0], a.kernel[0])


def backward(b, node, out_grads) -> list[str | None]:
    from tinytrain.ops.clamp_mask import masked_grad

    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: MaxPool2dAttrs = node.attrs
    g = out_grads[0]
    if (a.act_min, a.act_max) != (-128, 127):
        g = masked_grad(b, g, node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    attrs = MaxPool2dGradAttrs(a.kernel, a.stride, a.padding)
    return [b.emit("max_pool2d_grad", [g, x], attrs, f"{node.name}.grad_input")[0]]


OP = OpDef("max_pool2d", MaxPool2dAttrs, infer_shapes, reference, no_macs, backward=backward, rows=rows)


@dataclass(frozen=True)
class MaxPool2dGradAttrs:
    """g_x (N,H,W,C) from g (N,Ho,Wo,C) and the saved int8 input x: each output gradient added to its window's
    argmax, windows in (oy, ox) order, in float32."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]


def grad_shapes(a: MaxPool2dGradAttrs, ins) -> list[tuple[int, ...]]:
    g, x = ins
    if infer_shapes(MaxPool2dAttrs(a.kernel, a.stride, a.padding), [x])[0] != g.shape:
        raise ValueError(f"max_pool2d_grad: input {x.shape} does not give gradient {g.shape}")
    return [x.shape]


def grad_reference(a: MaxPool2dGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, x = arrays[0].astype(np.float32), arrays[1]
    n, ho, wo, c = g.shape
    kh, kw = a.kernel
    first = _windows(x, a, ho, wo).reshape(n, ho, wo, c, kh * kw).argmax(axis=-1)  # the first maximum
    iy = np.arange(ho)[None, :, None, None] * a.stride[0] - a.padding[0] + first // kw
    ix = np.arange(wo)[None, None, :, None] * a.stride[1] - a.padding[1] + first % kw
    gx = np.zeros(x.shape, np.float32)
    nn, cc = np.arange(n)[:, None], np.arange(c)[None, :]
    for oy in range(ho):
        for ox in range(wo):  # window order: a cell chosen by several windows sums their gradients in this order
            gx[nn, iy[:, oy, ox], ix[:, oy, ox], cc] += g[:, oy, ox]
    return [gx]


def grad_bound(a: MaxPool2dGradAttrs, ins, bounds) -> list[float]:
    """An input cell lies in at most ceil(k / stride) windows per axis, each adding one output gradient."""
    return [bounds[0] * -(-a.kernel[0] // a.stride[0]) * -(-a.kernel[1] // a.stride[1])]


GRAD = OpDef("max_pool2d_grad", MaxPool2dGradAttrs, grad_shapes, grad_reference, no_macs, bound=grad_bound)
OPS = (OP, GRAD)
