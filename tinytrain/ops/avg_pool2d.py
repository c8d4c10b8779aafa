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

Imports: TFLite AVERAGE_POOL_2D; ONNX AveragePool (a float island; count_include_pad pads explicitly) and
com.microsoft QLinearAveragePool, an IR mean (ops/mean.py) where the window covers the whole unpadded input;
exported as AveragePool.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.errors import ModelError, PlanError
from tinytrain.ops import OpDef, OpDoc, Resize, TfliteRead, integer_form, same_bound
from tinytrain.ops import mean as mean_op
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.quant import Requant, activation_range, multiply_by_quantized_multiplier


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

    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: AvgPool2dAttrs = node.attrs
    g = out_grads[0]
    if (a.act_min, a.act_max) != (-128, 127):
        g = masked_grad(b, g, node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    attrs = AvgPool2dGradAttrs(a.kernel, a.stride, a.padding, b.tensor(x).shape[1:3])
    return [b.emit("avg_pool2d_grad", [g], attrs, f"{node.name}.grad_input")[0]]


# ---- the importers, the exporter, the twin, the other input sizes (ops/__init__.py: hooks) -------------------------


def _same_quant(a, b) -> bool:
    return np.float32(a.s) == np.float32(b.s) and a.zp == b.zp


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    """An IR mean when the window is the whole unpadded input; else avg_pool2d rounding half to even with the
    input's quantization, or one rounding of s_in * sum(x - zx) / (count * s_out) to another (QLinearAveragePool)."""
    a = p.args
    xt = cv.tensors[a["x"]]
    if tuple(a["kernel"]) == xt.shape[1:3] and tuple(a["padding"]) == (0, 0, 0, 0):
        mean = replace(p, op="mean", args={"x": a["x"], "keepdims": True}, emit=mean_op.onnx_emit, reopens=True)
        return cv.materialize(mean, yq, out_hint)
    amin, amax = activation_range(yq.zp, yq.s, p.lo, p.hi, half_even=True)
    geometry = (tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]), amin, amax)
    if _same_quant(xt.quant, yq):
        return cv.add_node("avg_pool2d", p.source, [a["x"]], out_hint, xt.quant,
                           AvgPool2dAttrs(*geometry, round_half_even=True), p.source)
    cells = int(a["kernel"][0]) * int(a["kernel"][1])
    output = Requant.from_scales([xt.quant.s / (c * yq.s) for c in range(1, cells + 1)], True)
    return cv.add_node("avg_pool2d", p.source, [a["x"]], out_hint, yq, AvgPool2dAttrs(*geometry, output=output),
                       p.source)


def onnx_defer(cv, node, act) -> None:
    label = cv.label(node)
    if len(act.shape) != 4:
        raise cv.unsupported(f"{label}: only 2-D (NCHW) pooling is supported")
    n, c, h, w = act.shape
    kernel, stride, padding, include_pad = cv.pool_geometry(node, (h, w))
    x_ir = act.ir
    if include_pad and any(padding):
        x_ir = cv.emit_pad(x_ir, ((padding[0], padding[2]), (padding[1], padding[3]), (0, 0)), act.ir + "_padded",
                           label)
        padding = (0, 0, 0, 0)
        h, w = cv.tensors[x_ir].shape[1:3]
    ho = (h + padding[0] + padding[2] - kernel[0]) // stride[0] + 1
    wo = (w + padding[1] + padding[3] - kernel[1]) // stride[1] + 1
    cv.defer(node, "avg_pool2d", (n, c, ho, wo), onnx_emit, x=x_ir, kernel=kernel, stride=stride, padding=padding)


def onnx_average_pool(cv, node) -> None:
    onnx_defer(cv, node, cv.dq_input(node, 0))


def onnx_qlinear_average_pool(cv, node) -> None:
    """com.microsoft QLinearAveragePool (X, x_scale, x_zp, y_scale, y_zp), NCHW."""
    cv.channels_first(node)
    x = cv.qlinear_input(node, 0, 1, 2)
    yq, dtype = cv.qlinear_output(node, 3, 4)
    onnx_defer(cv, node, x)
    cv.set_output(node, cv.materialize(cv.values[node.output[0]].pending, yq, node.output[0]), dtype)


def tflite_average_pool(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    im.rank4(op, x)
    kernel = (op.options["filter_h"], op.options["filter_w"])
    if min(kernel) <= 0:
        raise ModelError(f"operator {op.index} (AVERAGE_POOL_2D) has filter {list(kernel)}")
    stride = im.stride(op)
    padding = im.padding(op, x, out, kernel, stride, (1, 1))
    act_min, act_max = im.activation(op, out)
    uint8 = im.tensor(op.inputs[0]).type == "UINT8"
    im.node(op, "avg_pool2d", [x.name], [out.name],
            AvgPool2dAttrs(kernel, stride, padding, act_min, act_max, round_half_up=uint8))


def export(ex, n) -> None:
    a = n.attrs
    f = ex.node("AveragePool", [ex.dq(n.inputs[0], n.name)], f"{n.outputs[0]}_float", n.name,
                kernel_shape=list(a.kernel), strides=list(a.stride), pads=list(a.padding), count_include_pad=0)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    a = node.attrs
    pt, pl, pb, pr = a.padding
    return t.F.avg_pool2d(t.F.pad(xs[0], (pl, pr, pt, pb)), a.kernel, a.stride)


def is_global_pool(a: AvgPool2dAttrs, shape: tuple[int, ...]) -> bool:
    """One unpadded window that is the whole input of NHWC ``shape``."""
    return a.padding == (0, 0, 0, 0) and a.kernel == shape[1:3]


def resized(a: AvgPool2dAttrs, old, new, out) -> AvgPool2dAttrs:
    """A global average pool stays global: its window becomes the new map (with its multipliers for up to the new
    count of cells); a fixed window is kept."""
    if not is_global_pool(a, old.shape):
        return a
    count = new.shape[1] * new.shape[2]
    if a.output is not None:  # one multiplier per valid-cell count 1 .. KH*KW
        if count > len(a.output.multiplier):
            raise ValueError(f"is a global average pool that would average {count} cells but carries multipliers "
                             f"for up to {len(a.output.multiplier)}; give an input size no larger than the model's")
        a = replace(a, output=replace(a.output, multiplier=a.output.multiplier[:count], shift=a.output.shift[:count]))
    return replace(a, kernel=new.shape[1:3])


RESIZE = Resize(stride=lambda a, shape: None if is_global_pool(a, shape) else a.stride, adapt=resized)
ONNX = {"AveragePool": onnx_average_pool}
ONNX_QOPERATOR = {"com.microsoft.QLinearAveragePool": onnx_qlinear_average_pool}
_POOL_OPTIONS = (5, (("padding", 0, "<b", 0), ("stride_w", 1, "<i", 0), ("stride_h", 2, "<i", 0),
                     ("filter_w", 3, "<i", 0), ("filter_h", 4, "<i", 0), ("activation", 5, "<b", 0)))
TFLITE = {"AVERAGE_POOL_2D": TfliteRead(tflite_average_pool, _POOL_OPTIONS)}
DOC = OpDoc("AVERAGE_POOL_2D", "AveragePool / QLinearAveragePool", "rounded division", "g / count to the window",
            "clamp mask if clamped")


OP = OpDef("avg_pool2d", AvgPool2dAttrs, infer_shapes, reference, macs, backward=backward, resize=RESIZE, export=export,
           twin=twin, doc=DOC)
def grad_bound(a: AvgPool2dGradAttrs, ins, bounds) -> list[float]:
    """An input cell lies in at most ceil(k / stride) windows per axis, each adding g / count with count >= 1."""
    return [bounds[0] * -(-a.kernel[0] // a.stride[0]) * -(-a.kernel[1] // a.stride[1])]


def _global_share(rewrite, node, s: float) -> float:
    """A global pool's integer gradient: the same integers, the scale divided by H W."""
    if not is_global(node.attrs):
        raise PlanError(f'"backward": "int": {node.name} is the gradient of an average pool that is not global; '
                        'use "backward": "fp32"')
    return s / (node.attrs.input_hw[0] * node.attrs.input_hw[1])


GRAD = OpDef("avg_pool2d_grad", AvgPool2dGradAttrs, grad_shapes, grad_reference, macs, bound=grad_bound,
             integer=integer_form("avg_pool2d_grad_int", _global_share))


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
