"""Zero-point padding of an int8 NHWC tensor (the quantized value of real 0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs


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


OP = OpDef("pad", PadAttrs, infer_shapes, reference, no_macs)
