"""The integer input gradient of a convolution (plan "backward": "int", training/integer_step.py): the gradient
flowing back through a pointwise (1x1) or depthwise (multiplier 1) convolution, int32 accumulation, then a
per-tensor power-of-two rescale into int16's range (NITI's static case: the shifts are chosen at compile time from
the overflow proof's bounds, ``shifts``).

Inputs: g_z (N,Ho,Wo,C_out) int32 (the masked output gradient, real scale s_g), w (C_out,KH,KW,C_in/groups) int8
(per-channel scales s_w[o], zero points zw[o]), fold (C_out,) int32: M[o] = round(2^15 s_w[o] / max s_w), the
per-channel weight scale folded into the gradient so that every term of a sum has one scale. Integers only:
    gs[o]  = (g_z[o] M[o] + half(r)) >> r                          (int32: |g_z| M + half(r) < 2^31, ``fits``)
    acc[c] = sum over (o, tap) reading c of gs[o] (w[o,tap] - zw[o])  (int32, exact: |acc| + half(t) < 2^31)
    g_x[c] = (acc[c] + half(t)) >> t                               (|g_x| <= 32767: int16's range)
half(k) = 2^(k-1) (0 when k = 0): rounding half up (the shift is floor). The result has real scale
s_g max(s_w) 2^(r - 15 + t); it is stored in an int32 tensor (its values within int16's range).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.ops import OpDef
from tinytrain.ops.conv2d import Conv2dGradInputAttrs, _taps, grad_input_macs, grad_input_shapes

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
    shift: int = 0  # t

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


def stage_bounds(g_bound: int, m_max: int, taps: int, r: int, t: int) -> tuple[int, int, int]:
    """Exact bounds of |gs|, |acc| and |g_x| given |g_z| <= g_bound, max M and the largest tap sum."""
    gs = (g_bound * m_max + _half(r)) >> r
    acc = gs * taps
    return gs, acc, (acc + _half(t)) >> t


def fits(g_bound: int, m_max: int, taps: int, r: int, t: int) -> bool:
    """Every intermediate of the kernel within int32: g_z M + half(r) and acc + half(t)."""
    acc = stage_bounds(g_bound, m_max, taps, r, t)[1]
    return g_bound * m_max + _half(r) <= INT32_MAX and acc + _half(t) <= INT32_MAX


def shifts(g_bound: int, m_max: int, taps: int) -> tuple[int, int]:
    """The smallest r, and then t, with every intermediate within int32 (``fits``) and |g_x| within int16."""
    for r in range(63):
        t = 0
        while stage_bounds(g_bound, m_max, taps, r, t)[2] > INT16_MAX:
            t += 1
        if fits(g_bound, m_max, taps, r, t):
            return r, t
    raise PlanError(f"no shifts keep an integer input gradient within int32 (gradient bound {g_bound})")


def reference(a: Conv2dGradInputIntAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, w, m = arrays
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
    return [((acc + _half(a.shift)) >> a.shift).astype(np.int32)]


def shapes(a: Conv2dGradInputIntAttrs, ins) -> list[tuple[int, ...]]:
    if not covered(a, ins[1].shape):
        raise ValueError("conv2d_grad_input_int: only a pointwise or depthwise (multiplier 1) convolution's")
    return grad_input_shapes(a.geometry(), ins[:2])


def bound(a: Conv2dGradInputIntAttrs, ins, bounds) -> list[float]:
    """|g_x| from |g_z|'s bound, the fold's largest M and the largest tap sum of the weight as the proof sees it
    (a trainable one at its worst case); inf when an intermediate sum could leave int32."""
    w = ins[1]
    taps = int(tap_sums(w.data, w.quant.zero_point, a.groups).max())
    g, m = int(bounds[0]), int(ins[2].data.max())
    if not fits(g, m, taps, a.pre_shift, a.shift):
        return [float("inf")]
    return [float(stage_bounds(g, m, taps, a.pre_shift, a.shift)[2])]


def macs(a: Conv2dGradInputIntAttrs, ins, outs) -> int:
    return grad_input_macs(a.geometry(), ins, outs)


OP = OpDef("conv2d_grad_input_int", Conv2dGradInputIntAttrs, shapes, reference, macs, bound=bound)
