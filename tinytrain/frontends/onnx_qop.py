"""ONNX QOperator models (onnxruntime ``quantize_static(..., quant_format=QuantFormat.QOperator)``) -> the int8 IR.

Integer ops carry their quantization parameters as inputs:

- ``QuantizeLinear`` of the float input: its output is the IR input;
- ``QLinearConv`` (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B int32 with scale
  x_scale*w_scale]) -> conv2d;
- ``QLinearMatMul`` (2-D; weights (K, N), per-column scales allowed) and com.microsoft ``QGemm``
  (int32 bias, y_scale present) -> fully_connected; a following ``QLinearAdd`` of a constant is
  folded into the bias;
- com.microsoft ``QLinearAdd`` of two activations -> add;
- com.microsoft ``QLinearGlobalAveragePool`` -> mean, ``QLinearAveragePool`` -> avg_pool2d (with
  its own output quantization when the scales differ, or mean when the window is global);
- integer ``Flatten`` / ``Reshape`` / ``Squeeze`` / ``Pad`` (with the zero point as value);
- float islands ``DequantizeLinear -> ReduceMean / GlobalAveragePool / Flatten / Reshape ->
  QuantizeLinear`` (onnxruntime leaves ReduceMean unquantized), through the shared QDQ machinery;
- the final ``DequantizeLinear``: the IR output is its integer input. A trailing
  com.microsoft ``QLinearSoftmax`` (or float Softmax) is dropped (the IR outputs the logits).
"""

from __future__ import annotations

import numpy as np
import onnx

from tinytrain.frontends.onnx_convert import Converter
from tinytrain.frontends.onnx_handlers import avgpool_pending, conv_setup, mean_pending, qconst_real
from tinytrain.frontends.onnx_parse import attrs_of, node_label
from tinytrain.frontends.onnx_values import SoftmaxOut
from tinytrain.frontends.onnx_ops import QOP_MORE_HANDLERS
from tinytrain.frontends.onnx_qdq import QDQ_HANDLERS
from tinytrain.ir import Graph


def _in(cv: Converter, node: onnx.NodeProto, idx: int, s_idx: int, zp_idx: int, what: str = "input"):
    q, dtype = cv.act_quant(node, s_idx, zp_idx, what)
    return cv.act_in(node, idx, q, dtype)


def _out(cv: Converter, node: onnx.NodeProto, s_idx: int, zp_idx: int):
    return cv.act_quant(node, s_idx, zp_idx, "output")


def _set(cv: Converter, node: onnx.NodeProto, ir: str, dtype: str) -> None:
    cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)


def h_qlinear_conv(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    x = _in(cv, node, 0, 1, 2)
    w = cv.qconst(node, 3, 4, 5, 0, "weight")
    yq, ydt = _out(cv, node, 6, 7)
    w_ir, geom, _ = conv_setup(cv, node, x, w)
    bias = None
    if len(node.input) > 8 and node.input[8]:
        b = cv.qconst_raw_int32(node, 8, "bias")
        bias = b
    ir = cv.emit_conv(x.ir, w_ir, bias, geom, yq, None, None, node.output[0], label)
    _set(cv, node, ir, ydt)


def _fc_weight(cv: Converter, node: onnx.NodeProto, x, w_idx: int, s_idx: int, zp_idx: int, trans_b: bool) -> str:
    label = node_label(node)
    if len(x.shape) != 2:
        raise cv.unsupported(f"{label}: input of shape {x.shape}; only 2-D (batch, features) inputs are supported "
                             f"(flatten before the layer)")
    w = cv.qconst(node, w_idx, s_idx, zp_idx, 0 if trans_b else 1, "weight")
    if w.data.ndim != 2:
        raise cv.unsupported(f"{label}: weight of shape {tuple(w.data.shape)} is not 2-D (batched MatMul with "
                             f"per-batch weights is not supported)")
    data = w.data if trans_b else w.data.T
    if data.shape[1] != x.shape[1]:
        raise cv.malformed(f"{label}: weight {tuple(w.data.shape)} does not match input {x.shape}")
    return cv.weight_tensor(w, np.ascontiguousarray(data), 0 if trans_b else 1, label)


def h_qlinear_matmul(cv: Converter, node: onnx.NodeProto) -> None:
    x = _in(cv, node, 0, 1, 2)
    w_ir = _fc_weight(cv, node, x, 3, 4, 5, False)
    yq, ydt = _out(cv, node, 6, 7)
    _set(cv, node, cv.emit_fc(x.ir, w_ir, None, yq, None, None, node.output[0], node_label(node)), ydt)


def h_qgemm(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    a = attrs_of(node)
    if a.get("transA", 0):
        raise cv.unsupported(f"{label}: transA=1 is not supported")
    if float(a.get("alpha", 1.0)) != 1.0:
        raise cv.unsupported(f"{label}: alpha={a['alpha']} is not supported (only 1)")
    if len(node.input) < 8 or not node.input[7]:
        raise cv.unsupported(f"{label} has a float output (no y_scale); quantize the model's outputs too")
    x = _in(cv, node, 0, 1, 2)
    w_ir = _fc_weight(cv, node, x, 3, 4, 5, bool(a.get("transB", 0)))
    bias = cv.qconst_raw_int32(node, 6, "bias") if len(node.input) > 6 and node.input[6] else None
    yq, ydt = _out(cv, node, 7, 8)
    _set(cv, node, cv.emit_fc(x.ir, w_ir, bias, yq, None, None, node.output[0], label), ydt)


def h_qlinear_add(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    yq, ydt = _out(cv, node, 6, 7)
    const_idx = [i for i in (0, 3) if cv.is_const(node.input[i])]
    if not const_idx:
        a = _in(cv, node, 0, 1, 2)
        b = _in(cv, node, 3, 4, 5)
        _set(cv, node, cv.emit_add(a.ir, b.ir, yq, None, None, node.output[0], label), ydt)
        return
    if len(const_idx) == 2:
        raise cv.unsupported(f"{label} adds two constants; fold constants before import")
    ci = const_idx[0]
    ai = 3 - ci
    act = _in(cv, node, ai, ai + 1, ai + 2)
    qc = cv.qconst(node, ci, ci + 1, ci + 2, None, "constant")
    p = cv.pending_from_producer(act, label)
    if p is None:
        raise cv.unsupported(f"{label} adds a constant to '{node.input[ai]}'; a constant can only be added as the bias "
                             f"of a convolution or matrix multiplication")
    p = cv.fold_bias(p, qconst_real(qc), label)
    _set(cv, node, cv.materialize(p, yq, node.output[0]), ydt)


def _channels_first(cv: Converter, node: onnx.NodeProto) -> None:
    if attrs_of(node).get("channels_last", 0):
        raise cv.unsupported(f"{node_label(node)}: channels_last=1 is not supported (NCHW only)")


def h_qlinear_gap(cv: Converter, node: onnx.NodeProto) -> None:
    _channels_first(cv, node)
    x = _in(cv, node, 0, 1, 2)
    yq, ydt = _out(cv, node, 3, 4)
    p = mean_pending(cv, node, x)
    _set(cv, node, cv.materialize(p, yq, node.output[0]), ydt)


def h_qlinear_avgpool(cv: Converter, node: onnx.NodeProto) -> None:
    _channels_first(cv, node)
    x = _in(cv, node, 0, 1, 2)
    yq, ydt = _out(cv, node, 3, 4)
    p = avgpool_pending(cv, node, x)
    _set(cv, node, cv.materialize(p, yq, node.output[0]), ydt)


def h_qlinear_softmax(cv: Converter, node: onnx.NodeProto) -> None:
    x = _in(cv, node, 0, 1, 2)
    cv.values[node.output[0]] = SoftmaxOut(x, node_label(node))


QOP_HANDLERS = {
    **QDQ_HANDLERS,
    **QOP_MORE_HANDLERS,
    "QLinearConv": h_qlinear_conv,
    "QLinearMatMul": h_qlinear_matmul,
    "com.microsoft.QGemm": h_qgemm,
    "com.microsoft.QLinearAdd": h_qlinear_add,
    "com.microsoft.QLinearGlobalAveragePool": h_qlinear_gap,
    "com.microsoft.QLinearAveragePool": h_qlinear_avgpool,
    "com.microsoft.QLinearSoftmax": h_qlinear_softmax,
}

# Ops that only appear in QOperator models (their presence selects this frontend).
QOP_MARKERS = {"QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearSoftmax", "QLinearMul", "QLinearConcat", "QLinearLeakyRelu",
               "QLinearSigmoid", "QLinearReduceMean", "QLinearWhere"}


def graph_from_qop(model: onnx.ModelProto, name: str, sha256: str) -> Graph:
    return Converter(model, name, sha256, QOP_HANDLERS, "QOperator").run()
