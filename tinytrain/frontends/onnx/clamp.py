"""The converter's own handlers of the clamps: a standalone Relu / Clip tightens the clamp range of the pending
computation it follows (fused into it on emission), or becomes a pending clamp of a dequantized activation
(emit.py ``emit_clamp``)."""

from __future__ import annotations

import math

import numpy as np
import onnx

from tinytrain.frontends.onnx.convert import Converter, Handler
from tinytrain.frontends.onnx.parse import attrs_of, node_label
from tinytrain.frontends.onnx.values import FVal, Pending


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
    v = cv.layout_input(node)
    lo, hi = clip_bounds(cv, node)
    if isinstance(v, FVal) and v.kind == "pending":
        cv.values[node.output[0]] = FVal("pending", pending=v.pending.clamped(lo, hi), source=label)
    elif isinstance(v, FVal) and v.kind == "dq":
        p = Pending("clamp", v.act.shape, {"x": v.act.ir, "dtype": v.act.dtype}, label, lo, hi)
        cv.values[node.output[0]] = FVal("pending", pending=p, source=label)
    else:
        raise cv.unsupported(f"{label} is applied to '{node.input[0]}', which is not a dequantized activation; "
                             f"quantize the model with onnxruntime quantize_static (QDQ or QOperator)")


HANDLERS: dict[str, Handler] = {"Relu": h_relu_clip, "Clip": h_relu_clip}
