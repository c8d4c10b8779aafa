"""A residual add left in float by the exporter, int8 -> int8 exactly as TFLite runs it: DEQUANTIZE each operand,
add in float32, QUANTIZE (LiteRT-torch's PT2E export leaves every residual add so, and chains them: ADD -> ADD).

y = clamp(round_half_away(float32(((d_1 + d_2) + d_3) ...) / float32(s_y)) + z_y, -128, 127), d_k = float32(s_k (x_k -
z_k)): TFLite's DEQUANTIZE (the product in double, cast to float: exact as a float32 product, (x - z) has 9 bits),
its float ADD (one float32 rounding per add, in the chain's order: input 1 is the running sum of a chain, the rest
each add one dequantized operand), its QUANTIZE (reference AffineQuantize: float32 division, std::round). A chain
is one node: the exporter's inner sums are float and never rounded to int8 (rounding them, as two int8 adds would,
was up to 3 LSB off tflite-micro on a MobileNetV2-style export).

The C (codegen/bindings/float_add.py) reads each d_k from a 256-entry float table of the int8 value (no multiply,
so no fused multiply-add can change a rounding), adds in the same order and rounds alike: sim == C bit for bit.

Imports: TFLite DEQUANTIZE -> ADD (-> ADD ...) -> QUANTIZE (frontends/tflite/importer.py ``float_add``).
Backward: y = sum x_k in real values: g to every input after the clamp mask, as ``add``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, OpDoc, dequantize, elementwise_min_read, elementwise_rows, no_macs, quantize
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.ops.dequantize import DequantizeAttrs
from tinytrain.ops.quantize import QuantizeAttrs


@dataclass(frozen=True)
class FloatAddAttrs:
    """No attributes: the operands' and the output's quantization are their tensors'."""


def infer_shapes(a: FloatAddAttrs, ins) -> list[tuple[int, ...]]:
    if len(ins) < 2 or any(t.shape != ins[0].shape for t in ins):
        raise ValueError(f"float_add: needs two or more inputs of one shape, got {[t.shape for t in ins]}")
    return [ins[0].shape]


def reference(a: FloatAddAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """TFLite's own DEQUANTIZE and QUANTIZE (ops/dequantize.py, ops/quantize.py: float32 division, half away from
    zero), the float32 sum in the chain's order."""
    d = [dequantize.reference(DequantizeAttrs(), [x], [t], [])[0] for t, x in zip(ins, arrays)]
    acc = d[0]
    for term in d[1:]:
        acc = (acc + term).astype(np.float32)
    return quantize.reference(QuantizeAttrs(half_to_even=False), [acc], [], outs)


def backward(b, node, out_grads) -> list[str | None]:
    """g to every input, 0 where the output saturated (-128 or 127)."""
    if not any(b.needs_grad(i) for i in node.inputs):
        return [None] * len(node.inputs)
    gz = masked_grad(b, out_grads[0], node.outputs[0], -128, 127, f"{node.name}.grad_z")
    return [gz if b.needs_grad(i) else None for i in node.inputs]


def export(ex, n) -> None:
    """DequantizeLinear each input, Add in the chain's order (float32, as TFLite), then TFLite's QUANTIZE: ties
    rounded away from zero (``q_half_away``; a plain QuantizeLinear rounds them to even, 1 LSB off on 528,384 of
    the 16,777,216 int8 input triples of a chain whose sums fall on ties). onnxruntime equals the reference on
    every int8 input (tests/ops/test_float_add.py); the result runs in onnxruntime but does not re-import."""
    f = ex.dq(n.inputs[0], n.name)
    for k, x in enumerate(n.inputs[1:]):
        f = ex.node("Add", [f, ex.dq(x, n.name)], f"{n.outputs[0]}_float{k}", n.name)
    ex.q_half_away(f, n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    return t.torch.clamp(sum(xs[1:], xs[0]), *clamp)


DOC = OpDoc("DEQUANTIZE -> ADD (-> ADD ...) -> QUANTIZE", "—", "float32, TFLite's order and rounding",
            "g to every input", "clamp mask")
OP = OpDef("float_add", FloatAddAttrs, infer_shapes, reference, no_macs, backward=backward,
           min_read=elementwise_min_read, rows=elementwise_rows, export=export, twin=twin, doc=DOC)
