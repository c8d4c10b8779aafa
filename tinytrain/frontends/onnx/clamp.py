"""The converter's own handlers of the clamps: a standalone Relu / Clip tightens the clamp range of the pending
computation it follows (fused into it on emission), or becomes a pending clamp of a dequantized activation
(emit.py ``emit_clamp``).

A Clip between QuantizeLinear and DequantizeLinear (Brevitas' QCDQ export: Q -> Clip -> DQ, its integer bounds
narrowing the int8 range, to [-127, 127] for narrow-range weights or fewer bits) clips integers: of a constant
(a weight), the constant clipped, exactly; of an integer activation, nothing where the bounds hold the whole range,
else an integer clamp in the activation's own quantization (exact: the bounds are integers of it)."""

from __future__ import annotations

import math

import numpy as np
import onnx

from tinytrain.frontends.onnx.convert import Converter, Handler
from tinytrain.frontends.onnx.parse import attrs_of, node_label
from tinytrain.frontends.onnx.values import Act, FVal, Pending


def clip_bounds(cv: Converter, node: onnx.NodeProto) -> tuple[float | None, float | None]:
    if node.op_type == "Relu":
        return 0.0, None
    a = attrs_of(node)
    if cv.opset is not None and cv.opset < 11:
        lo, hi = a.get("min"), a.get("max")
    else:
        lo = cv.const(node, 1, "min", optional=True)
        hi = cv.const(node, 2, "max", optional=True)
        lo = None if lo is None else float(np.asarray(lo).ravel()[0])
        hi = None if hi is None else float(np.asarray(hi).ravel()[0])
    lo = None if lo is not None and math.isinf(lo) and lo < 0 else lo
    hi = None if hi is not None and math.isinf(hi) and hi > 0 else hi
    return lo, hi


def h_relu_clip(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    if node.op_type == "Clip" and cv.is_const(node.input[0]) and cv.inits[node.input[0]] is not None \
            and cv.inits[node.input[0]].dtype.kind in "iu":
        _clip_integer_constant(cv, node)
        return
    v = cv.layout_input(node)
    if node.op_type == "Clip" and isinstance(v, Act):
        _clip_integer_activation(cv, node, v)
        return
    lo, hi = clip_bounds(cv, node)
    if isinstance(v, FVal) and v.kind == "pending":
        cv.values[node.output[0]] = FVal("pending", pending=v.pending.clamped(lo, hi), source=label)
    elif isinstance(v, FVal) and v.kind == "dq":
        p = Pending("clamp", v.act.shape, {"x": v.act.ir, "dtype": v.act.dtype}, label, lo, hi)
        cv.values[node.output[0]] = FVal("pending", pending=p, source=label)
    else:
        raise cv.unsupported(f"{label} is applied to '{node.input[0]}', which is not a dequantized activation; "
                             f"quantize the model with onnxruntime quantize_static (QDQ or QOperator)")


def _integer_bounds(cv: Converter, node: onnx.NodeProto, dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    lo, hi = clip_bounds(cv, node)
    for bound in (lo, hi):
        if bound is not None and bound != math.floor(bound):
            raise cv.unsupported(f"{node_label(node)} clips integers to a bound {bound:g} that is not an integer; "
                                 f"give integer Clip bounds (the QCDQ export's are)")
    return (info.min if lo is None else max(int(lo), info.min)), (info.max if hi is None else min(int(hi), info.max))


def _clip_integer_constant(cv: Converter, node: onnx.NodeProto) -> None:
    arr = cv.inits[node.input[0]]
    lo, hi = _integer_bounds(cv, node, arr.dtype)
    cv.inits[node.output[0]] = np.clip(arr, lo, hi).astype(arr.dtype)
    cv.init_types[node.output[0]] = cv.init_types[node.input[0]]


def _clip_integer_activation(cv: Converter, node: onnx.NodeProto, v: Act) -> None:
    lo, hi = _integer_bounds(cv, node, np.dtype(v.dtype))
    shift = 128 if v.dtype == "uint8" else 0  # a uint8 activation is held as int8: q - 128
    lo, hi = lo - shift, hi - shift
    if lo <= -128 and hi >= 127:
        cv.values[node.output[0]] = v
        return
    if v.quant is None:
        raise cv.unsupported(f"{node_label(node)} clips the integer input '{node.input[0]}' before its quantization "
                             f"is known; quantize the float input in the model (QuantizeLinear)")
    q = v.quant
    p = Pending("clamp", v.shape, {"x": v.ir, "dtype": v.dtype}, node_label(node), (lo - q.zp) * q.s, (hi - q.zp) * q.s)
    ir = cv.materialize(p, q, node.output[0])
    cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, v.dtype)


HANDLERS: dict[str, Handler] = {"Relu": h_relu_clip, "Clip": h_relu_clip}
