"""Fully connected, int8: x (N,K), w (C_out,K), bias (C_out,) int32 or absent -> (N,C_out).

Backward as conv2d's (fp32, real values): clamp mask, then g_x = g_z @ W, g_w = g_z^T @ x (selected
output channels), g_b = sum g_z.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tinytrain import f32
from tinytrain.ops import OpDef
from tinytrain.quant import Requant, requantize


@dataclass(frozen=True)
class FullyConnectedAttrs:
    requant: Requant
    act_min: int = -128
    act_max: int = 127


def infer_shapes(a: FullyConnectedAttrs, ins) -> list[tuple[int, ...]]:
    x, w = ins[0], ins[1]
    if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"fully_connected: input {x.shape} does not match weight {w.shape}")
    return [(x.shape[0], w.shape[0])]


def accumulate(x: np.ndarray, zx: int, w: np.ndarray, zw, bias: np.ndarray | None) -> np.ndarray:
    xz = x.astype(np.float64) - zx
    wz = w.astype(np.float64) - np.asarray(zw, np.float64).reshape(-1, 1)
    acc = (xz @ wz.T).astype(np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    return acc


def reference(a: FullyConnectedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    bias = arrays[2] if len(arrays) > 2 else None
    acc = accumulate(arrays[0], ins[0].quant.zp, arrays[1], ins[1].quant.zero_point, bias)
    return [requantize(acc, a.requant, outs[0].quant.zp, a.act_min, a.act_max)]


def macs(a: FullyConnectedAttrs, ins, outs) -> int:
    return ins[1].shape[0] * ins[1].shape[1]



# ---- backward (fp32, real values; float32 sums in the kernels' order, kernels/fully_connected_grad.c.j2) ----

@dataclass(frozen=True)
class FullyConnectedGradInputAttrs:
    """g_x (N,K) = g_z (N,C_out) @ s_w (w - zw)."""


@dataclass(frozen=True)
class FullyConnectedGradWeightAttrs:
    """g_w (C_sel,K) = g_z[:, channels]^T @ s_x (x - zx), all channels when None."""

    channels: tuple[int, ...] | None = None


def grad_input_shapes(a: FullyConnectedGradInputAttrs, ins) -> list[tuple[int, ...]]:
    g, w = ins
    if len(g.shape) != 2 or g.shape[1] != w.shape[0]:
        raise ValueError(f"fully_connected_grad_input: gradient {g.shape} does not match weight {w.shape}")
    return [(g.shape[0], w.shape[1])]


def grad_input_reference(a: FullyConnectedGradInputAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """gx[n,k] = sum_o (gz[n,o] * s_w[o]) * (w[o,k] - zw[o]) from +0 in order o = 0..Co-1, each term one fmaf, the
    first factor rounded to float32 (docs/design.md §3b)."""
    from tinytrain.ops.conv2d import weight_factors

    gq, d = (v.astype(np.float64) for v in weight_factors(arrays[0], arrays[1], ins[1]))  # (N,Co), (Co,K): exact
    gx = np.zeros((gq.shape[0], d.shape[1]), np.float32)
    for o in range(d.shape[0]):
        gx = f32.fma_product(gq[:, o, None] * d[o], gx)
    return [gx]


def grad_weight_shapes(a: FullyConnectedGradWeightAttrs, ins) -> list[tuple[int, ...]]:
    g, x = ins
    cout = g.shape[1]
    if a.channels is not None and (not a.channels or list(a.channels) != sorted(set(a.channels))
                                   or a.channels[0] < 0 or a.channels[-1] >= cout):
        raise ValueError(f"fully_connected_grad_weight: channels {a.channels} are not increasing channels of {cout}")
    return [(cout if a.channels is None else len(a.channels), x.shape[1])]


def grad_weight_reference(a: FullyConnectedGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """gw[s,k] = (gz[s] * s_x) * (x[k] - zx) (kernels/fully_connected_grad.c.j2: batch 1, one float32 product); a
    batch's further samples are added in order, each with one fmaf."""
    g = arrays[0].astype(np.float32) * np.float32(ins[1].quant.s)
    if a.channels is not None:
        g = g[:, np.asarray(a.channels)]
    x = (arrays[1].astype(np.int32) - np.int32(ins[1].quant.zp)).astype(np.float32)
    gw = g[0][:, None] * x[0][None, :]
    for n in range(1, len(g)):
        gw = f32.fmaf(g[n][:, None], x[n][None, :], gw)
    return [gw]


def grad_input_macs(a, ins, outs) -> int:
    return ins[1].shape[0] * ins[1].shape[1]


def grad_weight_macs(a, ins, outs) -> int:
    return outs[0].shape[0] * outs[0].shape[1]


def grad_input_bound(a: FullyConnectedGradInputAttrs, ins, bounds) -> list[float]:
    from tinytrain.ops.conv2d import weight_magnitude

    return [bounds[0] * float(weight_magnitude(ins[1]).sum(axis=0).max())]


def grad_weight_bound(a: FullyConnectedGradWeightAttrs, ins, bounds) -> list[float]:
    from tinytrain.ops.conv2d import input_magnitude

    return [bounds[0] * input_magnitude(ins[1])]


def backward(b, node, out_grads) -> list[str | None]:
    from tinytrain.ops.bias_grad import BiasGradAttrs
    from tinytrain.ops.clamp_mask import masked_grad

    a: FullyConnectedAttrs = node.attrs
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    result: list[str | None] = [None] * len(node.inputs)
    if b.needs_grad(x):
        result[0] = b.emit("fully_connected_grad_input", [gz, w], FullyConnectedGradInputAttrs(),
                           f"{node.name}.grad_input")[0]
    if b.needs_grad(w):
        result[1] = b.emit("fully_connected_grad_weight", [gz, x], FullyConnectedGradWeightAttrs(),
                           f"{node.name}.grad_weight")[0]
    if bias and b.needs_grad(bias):
        result[2] = b.emit("bias_grad", [gz], BiasGradAttrs(), f"{node.name}.grad_bias")[0]
    return result


# ---- integer weight gradient (plan "backward": "int", training/integer_step.py) ----------------------------

def grad_weight_int_reference(a: FullyConnectedGradWeightAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """g_w (C_sel,K) int32 = g_z[:, channels]^T @ (x - zx), exact integers (g_z int32 of scale s_g: g_w has scale
    s_g s_x). Its overflow proof is the bound rule (training/finite.py)."""
    g = arrays[0].astype(np.int64)
    if a.channels is not None:
        g = g[:, np.asarray(a.channels)]
    x = arrays[1].astype(np.int64) - ins[1].quant.zp
    return [(g.T @ x).astype(np.int32)]


def grad_weight_int_bound(a: FullyConnectedGradWeightAttrs, ins, bounds) -> list[float]:
    """N |g_z|max max|x - zx| (integers; N the batch, 1 on a device)."""
    zx = ins[1].quant.zp
    return [bounds[0] * ins[0].shape[0] * max(abs(-128 - zx), abs(127 - zx))]


# ---- integer input gradient (plan "backward": "int"): ops/conv2d_int.py's arithmetic on a (C_out, K) weight ----

@dataclass(frozen=True)
class FullyConnectedGradInputIntAttrs:
    pre_shift: int = 0  # r
    shift: int = 0  # T
    limit: int = 2 ** 15 - 1  # L

    def as_conv(self):
        """The same arithmetic as a pointwise convolution's (ops/conv2d_int.py) on N pixels."""
        from tinytrain.ops.conv2d_int import Conv2dGradInputIntAttrs

        return Conv2dGradInputIntAttrs((1, 1), (0, 0, 0, 0), (1, 1), pre_shift=self.pre_shift, shift=self.shift,
                                       limit=self.limit)


def _as_pointwise(w: np.ndarray) -> np.ndarray:
    return w.reshape(w.shape[0], 1, 1, w.shape[1])


def grad_input_int_shapes(a: FullyConnectedGradInputIntAttrs, ins) -> list[tuple[int, ...]]:
    return grad_input_shapes(FullyConnectedGradInputAttrs(), ins[:2]) + [(1,)]


def grad_input_int_reference(a: FullyConnectedGradInputIntAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """[g_x (N,K), e_x]: gs = (g_z M + half(r)) >> r, acc = gs @ (w - zw) (int32, exact), (acc + half(t)) >> t
    within the limit, t chosen at run time (ops/conv2d_int.py, whose bound rule and shifts it shares)."""
    from tinytrain.ops.conv2d_int import reference as conv_reference

    g, w, m = arrays[:3]
    out = replace(outs[0], shape=(g.shape[0], 1, 1, w.shape[1]))
    gx, e = conv_reference(a.as_conv(), [g.reshape(g.shape[0], 1, 1, -1), _as_pointwise(w), m, *arrays[3:]], ins,
                           [out, outs[1]])
    return [gx.reshape(outs[0].shape), e]


def grad_input_int_bound(a: FullyConnectedGradInputIntAttrs, ins, bounds) -> list[float]:
    from tinytrain.ops.conv2d_int import bound as conv_bound

    w = replace(ins[1], shape=(ins[1].shape[0], 1, 1, ins[1].shape[1]), data=_as_pointwise(ins[1].data))
    return conv_bound(a.as_conv(), [ins[0], w, *ins[2:]], bounds)


OP = OpDef("fully_connected", FullyConnectedAttrs, infer_shapes, reference, macs, backward=backward)
GRAD_INPUT = OpDef("fully_connected_grad_input", FullyConnectedGradInputAttrs, grad_input_shapes,
                   grad_input_reference, grad_input_macs, bound=grad_input_bound)
GRAD_WEIGHT = OpDef("fully_connected_grad_weight", FullyConnectedGradWeightAttrs, grad_weight_shapes,
                    grad_weight_reference, grad_weight_macs, bound=grad_weight_bound)
GRAD_WEIGHT_INT = OpDef("fully_connected_grad_weight_int", FullyConnectedGradWeightAttrs, grad_weight_shapes,
                        grad_weight_int_reference, grad_weight_macs, bound=grad_weight_int_bound)
GRAD_INPUT_INT = OpDef("fully_connected_grad_input_int", FullyConnectedGradInputIntAttrs, grad_input_int_shapes,
                       grad_input_int_reference, grad_input_macs, bound=grad_input_int_bound)
OPS = (OP, GRAD_INPUT, GRAD_WEIGHT, GRAD_WEIGHT_INT, GRAD_INPUT_INT)
