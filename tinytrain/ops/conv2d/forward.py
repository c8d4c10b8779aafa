"""conv2d's forward (the package docstring): attributes, shape rule, reference, MACs and the memory promises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.ir import Tensor
from tinytrain.ops import RowWindow
from tinytrain.quant import Requant, requantize


@dataclass(frozen=True)
class Conv2dAttrs:
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    requant: Requant
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    act_min: int = -128
    act_max: int = 127


def output_hw(h: int, w: int, kh: int, kw: int, a: Conv2dAttrs) -> tuple[int, int]:
    pt, pl, pb, pr = a.padding
    ho = (h + pt + pb - a.dilation[0] * (kh - 1) - 1) // a.stride[0] + 1
    wo = (w + pl + pr - a.dilation[1] * (kw - 1) - 1) // a.stride[1] + 1
    return ho, wo


def infer_shapes(a: Conv2dAttrs, ins: Sequence[Tensor | None]) -> list[tuple[int, ...]]:
    x, w = ins[0], ins[1]
    n, h, wd, cin = x.shape
    cout, kh, kw, cg = w.shape
    if cg * a.groups != cin or cout % a.groups:
        raise ValueError(f"conv2d: weight {w.shape} does not fit input {x.shape} with groups={a.groups}")
    if a.groups not in (1, cin):
        raise ValueError("conv2d: only regular (groups=1) and depthwise (groups=C_in) convolutions")
    ho, wo = output_hw(h, wd, kh, kw, a)
    if ho <= 0 or wo <= 0:
        raise ValueError(f"conv2d: empty output for input {x.shape}")
    return [(n, ho, wo, cout)]


def _centered_input(x: np.ndarray, xt: Tensor, a: Conv2dAttrs) -> np.ndarray:
    """(x - zx) as int32, zero-padded (padding holds zx, so it contributes nothing)."""
    xz = x.astype(np.int32) - np.int32(xt.quant.zp)
    pt, pl, pb, pr = a.padding
    return np.pad(xz, ((0, 0), (pt, pb), (pl, pr), (0, 0)))


def _centered_weight(w: np.ndarray, wt: Tensor) -> np.ndarray:
    zw = np.asarray(wt.quant.zero_point, np.int32).reshape(-1, *([1] * (w.ndim - 1)))
    return w.astype(np.int32) - zw


def accumulate(a: Conv2dAttrs, x: np.ndarray, xt: Tensor, w: np.ndarray, wt: Tensor,
               bias: np.ndarray | None, out_shape: tuple[int, ...]) -> np.ndarray:
    """The int32 accumulator (N,Ho,Wo,C_out) before requantization."""
    xp = _centered_input(x, xt, a)
    wz = _centered_weight(w, wt)
    cout, kh, kw, cg = w.shape
    n = x.shape[0]
    ho, wo = out_shape[1], out_shape[2]
    (sh, sw), (dh, dw) = a.stride, a.dilation
    if a.groups == 1:
        if (kh, kw, sh, sw) == (1, 1, 1, 1):
            cols = xp.reshape(-1, cg)
        else:
            win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
            win = win[:, : (ho - 1) * sh + 1 : sh, : (wo - 1) * sw + 1 : sw, :, ::dh, ::dw]
            cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(n * ho * wo, kh * kw * cg)
        # float64 matmul is exact: |sum| < 2^53 for any int8 model that fits a microcontroller.
        acc = (cols.astype(np.float64) @ wz.reshape(cout, -1).T.astype(np.float64)).astype(np.int64)
        acc = acc.reshape(n, ho, wo, cout)
    else:
        mult = cout // x.shape[3]
        if mult > 1:
            xp = xp[..., np.arange(cout) // mult]
        acc = np.zeros((n, ho, wo, cout), np.int64)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, i * dh : i * dh + (ho - 1) * sh + 1 : sh, j * dw : j * dw + (wo - 1) * sw + 1 : sw, :]
                acc += patch * wz[:, i, j, 0].astype(np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    return acc


def reference(a: Conv2dAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x, w = arrays[0], arrays[1]
    bias = arrays[2] if len(arrays) > 2 else None
    out_shape = (x.shape[0],) + outs[0].shape[1:]
    acc = accumulate(a, x, ins[0], w, ins[1], bias, out_shape)
    return [requantize(acc, a.requant, outs[0].quant.zp, a.act_min, a.act_max)]


def macs(a: Conv2dAttrs, ins, outs) -> int:
    _, ho, wo, cout = outs[0].shape
    _, kh, kw, cg = ins[1].shape
    return ho * wo * cout * kh * kw * cg


def _first_tap(n_out: int, stride: int, pad: int, dilation: int, taps: int, size: int) -> np.ndarray:
    """Per output row (or column): the first input row it reads, ``size`` when it reads only padding."""
    start = np.arange(n_out, dtype=np.int64) * stride - pad
    i = np.maximum(0, -(start // dilation))  # the first tap at or below the input's first row
    first = start + i * dilation
    return np.where((i < taps) & (first < size), first, size)


def min_read(a: Conv2dAttrs, ins, outs, k: int) -> np.ndarray | None:
    """``OpDef.min_read`` of input 0: output (y,x,o) reads first at its window's first valid row and column,
    channel 0 (regular) or o // multiplier (depthwise). The C kernels loop y, x, o and store each output
    after its accumulation, as that contract asks."""
    if k != 0:
        return None
    n, h, w, cin = ins[0].shape
    _, ho, wo, cout = outs[0].shape
    kh, kw = ins[1].shape[1:3]
    rows = _first_tap(ho, a.stride[0], a.padding[0], a.dilation[0], kh, h)
    cols = _first_tap(wo, a.stride[1], a.padding[1], a.dilation[1], kw, w)
    chans = np.zeros(cout, np.int64) if a.groups == 1 else np.arange(cout, dtype=np.int64) // (cout // cin)
    batch = np.arange(n, dtype=np.int64)
    idx = (((batch[:, None, None, None] * h + rows[None, :, None, None]) * w + cols[None, None, :, None]) * cin
           + chans[None, None, None, :])
    only_padding = (rows[None, :, None, None] >= h) | (cols[None, None, :, None] >= w)
    return np.where(only_padding, n * h * w * cin, idx).reshape(-1)


def row_window(a: Conv2dAttrs, ins, outs, k: int) -> RowWindow | None:
    """``OpDef.rows`` of input 0: output row r reads the kh window rows from r * stride - pad_top."""
    if k != 0:
        return None
    kh = ins[1].shape[1]
    return RowWindow(a.stride[0], -a.padding[0], (kh - 1) * a.dilation[0] + 1)
