"""Leaky ReLU, int8 -> int8: f(x) = x for x >= 0, alpha x below, a 256-entry table (tinytrain/tables.py).

TFLite models: TFLite Micro's int8 LeakyRelu, ported exactly (``tflite_table``): Prepare's two multipliers of
double(s_in) / double(s_out) (identity) and double(s_in) double(alpha) / double(s_out) (alpha), QuantizeMultiplier's,
then per element y = zy + MultiplyByQuantizedMultiplier(x - zx, the identity's for x - zx >= 0, else alpha's),
saturated to int8. ONNX models: onnxruntime's float32 DequantizeLinear -> LeakyRelu -> QuantizeLinear (QDQ), and its
table of the same float computation for com.microsoft QLinearLeakyRelu (QOperator).
Backward: g_x = g * slope[x], the slope 1 at and above 0 and alpha below (tables.py, ops/table_grad.py).
"""

from __future__ import annotations

import numpy as np

from tinytrain import tables
from tinytrain.ir import QuantParams
from tinytrain.ops import OpDef, OpDoc, TfliteRead, elementwise_min_read, elementwise_rows, no_macs
from tinytrain.quant import multiply_by_quantized_multiplier, quantize_multiplier


def tflite_table(xq: QuantParams, yq: QuantParams, alpha: float) -> tuple[int, ...]:
    """TFLite Micro's int8 LeakyRelu on every input (LeakyReluPrepare's multipliers, QuantizeLeakyRelu)."""
    identity = quantize_multiplier(float(np.float64(xq.s) / np.float64(yq.s)))
    slope = quantize_multiplier(float(np.float64(xq.s) * np.float64(np.float32(alpha)) / np.float64(yq.s)))
    x = tables.INT8_VALUES - xq.zp
    up = multiply_by_quantized_multiplier(x, identity[0], identity[1])
    down = multiply_by_quantized_multiplier(x, slope[0], slope[1])
    return tuple(int(v) for v in np.clip(np.where(x >= 0, up, down) + yq.zp, -128, 127))


def onnx_table(xq: QuantParams, yq: QuantParams, alpha: float, lo: float | None = None,
               hi: float | None = None) -> tuple[int, ...]:
    """onnxruntime: y = x >= 0 ? x : alpha x in float32 between DequantizeLinear and QuantizeLinear."""
    a = np.float32(alpha)
    return tables.float32_table(lambda x: np.where(x >= 0, x, x * a), xq, yq, lo, hi)


def slope(r: np.ndarray, a: tables.TableAttrs) -> np.ndarray:
    return np.where(r >= 0.0, 1.0, a.alpha)


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------


def _alpha(cv, node) -> float:
    return float(np.float32(cv.attrs(node).get("alpha", 0.01)))  # a float attribute


def onnx_leaky_relu(cv, node) -> None:
    alpha = _alpha(cv, node)
    tables.onnx_defer(cv, node, "leaky_relu", lambda xq, yq, lo, hi: onnx_table(xq, yq, alpha, lo, hi), alpha=alpha)


def onnx_qlinear_leaky_relu(cv, node) -> None:
    """com.microsoft QLinearLeakyRelu (X, X_scale, X_zp, Y_scale, Y_zp; alpha)."""
    alpha = _alpha(cv, node)
    x = cv.qlinear_input(node, 0, 1, 2)
    yq, dtype = cv.qlinear_output(node, 3, 4)
    p = cv.defer(node, "leaky_relu", x.shape, tables.onnx_emit, x=x.ir, kind="leaky_relu", alpha=alpha,
                 make=lambda xq, yq, lo, hi: onnx_table(xq, yq, alpha, lo, hi))
    cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)


def tflite_leaky_relu(im, op) -> None:
    alpha = op.options["alpha"]
    tables.tflite_read(im, op, "leaky_relu", lambda xq, yq: tflite_table(xq, yq, alpha), alpha=float(alpha))


def export(ex, n) -> None:
    tables.export_as(ex, n, "LeakyRelu", alpha=float(n.attrs.alpha))


def twin(t, node, xs, params, clamp):
    return t.F.leaky_relu(xs[0], node.attrs.alpha)


ONNX = {"LeakyRelu": onnx_leaky_relu}
ONNX_QOPERATOR = {"com.microsoft.QLinearLeakyRelu": onnx_qlinear_leaky_relu}
TFLITE = {"LEAKY_RELU": TfliteRead(tflite_leaky_relu, (75, (("alpha", 0, "<f", 0.0),)))}
DOC = OpDoc("LEAKY_RELU", "LeakyRelu / QLinearLeakyRelu", "256-entry table", "g * slope[x]", "input (int8)")
OP = OpDef("leaky_relu", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs,
           backward=tables.backward_with(slope), min_read=elementwise_min_read, rows=elementwise_rows, export=export,
           twin=twin, doc=DOC)
