"""Zero-point padding of an int8 NHWC tensor (the quantized value of real 0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs, same_bound


@dataclass(frozen=True)
class PadAttrs:
    pads: tuple[tuple[int, int], ...]  # (before, after) for each non-batch dimension


def infer_shapes(a: PadAttrs, ins) -> list[tuple[int, ...]]:
    x = ins[0]
    if len(a.pads) != len(x.shape) - 1 or any(p < 0 for pair in a.pads for p in pair):
        raise ValueError(f"pad: paddings {a.pads} do not fit input {x.shape}")
    return [(x.shape[0],) + tuple(d + b + e for d, (b, e) in zip(x.shape[1:], a.pads))]


def reference(a: PadAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [np.pad(arrays[0], ((0, 0),) + a.pads, constant_values=outs[0].quant.zp)]



@dataclass(frozen=True)
class PadGradAttrs:
    """g_x = g_y with the padding cut away (``pads`` as in the forward pad)."""

    pads: tuple[tuple[int, int], ...]


def grad_shapes(a: PadGradAttrs, ins) -> list[tuple[int, ...]]:
    g = ins[0]
    shape = (g.shape[0],) + tuple(d - lo - hi for d, (lo, hi) in zip(g.shape[1:], a.pads, strict=True))
    if min(shape) <= 0:
        raise ValueError(f"pad_grad: cannot remove {a.pads} from {g.shape}")
    return [shape]


def grad_reference(a: PadGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0]
    index = (slice(None),) + tuple(slice(lo, d - hi) for d, (lo, hi) in zip(g.shape[1:], a.pads))
    return [np.ascontiguousarray(g[index], np.float32)]


def backward(b, node, out_grads) -> list[str | None]:
    if not b.needs_grad(node.inputs[0]):
        return [None]
    return [b.emit("pad_grad", [out_grads[0]], PadGradAttrs(node.attrs.pads), f"{node.name}.grad_input")[0]]


OP = OpDef("pad", PadAttrs, infer_shapes, reference, no_macs, backward=backward)
GRAD = OpDef("pad_grad", PadGradAttrs, grad_shapes, grad_reference, no_macs, bound=same_bound)
OPS = (OP, GRAD)
