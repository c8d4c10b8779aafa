"""Residual add of two int8 tensors with rescaling (TFLite integer_ops::Add arithmetic).

Each input is offset, shifted left by ``left_shift`` (20), scaled to a common scale, summed and
requantized to the output scale, all in fixed point. The three requantizations round as their
Requant says (double rounding for TFLite imports; single rounding for ONNX imports, where the two input
rescales are exact to 2^-20 and the sum is rounded once, like onnxruntime's float add).

Imports: TFLite ADD of two activations of one shape (plus a scalar constant: ops/const_affine.py); ONNX Add of two dequantized activations and com.microsoft
QLinearAdd (a constant added to a convolution's or fully-connected layer's output folds into its bias instead; ONNX
Sub of a constant folds likewise, frontends/onnx/fold.py);
exported as Add.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain import tables
from tinytrain.errors import UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, TfliteRead, elementwise_min_read, elementwise_rows
from tinytrain.ops.clamp_mask import masked_grad
from tinytrain.quant import Requant, activation_range, multiply_by_quantized_multiplier


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

    if not any(b.needs_grad(i) for i in node.inputs):
        return [None, None]
    a: AddAttrs = node.attrs
    gz = masked_grad(b, out_grads[0], node.outputs[0], a.act_min, a.act_max, f"{node.name}.grad_z")
    return [gz if b.needs_grad(i) else None for i in node.inputs]


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    """TFLite's three requantizations, each rounded once (frontends/onnx/requant.py)."""
    ta, tb = cv.tensors[p.args["a"]], cv.tensors[p.args["b"]]
    if ta.shape != tb.shape:
        raise cv.unsupported(f"{p.source}: adds shapes {cv.onnx_shape(ta.shape)} and {cv.onnx_shape(tb.shape)}; "
                             f"broadcasting Add is not supported (only residual adds of equal shapes)")
    amin, amax = activation_range(yq.zp, yq.s, p.lo, p.hi, half_even=True)
    attrs = AddAttrs.from_scales(ta.quant.s, tb.quant.s, yq.s, amin, amax, single_rounding=True)
    return cv.add_node("add", p.source, [ta.name, tb.name], out_hint, yq, attrs, p.source)


def onnx_add(cv, node) -> None:
    label = cv.label(node)
    va, vb = cv.value(node, 0), cv.value(node, 1)
    kinds = [getattr(v, "kind", None) for v in (va, vb)]
    if kinds == ["dq", "dq"]:
        cv.defer(node, "add", va.act.shape, onnx_emit, reopens=True, a=va.act.ir, b=vb.act.ir)
        return
    const = cv.constant_operand(node)
    if const is not None:  # folded into the bias of the Conv / Gemm / MatMul computing the other operand
        cv.fold_affine(node, cv.value(node, 1 - const[0]), shift=const[1], what="adds a constant to")
        return
    cv.dq_input(node, 0)  # leave the detailed message to dq_input
    cv.dq_input(node, 1)
    raise cv.unsupported(f"{label}: unsupported Add pattern")


def onnx_sub(cv, node) -> None:
    """x - c and c - x, c a constant (per channel or scalar): folded into the Conv / Gemm computing x
    (frontends/onnx/fold.py); the difference of two activations is refused."""
    const = cv.constant_operand(node)
    if const is None:
        raise cv.unsupported(f"{cv.label(node)} subtracts two activations, which tinytrain does not support; "
                             f"only a constant can be subtracted")
    k, c = const
    if k == 1:
        cv.fold_affine(node, cv.value(node, 0), shift=-np.asarray(c), what="subtracts a constant from")
    else:
        cv.fold_affine(node, cv.value(node, 1), scale=-1.0, shift=c, what="subtracts from a constant")


def onnx_qlinear_add(cv, node) -> None:
    """com.microsoft QLinearAdd (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    label = cv.label(node)
    yq, dtype = cv.qlinear_output(node, 6, 7)
    const_idx = [i for i in (0, 3) if cv.is_const(node.input[i])]
    if not const_idx:
        a, b = cv.qlinear_input(node, 0, 1, 2), cv.qlinear_input(node, 3, 4, 5)
        p = cv.defer(node, "add", a.shape, onnx_emit, reopens=True, a=a.ir, b=b.ir)
        cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)
        return
    if len(const_idx) == 2:
        raise cv.unsupported(f"{label} adds two constants; fold constants before import")
    ci = const_idx[0]
    ai = 3 - ci
    act = cv.qlinear_input(node, ai, ai + 1, ai + 2)
    qc = cv.qconst(node, ci, ci + 1, ci + 2, None, "constant")
    p = cv.pending_from_producer(act, label)
    if p is None:
        raise cv.unsupported(f"{label} adds a constant to '{node.input[ai]}'; a constant can only be added as the bias "
                             f"of a convolution or matrix multiplication")
    cv.set_output(node, cv.materialize(cv.fold_bias(p, cv.real(qc), label), yq, node.output[0]), dtype)


def const_table(kind: str):
    """TFLite Micro's int8 ADD / SUB (``kind``) of x and a constant's int8 value c, as a table over x
    (``tables.tflite_const``): both shifted left 20, rescaled, summed or the second subtracted, requantized."""
    def make(x_first: bool, xq, c: int, cq, yq, act: tuple[int, int]) -> tuple[int, ...]:
        x = tables.INT8_VALUES
        s1, s2 = (xq.s, cq.s) if x_first else (cq.s, xq.s)
        a = AddAttrs.from_scales(s1, s2, yq.s)
        tx = input_term(a, 0 if x_first else 1, xq.zp, x)
        tc = input_term(a, 1 if x_first else 0, cq.zp, np.full_like(x, c))
        t1, t2 = (tx, tc) if x_first else (tc, tx)
        raw = t1 + t2 if kind == "ADD" else t1 - t2
        y = multiply_by_quantized_multiplier(raw, a.output.multiplier[0], a.output.shift[0]) + yq.zp
        return tuple(int(v) for v in np.clip(y, *act))
    return make


def tflite_add(im, op) -> None:
    if im.float_add(op):  # DEQUANTIZE -> float ADD -> QUANTIZE (LiteRT-torch): emitted by that QUANTIZE
        return
    if any(im.is_constant(i) for i in op.inputs[:2]):  # plus a scalar constant: a table (ops/const_affine.py)
        tables.tflite_const(im, op, const_table("ADD"))
        return
    a, b, out = im.act(op.inputs[0]), im.act(op.inputs[1]), im.out(op)
    if a.shape != b.shape or a.shape != out.shape:
        raise UnsupportedModelError(f"operator {op.index} (ADD) broadcasts {list(a.shape)} and {list(b.shape)}; "
                                    "only same-shape adds are supported")
    act_min, act_max = im.activation(op, out)
    im.node(op, "add", [a.name, b.name], [out.name], AddAttrs.from_scales(a.quant.s, b.quant.s, out.quant.s, act_min,
                                                                          act_max))


def export(ex, n) -> None:
    a = n.attrs
    f = ex.node("Add", [ex.dq(n.inputs[0], n.name), ex.dq(n.inputs[1], n.name)], f"{n.outputs[0]}_float", n.name)
    ex.q(ex.clip(f, n.outputs[0], a.act_min, a.act_max, n.name), n.outputs[0], n.name)


def twin(t, node, xs, params, clamp):
    return t.torch.clamp(xs[0] + xs[1], *clamp)


ONNX = {"Add": onnx_add, "Sub": onnx_sub}
ONNX_QOPERATOR = {"com.microsoft.QLinearAdd": onnx_qlinear_add}
TFLITE = {"ADD": TfliteRead(tflite_add, (11, (("activation", 0, "<b", 0),)), required=2)}
DOC = OpDoc("ADD", "Add / QLinearAdd", "TFLite fixed point", "g to both inputs", "clamp mask")


OP = OpDef("add", AddAttrs, infer_shapes, reference, macs, backward=backward, min_read=elementwise_min_read,
           rows=elementwise_rows, export=export, twin=twin, doc=DOC)
