"""The ONNX importers' handlers of the ops beyond the MobileNet set (ops/max_pool2d.py, ...), shared by the QDQ and
QOperator frontends; each maps one op as onnxruntime computes it (QDQ node units and QOperator kernels)."""

from __future__ import annotations

import onnx

from tinytrain.frontends.onnx_convert import Converter, Handler
from tinytrain.frontends.onnx_handlers import _pool_geom, resolve_clamp
from tinytrain.frontends.onnx_parse import attrs_of, node_label
from tinytrain.frontends.onnx_values import Act, FVal
from tinytrain.ops.max_pool2d import MaxPool2dAttrs


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


MORE_HANDLERS: dict[str, Handler] = {
    "MaxPool": h_max_pool,
}
