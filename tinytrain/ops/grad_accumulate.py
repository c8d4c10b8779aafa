"""Sum of two fp32 gradients of one tensor (autodiff emits it where a tensor has several readers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, elementwise_min_read, no_macs


@dataclass(frozen=True)
class GradAccumulateAttrs:
    pass


def infer_shapes(a: GradAccumulateAttrs, ins) -> list[tuple[int, ...]]:
    if ins[0].shape != ins[1].shape:
        raise ValueError(f"grad_accumulate: shapes {ins[0].shape} and {ins[1].shape} differ")
    return [ins[0].shape]


def reference(a: GradAccumulateAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [(arrays[0].astype(np.float32) + arrays[1].astype(np.float32)).astype(np.float32)]


def bound(a: GradAccumulateAttrs, ins, bounds) -> list[float]:
    return [bounds[0] + bounds[1]]


OP = OpDef("grad_accumulate", GradAccumulateAttrs, infer_shapes, reference, no_macs, min_read=elementwise_min_read,
           bound=bound)
