"""Fixed-point arithmetic of TFLite / CMSIS-NN, vectorized over numpy arrays (design.md §3).

Requantization comes in TFLite's two roundings, chosen per :class:`Requant` by the frontend:
double rounding (TFLite's default MultiplyByQuantizedMultiplier: SaturatingRoundingDoublingHighMul,
then RoundingDivideByPOT; tflite-micro's reference kernels, kept bit-exact for TFLite imports) and
single rounding (``TFLITE_SINGLE_ROUNDING`` / CMSIS-NN ``CMSIS_NN_USE_SINGLE_ROUNDING``:
(x * m + 2^(30 - shift)) >> (31 - shift) in 64 bits, one rounding of x * m * 2^(shift - 31), ties
toward +infinity; ONNX imports, closest to onnxruntime's float requantization).

Every function reproduces its C counterpart bit for bit, including C's truncating integer division.
Arrays are computed in int64 and returned as int64 unless stated otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class Requant:
    """Per-channel (or single) fixed-point multipliers: y = MultiplyByQuantizedMultiplier(acc, m, shift).

    ``shift`` follows TFLite: positive is a left shift, negative a rounding right shift.
    ``single_rounding``: TFLITE_SINGLE_ROUNDING arithmetic (one rounding, shift <= 30) instead of
    TFLite's default double rounding; a property of the model's origin, set by the frontend.
    """

    multiplier: tuple[int, ...]
    shift: tuple[int, ...]
    single_rounding: bool = False

    def __post_init__(self) -> None:
        if len(self.multiplier) != len(self.shift) or not self.multiplier:
            raise ValueError("requantization needs one shift per multiplier")

    @staticmethod
    def from_scales(real_scales, single_rounding: bool = False) -> Requant:
        pairs = [quantize_multiplier(float(s), single_rounding) for s in real_scales]
        return Requant(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), single_rounding)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.multiplier, np.int64), np.asarray(self.shift, np.int64)


def tflite_round(x: float) -> float:
    """std::round: half away from zero."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def quantize_multiplier(real: float, single_rounding: bool = False) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: real ~= multiplier * 2^(shift - 31), multiplier in [2^30, 2^31).

    With ``single_rounding`` (TFLITE_SINGLE_ROUNDING) a shift above 30 is clamped to 30 with the
    largest multiplier 2^31 - 1, as single-rounding MultiplyByQuantizedMultiplier requires.
    """
    if real == 0.0:
        return 0, 0
    if not (math.isfinite(real) and real > 0):
        raise ValueError(f"cannot quantize multiplier {real}")
    q, shift = math.frexp(real)
    q_fixed = int(tflite_round(q * (1 << 31)))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if single_rounding and shift > 30:
        return (1 << 31) - 1, 30
    return q_fixed, shift


def _c_div_pow2(v: np.ndarray, bits: int) -> np.ndarray:
    """C integer division of int64 v by 2^bits (truncation toward zero)."""
    return np.where(v >= 0, v >> bits, -((-v) >> bits))


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul of int32 values (held in int64)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    result = _c_div_pow2(ab + nudge, 31)
    return np.where(overflow, INT32_MAX, result)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """RoundingDivideByPOT: x / 2^exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift, single_rounding: bool = False) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier, broadcasting multiplier/shift.

    Double rounding by default; ``single_rounding``: the TFLITE_SINGLE_ROUNDING variant (= CMSIS-NN
    arm_nn_requantize with CMSIS_NN_USE_SINGLE_ROUNDING), (x * m + 2^(total - 1)) >> total with
    total = 31 - shift, in int64 (shift <= 30; |x| < 2^32 so that x * m fits).
    """
    x = np.asarray(x, np.int64)
    shift = np.asarray(shift, np.int64)
    if single_rounding:
        if np.any(shift > 30):
            raise ValueError("single-rounding requantization needs shift <= 30")
        total = 31 - shift
        return (x * np.asarray(multiplier, np.int64) + (np.int64(1) << (total - 1))) >> total
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = (x << left)
    # C computes x * (1 << left) in int32; the models we accept never overflow here.
    return rounding_divide_by_pot(srdhm(shifted, multiplier), right)


def saturating_left_shift(x, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT for a positive exponent."""
    x = np.asarray(x, np.int64)
    threshold = (1 << (31 - exponent)) - 1
    result = x << exponent
    result = np.where(x > threshold, INT32_MAX, result)
    return np.where(x < -threshold, INT32_MIN, result)


def requantize(acc, requant: Requant, zero_point: int, qmin: int, qmax: int, channel_axis: int = -1) -> np.ndarray:
    """acc (int, channels along ``channel_axis``) -> int8 output: MBQM + zero point, clamped."""
    m, s = requant.arrays()
    acc = np.asarray(acc, np.int64)
    if len(m) > 1:
        shape = [1] * acc.ndim
        shape[channel_axis] = len(m)
        m, s = m.reshape(shape), s.reshape(shape)
    y = multiply_by_quantized_multiplier(acc, m, s, requant.single_rounding) + zero_point
    return np.clip(y, qmin, qmax).astype(np.int8)


def activation_range(zero_point: int, scale: float, lo: float | None, hi: float | None,
                     half_even: bool = False) -> tuple[int, int]:
    """Quantized clamp range of a fused activation (ReLU: lo=0; ReLU6: lo=0, hi=6), TFLite style.

    As TFLite's Quantize in kernel_util.cc, f / scale is a float32 division, rounded half away from
    zero; ``half_even``: rounded half to even, as ONNX QuantizeLinear (so Q(clip(v)) == clip(Q(v))).
    """
    rnd = (lambda v: float(np.rint(v))) if half_even else tflite_round
    qmin, qmax = -128, 127
    if lo is not None:
        qmin = max(qmin, zero_point + int(rnd(float(np.float32(lo) / np.float32(scale)))))
    if hi is not None:
        qmax = min(qmax, zero_point + int(rnd(float(np.float32(hi) / np.float32(scale)))))
    return qmin, qmax
