"""A weight gradient fused with its SGD update: ``conv2d_grad_weight_sgd_update`` and
``fully_connected_grad_weight_sgd_update`` (the pass that creates them: training/fuse.py), and the integer step's
``conv2d_grad_weight_int_sgd_update_int`` (an int32 gradient a block of rows at a time, the same blocks).

Inputs: param (the weight, written in place), g_z, x (the grad-weight op's inputs), scale, momentum or "",
step or "", remainder (``sgd_update``'s other inputs), and for the integer step the gradient's exponent or ""
(ops/sgd_update_int.py); no outputs. Attributes: the grad-weight op's attrs, the
``sgd_update`` attrs, and ``block``.

The reference is the grad-weight op's reference followed by ``sgd_update``'s — the same result as the two
unfused nodes, by construction. The C kernel computes the gradient of ``block`` output-channel rows at a time
into a scratch buffer of ``block * E`` floats (E = elements of one row of the weight) and applies each block
at once, so no more than one block of the fp32 gradient ever exists; every element sees the same float32
operations in the same order as in the unfused kernels (including its stochastic-rounding index i, counted
over the whole selected gradient), so fused and unfused C agree bit for bit. A pointwise gradient of at least 4 rows
of at least 4 inputs is computed in tiles of 4 x 4 elements held in registers instead, each tile updated at once
(codegen/bindings/grad_weight_sgd_update.py, kernels/grad_weight_sgd_update_tiles.c.j2): its scratch then lists
the pixels where 4 rows' g_z are not all zero.

Block size (the one place it is chosen, ``block_rows``): the most rows whose fp32 gradient fits ``SCRATCH_BYTES``
(2 KB — small beside a 256 KB SRAM; larger blocks save only loop overhead, each block walking g_z's positions
once more), at least 1 (a row wider than 2 KB gets a scratch of one row), at most all selected rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tinytrain.ir import DType, Role, Tensor
from tinytrain.ops import OpDef, conv2d, fully_connected
from tinytrain.ops import sgd_update as sgd
from tinytrain.ops import sgd_update_int
from tinytrain.ops.conv2d import Conv2dGradWeightAttrs
from tinytrain.ops.fully_connected import FullyConnectedGradWeightAttrs
from tinytrain.ops.sgd_update import SgdUpdateAttrs

SCRATCH_BYTES = 2048
FLOAT_BYTES = 4
PARAM, G_Z, X, SCALE, MOMENTUM, STEP, REMAINDER, EXP = range(8)  # EXP: sgd_update_int's gradient exponent


def row_elements(param: Tensor) -> int:
    """E: the elements of one output-channel row of a weight."""
    return param.size // param.shape[0]


def block_rows(param: Tensor, rows: int, scratch_bytes: int = SCRATCH_BYTES) -> int:
    """Rows per block of a weight whose ``rows`` selected rows are updated: the most whose fp32 gradient fits
    ``scratch_bytes``, at least 1, at most ``rows``."""
    return max(1, min(rows, scratch_bytes // (FLOAT_BYTES * row_elements(param))))


@dataclass(frozen=True)
class GradWeightSgdUpdateAttrs:
    """``grad``: the attrs of the grad-weight op; ``update``: of the update; ``block``: rows per block.
    ``channels`` and ``stream`` are the update's (what readers of update nodes look for)."""

    grad: Conv2dGradWeightAttrs | FullyConnectedGradWeightAttrs
    update: SgdUpdateAttrs
    block: int

    @property
    def channels(self) -> tuple[int, ...] | None:
        return self.update.channels

    @property
    def stream(self) -> int:
        return self.update.stream


def _grad_tensor(grad: OpDef, a: GradWeightSgdUpdateAttrs, ins) -> Tensor:
    """The gradient the unfused grad-weight node would output (it exists only a block at a time)."""
    (shape,) = grad.infer_shapes(a.grad, [ins[G_Z], ins[X]])
    return Tensor("grad", shape, DType.INT32 if grad.name.endswith("_int") else DType.FLOAT32, Role.GRADIENT)


def _update_inputs(values: Sequence[Any], grad: Any) -> list[Any]:
    """``sgd_update``'s inputs (param, grad, scale[, momentum[, step[, remainder]]]) from the fused node's."""
    return [values[PARAM], grad, values[SCALE], *values[MOMENTUM:]]


def _fused(grad: OpDef, update: OpDef = sgd.OP) -> OpDef:
    name = f"{grad.name}_{update.name}"

    def infer_shapes(a: GradWeightSgdUpdateAttrs, ins) -> list[tuple[int, ...]]:
        if not isinstance(a.grad, grad.attrs_type):
            raise ValueError(f"{name}: grad attrs {type(a.grad).__name__} are not {grad.attrs_type.__name__}")
        if a.grad.channels != a.update.channels:
            raise ValueError(f"{name}: gradient channels {a.grad.channels} != updated channels {a.update.channels}")
        g = _grad_tensor(grad, a, ins)
        update.infer_shapes(a.update, _update_inputs(ins, g))
        if not 1 <= a.block <= g.shape[0]:
            raise ValueError(f"{name}: block {a.block} is not 1..{g.shape[0]} rows")
        return []

    def reference(a: GradWeightSgdUpdateAttrs, arrays, ins, outs) -> list:
        g = _grad_tensor(grad, a, ins)
        (value,) = grad.reference(a.grad, [arrays[G_Z], arrays[X]], [ins[G_Z], ins[X]], [g])
        return update.reference(a.update, _update_inputs(arrays, value), _update_inputs(ins, g), [])

    def macs(a: GradWeightSgdUpdateAttrs, ins, outs) -> int:
        g = _grad_tensor(grad, a, ins)
        return grad.macs(a.grad, [ins[G_Z], ins[X]], [g]) + update.macs(a.update, _update_inputs(ins, g), [])

    def scratch(a: GradWeightSgdUpdateAttrs, ins, outs) -> int:
        return a.block * row_elements(ins[PARAM]) * FLOAT_BYTES

    def bound(a: GradWeightSgdUpdateAttrs, ins, bounds) -> list[float]:
        (g,) = grad.bound(a.grad, [ins[G_Z], ins[X]], [bounds[G_Z], None])
        return sgd.update_bound(a.update, g) if update is sgd.OP else [g, 0.0]

    return OpDef(name, GradWeightSgdUpdateAttrs, infer_shapes, reference, macs,
                 writes=(PARAM, MOMENTUM, REMAINDER), scratch=scratch, bound=bound)


# grad-weight op -> the op fusing it with its update (sgd_update, or the integer step's sgd_update_int)
FUSED = {grad.name: _fused(grad) for grad in (conv2d.GRAD_WEIGHT, fully_connected.GRAD_WEIGHT)}
FUSED[conv2d.GRAD_WEIGHT_INT.name] = _fused(conv2d.GRAD_WEIGHT_INT, sgd_update_int.OP)
OPS = tuple(FUSED.values())
