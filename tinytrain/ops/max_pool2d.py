"""Max pooling, int8 NHWC (TFLite reference MaxPool; onnxruntime's int8 MaxPool for ONNX imports).

The output has the input's quantization: y = clamp(max of the window's valid cells, act_min, act_max); padding
cells are not candidates (TFLite skips them, ONNX pads with -inf). A window must hold a valid cell (padding <
kernel).

Backward (docs/guide/ops.md): the gradient of an output goes to its window's argmax, the first cell holding the
maximum in the window's row-major order (PyTorch's and TensorFlow's choice). The argmax is recomputed from the
saved int8 input: it costs no tensor of its own, where saved indices would cost Ho*Wo*C bytes (a quarter of the
input for a 2x2/2 pool) and a 1-bit "chosen" mask does not tell which of several overlapping windows chose a
cell. A clamp narrower than int8 masks the output gradient first (clamp_mask on the saved output).

Imports: TFLite MAX_POOL_2D (input and output quantized alike); ONNX MaxPool on int8 data (QOperator) or
DQ -> MaxPool (-> Q): the maximum commutes with the dequantization, so the int8 maximum in the input's quantization
is exact, and a following QuantizeLinear requantizes if needed; exported as MaxPool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, Resize, RowWindow, TfliteRead, no_macs
from tinytrain.ops.clamp_mask import masked_grad

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
    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: MaxPool2dAttrs = node.attrs
    g = out_grads[0]
    if (a.act_min, a.act_max) != (-128, 127):
        g = masked_grad(b, g, node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    attrs = MaxPool2dGradAttrs(a.kernel, a.stride, a.padding)
    return [b.emit("max_pool2d_grad", [g, x], attrs, f"{node.name}.grad_input")[0]]


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def onnx_max_pool(cv, node) -> None:
    label = cv.label(node)
    if len(node.output) > 1 and node.output[1]:
        raise cv.unsupported(f"{label}: MaxPool's Indices output is not supported")
    if cv.attrs(node).get("storage_order", 0):
        raise cv.unsupported(f"{label}: storage_order=1 is not supported")
    x, dq = cv.int_or_dq(node, 0)
    if len(x.shape) != 4:
        raise cv.unsupported(f"{label}: only 2-D (NCHW) max pooling is supported")
    kernel, stride, padding, _ = cv.pool_geometry(node, x.shape[2:])
    attrs = MaxPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding))
    cv.record(node, cv.add_node("max_pool2d", label, [x.ir], node.output[0], cv.tensors[x.ir].quant, attrs, label),
              x, dq)


def tflite_max_pool(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    im.rank4(op, x)
    kernel = (op.options["filter_h"], op.options["filter_w"])
    if min(kernel) <= 0:
        raise ModelError(f"operator {op.index} (MAX_POOL_2D) has filter {list(kernel)}")
    stride = im.stride(op)
    padding = im.padding(op, x, out, kernel, stride, (1, 1))
    if x.quant != out.quant:
        raise UnsupportedModelError(f"operator {op.index} (MAX_POOL_2D): input and output quantization differ "
                                    "(TFLite's kernel does not rescale)")
    act_min, act_max = im.activation(op, out)
    im.node(op, "max_pool2d", [x.name], [out.name], MaxPool2dAttrs(kernel, stride, padding, act_min, act_max))


def export(ex, n) -> None:
    a = n.attrs
    f = ex.node("MaxPool", [ex.dq(n.inputs[0], n.name)], f"{n.outputs[0]}_float", n.name,
                kernel_shape=list(a.kernel), strides=list(a.stride), pads=list(a.padding))
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    a = node.attrs
    pt, pl, pb, pr = a.padding
    y = t.F.max_pool2d(t.F.pad(xs[0], (pl, pr, pt, pb), value=float("-inf")), a.kernel, a.stride)
    return t.torch.clamp(y, *clamp)


ONNX = {"MaxPool": onnx_max_pool}
TFLITE = {"MAX_POOL_2D": TfliteRead(tflite_max_pool, (5, (("padding", 0, "<b", 0), ("stride_w", 1, "<i", 0),
                                                          ("stride_h", 2, "<i", 0), ("filter_w", 3, "<i", 0),
                                                          ("filter_h", 4, "<i", 0), ("activation", 5, "<b", 0))))}
DOC = OpDoc("MAX_POOL_2D", "MaxPool (int8 or DQ -> MaxPool)", "window maximum, same quantization",
            "g to the window's argmax (first maximum, row-major), windows in (oy, ox) order",
            "**input** (int8), clamp mask if clamped", streamed="**yes** (bands)")
OP = OpDef("max_pool2d", MaxPool2dAttrs, infer_shapes, reference, no_macs, backward=backward, rows=rows,
           resize=Resize(stride=lambda a, shape: a.stride), export=export, twin=twin, doc=DOC)


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
