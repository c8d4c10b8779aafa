"""Bias gradient (backward, fp32): g_b[c] = sum over every position of g[..., c] (channels last).

Shared by conv2d and fully_connected. ``bias_grad_int``: the same sums of an int32 gradient, in integers. The gradient is with respect to the real bias
b = s_x * s_w[c] * b_int32. Each sum is float32 from +0, one addition at a time in position order, as the kernel's
(kernels/bias_grad.c.j2, docs/design.md §3b).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain import f32
from tinytrain.ops import OpDef, integer_form


@dataclass(frozen=True)
class BiasGradAttrs:
    pass


def infer_shapes(a: BiasGradAttrs, ins) -> list[tuple[int, ...]]:
    return [(ins[0].shape[-1],)]


def reference(a: BiasGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0]
    return [f32.ordered_sum(g.reshape(-1, g.shape[-1]), axis=0)]


def macs(a: BiasGradAttrs, ins, outs) -> int:
    return ins[0].size


def bound(a: BiasGradAttrs, ins, bounds) -> list[float]:
    return [bounds[0] * (ins[0].size // ins[0].shape[-1])]


def int_reference(a: BiasGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """The integer form (plan "backward": "int"): int32 g -> int32 sums in exact integers (the bound rule proves
    they fit: P |g|max < 2^31)."""
    g = arrays[0].astype(np.int64)
    return [g.reshape(-1, g.shape[-1]).sum(axis=0).astype(np.int32)]


OP = OpDef("bias_grad", BiasGradAttrs, infer_shapes, reference, macs, bound=bound,
           integer=integer_form("bias_grad_int"))
INT = OpDef("bias_grad_int", BiasGradAttrs, infer_shapes, int_reference, macs, bound=bound)
OPS = (OP, INT)
