"""The C binding of ``float_add`` (ops/float_add.py): TFLite's DEQUANTIZE -> float ADD chain -> QUANTIZE.

Each operand's dequantized value is a function of its int8 value alone: a table of 256 float32 (the reference's own
DEQUANTIZE, by the byte read unsigned; 1 KB of flash per operand), so the kernel multiplies nothing (no fused
multiply-add can change a rounding): float32 adds in the reference's order, a float32 division by the output scale,
round half away from zero, the zero point, the int8 saturation (float_add.c.j2).
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.add import INT8_BYTES
from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node
from tinytrain.ops import dequantize
from tinytrain.ops.dequantize import DequantizeAttrs


def float_add(node: Node, ctx) -> Call:
    xs, y = [ctx.tensor(i) for i in node.inputs], ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    for k, x in enumerate(xs):
        s.add(f"const int8_t *in{k + 1}", ctx.act(x.name), "(N,)")
    for k, x in enumerate(xs):
        table = dequantize.reference(DequantizeAttrs(), [INT8_BYTES], [x], [])[0].astype(np.float32)
        s.add(f"const float *term{k + 1}", ctx.table(node, f"term{k + 1}", table),
              f"(256,): input {k + 1} dequantized, by its byte (0 .. 127, -128 .. -1)")
    s.ints(N=y.size)
    s.add("float out_scale", float_literal(y.quant.s))
    s.int32s(out_zp=y.quant.zp)
    return s.call("float_add", f"tt_float_add{len(xs)}_s8", dict(n=len(xs)))


BINDINGS: dict[str, Binding] = {"float_add": float_add}
