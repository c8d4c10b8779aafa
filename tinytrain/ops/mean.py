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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, same_bound
from tinytrain.quant import Requant, multiply_by_quantized_multiplier


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
    from tinytrain.ops.clamp_mask_packed import packed_shape

    (shape,) = grad_shapes(MeanGradAttrs(a.input_hw), ins[:1])
    if ins[1].shape != packed_shape(shape):
        raise ValueError(f"mean_grad_masked: bits {ins[1].shape} do not fit gradient {shape}")
    return [shape]


def grad_masked_reference(a: MeanGradMaskedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    from tinytrain.ops.clamp_mask_packed import unpack

    (gx,) = grad_reference(MeanGradAttrs(a.input_hw), arrays[:1], ins[:1], outs)
    return [np.where(unpack(arrays[1], gx.shape), gx, np.float32(0)).astype(np.float32)]


def backward(b, node, out_grads) -> list[str | None]:
    from tinytrain.ops.clamp_mask import masked_grad

    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    a: MeanAttrs = node.attrs
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    return [b.emit("mean_grad", [gz], MeanGradAttrs(b.tensor(x).shape[1:3]), f"{node.name}.grad_input")[0]]


OP = OpDef("mean", MeanAttrs, infer_shapes, reference, macs, backward=backward)
GRAD = OpDef("mean_grad", MeanGradAttrs, grad_shapes, grad_reference, macs, bound=same_bound)  # g / (H*W) <= g
GRAD_MASKED = OpDef("mean_grad_masked", MeanGradMaskedAttrs, grad_masked_shapes, grad_masked_reference, macs,
                    bound=same_bound)


def grad_int_reference(a: MeanGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """The integer form (plan "backward": "int"): g / (H W) is the same integer g broadcast, its real scale divided
    by H W (training/integer_step.py): an exact share, no rounding."""
    g = arrays[0].reshape(arrays[0].shape[0], 1, 1, -1)
    return [np.broadcast_to(g, outs[0].shape).astype(np.int32)]


GRAD_INT = OpDef("mean_grad_int", MeanGradAttrs, grad_shapes, grad_int_reference, macs, bound=same_bound)
OPS = (OP, GRAD, GRAD_MASKED, GRAD_INT)
