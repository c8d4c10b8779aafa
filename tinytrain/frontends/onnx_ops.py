"""The ONNX importers' handlers of the ops beyond the MobileNet set (ops/max_pool2d.py, ...), shared by the QDQ and
QOperator frontends; each maps one op as onnxruntime computes it (QDQ node units and QOperator kernels)."""

from __future__ import annotations

import numpy as np
import onnx

from tinytrain.frontends.onnx_convert import Converter, Handler
from tinytrain.frontends.onnx_handlers import _pool_geom, dq_act, resolve_clamp
from tinytrain.frontends.onnx_parse import attrs_of, node_label
from tinytrain.frontends.onnx_requant import clamp_range, ort_output_scales
from tinytrain.frontends.onnx_values import Act, FVal, Pending, same_quant
from tinytrain.ir import QuantParams
from tinytrain.ops import hard_sigmoid, hard_swish, logistic
from tinytrain.ops.concat import ConcatAttrs
from tinytrain.ops.max_pool2d import MaxPool2dAttrs
from tinytrain.ops.mul import MulAttrs
from tinytrain.quant import Requant
from tinytrain.tables import TableAttrs, float32_table


def _int_or_dq(cv: Converter, node: onnx.NodeProto, idx: int) -> tuple[Act, bool]:
    """The int8 activation at input idx, directly (QOperator: ops onnxruntime runs on int8 data) or through a
    DequantizeLinear (QDQ); the flag says which, so the result is recorded in the same form."""
    v = resolve_clamp(cv, node, idx)
    if isinstance(v, Act):
        return v, False
    if isinstance(v, FVal) and v.kind == "dq":
        return v.act, True
    raise cv.unsupported(f"{node_label(node)}: input '{node.input[idx]}' is not an int8 activation or its "
                         f"DequantizeLinear; quantize the whole model (quantize_static)")


def _record(cv: Converter, node: onnx.NodeProto, ir: str, like: Act, dq: bool) -> None:
    act = cv.new_act(ir, cv.tensors[ir].shape, like.dtype)
    cv.values[node.output[0]] = FVal("dq", act=act, source=node_label(node)) if dq else act


def h_max_pool(cv: Converter, node: onnx.NodeProto) -> None:
    """MaxPool on int8 data (QOperator) or DQ -> MaxPool (-> Q): the maximum commutes with the dequantization,
    so the int8 maximum in the input's quantization is exact; a following QuantizeLinear requantizes if needed."""
    label = node_label(node)
    if len(node.output) > 1 and node.output[1]:
        raise cv.unsupported(f"{label}: MaxPool's Indices output is not supported")
    if attrs_of(node).get("storage_order", 0):
        raise cv.unsupported(f"{label}: storage_order=1 is not supported")
    x, dq = _int_or_dq(cv, node, 0)
    if len(x.shape) != 4:
        raise cv.unsupported(f"{label}: only 2-D (NCHW) max pooling is supported")
    kernel, stride, padding, _ = _pool_geom(cv, node, x.shape[2:])
    attrs = MaxPool2dAttrs(tuple(kernel), tuple(stride), tuple(padding))
    ir = cv.add_node("max_pool2d", label, [x.ir], node.output[0], cv.tensors[x.ir].quant, attrs, label)
    _record(cv, node, ir, x, dq)


def emit_table(cv: Converter, p: Pending, yq: QuantParams, out_hint: str) -> str:
    """Materialize a pending table op once QuantizeLinear fixes its output: the table of DequantizeLinear -> op ->
    (Relu / Clip) -> QuantizeLinear in onnxruntime's float32 arithmetic."""
    a = p.args
    xq = cv.tensors[a["x"]].quant
    table = a["make"](xq, yq, p.lo, p.hi)
    attrs = TableAttrs(table, a["kind"], a.get("alpha", 0.0), a.get("beta", 0.0))
    return cv.add_node(a["kind"], p.source, [a["x"]], out_hint, yq, attrs, p.source)


def _pending_table(cv: Converter, node: onnx.NodeProto, kind: str, make, **params) -> None:
    x = dq_act(cv, node, 0)
    label = node_label(node)
    p = Pending("custom", x.shape, {"emit": emit_table, "x": x.ir, "kind": kind, "make": make, **params}, label)
    cv.values[node.output[0]] = FVal("pending", pending=p, source=label)


def h_hard_swish(cv: Converter, node: onnx.NodeProto) -> None:
    _pending_table(cv, node, "hard_swish", hard_swish.onnx_table)


def h_sigmoid(cv: Converter, node: onnx.NodeProto) -> None:
    _pending_table(cv, node, "logistic", logistic.onnx_table)


def h_hard_sigmoid(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    alpha, beta = (float(np.float32(a.get(k, d))) for k, d in (("alpha", 0.2), ("beta", 0.5)))  # float attributes

    def make(xq, yq, lo, hi):
        return hard_sigmoid.onnx_table(xq, yq, alpha, beta, lo, hi)
    _pending_table(cv, node, "hard_sigmoid", make, alpha=alpha, beta=beta)


def h_qlinear_sigmoid(cv: Converter, node: onnx.NodeProto) -> None:
    """com.microsoft QLinearSigmoid (X, X_scale, X_zp, Y_scale, Y_zp): onnxruntime's table of the float sigmoid."""
    xq, x_dtype = cv.act_quant(node, 1, 2, "input")
    x = cv.act_in(node, 0, xq, x_dtype)
    yq, y_dtype = cv.act_quant(node, 3, 4, "output")
    p = Pending("custom", x.shape, {"x": x.ir, "kind": "logistic", "make": logistic.onnx_table}, node_label(node))
    ir = emit_table(cv, p, yq, node.output[0])
    cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, y_dtype)


def emit_mul(cv: Converter, p: Pending, yq: QuantParams, out_hint: str) -> str:
    """The int8 product requantized once in onnxruntime's float32 arithmetic (scale float32(s_a * s_b) / s_y)."""
    a, b = (cv.tensors[p.args[k]] for k in ("a", "b"))
    requant = Requant.from_scales(ort_output_scales(a.quant.s, [b.quant.s], yq.s), fp32=True)
    attrs = MulAttrs(requant, *clamp_range(yq, p.lo, p.hi))
    return cv.add_node("mul", p.source, [a.name, b.name], out_hint, yq, attrs, p.source)


def _broadcast_operands(cv: Converter, node: onnx.NodeProto, a: Act, b: Act) -> tuple[Act, Act]:
    if len(a.shape) != len(b.shape):
        raise cv.unsupported(f"{node_label(node)}: {node.op_type} of ranks {len(a.shape)} and {len(b.shape)}; "
                             f"operands of the same rank (each dimension equal or 1) are supported")
    return a, b


def h_mul(cv: Converter, node: onnx.NodeProto) -> None:
    """DQ(a) * DQ(b) -> Q (QDQ): a pending broadcast multiply of two activations."""
    a, b = _broadcast_operands(cv, node, dq_act(cv, node, 0), dq_act(cv, node, 1))
    label = node_label(node)
    shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
    p = Pending("custom", shape, {"emit": emit_mul, "a": a.ir, "b": b.ir}, label)
    cv.values[node.output[0]] = FVal("pending", pending=p, source=label)


def h_qlinear_mul(cv: Converter, node: onnx.NodeProto) -> None:
    """com.microsoft QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    acts = []
    for idx in (0, 3):
        q, dtype = cv.act_quant(node, idx + 1, idx + 2, "input")
        acts.append(cv.act_in(node, idx, q, dtype))
    a, b = _broadcast_operands(cv, node, *acts)
    yq, dtype = cv.act_quant(node, 6, 7, "output")
    p = Pending("custom", a.shape, {"a": a.ir, "b": b.ir}, node_label(node))
    ir = emit_mul(cv, p, yq, node.output[0])
    cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)


_NCHW_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}


def emit_concat(cv: Converter, p: Pending, yq: QuantParams, out_hint: str) -> str:
    """Each input requantized to the output (and clamped by a Relu / Clip after it) in float32 through a table,
    or copied when it has the output's quantization and nothing clamps."""
    xs = [cv.tensors[x] for x in p.args["xs"]]
    copy = (p.lo, p.hi) == (None, None)
    tables = tuple(None if copy and same_quant(x.quant, yq) else float32_table(lambda v: v, x.quant, yq, p.lo, p.hi)
                   for x in xs)
    return cv.add_node("concat", p.source, [x.name for x in xs], out_hint, yq, ConcatAttrs(p.args["axis"], tables),
                       p.source)


def _concat_axis(cv: Converter, node: onnx.NodeProto, rank: int) -> int:
    axis = int(attrs_of(node).get("axis", 1)) % rank
    axis = _NCHW_TO_NHWC[axis] if rank == 4 else axis
    if axis == 0:
        raise cv.unsupported(f"{node_label(node)} concatenates along the batch axis")
    return axis


def h_concat(cv: Converter, node: onnx.NodeProto) -> None:
    """Concat of DequantizeLinear outputs (QDQ), pending its QuantizeLinear."""
    xs = [dq_act(cv, node, i) for i in range(len(node.input))]
    label = node_label(node)
    axis = _concat_axis(cv, node, len(xs[0].shape))
    onnx_axis = int(attrs_of(node).get("axis", 1)) % len(xs[0].shape)
    shape = list(xs[0].shape)
    shape[onnx_axis] = sum(x.shape[onnx_axis] for x in xs)
    p = Pending("custom", tuple(shape), {"emit": emit_concat, "xs": [x.ir for x in xs], "axis": axis}, label)
    cv.values[node.output[0]] = FVal("pending", pending=p, source=label)


def h_qlinear_concat(cv: Converter, node: onnx.NodeProto) -> None:
    """com.microsoft QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per input)."""
    yq, dtype = cv.act_quant(node, 0, 1, "output")
    xs = []
    for idx in range(2, len(node.input), 3):
        q, x_dtype = cv.act_quant(node, idx + 1, idx + 2, "input")
        xs.append(cv.act_in(node, idx, q, x_dtype))
    p = Pending("custom", (), {"xs": [x.ir for x in xs], "axis": _concat_axis(cv, node, len(xs[0].shape))},
                node_label(node))
    ir = emit_concat(cv, p, yq, node.output[0])
    cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)


MORE_HANDLERS: dict[str, Handler] = {
    "Concat": h_concat,
    "Mul": h_mul,
    "MaxPool": h_max_pool,
    "HardSwish": h_hard_swish,
    "HardSigmoid": h_hard_sigmoid,
    "Sigmoid": h_sigmoid,
}
QOP_MORE_HANDLERS: dict[str, Handler] = {
    "com.microsoft.QLinearSigmoid": h_qlinear_sigmoid,
    "com.microsoft.QLinearMul": h_qlinear_mul,
    "com.microsoft.QLinearConcat": h_qlinear_concat,
}
