"""Mean over H and W of an int8 NHWC tensor, with rescaling (TFLite Micro integer Mean).

acc = sum(x - zx); acc = MBQM(acc, s_in / s_out); acc = acc / count rounded half away from zero;
y = clamp(acc + zy). Output (N,1,1,C) with ``keepdims`` else (N,C).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef
from tinytrain.ops.avg_pool2d import divide_rounded
from tinytrain.quant import Requant, multiply_by_quantized_multiplier


@dataclass(frozen=True)
class MeanAttrs:
    requant: Requant
    keepdims: bool = True
    act_min: int = -128
    act_max: int = 127


def infer_shapes(a: MeanAttrs, ins) -> list[tuple[int, ...]]:
    n, _, _, c = ins[0].shape
    return [(n, 1, 1, c) if a.keepdims else (n, c)]


def reference(a: MeanAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x = arrays[0].astype(np.int64) - ins[0].quant.zp
    count = x.shape[1] * x.shape[2]
    acc = multiply_by_quantized_multiplier(x.sum(axis=(1, 2)), a.requant.multiplier[0], a.requant.shift[0])
    y = divide_rounded(acc, count, half_up=False) + outs[0].quant.zp
    y = np.clip(y, a.act_min, a.act_max).astype(np.int8)
    return [y.reshape((x.shape[0],) + outs[0].shape[1:])]


def macs(a: MeanAttrs, ins, outs) -> int:
    return 0


OP = OpDef("mean", MeanAttrs, infer_shapes, reference, macs)
