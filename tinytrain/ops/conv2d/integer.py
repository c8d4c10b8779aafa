"""conv2d's integer forms (plan "backward": "int", training/integer_step.py): the weight gradient
``conv2d_grad_weight_int`` (int32 sums of g_z (x - zx)), and the input gradient ``conv2d_grad_input_int``: the gradient
flowing back through a pointwise (1x1) or depthwise (multiplier 1) convolution, int32 accumulation, then a
per-tensor power-of-two rescale chosen at run time (NITI's dynamic shift), so the gradient keeps its bits however
small it is: a static bound would have to assume the worst case at every layer, and a deep gradient would be
left with a few bits of its int16 range.

Inputs: g_z (N,Ho,Wo,C_out) int32 (the masked output gradient, real scale s_g 2^-e_z), w (C_out,KH,KW,C_in/groups)
int8 (per-channel scales s_w[o], zero points zw[o]), fold (C_out,) int32: M[o] = round(2^15 s_w[o] / max s_w), the
per-channel weight scale folded into the gradient so that every term of a sum has one scale, and e_z (1,) int32 or
"" (0): the exponent g_z's producer chose. Outputs: g_x and its exponent e_x (1,) int32. Integers only:
    gs[o]  = (g_z[o] M[o] + half(r)) >> r                          (int32: |g_z| M + half(r) < 2^31, ``fits``)
    acc[c] = sum over (o, tap) reading c of gs[o] (w[o,tap] - zw[o])  (int32, exact)
    t      = the smallest shift with (max|acc| + half(t)) >> t <= L    (|acc| + half(t) < 2^31, ``fits``)
    g_x[c] = (acc[c] + half(t)) >> t                               (|g_x| <= L)
    e_x    = e_z + T - t
half(k) = 2^(k-1) (0 when k = 0): rounding half up (the shift is floor). r is static: the smallest pre-shift the
overflow proof allows for |g_z| <= its bound (``shifts``), with t at its largest for that bound; L (``limit``) is
32767 (int16's range), or less where the weight gradient summing g_x over H x W pixels of an int8 input would leave
int32 (``limit_for``). g_x has real scale s_g max(s_w) 2^(r - 15 + T) 2^-e_x: the static part is the tensor's
quantization, T a static offset that keeps it at g_z's (``offset``: T = 15 - r - round(log2 max s_w)), so the
exponent, of either sign, is what the gradient's magnitude does at run time and the update adds to its shift
(ops/sgd_update_int.py). g_x is stored in an int32 tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ir import Node
from tinytrain.ops.conv2d.backward import (Conv2dGradInputAttrs, Conv2dGradWeightAttrs, _taps, grad_input_macs,
                                           grad_input_shapes, grad_weight_shapes)

INT16_MAX = 2 ** 15 - 1
INT32_MAX = 2 ** 31 - 1
FOLD_BITS = 15  # M[o] in Q15


@dataclass(frozen=True)
class Conv2dGradInputIntAttrs:
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    input_hw: tuple[int, int]
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    pre_shift: int = 0  # r
    shift: int = 0  # T: the static offset of the exponent
    limit: int = 2 ** 15 - 1  # L: |g_x| <= L

    def geometry(self) -> Conv2dGradInputAttrs:
        return Conv2dGradInputAttrs(self.stride, self.padding, self.input_hw, self.dilation, self.groups)


def covered(a: Conv2dGradInputAttrs, w_shape: tuple[int, ...]) -> bool:
    """A pointwise (1x1, stride 1, unpadded) or depthwise multiplier-1 convolution's input gradient."""
    if a.groups == 1:
        return tuple(w_shape[1:3]) == (1, 1) and a.stride == (1, 1) and not any(a.padding)
    return w_shape[0] == a.groups


def fold(w_scale, cout: int) -> np.ndarray:
    """M[o] = round(2^15 s_w[o] / max s_w) (int32, (C_out,)): 2^15 for every channel of a per-tensor scale."""
    s = np.broadcast_to(np.asarray(w_scale, np.float64), (cout,))
    return np.round(s / s.max() * 2 ** FOLD_BITS).astype(np.int32)


def _half(k: int) -> int:
    return 1 << (k - 1) if k > 0 else 0


def tap_sums(w: np.ndarray, zw, groups: int) -> np.ndarray:
    """Per input channel c: the sum of |w - zw| over every (output channel, tap) that reads c."""
    wz = np.abs(w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, *([1] * (w.ndim - 1))))
    return wz.sum(axis=(0, 1, 2)) if groups == 1 else wz.sum(axis=(1, 2, 3))


def limit_for(pixels: int) -> int:
    """L for a gradient of ``pixels`` (H x W) positions: int16's range, or less so that a weight gradient summing it
    times an int8 input's |x - zx| <= 255 over those positions stays within int32."""
    return min(INT16_MAX, INT32_MAX // (pixels * 255))


def dynamic_shift(amax: int, limit: int) -> int:
    """The smallest t with (amax + half(t)) >> t <= limit."""
    t = 0
    while (amax + _half(t)) >> t > limit:
        t += 1
    return t


def stage_bounds(g_bound: int, m_max: int, taps: int, r: int, t: int) -> tuple[int, int, int]:
    """Exact bounds of |gs|, |acc| and |g_x| given |g_z| <= g_bound, max M and the largest tap sum."""
    gs = (g_bound * m_max + _half(r)) >> r
    acc = gs * taps
    return gs, acc, (acc + _half(t)) >> t


def fits(g_bound: int, m_max: int, taps: int, r: int, t: int) -> bool:
    """Every intermediate of the kernel within int32: g_z M + half(r) and acc + half(t)."""
    acc = stage_bounds(g_bound, m_max, taps, r, t)[1]
    return g_bound * m_max + _half(r) <= INT32_MAX and acc + _half(t) <= INT32_MAX


def offset(pre_shift: int, w_scale_max: float) -> int:
    """T: the exponent's static offset that keeps g_x's static scale s_g max(s_w) 2^(r - 15 + T) near g_z's."""
    return 15 - pre_shift - round(math.log2(w_scale_max))


def shifts(g_bound: int, m_max: int, taps: int, limit: int = INT16_MAX) -> tuple[int, int]:
    """The smallest r, and the largest run-time t it leads to, with every intermediate within int32 (``fits``) and
    |g_x| <= limit."""
    for r in range(63):
        t = dynamic_shift(stage_bounds(g_bound, m_max, taps, r, 0)[1], limit)
        if fits(g_bound, m_max, taps, r, t):
            return r, t
    raise PlanError(f"no shifts keep an integer input gradient within int32 (gradient bound {g_bound})")


def reference(a: Conv2dGradInputIntAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, w, m = arrays[:3]
    zw = np.asarray(ins[1].quant.zero_point, np.int64).reshape(-1, 1, 1, 1)
    wz = w.astype(np.int64) - zw
    gs = (g.astype(np.int64) * m.astype(np.int64) + _half(a.pre_shift)) >> a.pre_shift
    n, ho, wo, cout = g.shape
    _, kh, kw, _ = w.shape
    (h, wd), (pt, pl, pb, pr) = a.input_hw, a.padding
    cin = outs[0].shape[3]
    acc = np.zeros((n, h + pt + pb, wd + pl + pr, cin), np.int64)
    for i, j, (rows, cols) in _taps(kh, kw, ho, wo, a.stride, a.dilation):
        acc[:, rows, cols, :] += gs @ wz[:, i, j, :] if a.groups == 1 else gs * wz[:, i, j, 0]
    acc = acc[:, pt:pt + h, pl:pl + wd, :]
    return rescale(acc, a, arrays[3] if len(arrays) > 3 else None)


def rescale(acc: np.ndarray, a, exp_in) -> list[np.ndarray]:
    """[g_x, e_x]: the sums shifted by the run-time t into +-limit, the exponent e_z + T - t."""
    t = dynamic_shift(int(np.abs(acc).max(initial=0)), a.limit)
    e = (0 if exp_in is None else int(np.asarray(exp_in).reshape(-1)[0])) + a.shift - t
    return [((acc + _half(t)) >> t).astype(np.int32), np.array([e], np.int32)]


def shapes(a: Conv2dGradInputIntAttrs, ins) -> list[tuple[int, ...]]:
    if not covered(a, ins[1].shape):
        raise ValueError("conv2d_grad_input_int: only a pointwise or depthwise (multiplier 1) convolution's")
    return grad_input_shapes(a.geometry(), ins[:2]) + [(1,)]


def bound(a: Conv2dGradInputIntAttrs, ins, bounds) -> list[float]:
    """|g_x| <= limit and |e_x| <= |e_z| + |T| + t, given |g_z|'s bound, the fold's largest M and the largest tap
    sum of the weight as the proof sees it (a trainable one at its worst case), t the largest run-time shift; inf
    when an intermediate sum could leave int32."""
    w = ins[1]
    taps = int(tap_sums(w.data, w.quant.zero_point, a.groups).max())
    g, m = int(bounds[0]), int(ins[2].data.max())
    t = dynamic_shift(stage_bounds(g, m, taps, a.pre_shift, 0)[1], a.limit)
    if not fits(g, m, taps, a.pre_shift, t):
        return [float("inf"), float("inf")]
    exp = (bounds[3] or 0.0) if len(bounds) > 3 else 0.0
    return [float(a.limit), exp + abs(a.shift) + t]


def macs(a: Conv2dGradInputIntAttrs, ins, outs) -> int:
    return grad_input_macs(a.geometry(), ins, outs)


# ---- the integer weight gradient -----------------------------------------------------------------------------


def grad_weight_int_shapes(a: Conv2dGradWeightAttrs, ins) -> list[tuple[int, ...]]:
    if a.groups != 1 and ins[0].shape[3] != ins[1].shape[3]:
        raise ValueError("conv2d_grad_weight_int: a depthwise convolution's only with channel multiplier 1")
    return grad_weight_shapes(a, ins)


def grad_weight_int_reference(a: Conv2dGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """g_w (C_sel,KH,KW,C_in/groups) int32 = sum over output pixels of g_z[.., o] (x[window tap] - zx), exact (the
    bound rule proves it fits); padding holds zx, so it adds nothing."""
    g = arrays[0].astype(np.int64)
    sel = np.arange(g.shape[3]) if a.channels is None else np.asarray(a.channels)
    g = g[..., sel]
    pt, pl, pb, pr = a.padding
    xp = np.pad(arrays[1].astype(np.int64) - ins[1].quant.zp, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    n, ho, wo, _ = g.shape
    kh, kw = a.kernel
    gw = np.zeros(outs[0].shape, np.int64)
    for i, j, (rows, cols) in _taps(kh, kw, ho, wo, a.stride, a.dilation):
        patch = xp[:, rows, cols, :]
        if a.groups == 1:
            gw[:, i, j, :] = g.reshape(-1, len(sel)).T @ patch.reshape(-1, patch.shape[3])
        else:
            gw[:, i, j, 0] = (g * patch[..., sel]).sum(axis=(0, 1, 2))
    return [gw.astype(np.int32)]


def grad_weight_int_bound(a: Conv2dGradWeightAttrs, ins, bounds) -> list[float]:
    """Pixels x |g_z|max x max|x - zx| (integers)."""
    zx = ins[1].quant.zp
    return [bounds[0] * ins[0].shape[0] * ins[0].shape[1] * ins[0].shape[2] * max(abs(-128 - zx), abs(127 - zx))]


# ---- the integer step's rewrites (OpDef.integer, training/integer_step.py) ----------------------------------------


def input_gradient(node: Node, rewrite, op: str, conv: bool, attrs_of) -> Node:
    """A convolution's (``conv``) or fully-connected layer's input gradient -> its integer form ``op``: the weight's
    per-channel scale folded (Q15), the pre-shift the smallest the proof allows, the limit the weight gradient behind
    allows, the exponent's offset; the output's static scale s_g max(s_w) 2^(r-15+T) and its exponent tensor.
    ``attrs_of(r, t, limit)``: the integer op's attrs."""
    (g, w), wt = node.inputs, rewrite.tensors[node.inputs[1]]
    s_g = rewrite.scale(g, node)
    if conv and not covered(node.attrs, wt.shape):
        raise PlanError(f'"backward": "int": {node.name} is the input gradient of a convolution neither pointwise nor '
                        'depthwise (multiplier 1); use "backward": "fp32"')
    proven = rewrite.proven(w).data
    proven = proven if conv else proven.reshape(proven.shape[0], 1, 1, -1)
    m = fold(wt.quant.scale, wt.shape[0])
    gx = rewrite.tensors[node.outputs[0]]
    limit = limit_for(gx.shape[1] * gx.shape[2] if conv else gx.shape[0])
    r = shifts(int(rewrite.bounds[g]), int(m.max()),
               int(tap_sums(proven, wt.quant.zero_point, node.attrs.groups if conv else 1).max()), limit)[0]
    s_w = float(np.max(np.asarray(wt.quant.scale, np.float32)))
    t = offset(r, s_w)
    fold_name = rewrite.constant(f"{node.name}.fold", m)
    rewrite.int_output(gx.name, s_g * s_w * 2.0 ** (r - FOLD_BITS + t))
    exp = rewrite.exponent_tensor(gx.name, gx.role)
    return replace(node, op=op, inputs=(g, w, fold_name, rewrite.exps.get(g, "")), outputs=(gx.name, exp),
                   attrs=attrs_of(r, t, limit))


def conv_input_gradient(node: Node, rewrite) -> Node:
    a = node.attrs
    return input_gradient(node, rewrite, "conv2d_grad_input_int", True, lambda r, t, limit: Conv2dGradInputIntAttrs(
        a.stride, a.padding, a.input_hw, a.dilation, a.groups, r, t, limit))


def weight_gradient_scale(rewrite, node: Node, s_g: float) -> float:
    """A weight gradient's integer scale: s_g times its input's float32 scale."""
    return s_g * float(np.float32(rewrite.tensors[node.inputs[1]].quant.s))
