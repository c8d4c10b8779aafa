"""Logistic (sigmoid), int8 -> int8: f(x) = 1 / (1 + exp(-x)), a 256-entry table (tinytrain/tables.py).

TFLite models (output scale 1/256, zero point -128, as TFLite requires): TFLite Micro's
reference_integer_ops::Logistic, ported exactly (``tflite_table``): the centred input rescaled to a Q4.27 fixed
point value (LogisticPrepare's multiplier, inputs beyond the radius saturate), gemmlowp's fixed-point logistic
(exp on [-1/4, 0) by a Taylor polynomial and a barrel shifter, 1 / (1 + x) by three Newton-Raphson steps), the
Q0.31 result rounded to 8 fractional bits. ONNX models: onnxruntime's float32 DequantizeLinear -> Sigmoid ->
QuantizeLinear (QLinearSigmoid builds the same table), within the 1-LSB float32 tie rule (docs/design.md §3a).
"""

from __future__ import annotations

import math

import numpy as np

from tinytrain import tables
from tinytrain.ir import QuantParams
from tinytrain.ops import OpDef, OpDoc, TfliteRead, elementwise_min_read, elementwise_rows, no_macs
from tinytrain.quant import multiply_by_quantized_multiplier, rounding_divide_by_pot, srdhm, tflite_round

_ONE_Q0 = (1 << 31) - 1  # FixedPoint<int32_t, 0>::One()


def _pot(x, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> of int32 raws."""
    x = np.asarray(x, np.int64)
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, _ONE_Q0, np.where(x < -threshold, -(1 << 31), x << exponent))


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = _pot(srdhm(_pot(x4, -2) + x3, one_third) + x2, -1)
    return constant_term + srdhm(constant_term, x + poly)


def _exp_negative(a: np.ndarray) -> np.ndarray:
    """exp(a) for a <= 0 given in Q4.27, as Q0.31 (gemmlowp exp_on_negative_values, 4 integer bits)."""
    quarter = 1 << 25
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_pot(a_mod, 4))  # Rescale<0> of a Q4.27 value
    remainder = a_mod - a
    for exponent, multiplier in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                                 (2, 39332535), (3, 720401)):
        result = np.where(remainder & (1 << (27 + exponent)), srdhm(result, multiplier), result)
    return np.where(a == 0, _ONE_Q0, result)


def _one_over_one_plus(a: np.ndarray) -> np.ndarray:
    """1 / (1 + a) for a in (0, 1), Q0.31 in and out (Newton-Raphson in Q2.29)."""
    s = a + _ONE_Q0
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # RoundingHalfSum: (s + sign) / 2
    x = 1515870810 + srdhm(half_denominator, -1010580540)
    for _ in range(3):
        x = x + _pot(srdhm(x, (1 << 29) - srdhm(half_denominator, x)), 2)
    return _pot(x, 1)  # Rescale<0>(ExactMulByPot<-1>(x)): Q1.30 -> Q0.31


def fixed_logistic(q4: np.ndarray) -> np.ndarray:
    """gemmlowp logistic of Q4.27 raws, as Q0.31 raws."""
    positive = _one_over_one_plus(_exp_negative(-np.abs(q4)))
    return np.where(q4 == 0, 1 << 30, np.where(q4 > 0, positive, _ONE_Q0 - positive))


def tflite_table(xq: QuantParams, yq: QuantParams) -> tuple[int, ...]:
    """TFLite Micro's int8 Logistic on every input value (LogisticPrepare's multiplier and radius)."""
    if yq.zp != -128 or np.float32(yq.s) != np.float32(1.0 / 256):
        raise ValueError(f"logistic: output quantization s={yq.s} zp={yq.zp}; TFLite requires 1/256 and -128")
    q, left_shift = math.frexp(float(np.float32(xq.s)) * float(1 << 27))
    multiplier = int(tflite_round(q * (1 << 31)))
    radius = math.floor(15.0 * (1 << 27) / (1 << left_shift))  # CalculateInputRadius(4, left_shift, 31)
    x = tables.INT8_VALUES - xq.zp
    q4 = multiply_by_quantized_multiplier(np.clip(x, -radius, radius), multiplier, left_shift)
    y = rounding_divide_by_pot(fixed_logistic(q4), 23) - 128
    y = np.where(x <= -radius, -128, np.where(x >= radius, 127, np.clip(y, -128, 127)))
    return tuple(int(v) for v in y)


def onnx_table(xq: QuantParams, yq: QuantParams, lo: float | None = None, hi: float | None = None) -> tuple[int, ...]:
    def f(x):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    return tables.float32_table(f, xq, yq, lo, hi)


def slope(r: np.ndarray, a: tables.TableAttrs) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-r))
    return s * (1.0 - s)


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------

ONNX = {"Sigmoid": lambda cv, node: tables.onnx_defer(cv, node, "logistic", onnx_table)}
ONNX_QOPERATOR = {"com.microsoft.QLinearSigmoid": lambda cv, node: tables.onnx_qlinear(cv, node, "logistic",
                                                                                        onnx_table)}
TFLITE = {"LOGISTIC": TfliteRead(lambda im, op: tables.tflite_read(im, op, "logistic", tflite_table))}
DOC = OpDoc("LOGISTIC", "Sigmoid / QLinearSigmoid", "256-entry table", "g * slope[x]", "input (int8)")
OP = OpDef("logistic", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs,
           backward=tables.backward_with(slope), min_read=elementwise_min_read, rows=elementwise_rows,
           export=lambda ex, n: tables.export_as(ex, n, "Sigmoid"),
           twin=lambda t, node, xs, p, c: t.torch.sigmoid(xs[0]), doc=DOC)
