"""int8 -> int8 with another scale / zero point (TFLite QUANTIZE on an int8 input; ONNX QuantizeLinear of a
dequantized activation, frontends/onnx/boundary.py); exported as DequantizeLinear -> QuantizeLinear."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, OpDoc, elementwise_min_read, elementwise_rows, no_macs
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.quant import Requant, requantize


@dataclass(frozen=True)
class RequantizeAttrs:
    requant: Requant


def infer_shapes(a: RequantizeAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


def reference(a: RequantizeAttrs, arrays, ins, outs) -> list[np.ndarray]:
    acc = arrays[0].astype(np.int64) - ins[0].quant.zp
    return [requantize(acc, a.requant, outs[0].quant.zp, -128, 127)]


def backward(b, node, out_grads) -> list[str | None]:
    """Identity on real values, masked where the int8 output saturated."""

    if not b.needs_grad(node.inputs[0]):
        return [None]
    return [masked_grad(b, out_grads[0], node.outputs[0], -128, 127, f"{node.name}.grad_input")]


def export(ex, n) -> None:
    ex.q(ex.dq(n.inputs[0], n.name), n.outputs[0], n.name)


DOC = OpDoc("QUANTIZE (int8 -> int8)", "QuantizeLinear of a DQ", "requantize", "g", "clamp mask")
OP = OpDef("requantize", RequantizeAttrs, infer_shapes, reference, no_macs, backward=backward,
           min_read=elementwise_min_read, rows=elementwise_rows, export=export, doc=DOC)
