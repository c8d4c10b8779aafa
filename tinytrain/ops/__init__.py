"""The op registry: one module per op, each exporting ``OP``, an :class:`OpDef`.

An op module holds everything about its op: attribute dataclass, shape rule, numpy reference
(the spec), and MAC count. Adding an op touches its module and the list below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tinytrain.ir import Tensor

ShapeRule = Callable[[Any, Sequence[Tensor | None]], list[tuple[int, ...]]]
Reference = Callable[[Any, Sequence[np.ndarray | None], Sequence[Tensor | None], Sequence[Tensor]], list[np.ndarray]]
MacCount = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor]], int]


@dataclass(frozen=True)
class OpDef:
    """What the compiler knows about one op.

    ``reference(attrs, arrays, in_tensors, out_tensors)`` computes the outputs from input arrays whose
    dimension 0 is the batch (any size); tensors give shapes and quantization (batch 1).
    """

    name: str
    attrs_type: type
    infer_shapes: ShapeRule
    reference: Reference
    macs: MacCount


def _registry() -> dict[str, OpDef]:
    from tinytrain.ops import (add, avg_pool2d, conv2d, dequantize, fully_connected, mean, pad, quantize,
                               requantize, reshape, softmax)

    modules = (add, avg_pool2d, conv2d, dequantize, fully_connected, mean, pad, quantize, requantize, reshape, softmax)
    return {m.OP.name: m.OP for m in modules}


_OPS: dict[str, OpDef] = {}


def get_op(name: str) -> OpDef:
    if not _OPS:
        _OPS.update(_registry())
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}") from None


def no_macs(attrs: Any, ins: Sequence[Tensor | None], outs: Sequence[Tensor]) -> int:
    return 0
