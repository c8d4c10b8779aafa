"""Residual add of two int8 tensors with rescaling (TFLite integer_ops::Add arithmetic).

Each input is offset, shifted left by ``left_shift`` (20), scaled to a common scale, summed and
requantized to the output scale, all in fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef
from tinytrain.quant import Requant, multiply_by_quantized_multiplier


@dataclass(frozen=True)
class AddAttrs:
    input1: Requant
    input2: Requant
    output: Requant
    left_shift: int = 20
    act_min: int = -128
    act_max: int = 127

    @staticmethod
    def from_scales(s1: float, s2: float, s_out: float, act_min: int = -128, act_max: int = 127) -> AddAttrs:
        """Multipliers exactly as TFLite's Prepare computes them (double precision)."""
        left_shift = 20
        twice_max = 2.0 * max(s1, s2)
        return AddAttrs(
            Requant.from_scales([s1 / twice_max]),
            Requant.from_scales([s2 / twice_max]),
            Requant.from_scales([twice_max / ((1 << left_shift) * s_out)]),
            left_shift, act_min, act_max,
        )


def infer_shapes(a: AddAttrs, ins) -> list[tuple[int, ...]]:
    if ins[0].shape != ins[1].shape:
        raise ValueError(f"add: shapes {ins[0].shape} and {ins[1].shape} differ (no broadcasting)")
    return [ins[0].shape]


def reference(a: AddAttrs, arrays, ins, outs) -> list[np.ndarray]:
    def scaled(x: np.ndarray, zp: int, r: Requant) -> np.ndarray:
        shifted = (x.astype(np.int64) - zp) << a.left_shift
        return multiply_by_quantized_multiplier(shifted, r.multiplier[0], r.shift[0])

    raw = scaled(arrays[0], ins[0].quant.zp, a.input1) + scaled(arrays[1], ins[1].quant.zp, a.input2)
    y = multiply_by_quantized_multiplier(raw, a.output.multiplier[0], a.output.shift[0]) + outs[0].quant.zp
    return [np.clip(y, a.act_min, a.act_max).astype(np.int8)]


def macs(a: AddAttrs, ins, outs) -> int:
    return 0


OP = OpDef("add", AddAttrs, infer_shapes, reference, macs)
