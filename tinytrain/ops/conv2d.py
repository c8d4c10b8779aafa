"""2-D convolution, int8: regular, depthwise (groups = C_in, any channel multiplier) and pointwise.

x (N,H,W,C_in) int8, w (C_out,KH,KW,C_in/groups) int8, bias (C_out,) int32 or absent.
acc[n,y,x,o] = bias[o] + sum (x - zx) * (w - zw); y = clamp(MBQM(acc, m[o], shift[o]) + zy).

Backward (fp32, real values; forward saves int8 x and y): g_z = clamp_mask(g_y, y);
conv2d_grad_input: g_x = conv^T(g_z, s_w (w - zw)); conv2d_grad_weight: g_w[o] = sum g_z[..o] * s_x (x - zx)
over the selected output channels; bias_grad: g_b = sum g_z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain import f32
from tinytrain.ir import Tensor
from tinytrain.ops import OpDef, RowWindow
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


# ---- backward (fp32; gradients with respect to the real values; each sum in float32 in its kernel's order,
# ---- every term one fused multiply-add: docs/design.md §3b, tinytrain/f32.py) -----------------------------

@dataclass(frozen=True)
class Conv2dGradInputAttrs:
    """g_x (N,H,W,C_in) = transposed convolution of g_z (N,Ho,Wo,C_out) with the dequantized weight."""

    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    input_hw: tuple[int, int]
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


@dataclass(frozen=True)
class Conv2dGradWeightAttrs:
    """g_w (C_sel,KH,KW,C_in/groups) for output channels ``channels`` (all when None), from g_z and saved x."""

    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    kernel: tuple[int, int]
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    channels: tuple[int, ...] | None = None


def dequantize_weight(w: np.ndarray, wt: Tensor) -> np.ndarray:
    """float32 s_w[o] * (w - zw[o]) (per output channel along axis 0)."""
    shape = (-1,) + (1,) * (w.ndim - 1)
    s = np.asarray(wt.quant.scale, np.float32).reshape(shape)
    return (w.astype(np.int32) - np.asarray(wt.quant.zero_point, np.int32).reshape(shape)).astype(np.float32) * s


def dequantize_input(x: np.ndarray, xt: Tensor) -> np.ndarray:
    """float32 s_x * (x - zx) of a saved int8 activation."""
    return (x.astype(np.int32) - np.int32(xt.quant.zp)).astype(np.float32) * np.float32(xt.quant.s)


def weight_magnitude(wt: Tensor) -> np.ndarray:
    """|s_w[o] (w - zw[o])| in float64, elementwise, of a weight's data (the non-finite proof, training/finite.py)."""
    shape = (-1,) + (1,) * (len(wt.shape) - 1)
    zw = np.asarray(wt.quant.zero_point, np.float64).reshape(shape)
    return np.abs((wt.data.astype(np.float64) - zw) * np.asarray(wt.quant.scale, np.float64).reshape(shape))


def input_magnitude(xt: Tensor) -> float:
    """The largest |s_x (x - zx)| any int8 x can give."""
    return float(max(abs(-128 - xt.quant.zp), abs(127 - xt.quant.zp)) * np.float64(xt.quant.s))


def _taps(kh: int, kw: int, ho: int, wo: int, stride, dilation):
    for i in range(kh):
        for j in range(kw):
            yield i, j, (slice(i * dilation[0], i * dilation[0] + (ho - 1) * stride[0] + 1, stride[0]),
                         slice(j * dilation[1], j * dilation[1] + (wo - 1) * stride[1] + 1, stride[1]))


def grad_input_shapes(a: Conv2dGradInputAttrs, ins) -> list[tuple[int, ...]]:
    g, w = ins
    n, ho, wo, cout = g.shape
    if w.shape[0] != cout:
        raise ValueError(f"conv2d_grad_input: gradient {g.shape} does not match weight {w.shape}")
    cin = w.shape[3] * a.groups
    fwd = Conv2dAttrs(a.stride, a.padding, Requant((1,), (0,)), a.dilation, a.groups)
    if output_hw(*a.input_hw, w.shape[1], w.shape[2], fwd) != (ho, wo):
        raise ValueError(f"conv2d_grad_input: input {a.input_hw} does not give output {(ho, wo)}")
    return [(n, a.input_hw[0], a.input_hw[1], cin)]


def weight_factors(g: np.ndarray, w: np.ndarray, wt: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """An input gradient's two factors as the kernels round them: g * s_w[o] (float32, o the last axis of g) and the
    integer w - zw[o] as float32 (exact; o along axis 0 of w)."""
    s = np.asarray(wt.quant.scale, np.float32)
    zw = np.asarray(wt.quant.zero_point, np.int32).reshape((-1,) + (1,) * (w.ndim - 1))
    return g.astype(np.float32) * s, (w.astype(np.int32) - zw).astype(np.float32)


def grad_input_reference(a: Conv2dGradInputAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """Regular: gx = sum of (gz * s_w[o]) * (w - zw) in the C's scatter order (oy, ox, o): per gx element its taps
    from the last (i, j) to the first, each over o = 0..Co-1. Depthwise: gz * (s_w[o] * (w - zw)) (the dequantized
    tap rounded first) over (o, i, j) in that order. Each term one fmaf, every sum from +0 (docs/design.md §3b)."""
    g = arrays[0]
    n, ho, wo, cout = g.shape
    (h, w), (pt, pl, pb, pr) = a.input_hw, a.padding
    kh, kw, cg = ins[1].shape[1:]
    cin = cg * a.groups
    gxp = np.zeros((n, h + pt + pb, w + pl + pr, cin), np.float32)
    taps = list(_taps(kh, kw, ho, wo, a.stride, a.dilation))
    if a.groups == 1:
        gq, d = (v.astype(np.float64) for v in weight_factors(g, arrays[1], ins[1]))  # float32 values, exact
        for i, j, (rows, cols) in reversed(taps):
            for o in range(cout):
                gxp[:, rows, cols, :] = f32.fma_product(gq[..., o, None] * d[o, i, j], gxp[:, rows, cols, :])
    else:  # depthwise: output channel o = c * m + r reads input channel c
        m = cout // cin
        gm = g.astype(np.float32).astype(np.float64).reshape(n, ho, wo, cin, m)
        wd = dequantize_weight(arrays[1], ins[1]).astype(np.float64).reshape(cin, m, kh, kw)
        for r in range(m):
            for i, j, (rows, cols) in taps:
                gxp[:, rows, cols, :] = f32.fma_product(gm[..., r] * wd[:, r, i, j], gxp[:, rows, cols, :])
    return [gxp[:, pt : pt + h, pl : pl + w, :]]


def grad_weight_shapes(a: Conv2dGradWeightAttrs, ins) -> list[tuple[int, ...]]:
    g, x = ins
    cout = g.shape[3]
    if a.groups not in (1, x.shape[3]) or cout % a.groups:
        raise ValueError(f"conv2d_grad_weight: groups={a.groups} does not fit input {x.shape}")
    if a.channels is not None and (not a.channels or list(a.channels) != sorted(set(a.channels))
                                   or a.channels[0] < 0 or a.channels[-1] >= cout):
        raise ValueError(f"conv2d_grad_weight: channels {a.channels} are not increasing channels of {cout}")
    n_sel = cout if a.channels is None else len(a.channels)
    return [(n_sel, a.kernel[0], a.kernel[1], x.shape[3] // a.groups)]


def grad_weight_reference(a: Conv2dGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """gw[s,i,j,c] = sum over (n, oy, ox) in order of (gz[..,s] * s_x) * (x[window] - zx), each term one fmaf into a sum
    from +0 (padding cells add an exact 0: nothing); a depthwise row reads its own input channel (docs/design.md §3b)."""
    g = arrays[0]
    n, ho, wo, cout = g.shape
    sel = np.arange(cout) if a.channels is None else np.asarray(a.channels)
    gq = (g[..., sel].astype(np.float32) * np.float32(ins[1].quant.s)).astype(np.float64).reshape(-1, len(sel))
    pt, pl, pb, pr = a.padding
    xd = (arrays[1].astype(np.int32) - np.int32(ins[1].quant.zp)).astype(np.float64)  # integers, exact
    xp = np.pad(xd, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    kh, kw = a.kernel
    patches = np.stack([xp[:, rows, cols, :] for _, _, (rows, cols) in _taps(kh, kw, ho, wo, a.stride, a.dilation)],
                       axis=3).reshape(n * ho * wo, kh * kw, -1)  # (positions, taps, C_in)
    if a.groups == 1:
        terms = patches.reshape(len(patches), 1, -1)  # (positions, 1, taps * C_in)
    else:  # row s reads input channel sel[s] // m
        terms = patches[:, :, sel // (cout // xd.shape[3])].transpose(0, 2, 1)  # (positions, C_sel, taps)
    gw = np.zeros((len(sel), terms.shape[2]), np.float32)
    for q in range(len(terms)):
        gw = f32.fma_product(gq[q, :, None] * terms[q], gw)
    return [gw.reshape(len(sel), kh, kw, -1)]


def grad_input_macs(a: Conv2dGradInputAttrs, ins, outs) -> int:
    _, ho, wo, cout = ins[0].shape
    _, kh, kw, cg = ins[1].shape
    return ho * wo * cout * kh * kw * cg


def grad_weight_macs(a: Conv2dGradWeightAttrs, ins, outs) -> int:
    _, ho, wo, _ = ins[0].shape
    n_sel, kh, kw, cg = outs[0].shape
    return ho * wo * n_sel * kh * kw * cg


def grad_input_bound(a: Conv2dGradInputAttrs, ins, bounds) -> list[float]:
    """|g_x[.., c]| <= |g_z|max * the sum of |real weight| over every (output channel, tap) that reads channel c."""
    wr = weight_magnitude(ins[1])
    if a.groups == 1:
        per_channel = wr.sum(axis=(0, 1, 2))
    else:  # depthwise: output channel o reads input channel o // m, m = C_out / groups
        per_channel = wr.sum(axis=(1, 2, 3)).reshape(a.groups, -1).sum(axis=1)
    return [bounds[0] * float(per_channel.max())]


def grad_weight_bound(a: Conv2dGradWeightAttrs, ins, bounds) -> list[float]:
    """Each element sums H_out * W_out products |g_z| |real x|."""
    return [bounds[0] * ins[0].shape[1] * ins[0].shape[2] * input_magnitude(ins[1])]


def backward(b, node, out_grads) -> list[str | None]:
    """Mask the output gradient at the clamps, then input, weight and bias gradients as needed."""
    from tinytrain.ops.bias_grad import BiasGradAttrs
    from tinytrain.ops.clamp_mask import masked_grad

    a: Conv2dAttrs = node.attrs
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    result: list[str | None] = [None] * len(node.inputs)
    if b.needs_grad(x):
        hw = b.tensor(x).shape[1:3]
        result[0] = b.emit("conv2d_grad_input", [gz, w],
                           Conv2dGradInputAttrs(a.stride, a.padding, hw, a.dilation, a.groups),
                           f"{node.name}.grad_input")[0]
    if b.needs_grad(w):
        kernel = b.tensor(w).shape[1:3]
        result[1] = b.emit("conv2d_grad_weight", [gz, x],
                           Conv2dGradWeightAttrs(a.stride, a.padding, kernel, a.dilation, a.groups),
                           f"{node.name}.grad_weight")[0]
    if bias and b.needs_grad(bias):
        result[2] = b.emit("bias_grad", [gz], BiasGradAttrs(), f"{node.name}.grad_bias")[0]
    return result


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


def _first_source(n_in: int, stride: int, pad: int, dilation: int, taps: int, n_out: int) -> np.ndarray:
    """Per input row (or column) of a transposed convolution: the first output row whose window holds it,
    ``n_out`` when none does (the taps i with (row + pad - i * dilation) / stride an output row; the last valid
    tap gives the first row)."""
    t = np.arange(n_in, dtype=np.int64)[:, None] + pad - np.arange(taps, dtype=np.int64)[None, :] * dilation
    valid = (t >= 0) & (t % stride == 0) & (t // stride < n_out)
    return np.where(valid, t // stride, n_out).min(axis=1)


def grad_input_min_read(a: Conv2dGradInputAttrs, ins, outs, k: int) -> np.ndarray | None:
    """``OpDef.min_read`` over g_z (input 0) of the depthwise and pointwise input gradients: their C kernels gather
    each g_x element, in C order, and store it after its sum — a depthwise element (iy,ix,c) from the g_z windows
    that hold it, channels c*m .. c*m+m-1, so it reads first at the first output row and column holding it. The
    pointwise kernel goes pixel by pixel, zeroing and accumulating g_x pixel p while it reads g_z pixel p: its
    min_read puts g_x pixel p before g_z pixel p. The regular kernel scatters into a zeroed g_x, the blocked
    depthwise kernel (``grad_input_block``) writes a block of channels at a time: neither in C order."""
    if k != 0 or (a.groups != 1 and grad_input_block(a, ins, outs)):
        return None
    return _gather_min_read(a, ins, outs)


# The blocked depthwise input gradient's scratch: a block of channels of g_x, at most this many bytes (or one channel).
BLOCK_SCRATCH_BYTES = 2048


def grad_input_block(a: Conv2dGradInputAttrs, ins, outs) -> int:
    """Channels per block of the blocked depthwise input gradient, 0 for the kernel gathering in C order. Blocked
    when g_x has g_z's shape (stride 1, multiplier 1: it may then take g_z's very bytes, ``OpDef.overwrites``) and
    the most channels of g_x that fit BLOCK_SCRATCH_BYTES, at least one, are fewer bytes than the distance the
    C-order kernel keeps ahead of g_z (a row and a pixel for 3x3, three rows and three pixels for 7x7). A block is
    then the most channels whose g_x and taps (dequantized once, ``grad_input_scratch``) fit that scratch."""
    from tinytrain.memory.inplace import min_gap

    g, gx = ins[0], outs[0]
    if a.groups == 1 or g.shape != gx.shape:
        return 0
    plane = gx.size // gx.shape[-1] * 4
    if max(1, min(gx.shape[-1], BLOCK_SCRATCH_BYTES // plane)) * plane >= min_gap(_gather_min_read(a, ins, outs), 4, 4):
        return 0
    kh, kw = ins[1].shape[1:3]
    return max(1, min(gx.shape[-1], BLOCK_SCRATCH_BYTES // (plane + kh * kw * 4)))  # with its taps, dequantized


def grad_input_overwrites(a: Conv2dGradInputAttrs, ins, outs) -> int | None:
    return 0 if a.groups != 1 and grad_input_block(a, ins, outs) else None


def grad_input_scratch(a: Conv2dGradInputAttrs, ins, outs) -> int:
    """The blocked depthwise kernel's block of g_x channels, and the block's taps dequantized once."""
    if a.groups == 1:
        return 0
    kh, kw = ins[1].shape[1:3]
    return grad_input_block(a, ins, outs) * (outs[0].size // outs[0].shape[-1] + kh * kw) * 4


def _pointwise(a: Conv2dGradInputAttrs, w: Tensor) -> bool:
    return a.groups == 1 and tuple(w.shape[1:3]) == (1, 1) and a.stride == (1, 1) and not any(a.padding)


def _gather_min_read(a: Conv2dGradInputAttrs, ins, outs) -> np.ndarray | None:
    n, ho, wo, cout = ins[0].shape
    _, h, w, cin = outs[0].shape
    (kh, kw) = ins[1].shape[1:3]
    if a.groups == 1:
        if not _pointwise(a, ins[1]):
            return None
        # pixel p's elements are all written while pixel p of g_z is read: as if element (p,c) read from
        # p*Co - Ci + c, so that g_x pixel p ends before g_z pixel p starts
        return (np.arange(n * h * w, dtype=np.int64)[:, None] * cout - cin + np.arange(cin)[None, :]).reshape(-1)
    rows = _first_source(h, a.stride[0], a.padding[0], a.dilation[0], kh, ho)
    cols = _first_source(w, a.stride[1], a.padding[1], a.dilation[1], kw, wo)
    chans = np.arange(cin, dtype=np.int64) * (cout // cin)
    batch = np.arange(n, dtype=np.int64)
    idx = (((batch[:, None, None, None] * ho + rows[None, :, None, None]) * wo + cols[None, None, :, None]) * cout
           + chans[None, None, None, :])
    reads_nothing = (rows[None, :, None, None] >= ho) | (cols[None, None, :, None] >= wo)
    return np.where(reads_nothing, n * ho * wo * cout, idx).reshape(-1)


OP = OpDef("conv2d", Conv2dAttrs, infer_shapes, reference, macs, backward=backward, min_read=min_read,
            rows=row_window)
GRAD_INPUT = OpDef("conv2d_grad_input", Conv2dGradInputAttrs, grad_input_shapes, grad_input_reference, grad_input_macs,
                   min_read=grad_input_min_read, scratch=grad_input_scratch, overwrites=grad_input_overwrites,
                   bound=grad_input_bound)
GRAD_WEIGHT = OpDef("conv2d_grad_weight", Conv2dGradWeightAttrs, grad_weight_shapes, grad_weight_reference,
                    grad_weight_macs, bound=grad_weight_bound)


# ---- integer weight gradient (plan "backward": "int", training/integer_step.py) ----

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


GRAD_WEIGHT_INT = OpDef("conv2d_grad_weight_int", Conv2dGradWeightAttrs, grad_weight_int_shapes,
                        grad_weight_int_reference, grad_weight_macs, bound=grad_weight_int_bound)
OPS = (OP, GRAD_INPUT, GRAD_WEIGHT, GRAD_WEIGHT_INT)
