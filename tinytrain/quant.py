"""Fixed-point arithmetic of TFLite / CMSIS-NN, vectorized over numpy arrays (docs/design.md §3).

Requantization comes in TFLite's two roundings, chosen per :class:`Requant` by the frontend:
double rounding (TFLite's default MultiplyByQuantizedMultiplier: SaturatingRoundingDoublingHighMul,
then RoundingDivideByPOT; tflite-micro's reference kernels, kept bit-exact for TFLite imports) and
single rounding (``TFLITE_SINGLE_ROUNDING`` / CMSIS-NN ``CMSIS_NN_USE_SINGLE_ROUNDING``:
(x * m + 2^(30 - shift)) >> (31 - shift) in 64 bits, one rounding of x * m * 2^(shift - 31), ties
toward +infinity), plus onnxruntime's own float32 requantization emulated in integer arithmetic
(``Requant.fp32``: y = nearbyint((float)acc * scale) with a float32 scale, as MLAS requantizes in
QLinearConv / QGemm / QLinearGlobalAveragePool; ONNX imports' conv2d / fully_connected / mean).

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
    ``fp32``: onnxruntime's float32 requantization (:func:`multiply_by_float32_scale`): multiplier * 2^(shift - 31)
    is then exactly a float32 scale (the multiplier's low 7 bits are zero, shift <= 23); exclusive with
    ``single_rounding``.
    """

    multiplier: tuple[int, ...]
    shift: tuple[int, ...]
    single_rounding: bool = False
    fp32: bool = False

    def __post_init__(self) -> None:
        if len(self.multiplier) != len(self.shift) or not self.multiplier:
            raise ValueError("requantization needs one shift per multiplier")
        if self.fp32:
            if self.single_rounding:
                raise ValueError("fp32 requantization has its own rounding; single_rounding must be False")
            if any(m & 0x7F or (m and s > 23) for m, s in zip(self.multiplier, self.shift)):
                raise ValueError("fp32 requantization needs float32 scales below 2^23 (24-bit multipliers)")

    @property
    def rounding(self) -> str:
        """"double" (TFLite default), "single" (TFLITE_SINGLE_ROUNDING) or "fp32" (onnxruntime's float32)."""
        return "fp32" if self.fp32 else ("single" if self.single_rounding else "double")

    @staticmethod
    def from_scales(real_scales, single_rounding: bool = False, fp32: bool = False) -> Requant:
        """Multipliers of real scales. With ``fp32`` every scale must be a float32 value (the frontend computes
        it as onnxruntime does), which QuantizeMultiplier represents exactly."""
        if fp32:
            for s in real_scales:
                if float(np.float32(s)) != float(s):
                    raise ValueError(f"fp32 requantization needs float32 scales, got {s!r}")
            pairs = [quantize_multiplier(float(s)) for s in real_scales]
            return Requant(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), False, True)
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


_POWERS_OF_TWO = np.int64(1) << np.arange(63, dtype=np.int64)


def _bit_length(a: np.ndarray) -> np.ndarray:
    """Number of significant bits of non-negative int64 values (0 for 0): how many powers of two are <= a."""
    return np.searchsorted(_POWERS_OF_TWO, a, side="right").astype(np.int64)


def shift_round_half_even(x, k) -> np.ndarray:
    """x / 2^k rounded to nearest, ties to even, for 1 <= k <= 62 (floor shift plus remainder)."""
    x = np.asarray(x, np.int64)
    k = np.asarray(k, np.int64)
    q = x >> k
    r = x & ((np.int64(1) << k) - 1)
    half = np.int64(1) << (k - 1)
    return q + ((r > half) | ((r == half) & ((q & 1) == 1)))


def round_to_float32(x) -> np.ndarray:
    """The integer value of (float)x: int64 x (|x| < 2^62) rounded to 24 significant bits, ties to even."""
    x = np.asarray(x, np.int64)
    ax = np.abs(x)
    if ax.size == 0 or ax.max() < (1 << 24):
        return x
    k = _bit_length(ax) - 24
    kk = np.maximum(k, 1)
    return np.where(k > 0, shift_round_half_even(x, kk) << kk, x)


FP32_LIMIT = 1 << 30  # multiply_by_float32_scale saturates here, so adding a zero point cannot overflow int32


def multiply_by_float32_scale(x, multiplier, shift) -> np.ndarray:
    """onnxruntime's requantization, nearbyint((float)x * scale) in float32 with ties to even (MLAS
    MlasRequantizeOutput, used by QLinearConv, QGemm and QLinearGlobalAveragePool), in integer arithmetic.

    scale = multiplier * 2^(shift - 31) is a float32 value: its significand is m = multiplier >> 7
    (24 bits), so scale = m * 2^(shift - 24). (float)x and the float32 product are x and p = (float)x * m
    each rounded to 24 significant bits (:func:`round_to_float32`); p * 2^(shift - 24) is then rounded to
    an integer, ties to even. Everything is exact in int64 (|x| < 2^31, m < 2^24). The result saturates
    at +-2^30 (MLAS clamps to the output range first; any int8 clamp after this gives the same value).
    C: tt_requantize_fp32 in tt_fixedpoint.h.
    """
    x = np.asarray(x, np.int64)
    m = np.asarray(multiplier, np.int64)
    shift = np.asarray(shift, np.int64)
    if np.any((m != 0) & (shift > 23)):
        raise ValueError("fp32 requantization needs shift <= 23")
    p = round_to_float32(x) * (m >> 7)
    k = np.clip(24 - shift, 1, 62)  # per channel, broadcast
    # Rounding p to 24 bits moves it by at most 2^(d - 1), d = bit_length(|p|) - 24, so it can change the
    # final rounding only where p is that close to a tie: round those exactly, the rest once (same values,
    # only faster).
    y = shift_round_half_even(p, k)
    d_max = int(_bit_length(np.abs(p).max(initial=0))) - 24
    if d_max > 0:
        tie = np.int64(1) << (k - 1)
        near = np.abs((p & ((np.int64(1) << k) - 1)) - tie) <= (np.int64(1) << (d_max - 1))
        if near.any():
            y = np.array(y, copy=True)
            y[near] = shift_round_half_even(round_to_float32(p[near]), np.broadcast_to(k, p.shape)[near])
    y = np.where(m == 0, 0, y)
    return np.clip(y, -FP32_LIMIT, FP32_LIMIT)


def multiply_by_quantized_multiplier(x, multiplier, shift, single_rounding: bool = False,
                                     fp32: bool = False) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier, broadcasting multiplier/shift.

    Double rounding by default; ``single_rounding``: the TFLITE_SINGLE_ROUNDING variant (= CMSIS-NN
    arm_nn_requantize with CMSIS_NN_USE_SINGLE_ROUNDING), (x * m + 2^(total - 1)) >> total with
    total = 31 - shift, in int64 (shift <= 30; |x| < 2^32 so that x * m fits); ``fp32``:
    :func:`multiply_by_float32_scale` (onnxruntime's float32 requantization).
    """
    if fp32:
        return multiply_by_float32_scale(x, multiplier, shift)
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
    y = multiply_by_quantized_multiplier(acc, m, s, requant.single_rounding, requant.fp32) + zero_point
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


def ort_output_scales(s_x: float, s_w, s_y: float) -> list[float]:
    """onnxruntime's requantization scale per output channel, float32(float32(s_x * s_w[c]) / s_y): float32
    arithmetic, as QLinearConv's and QGemm's ComputeOutputScale (import time only, never in the forward pass)."""
    f = np.float32
    return [float((f(s_x) * f(s)) / f(s_y)) for s in s_w]


def ort_requant(s_x: float, s_w, s_y: float) -> Requant:
    """An ONNX import's conv2d / fully_connected / mul requantization: onnxruntime's float32 rounding with its
    output scales (``ort_output_scales``)."""
    return Requant.from_scales(ort_output_scales(s_x, s_w, s_y), fp32=True)
