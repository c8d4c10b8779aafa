"""ONNX QOperator models (onnxruntime ``quantize_static(..., quant_format=QuantFormat.QOperator)``) -> the int8 IR.

Integer ops carry their quantization parameters as inputs; the ops' own handlers (``ONNX_QOPERATOR`` of
``tinytrain/ops/<op>.py``) read them:

- ``QLinearConv`` (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B int32 with scale
  x_scale*w_scale]) -> conv2d;
- ``QLinearMatMul`` (2-D; weights (K, N), per-column scales allowed) and com.microsoft ``QGemm``
  (int32 bias, y_scale present) -> fully_connected; a following ``QLinearAdd`` of a constant is
  folded into the bias;
- com.microsoft ``QLinearAdd`` of two activations -> add; ``QLinearMul`` -> mul; ``QLinearConcat`` -> concat;
  ``QLinearSigmoid`` -> logistic;
- com.microsoft ``QLinearGlobalAveragePool`` -> mean, ``QLinearAveragePool`` -> avg_pool2d (with
  its own output quantization when the scales differ, or mean when the window is global);

and every handler of the QDQ reader (qdq.py): the integer ``Flatten`` / ``Reshape`` / ``Squeeze`` / ``Pad`` (with
the zero point as value), ``MaxPool`` on int8 data, and the float islands ``DequantizeLinear -> ReduceMean /
GlobalAveragePool / Flatten / Reshape -> QuantizeLinear`` (onnxruntime leaves ReduceMean unquantized). The IR
output is the final DequantizeLinear's integer input; a trailing com.microsoft ``QLinearSoftmax`` (or float
Softmax) is dropped (the IR outputs the logits).
"""

from __future__ import annotations

from tinytrain.frontends.onnx import boundary, qdq
from tinytrain.frontends.onnx.convert import Handler
from tinytrain.ops import declared

# Ops that only appear in QOperator models (their presence selects this frontend).
MARKERS = {"QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearGlobalAveragePool", "QLinearAveragePool",
           "QLinearSoftmax", "QLinearMul", "QLinearConcat", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearReduceMean",
           "QLinearWhere"}


def handlers() -> dict[str, Handler]:
    """ONNX op type (com.microsoft ones qualified by their domain) -> handler of the QOperator reader."""
    return {**qdq.handlers(), **boundary.QOPERATOR_HANDLERS, **declared("ONNX_QOPERATOR")}
