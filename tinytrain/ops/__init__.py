"""The op registry: one module per op, each exporting ``OP``, an :class:`OpDef`.

An op module holds everything about its op: attribute dataclass, shape rule, numpy reference
(the spec), MAC count and backward rule. A forward op's backward kernels (``conv2d_grad_input``, ...)
live in its module too, which then exports them all in ``OPS``. Adding an op touches its module and
the list below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tinytrain.ir import Node, Tensor

ShapeRule = Callable[[Any, Sequence[Tensor | None]], list[tuple[int, ...]]]
Reference = Callable[[Any, Sequence[np.ndarray | None], Sequence[Tensor | None], Sequence[Tensor]], list[np.ndarray]]
MacCount = Callable[[Any, Sequence[Tensor | None], Sequence[Tensor]], int]
# backward(builder, forward_node, output_gradient_names) -> one gradient name (or None) per node input.
# The builder is tinytrain.training.builder.GraphBuilder: it emits fp32 backward nodes and says which
# inputs need a gradient (``needs_grad``). Gradients are with respect to the dequantized (real) values.
Backward = Callable[[Any, Node, Sequence[str | None]], list[str | None]]


@dataclass(frozen=True)
class OpDef:
    """What the compiler knows about one op.

    ``reference(attrs, arrays, in_tensors, out_tensors)`` computes the outputs from input arrays whose
    dimension 0 is the batch (any size); tensors give shapes and quantization (batch 1).
    ``view``: output 0 is input 0's bytes under another shape (no copy); the memory planner gives both
    one buffer and the code generator one pointer.
    ``backward`` is the op's gradient rule (None: gradients do not flow through it). ``writes`` lists the
    inputs the op updates in place (the optimizer's update ops); such an op has no outputs and its
    ``reference`` returns the new values of those inputs, in that order.
    """

    name: str
    attrs_type: type
    infer_shapes: ShapeRule
    reference: Reference
    macs: MacCount
    view: bool = False
    backward: Backward | None = None
    writes: tuple[int, ...] = ()


def _registry() -> dict[str, OpDef]:
    from tinytrain.ops import (add, avg_pool2d, conv2d, dequantize, fully_connected, mean, pad, quantize,
                               requantize, reshape, softmax)
    from tinytrain.ops import bias_grad, clamp_mask, grad_accumulate, sgd_update, softmax_xent

    modules = (add, avg_pool2d, conv2d, dequantize, fully_connected, mean, pad, quantize, requantize, reshape, softmax,
               bias_grad, clamp_mask, grad_accumulate, sgd_update, softmax_xent)
    return {op.name: op for m in modules for op in (m.OPS if hasattr(m, "OPS") else (m.OP,))}


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
