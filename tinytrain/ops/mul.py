"""Broadcast multiply of two int8 activations with requantization (squeeze-and-excitation's (1,1,C) x (H,W,C)).

Forward (TFLite integer_ops::Mul / BroadcastMul, one path for both): y = clamp(zy + MBQM((a - za) * (b - zb),
m, shift)) with m, shift of s_a * s_b / s_y in double; ONNX imports carry onnxruntime's float32 rounding in the
Requant (``fp32``: QLinearMul and QDQ Mul, within the 1-LSB float32 tie rule of docs/design.md §3a). The operands
have the output's rank; each dimension equals the output's or is 1 (broadcast).

Backward (real y = a * b, after the clamp mask): g_a = g * b, summed over the dimensions a is broadcast along;
alike for b (``mul_grad``, one node per operand that needs it, reading the other operand's saved int8 values).

Imports: TFLite MUL of two activations (broadcast; by a scalar constant: ops/const_affine.py); ONNX Mul of two dequantized activations and com.microsoft
QLinearMul; exported as Mul. ONNX Mul / Div by a constant (per channel or scalar) is no mul: it folds into the Conv /
Gemm before it (frontends/onnx/fold.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from tinytrain import tables
from tinytrain.errors import UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, TfliteRead, no_macs
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.ops.conv2d import dequantize_input, input_magnitude
from tinytrain.quant import Requant, activation_range, multiply_by_quantized_multiplier, ort_requant


@dataclass(frozen=True)
class MulAttrs:
    output: Requant
    act_min: int = -128
    act_max: int = 127


def broadcast_shape(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    if len(sa) != len(sb) or any(x != y and 1 not in (x, y) for x, y in zip(sa, sb)):
        raise ValueError(f"mul: shapes {sa} and {sb} do not broadcast (same rank, each dimension equal or 1)")
    return tuple(max(x, y) for x, y in zip(sa, sb))


def infer_shapes(a: MulAttrs, ins) -> list[tuple[int, ...]]:
    return [broadcast_shape(ins[0].shape, ins[1].shape)]


def reference(a: MulAttrs, arrays, ins, outs) -> list[np.ndarray]:
    prod_ = ((arrays[0].astype(np.int64) - ins[0].quant.zp) * (arrays[1].astype(np.int64) - ins[1].quant.zp))
    r = a.output
    y = multiply_by_quantized_multiplier(prod_, r.multiplier[0], r.shift[0], r.single_rounding, r.fp32)
    return [np.clip(y + outs[0].quant.zp, a.act_min, a.act_max).astype(np.int8)]


def min_read(a: MulAttrs, ins, outs, k: int) -> np.ndarray | None:
    """The output may overwrite the operand of its own shape (element q reads element q)."""
    return np.arange(outs[0].size, dtype=np.int64) if ins[k].shape == outs[0].shape else None


def backward(b, node, out_grads) -> list[str | None]:
    if not any(b.needs_grad(i) for i in node.inputs):
        return [None, None]
    a: MulAttrs = node.attrs
    g = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    grads: list[str | None] = []
    for k, x in enumerate(node.inputs):
        attrs = MulGradAttrs(b.tensor(x).shape)
        grads.append(b.emit("mul_grad", [g, node.inputs[1 - k]], attrs, f"{node.name}.grad_{k}")[0]
                     if b.needs_grad(x) else None)
    return grads


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    """The int8 product requantized once in onnxruntime's float32 arithmetic (scale float32(s_a * s_b) / s_y)."""
    a, b = (cv.tensors[p.args[k]] for k in ("a", "b"))
    attrs = MulAttrs(ort_requant(a.quant.s, [b.quant.s], yq.s), *activation_range(yq.zp, yq.s, p.lo, p.hi,
                                                                                   half_even=True))
    return cv.add_node("mul", p.source, [a.name, b.name], out_hint, yq, attrs, p.source)


def _same_rank(cv, node, a, b) -> None:
    if len(a.shape) != len(b.shape):
        raise cv.unsupported(f"{cv.label(node)}: {node.op_type} of ranks {len(a.shape)} and {len(b.shape)}; "
                             f"operands of the same rank (each dimension equal or 1) are supported")


def onnx_mul(cv, node) -> None:
    """DQ(a) * DQ(b) -> Q (QDQ): a broadcast multiply of two activations, deferred to its QuantizeLinear; times a
    constant (per channel or scalar): folded into the Conv / Gemm before it (frontends/onnx/fold.py)."""
    const = cv.constant_operand(node)
    if const is not None:
        k, c = const
        if node.op_type == "Div" and k == 0:
            raise cv.unsupported(f"{cv.label(node)} divides a constant by an activation, which tinytrain does not "
                                 f"support")
        cv.fold_affine(node, cv.value(node, 1 - k), 1 / c if node.op_type == "Div" else c, what="scales")
        return
    if node.op_type == "Div":
        raise cv.unsupported(f"{cv.label(node)} divides two activations, which tinytrain does not support")
    a, b = cv.dq_input(node, 0), cv.dq_input(node, 1)
    _same_rank(cv, node, a, b)
    cv.defer(node, "mul", tuple(max(x, y) for x, y in zip(a.shape, b.shape)), onnx_emit, a=a.ir, b=b.ir)


def onnx_qlinear_mul(cv, node) -> None:
    """com.microsoft QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    a, b = cv.qlinear_input(node, 0, 1, 2), cv.qlinear_input(node, 3, 4, 5)
    _same_rank(cv, node, a, b)
    yq, dtype = cv.qlinear_output(node, 6, 7)
    p = cv.defer(node, "mul", a.shape, onnx_emit, a=a.ir, b=b.ir)
    cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)


def const_table(x_first: bool, xq, c: int, cq, yq, act: tuple[int, int]) -> tuple[int, ...]:
    """TFLite Micro's int8 MUL of x and a constant's int8 value c, as a table over x (``tables.tflite_const``)."""
    r = Requant.from_scales([xq.s * cq.s / yq.s])
    y = multiply_by_quantized_multiplier((tables.INT8_VALUES - xq.zp) * (c - cq.zp), r.multiplier[0], r.shift[0])
    return tuple(int(v) for v in np.clip(y + yq.zp, *act))


def tflite_mul(im, op) -> None:
    """Two activations (TFLite's int8 Mul / BroadcastMul): multiplier of s_a * s_b / s_y in double; an activation
    times a scalar constant: ops/const_affine.py."""
    if any(im.is_constant(i) for i in op.inputs[:2]):  # times a scalar constant: a table (ops/const_affine.py)
        tables.tflite_const(im, op, const_table)
        return
    a, b, out = im.act(op.inputs[0]), im.act(op.inputs[1]), im.out(op)
    try:
        if broadcast_shape(a.shape, b.shape) != out.shape:
            raise ValueError(f"output {list(out.shape)}")
    except ValueError as e:
        raise UnsupportedModelError(f"operator {op.index} (MUL): {list(a.shape)} x {list(b.shape)}: {e}; "
                                    "operands of the output's rank, each dimension equal or 1") from None
    act_min, act_max = im.activation(op, out)
    requant = Requant.from_scales([a.quant.s * b.quant.s / out.quant.s])
    im.node(op, "mul", [a.name, b.name], [out.name], MulAttrs(requant, act_min, act_max))


def export(ex, n) -> None:
    a = n.attrs
    f = ex.node("Mul", [ex.dq(n.inputs[0], n.name), ex.dq(n.inputs[1], n.name)], f"{n.outputs[0]}_float", n.name)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    return t.torch.clamp(xs[0] * xs[1], *clamp)


ONNX = {"Div": onnx_mul, "Mul": onnx_mul}
ONNX_QOPERATOR = {"com.microsoft.QLinearMul": onnx_qlinear_mul}
TFLITE = {"MUL": TfliteRead(tflite_mul, (21, (("activation", 0, "<b", 0),)), required=2)}
DOC = OpDoc("MUL (two activations, broadcast)", "Mul / QLinearMul", "(a - za)(b - zb) requantized",
            "g * b summed over a's broadcast dims, and alike for b", "both inputs (int8), clamp mask",
            in_place="the full-shape operand")
OP = OpDef("mul", MulAttrs, infer_shapes, reference, no_macs, backward=backward, min_read=min_read, export=export,
           twin=twin, doc=DOC)


@dataclass(frozen=True)
class MulGradAttrs:
    """g_k (``shape``) = g * other (dequantized, broadcast to g), summed over the dimensions where ``shape`` is 1
    and g is not: float32 products, each sum in float32 over the summed positions in C order from +0."""

    shape: tuple[int, ...]


def grad_shapes(a: MulGradAttrs, ins) -> list[tuple[int, ...]]:
    g, other = ins
    if broadcast_shape(a.shape, other.shape) != g.shape:
        raise ValueError(f"mul_grad: operand {a.shape} and {other.shape} do not give gradient {g.shape}")
    return [a.shape]


def grad_reference(a: MulGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g = arrays[0].astype(np.float32)
    terms = g * np.broadcast_to(dequantize_input(arrays[1], ins[1]), g.shape)
    summed = [d for d in range(1, g.ndim) if a.shape[d] == 1 and g.shape[d] > 1]
    acc = np.zeros(g.shape[:1] + a.shape[1:], np.float32)
    for pos in product(*(range(g.shape[d]) for d in summed)):
        index = [slice(None)] * g.ndim
        for d, p in zip(summed, pos):
            index[d] = slice(p, p + 1)
        acc = acc + terms[tuple(index)]
    return [acc]


def grad_bound(a: MulGradAttrs, ins, bounds) -> list[float]:
    g, other = ins
    count = int(np.prod(g.shape)) // int(np.prod(a.shape))
    return [bounds[0] * input_magnitude(other) * count]


GRAD = OpDef("mul_grad", MulGradAttrs, grad_shapes, grad_reference, no_macs, bound=grad_bound)
OPS = (OP, GRAD)
