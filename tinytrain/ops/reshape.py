"""Reshape (flatten, squeeze): same bytes, new shape. ``shape`` excludes the batch dimension."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs, same_bound


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...]


def infer_shapes(a: ReshapeAttrs, ins) -> list[tuple[int, ...]]:
    x = ins[0]
    if int(np.prod(a.shape)) != int(np.prod(x.shape[1:])):
        raise ValueError(f"reshape: cannot reshape {x.shape} to (N,){a.shape}")
    return [(x.shape[0],) + a.shape]


def reference(a: ReshapeAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [arrays[0].reshape((arrays[0].shape[0],) + a.shape)]



def backward(b, node, out_grads) -> list[str | None]:
    """The gradient reshaped back (a reshape of the fp32 gradient)."""
    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    return [b.emit("reshape", [out_grads[0]], ReshapeAttrs(b.tensor(x).shape[1:]), f"{node.name}.grad_input")[0]]


OP = OpDef("reshape", ReshapeAttrs, infer_shapes, reference, no_macs, view=True, backward=backward,
           bound=same_bound)
