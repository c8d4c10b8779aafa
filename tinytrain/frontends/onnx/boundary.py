"""The converter's own handlers of the quantization boundary: QuantizeLinear / DequantizeLinear, Identity, and a
trailing Softmax / LogSoftmax / com.microsoft QLinearSoftmax (dropped, see requant.py).

A QuantizeLinear of a float value fixes its output quantization: of the float input, it is the IR input; of a
dequantized activation, a requantize (or nothing, with the same parameters); of a pending float computation, that
computation's emission; of a float constant (QAT exports' float weights -> Q -> DQ), the quantized constant.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from tinytrain.frontends.onnx.channels import dequantize_per_channel, per_channel_scales, quantize_per_channel
from tinytrain.frontends.onnx.convert import Converter, Handler
from tinytrain.frontends.onnx.layout import through_view
from tinytrain.frontends.onnx.parse import attrs_of, elem_type_name, node_label
from tinytrain.frontends.onnx.requant import round_half_even
from tinytrain.frontends.onnx.values import Act, FVal, SoftmaxOut, same_quant


def h_quantize_linear(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    out_dtype = "uint8"
    if "output_dtype" in a and a["output_dtype"]:
        out_dtype = elem_type_name(a["output_dtype"])
    if a.get("block_size"):
        raise cv.unsupported(f"{node_label(node)} uses blocked quantization, which tinytrain does not support")
    v = cv.value(node, 0)
    if isinstance(v, FVal) and v.kind == "fconst":
        # a float constant quantized in the graph (float weights -> Q -> DQ, as QAT exports write them):
        # quantize it here, as QuantizeLinear does (round half to even, saturate)
        s = cv.scale_of(node, 1, "scale")
        zp, dtype = cv.zero_point_of(node, 2, "zero point", out_dtype)
        if dtype not in ("int8", "uint8"):
            raise cv.unsupported(f"{node_label(node)} quantizes a constant to {dtype}; tinytrain supports int8 weights")
        arr = v.array
        shape = [1] * arr.ndim
        if s.size > 1:
            axis = a.get("axis", 1)
            shape[axis + arr.ndim if axis < 0 else axis] = s.size
        zps = zp.reshape(shape) if zp.size > 1 else zp[0]
        lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
        q = np.clip(round_half_even(arr / s.reshape(shape)) + zps, lo, hi)
        cv.inits[node.output[0]] = q.astype(dtype)
        cv.init_types[node.output[0]] = TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8
        return
    channels = per_channel_scales(cv, node, "output", out_dtype)
    if channels is not None:
        cv.values[node.output[0]] = quantize_per_channel(cv, node, v, *channels)
        return
    yq, dtype = cv.act_quant(node, 1, 2, "output", out_dtype)
    hint = node.output[0]
    if isinstance(v, FVal):
        if v.kind == "input":
            cv.values[node.output[0]] = cv.quantize_input(node, yq, dtype)
            return
        if v.kind == "dq":
            if same_quant(v.act.quant, yq) and v.act.dtype == dtype:
                cv.values[node.output[0]] = v.act
            else:
                ir = cv.emit_requantize(v.act.ir, yq, hint, node_label(node))
                cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)
            return
        if v.kind == "pending":
            ir = cv.materialize(v.pending, yq, hint)
            cv.values[node.output[0]] = cv.new_act(ir, cv.tensors[ir].shape, dtype)
            return
        if v.kind == "softmax":
            cv.values[node.output[0]] = SoftmaxOut(v.act, v.source)
            return
    raise cv.unsupported(f"{node_label(node)} quantizes '{node.input[0]}', which is not a supported float value")


def h_dequantize_linear(cv: Converter, node: onnx.NodeProto) -> None:
    a = attrs_of(node)
    if a.get("block_size"):
        raise cv.unsupported(f"{node_label(node)} uses blocked quantization, which tinytrain does not support")
    name = node.input[0]
    if cv.is_const(name):
        qc = cv.qconst(node, 0, 1, 2, a.get("axis", 1), "constant")
        cv.values[node.output[0]] = FVal("qconst", qconst=qc, source=name)
        return
    v = cv.value(node, 0)
    if isinstance(v, SoftmaxOut):
        cv.values[node.output[0]] = FVal("softmax", act=v.act, source=v.source)
        return
    if not isinstance(v, Act):
        raise cv.unsupported(f"{node_label(node)} dequantizes '{name}', which is not an int8/uint8 activation")
    if v.gain is not None:
        dequantize_per_channel(cv, node, v)
        return
    q, dtype = cv.act_quant(node, 1, 2, "input", v.dtype)
    cv.bind_quant(v, q, dtype, node)
    cv.values[node.output[0]] = FVal("dq", act=v, source=name)


def h_identity(cv: Converter, node: onnx.NodeProto) -> None:
    cv.values[node.output[0]] = cv.value(node, 0)


def h_softmax(cv: Converter, node: onnx.NodeProto) -> None:
    act = cv.dq_input(node, 0)
    cv.values[node.output[0]] = FVal("softmax", act=act, source=node_label(node))


def h_qlinear_softmax(cv: Converter, node: onnx.NodeProto) -> None:
    x = cv.qlinear_input(node, 0, 1, 2)
    cv.values[node.output[0]] = SoftmaxOut(x, node_label(node))


HANDLERS: dict[str, Handler] = {
    "QuantizeLinear": through_view(h_quantize_linear),
    "DequantizeLinear": through_view(h_dequantize_linear),
    "Identity": h_identity,
    "Softmax": h_softmax,
    "LogSoftmax": h_softmax,
}
QOPERATOR_HANDLERS: dict[str, Handler] = {"com.microsoft.QLinearSoftmax": h_qlinear_softmax}
