"""ONNX QDQ models (onnxruntime ``quantize_static(..., quant_format=QuantFormat.QDQ)``) -> the int8 IR.

The graph is float ops between DequantizeLinear (DQ) and QuantizeLinear (Q) nodes:
``float input -> Q -> (DQ -> op -> Q)* -> DQ -> output``. The IR input is the int8 (or uint8) tensor
after the first Q, the IR output the integer tensor before the final DQ. Patterns (see
onnx_convert for the machinery and onnx_requant for the documented deviations):

- ``DQ(x), DQ(w int8 per-channel axis 0), DQ(b int32) -> Conv [-> Relu | Clip] -> Q``: conv2d
  (group 1 or depthwise; pads / strides / dilations / auto_pad); the activation becomes the clamp
  range. onnxruntime usually removes Relu/Clip(0, 6) when the Q range already implies it (zero
  point at the bottom of the int8 range, calibrated max <= 6): the Q range is then the clamp.
- ``Gemm`` (transA 0, transB 0 or 1, alpha > 0 folded into the weight scale, beta into the bias)
  and ``MatMul`` with an optional constant ``Add`` -> fully_connected.
- ``Add`` of two DQ activations -> add; ``Add`` of a constant to a Conv/Gemm/MatMul output is folded
  into that layer's bias.
- ``GlobalAveragePool`` / ``ReduceMean`` over H, W -> mean; ``AveragePool`` -> avg_pool2d.
- ``Flatten`` / ``Reshape`` / ``Squeeze`` / ``Unsqueeze`` when NCHW -> NHWC does not change the
  element order (spatial 1x1); ``Pad`` (constant zero); standalone ``Relu`` / ``Clip``.
- A trailing ``Softmax`` (with or without its Q/DQ) is dropped; the IR outputs the logits.
"""

from __future__ import annotations

import numpy as np
import onnx

from tinytrain.frontends.onnx_convert import Converter
from tinytrain.frontends.onnx_handlers import COMMON_HANDLERS, bias_value, conv_setup, dq_act, qconst_real, weight_qconst
from tinytrain.frontends.onnx_ops import MORE_HANDLERS
from tinytrain.frontends.onnx_parse import QConst, attrs_of, node_label
from tinytrain.frontends.onnx_values import FVal, Pending
from tinytrain.ir import Graph


def h_conv(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    x = dq_act(cv, node, 0)
    w = weight_qconst(cv, node, 1)
    w_ir, geom, out_shape = conv_setup(cv, node, x, w)
    s_w = np.asarray(cv.tensors[w_ir].quant.scale)
    bias = cv.bias_int32(bias_value(cv, node, 2), x.quant.s, s_w, label)
    p = Pending("conv", out_shape, {"x": x.ir, "w": w_ir, "bias": bias, "geom": geom}, label)
    cv.values[node.output[0]] = FVal("pending", pending=p, source=label)


def _fc(cv: Converter, node: onnx.NodeProto, x, w: QConst, trans_b: bool, alpha: float, bias, beta: float) -> None:
    label = node_label(node)
    if len(x.shape) != 2:
        raise cv.unsupported(f"{label}: input of shape {x.shape}; only 2-D (batch, features) inputs are supported "
                             f"(flatten before the layer)")
    if w.data.ndim != 2:
        raise cv.unsupported(f"{label}: weight of shape {tuple(w.data.shape)} is not 2-D")
    data = w.data if trans_b else w.data.T
    if data.shape[1] != x.shape[1]:
        raise cv.malformed(f"{label}: weight {tuple(w.data.shape)} does not match input {x.shape}")
    if alpha != 1.0:
        if not alpha > 0:
            raise cv.unsupported(f"{label}: alpha={alpha}; only a positive alpha is supported")
        w = QConst(w.name, w.data, w.dtype, w.scale * alpha, w.zero_point, w.axis)
    w_ir = cv.weight_tensor(w, np.ascontiguousarray(data), 0 if trans_b else 1, label)
    s_w = np.asarray(cv.tensors[w_ir].quant.scale)
    if bias is not None and beta != 1.0:
        bias = (qconst_real(bias) if isinstance(bias, QConst) else np.asarray(bias, np.float64)) * beta
    if bias is not None and not isinstance(bias, QConst):
        bias = np.asarray(bias, np.float64).reshape(-1)
    elif isinstance(bias, QConst) and bias.data.ndim > 1:
        bias = qconst_real(bias).reshape(-1)
    b = cv.bias_int32(bias, x.quant.s, s_w, label)
    p = Pending("fc", (1, data.shape[0]), {"x": x.ir, "w": w_ir, "bias": b}, label)
    cv.values[node.output[0]] = FVal("pending", pending=p, source=label)


def h_gemm(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    if a.get("transA", 0):
        raise cv.unsupported(f"{node_label(node)}: transA=1 is not supported")
    x = dq_act(cv, node, 0)
    w = weight_qconst(cv, node, 1)
    _fc(cv, node, x, w, bool(a.get("transB", 0)), float(a.get("alpha", 1.0)), bias_value(cv, node, 2),
        float(a.get("beta", 1.0)))


def h_matmul(cv: Converter, node: onnx.NodeProto) -> None:
    x = dq_act(cv, node, 0)
    w = weight_qconst(cv, node, 1)
    _fc(cv, node, x, w, False, 1.0, None, 1.0)


def h_add(cv: Converter, node: onnx.NodeProto) -> None:
    label = node_label(node)
    va, vb = cv.value(node, 0), cv.value(node, 1)

    def is_const(v) -> bool:
        return isinstance(v, FVal) and v.kind in ("qconst", "fconst")

    if isinstance(va, FVal) and isinstance(vb, FVal) and va.kind == "dq" and vb.kind == "dq":
        p = Pending("add", va.act.shape, {"a": va.act.ir, "b": vb.act.ir}, label)
        cv.values[node.output[0]] = FVal("pending", pending=p, source=label)
        return
    if is_const(va) and not is_const(vb):
        va, vb = vb, va
    if isinstance(va, FVal) and is_const(vb):
        real = qconst_real(vb.qconst) if vb.kind == "qconst" else vb.array
        p = None
        if va.kind == "pending" and va.pending.op in ("conv", "fc") and (va.pending.lo, va.pending.hi) == (None, None):
            p = va.pending
        elif va.kind == "dq":
            p = cv.pending_from_producer(va.act, label)
        if p is not None:
            cv.values[node.output[0]] = FVal("pending", pending=cv.fold_bias(p, real, label), source=label)
            return
        raise cv.unsupported(f"{label} adds a constant to '{node.input[0]}'; a constant can only be added as the bias "
                             f"of a Conv/Gemm/MatMul")
    # leave the detailed message to dq_act
    dq_act(cv, node, 0)
    dq_act(cv, node, 1)
    raise cv.unsupported(f"{label}: unsupported Add pattern")


QDQ_HANDLERS = {
    **COMMON_HANDLERS,
    **MORE_HANDLERS,
    "Conv": h_conv,
    "Gemm": h_gemm,
    "MatMul": h_matmul,
    "Add": h_add,
}


def graph_from_qdq(model: onnx.ModelProto, name: str, sha256: str) -> Graph:
    return Converter(model, name, sha256, QDQ_HANDLERS, "QDQ").run()
