"""Residual add of two int8 tensors with rescaling (TFLite integer_ops::Add arithmetic).

Each input is offset, shifted left by ``left_shift`` (20), scaled to a common scale, summed and
requantized to the output scale, all in fixed point. The three requantizations round as their
Requant says (double rounding for TFLite imports; single rounding for ONNX imports, where the two input
rescales are exact to 2^-20 and the sum is rounded once, like onnxruntime's float add).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, elementwise_min_read, elementwise_rows
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
    def from_scales(s1: float, s2: float, s_out: float, act_min: int = -128, act_max: int = 127,
                    single_rounding: bool = False) -> AddAttrs:
        """Multipliers exactly as TFLite's Prepare computes them (double precision)."""
        left_shift = 20
        twice_max = 2.0 * max(s1, s2)
        return AddAttrs(
            Requant.from_scales([s1 / twice_max], single_rounding),
            Requant.from_scales([s2 / twice_max], single_rounding),
            Requant.from_scales([twice_max / ((1 << left_shift) * s_out)], single_rounding),
            left_shift, act_min, act_max,
        )


def infer_shapes(a: AddAttrs, ins) -> list[tuple[int, ...]]:
    if ins[0].shape != ins[1].shape:
        raise ValueError(f"add: shapes {ins[0].shape} and {ins[1].shape} differ (no broadcasting)")
    return [ins[0].shape]


def input_term(a: AddAttrs, k: int, zp: int, x: np.ndarray) -> np.ndarray:
    """Input ``k``'s (0 or 1) int8 values ``x``, zero point ``zp``, rescaled to the common scale: the term the sum
    adds (a function of the int8 value alone: the C reads it from a table, codegen/bindings/add.py)."""
    r = (a.input1, a.input2)[k]
    shifted = (np.asarray(x).astype(np.int64) - zp) << a.left_shift
    return multiply_by_quantized_multiplier(shifted, r.multiplier[0], r.shift[0], r.single_rounding, r.fp32)


def reference(a: AddAttrs, arrays, ins, outs) -> list[np.ndarray]:
    raw = input_term(a, 0, ins[0].quant.zp, arrays[0]) + input_term(a, 1, ins[1].quant.zp, arrays[1])
    out = a.output
    y = multiply_by_quantized_multiplier(raw, out.multiplier[0], out.shift[0], out.single_rounding,
                                         out.fp32) + outs[0].quant.zp
    return [np.clip(y, a.act_min, a.act_max).astype(np.int8)]


def macs(a: AddAttrs, ins, outs) -> int:
    return 0



def backward(b, node, out_grads) -> list[str | None]:
    """Real-valued y = x1 + x2: after the clamp mask both inputs get g unchanged.

    The rescales of the int8 form (s1 / 2max, s2 / 2max, 2max / s_out) only change representation;
    gradients are of real values, so they carry no factor and no add_grad kernel is needed.
    """
    from tinytrain.ops.clamp_mask import masked_grad

    if not any(b.needs_grad(i) for i in node.inputs):
        return [None, None]
    a: AddAttrs = node.attrs
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    return [gz if b.needs_grad(i) else None for i in node.inputs]


OP = OpDef("add", AddAttrs, infer_shapes, reference, macs, backward=backward, min_read=elementwise_min_read,
           rows=elementwise_rows)
