"""Hard-swish, int8 -> int8 (MobileNetV3): f(x) = x * relu6(x + 3) / 6, a 256-entry table (tinytrain/tables.py).

TFLite models: TFLite Micro's reference HardSwish<int8_t>, ported exactly (``tflite_table``): the input on a
"high-res" scale s_in / 128 in int16, a "reluish" factor on the scale 3 / 32768, both through 16-bit fixed-point
multipliers (DownScaleInt32ToInt16Multiplier of QuantizeMultiplier's), then the output rounded by a power of two.
ONNX models: onnxruntime's float32 DequantizeLinear -> HardSwish (alpha 1/6, beta 1/2) -> QuantizeLinear.
"""

from __future__ import annotations

import numpy as np

from tinytrain import tables
from tinytrain.ir import QuantParams
from tinytrain.ops import OpDef, OpDoc, TfliteRead, elementwise_min_read, elementwise_rows, no_macs
from tinytrain.quant import quantize_multiplier, rounding_divide_by_pot

_I16_MIN, _I16_MAX = -(1 << 15), (1 << 15) - 1


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier: (int16 multiplier, exponent)."""
    m32, exponent = quantize_multiplier(real)
    m16 = _I16_MAX if m32 >= (1 << 31) - 1 - (1 << 15) else (m32 + (1 << 15)) >> 16
    return m16, exponent


def _srdhm16(a, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul for int16."""
    ab = np.asarray(a, np.int64) * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    v = ab + nudge
    high = np.where(v >= 0, v >> 15, -((-v) >> 15))  # C division: toward zero
    return np.where((np.asarray(a) == _I16_MIN) & (b == _I16_MIN), _I16_MAX, high)


def _sat_shift16(a, shift: int) -> np.ndarray:
    return np.clip(np.asarray(a, np.int64) * (1 << shift), _I16_MIN, _I16_MAX)


def tflite_table(xq: QuantParams, yq: QuantParams) -> tuple[int, ...]:
    """TFLite Micro's int8 HardSwish (HardSwishPrepare's multipliers, reference_ops::HardSwish) on every input."""
    hires_scale = np.float32(1.0 / 128.0) * np.float32(xq.s)
    out_m, out_e = _int16_multiplier(float(hires_scale / np.float32(yq.s)))
    relu_m, relu_e = _int16_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    if out_e > 0:
        raise ValueError(f"hard_swish: output scale {yq.s} is too small for input scale {xq.s} (TFLite refuses it)")
    hires = (tables.INT8_VALUES - xq.zp) * 128
    pre_out = _srdhm16(hires, out_m)
    reluish = _sat_shift16(hires, relu_e - 1) if relu_e > 0 else hires
    reluish = _srdhm16(reluish, relu_m)
    if relu_e > 0:
        reluish = _sat_shift16(reluish, 1)
    if relu_e < 0:
        reluish = rounding_divide_by_pot(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1
    prod = reluish * pre_out  # SaturatingDoublingHighMul: no rounding, never saturates here (reluish >= 0)
    pre_shift = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))
    y = rounding_divide_by_pot(pre_shift, -out_e) + yq.zp
    return tuple(int(v) for v in np.clip(y, -128, 127))


def onnx_table(xq: QuantParams, yq: QuantParams, lo: float | None = None, hi: float | None = None) -> tuple[int, ...]:
    """onnxruntime: y = x * max(0, min(1, x / 6 + 1/2)) in float32 between DequantizeLinear and QuantizeLinear."""
    def f(x):
        return x * np.minimum(np.maximum(x * np.float32(1.0 / 6.0) + np.float32(0.5), np.float32(0)), np.float32(1))
    return tables.float32_table(f, xq, yq, lo, hi)


def slope(r: np.ndarray, a: tables.TableAttrs) -> np.ndarray:
    return np.where(r < -3.0, 0.0, np.where(r > 3.0, 1.0, (2.0 * r + 3.0) / 6.0))


# ---- the importers, the exporter, the twin (ops/__init__.py: hooks) ----------------------------------------------

ONNX = {"HardSwish": lambda cv, node: tables.onnx_defer(cv, node, "hard_swish", onnx_table)}
TFLITE = {"HARD_SWISH": TfliteRead(lambda im, op: tables.tflite_read(im, op, "hard_swish", tflite_table))}
DOC = OpDoc("HARD_SWISH", "HardSwish (float island)", "256-entry table", "g * slope[x]", "**input** (int8)")
OP = OpDef("hard_swish", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs,
           backward=tables.backward_with(slope), min_read=elementwise_min_read, rows=elementwise_rows,
           export=lambda ex, n: tables.export_as(ex, n, "HardSwish"),
           twin=lambda t, node, xs, p, c: t.F.hardswish(xs[0]), doc=DOC)
