"""Mean over H and W of an int8 NHWC tensor, with rescaling (tflite-micro int8 MEAN: EvalIntegerMean ->
reference_ops::QuantizedMeanOrSum, used whatever the input and output quantization).

The multiplier m, shift of s_in / s_out (``requant``) absorbs 1/count: k = min(floor(log2(count)), 32,
31 + shift), m' = (m << k) // count, shift' = shift - k; y = clamp(MBQM(sum(x) - zx * count, m', shift') + zy).
With ``count_folded`` (ONNX imports) ``requant`` is already s_in / (count * s_out), computed in double, and
is used as is: m' = m, shift' = shift, one rounding of the real mean (no truncated division of m).
MBQM rounds as ``requant`` says (double, single, or onnxruntime's float32 rounding with ``requant.fp32``,
which needs ``count_folded``). Output (N,1,1,C) with ``keepdims`` else (N,C).

Backward (fp32, real values): clamp mask of y, then mean_grad spreads g / (H*W) over the input.
``mean_grad_masked`` is mean_grad followed by ``clamp_mask_packed`` of the input's producer in one node (the
broadcast gradient is never stored; training/fuse_masks.py), with the same float32 values.

Imports: TFLite MEAN over H and W; ONNX GlobalAveragePool, ReduceMean over axes 2, 3 (the float islands of QDQ and
QOperator models), com.microsoft QLinearGlobalAveragePool, and an AveragePool whose window is its whole input
(ops/avg_pool2d.py), all with onnxruntime's float32 scale (``ort_mean_scale``); exported as GlobalAveragePool or
ReduceMean.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tinytrain.errors import UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, Resize, TfliteRead, integer_form, same_bound
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.ops.clamp_mask_packed import packed_shape, unpack
from tinytrain.quant import Requant, activation_range, multiply_by_quantized_multiplier


@dataclass(frozen=True)
class MeanAttrs:
    requant: Requant
    keepdims: bool = True
    act_min: int = -128
    act_max: int = 127
    count_folded: bool = False  # requant is s_in / (count * s_out), not s_in / s_out

    def __post_init__(self) -> None:
        if self.requant.fp32 and not self.count_folded:
            raise ValueError("mean: fp32 requantization needs count_folded (a float32 scale with 1/count in it)")


def mean_multiplier(a: MeanAttrs, count: int) -> tuple[int, int]:
    """The (multiplier, shift) applied to sum(x) - zx * count (the C binding passes the same)."""
    if a.count_folded:
        return a.requant.multiplier[0], a.requant.shift[0]
    k = min(count.bit_length() - 1, 32, 31 + a.requant.shift[0])  # 63 - CountLeadingZeros(count), clamped
    return (a.requant.multiplier[0] << k) // count, a.requant.shift[0] - k


def infer_shapes(a: MeanAttrs, ins) -> list[tuple[int, ...]]:
    n, _, _, c = ins[0].shape
    return [(n, 1, 1, c) if a.keepdims else (n, c)]


def reference(a: MeanAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x = arrays[0].astype(np.int64)
    count = x.shape[1] * x.shape[2]
    sums = x.sum(axis=(1, 2))
    multiplier, shift = mean_multiplier(a, count)
    acc = multiply_by_quantized_multiplier(sums - ins[0].quant.zp * count, multiplier, shift,
                                           a.requant.single_rounding, a.requant.fp32)
    y = acc + outs[0].quant.zp
    y = np.clip(y, a.act_min, a.act_max).astype(np.int8)
    return [y.reshape((x.shape[0],) + outs[0].shape[1:])]


def macs(a: MeanAttrs, ins, outs) -> int:
    return 0



@dataclass(frozen=True)
class MeanGradAttrs:
    """g_x (N,H,W,C) = g_y / (H*W) broadcast (one float32 division per element)."""

    input_hw: tuple[int, int]


def grad_shapes(a: MeanGradAttrs, ins) -> list[tuple[int, ...]]:
    g = ins[0]
    return [(g.shape[0], a.input_hw[0], a.input_hw[1], g.shape[-1])]


def grad_reference(a: MeanGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0].astype(np.float32).reshape(arrays[0].shape[0], 1, 1, -1)
    gx = g / np.float32(a.input_hw[0] * a.input_hw[1])
    return [np.broadcast_to(gx, (g.shape[0],) + outs[0].shape[1:]).astype(np.float32)]


@dataclass(frozen=True)
class MeanGradMaskedAttrs:
    """g_x (N,H,W,C) = g_y / (H*W) broadcast where the packed clamp mask's bit is 1, else 0."""

    input_hw: tuple[int, int]


def grad_masked_shapes(a: MeanGradMaskedAttrs, ins) -> list[tuple[int, ...]]:
    (shape,) = grad_shapes(MeanGradAttrs(a.input_hw), ins[:1])
    if ins[1].shape != packed_shape(shape):
        raise ValueError(f"mean_grad_masked: bits {ins[1].shape} do not fit gradient {shape}")
    return [shape]


def grad_masked_reference(a: MeanGradMaskedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    (gx,) = grad_reference(MeanGradAttrs(a.input_hw), arrays[:1], ins[:1], outs)
    return [np.where(unpack(arrays[1], gx.shape), gx, np.float32(0)).astype(np.float32)]


def backward(b, node, out_grads) -> list[str | None]:
    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: MeanAttrs = node.attrs
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    return [b.emit("mean_grad", [gz], MeanGradAttrs(b.tensor(x).shape[1:3]), f"{node.name}.grad_input")[0]]


# ---- the importers, the exporter, the twin, the other input sizes (ops/__init__.py: hooks) -------------------------


def ort_mean_scale(s_x: float, count: int, s_y: float) -> float:
    """onnxruntime's QLinearGlobalAveragePool scale, float32(s_x / float32(s_y * float32(count)))."""
    f = np.float32
    return float(f(s_x) / (f(s_y) * f(count)))


def mean_requant(s_x: float, count: int, s_y: float) -> Requant:
    """An ONNX import's mean over ``count`` values (count folded into the scale): onnxruntime's float32 rounding."""
    return Requant.from_scales([ort_mean_scale(s_x, count, s_y)], fp32=True)


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    xt = cv.tensors[p.args["x"]]
    count = xt.shape[1] * xt.shape[2]
    amin, amax = activation_range(yq.zp, yq.s, p.lo, p.hi, half_even=True)
    attrs = MeanAttrs(mean_requant(xt.quant.s, count, yq.s), p.args["keepdims"], amin, amax, count_folded=True)
    return cv.add_node("mean", p.source, [p.args["x"]], out_hint, yq, attrs, p.source)


def onnx_defer(cv, node, act) -> None:
    """A GlobalAveragePool / ReduceMean over H, W (keepdims as the node says), deferred to its QuantizeLinear."""
    label = cv.label(node)
    if len(act.shape) != 4:
        raise cv.unsupported(f"{label}: only spatial means of NCHW tensors are supported")
    n, c, _, _ = act.shape
    if node.op_type in ("GlobalAveragePool", "QLinearGlobalAveragePool"):
        keep = True
    else:
        a = cv.attrs(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(x) for x in cv.const(node, 1, "axes")]
        if not axes:
            raise cv.unsupported(f"{label} averages over all axes; only the mean over H and W (axes 2, 3) is supported")
        axes = sorted({x + 4 if x < 0 else x for x in axes})
        if axes != [2, 3]:
            raise cv.unsupported(f"{label} averages over axes {axes}; only the mean over H and W (axes 2, 3) is "
                                 f"supported")
        keep = bool(a.get("keepdims", 1))
    cv.defer(node, "mean", (n, c, 1, 1) if keep else (n, c), onnx_emit, reopens=True, x=act.ir, keepdims=keep)


def onnx_mean(cv, node) -> None:
    onnx_defer(cv, node, cv.dq_input(node, 0))


def onnx_qlinear_mean(cv, node) -> None:
    """com.microsoft QLinearGlobalAveragePool (X, x_scale, x_zp, y_scale, y_zp), NCHW."""
    cv.channels_first(node)
    x = cv.qlinear_input(node, 0, 1, 2)
    yq, dtype = cv.qlinear_output(node, 3, 4)
    onnx_defer(cv, node, x)
    cv.set_output(node, cv.materialize(cv.values[node.output[0]].pending, yq, node.output[0]), dtype)


def pooled_axes(im, op, perm: tuple[int, ...]) -> tuple[list[int], bool]:
    """(the NHWC axes a TFLite MEAN reduces, read through the ``perm`` of a dropped TRANSPOSE before it; keep_dims).
    A transposed input's mean keeps its dims only where the permutation leaves the output's layout alone."""
    axes = sorted({perm[int(a) % 4] for a in im.const_data(op.inputs[1], "MEAN axis", ("INT32", "INT64")).ravel()})
    keep = bool(op.options["keep_dims"])
    if keep and perm != (0, 1, 2, 3):
        raise UnsupportedModelError(f"operator {op.index} (MEAN) keeps the dims of a transposed {list(perm)} input; "
                                    "only keep_dims=False is supported there (PyTorch's x.mean((2, 3)))")
    return axes, keep


def tflite_mean(im, op) -> None:
    src, perm = im.through_layout(op.inputs[0])
    x, out = im.act(src), im.out(op)
    im.rank4(op, x)
    axes, keep = pooled_axes(im, op, perm)
    if axes != [1, 2]:
        raise UnsupportedModelError(f"operator {op.index} (MEAN) reduces axes {axes}; only the spatial axes "
                                    "[1, 2] of an NHWC tensor are supported")
    requant = Requant.from_scales([x.quant.s / out.quant.s])
    im.node(op, "mean", [x.name], [out.name], MeanAttrs(requant, keepdims=keep))


def export(ex, n) -> None:
    a = n.attrs
    x = ex.dq(n.inputs[0], n.name)
    if a.keepdims:
        f = ex.node("GlobalAveragePool", [x], f"{n.outputs[0]}_float", n.name)
    else:
        axes = ex.init(f"{n.outputs[0]}_axes", np.array([2, 3], np.int64))
        f = ex.node("ReduceMean", [x, axes], f"{n.outputs[0]}_float", n.name, keepdims=0)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    y = t.torch.clamp(xs[0].mean((2, 3), keepdim=True), *clamp)
    return y if node.attrs.keepdims else y.flatten(1)


def resized(a: MeanAttrs, old, new, out) -> MeanAttrs:
    """A mean keeps averaging the whole map; an ONNX mean that folded 1/count into its scale gets the scale of the
    new count, rounded as the frontend rounds it."""
    if a.count_folded and new.shape[1:3] != old.shape[1:3]:
        return replace(a, requant=mean_requant(old.quant.s, new.shape[1] * new.shape[2], out.quant.s))
    return a


ONNX = {"GlobalAveragePool": onnx_mean, "ReduceMean": onnx_mean}
ONNX_QOPERATOR = {"com.microsoft.QLinearGlobalAveragePool": onnx_qlinear_mean}
TFLITE = {"MEAN": TfliteRead(tflite_mean, (27, (("keep_dims", 0, "<B", 0),)), required=2, constants=(1,))}
DOC = OpDoc("MEAN (H, W)", "GlobalAveragePool, ReduceMean / QLinearGlobalAveragePool", "requantized sum",
            "broadcast g / count", "clamp mask")


OP = OpDef("mean", MeanAttrs, infer_shapes, reference, macs, backward=backward, resize=Resize(adapt=resized),
           export=export, twin=twin, doc=DOC)
GRAD = OpDef("mean_grad", MeanGradAttrs, grad_shapes, grad_reference, macs, bound=same_bound,  # g / (H*W) <= g
             integer=integer_form("mean_grad_int", lambda rewrite, node, s: s / (node.attrs.input_hw[0]
                                                                                   * node.attrs.input_hw[1])))
GRAD_MASKED = OpDef("mean_grad_masked", MeanGradMaskedAttrs, grad_masked_shapes, grad_masked_reference, macs,
                    bound=same_bound)


def grad_int_reference(a: MeanGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """The integer form (plan "backward": "int"): g / (H W) is the same integer g broadcast, its real scale divided
    by H W (training/integer_step.py): an exact share, no rounding."""
    g = arrays[0].reshape(arrays[0].shape[0], 1, 1, -1)
    return [np.broadcast_to(g, outs[0].shape).astype(np.int32)]


GRAD_INT = OpDef("mean_grad_int", MeanGradAttrs, grad_shapes, grad_int_reference, macs, bound=same_bound)
OPS = (OP, GRAD, GRAD_MASKED, GRAD_INT)
