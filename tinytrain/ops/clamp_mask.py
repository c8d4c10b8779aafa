"""Straight-through gradient of an int8 output clamp, from the saved int8 output (backward, fp32).

g_in = g_out where act_min < y < act_max, else 0. Rounding is straight-through; an output sitting on
a bound counts as clamped (the int8 value cannot tell "exactly on the bound" from "beyond it").
Every op whose int8 output can saturate (conv2d, fully_connected, add, mean, requantize) masks its
output gradient with this before its own backward math. ``clamp_mask_int``: the same on an int32 gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, elementwise_min_read, integer_form, no_macs, same_bound


@dataclass(frozen=True)
class ClampMaskAttrs:
    act_min: int
    act_max: int


def infer_shapes(a: ClampMaskAttrs, ins) -> list[tuple[int, ...]]:
    g, y = ins
    if g.shape != y.shape:
        raise ValueError(f"clamp_mask: gradient {g.shape} and saved output {y.shape} differ")
    return [g.shape]


def reference(a: ClampMaskAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, y = arrays
    inside = (y > a.act_min) & (y < a.act_max)
    return [np.where(inside, g, np.float32(0)).astype(np.float32)]


def masked_grad(b, g: str, y: str, act_min: int, act_max: int, name: str) -> str:
    """Emit the clamp mask of output ``y`` (int8, saved) applied to its gradient ``g``."""
    return b.emit("clamp_mask", [g, y], ClampMaskAttrs(act_min, act_max), name)[0]


def int_reference(a: ClampMaskAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """The integer form (plan "backward": "int"): the same mask on an int32 gradient."""
    g, y = arrays
    return [np.where((y > a.act_min) & (y < a.act_max), g, 0).astype(np.int32)]


OP = OpDef("clamp_mask", ClampMaskAttrs, infer_shapes, reference, no_macs, min_read=elementwise_min_read,
           bound=same_bound, integer=integer_form("clamp_mask_int"))
INT = OpDef("clamp_mask_int", ClampMaskAttrs, infer_shapes, int_reference, no_macs, min_read=elementwise_min_read,
            bound=same_bound)
OPS = (OP, INT)
