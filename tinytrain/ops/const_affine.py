"""An activation times, plus or minus a scalar constant (TFLite MUL / ADD / SUB with a constant operand), int8 ->
int8: a 256-entry table (tinytrain/tables.py) of TFLite Micro's own kernel on the constant's int8 value.

The TensorFlow converter writes hard-swish and hard-sigmoid (MobileNetV3's squeeze-excite gate) as ADD(x, 3) ->
RELU6 -> MUL(x, 1/6) when it does not fuse them, and a Rescaling layer as MUL / ADD by a constant. With one operand
constant, the int8 kernel is a function of the other operand's int8 value alone, so the table is exact:
- MUL (integer_ops::Mul / BroadcastMul): y = zy + MBQM((x - zx)(c - zc), s_x s_c / s_y in double);
- ADD / SUB (integer_ops::Add, reference_ops::Sub): both operands shifted left 20, rescaled by s / (2 max(s_x, s_c)),
  summed (or the second subtracted), requantized by 2 max / (2^20 s_y) (the ``add`` op's AddAttrs and terms);
then the fused activation's clamp. A constant of any shape whose elements are all equal is a scalar; a per-channel
constant is refused (its table would differ per channel). The tables: ``mul.const_table``, ``add.const_table``; the
reader: ``tables.tflite_const``.

Backward: y = alpha x + beta in real values (alpha = the constant for MUL, 1 for ADD and x - c, -1 for c - x):
g_x = g * alpha, 0 where the output sits on the table's lowest or highest value (the clamp: the straight-through
convention of ops/clamp_mask.py, as for every table op; ops/table_grad.py).
"""

from __future__ import annotations

import numpy as np

from tinytrain import tables
from tinytrain.errors import UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, TfliteRead, elementwise_min_read, elementwise_rows, no_macs
from tinytrain.ops.add import const_table


def backward(b, node, out_grads) -> list[str | None]:
    """g_x = g * alpha, 0 where the output is on the table's lowest or highest value."""
    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    table = np.asarray(node.attrs.table)
    flat = np.isin(table, (table.min(), table.max()))
    slope = np.where(flat, 0.0, node.attrs.alpha).astype(np.float32)
    attrs = tables.TableGradAttrs(tuple(float(v) for v in slope))
    return [b.emit("table_grad", [out_grads[0], x], attrs, f"{node.name}.grad_input")[0]]


# ---- the importer (MUL and ADD: their modules' readers, through tables.tflite_const), the exporter, the twin -------


def tflite_sub(im, op) -> None:
    if not any(im.is_constant(i) for i in op.inputs[:2]):
        raise UnsupportedModelError(f"operator {op.index} (SUB) subtracts two activations; only subtracting a "
                                    "scalar constant (or from one) is supported")
    tables.tflite_const(im, op, const_table("SUB"))


def export(ex, n) -> None:
    """The table itself, exactly: Gather of the int8 input (Cast to int32) from the table rolled by 128, so index
    x in -128 .. 127 reads table[x + 128] through Gather's negative indices. (The float form alpha x + beta between
    DequantizeLinear and QuantizeLinear is up to 2 LSB off TFLite's fixed point.)"""
    from onnx import TensorProto  # the exporter's dependency, imported only when exporting

    table = np.roll(np.asarray(n.attrs.table, np.int8), -128)
    idx = ex.node("Cast", [ex.names[n.inputs[0]]], f"{n.outputs[0]}_index", n.name, to=TensorProto.INT32)
    ex.names[n.outputs[0]] = ex.node("Gather", [ex.init(f"{n.outputs[0]}_table", table), idx], "", n.name,
                                     output=n.outputs[0], axis=0)


def twin(t, node, xs, params, clamp):
    return t.torch.clamp(xs[0] * node.attrs.alpha + node.attrs.beta, *clamp)


TFLITE = {"SUB": TfliteRead(tflite_sub, (28, (("activation", 0, "<b", 0),)), required=2)}
DOC = OpDoc("MUL / ADD / SUB with a scalar constant", "— (folded into the Conv / Gemm before it)",
            "256-entry table of TFLite's kernel", "g * the constant (MUL), ± g (ADD / SUB)", "input (int8)")
OP = OpDef("const_affine", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs, backward=backward,
           min_read=elementwise_min_read, rows=elementwise_rows, export=export, twin=twin, doc=DOC)
