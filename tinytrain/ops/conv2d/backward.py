"""conv2d's backward (fp32; gradients with respect to the real values; each sum in float32 in its kernel's order,
every term one fused multiply-add: docs/design.md §3b, tinytrain/f32.py): the input and weight gradients, their
shapes, references, MACs, bounds and memory promises, and the backward rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain import f32
from tinytrain.ir import Tensor
from tinytrain.ops import min_gap
from tinytrain.ops.bias_grad import BiasGradAttrs
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.ops.conv2d.forward import Conv2dAttrs, output_hw
from tinytrain.quant import Requant


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
