"""Fixed-point helpers against a scalar transcription of the TFLite / gemmlowp C code."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from tinytrain.quant import (INT32_MAX, INT32_MIN, activation_range, multiply_by_quantized_multiplier,
                             quantize_multiplier, rounding_divide_by_pot, srdhm)

int32 = st.integers(INT32_MIN, INT32_MAX)


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def srdhm_scalar(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def rdbpot_scalar(x: int, e: int) -> int:
    mask = (1 << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if remainder > threshold else 0)


@settings(derandomize=True, max_examples=300)
@given(int32, int32)
def test_srdhm_matches_c(a, b):
    assert int(srdhm(a, b)) == srdhm_scalar(a, b)


@settings(derandomize=True, max_examples=300)
@given(int32, st.integers(0, 31))
def test_rounding_divide_by_pot_matches_c(x, e):
    assert int(rounding_divide_by_pot(x, e)) == rdbpot_scalar(x, e)


@settings(derandomize=True, max_examples=300)
@given(st.integers(-(1 << 20), 1 << 20), st.floats(1e-6, 0.99))
def test_requantization_approximates_real_multiplication(acc, real):
    m, shift = quantize_multiplier(real)
    got = int(multiply_by_quantized_multiplier(acc, m, shift))
    assert abs(got - acc * real) <= 1 + 1e-6 * abs(acc)  # double rounding, as in TFLite
    expected = rdbpot_scalar(srdhm_scalar(acc << max(shift, 0), m), max(-shift, 0))
    assert got == expected


def test_quantize_multiplier_known_values():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.25) == (1 << 30, -1)
    assert quantize_multiplier(0.0) == (0, 0)
    m, s = quantize_multiplier(0.1)
    assert abs(m * 2.0 ** (s - 31) - 0.1) < 1e-9


def test_vectorized_helpers_broadcast_per_channel():
    acc = np.array([[1000, -1000], [12345, -12345]])
    m = np.array([quantize_multiplier(0.1)[0], quantize_multiplier(0.01)[0]])
    s = np.array([quantize_multiplier(0.1)[1], quantize_multiplier(0.01)[1]])
    got = multiply_by_quantized_multiplier(acc, m, s)
    assert got.tolist() == [[100, -10], [1235, -123]]


def test_activation_range():
    assert activation_range(-128, 0.05, 0.0, None) == (-128, 127)
    assert activation_range(-10, 0.05, 0.0, 6.0) == (-10, 110)


def single_rounding_scalar(x: int, m: int, shift: int) -> int:
    """TFLite MultiplyByQuantizedMultiplier with TFLITE_SINGLE_ROUNDING, transcribed."""
    total_shift = 31 - shift
    return (x * m + (1 << (total_shift - 1))) >> total_shift


@settings(derandomize=True, max_examples=300)
@given(st.integers(-(1 << 24), 1 << 24), st.floats(1e-7, 0.99))
def test_single_rounding_rounds_the_real_product_once(acc, real):
    m, shift = quantize_multiplier(real, single_rounding=True)
    got = int(multiply_by_quantized_multiplier(acc, m, shift, single_rounding=True))
    assert got == single_rounding_scalar(acc, m, shift)
    exact = acc * m * 2.0 ** (shift - 31)  # the fixed-point product, rounded once (ties toward +inf)
    assert got == math.floor(exact + 0.5)
    assert abs(got - acc * real) <= 0.5 + 1e-6 * abs(acc)


def test_single_rounding_vectorized_and_per_channel():
    acc = np.array([[5, -5, 7, -7], [1000, -1000, 12345, -12345]])
    m, s = quantize_multiplier(0.5, single_rounding=True)
    # ties go toward +infinity (double rounding: -5 * 0.5 -> -2 as well, 7 * 0.5 -> 4, -7 * 0.5 -> -3)
    assert multiply_by_quantized_multiplier(acc[0], m, s, single_rounding=True).tolist() == [3, -2, 4, -3]
    ms = np.array([quantize_multiplier(r, True) for r in (0.1, 0.01, 0.3, 0.7)])
    got = multiply_by_quantized_multiplier(acc, ms[:, 0], ms[:, 1], single_rounding=True)
    assert got.tolist() == [[single_rounding_scalar(int(a), int(mm), int(ss)) for a, (mm, ss) in zip(row, ms)]
                            for row in acc]


def test_quantize_multiplier_single_rounding_clamps_large_shifts():
    assert quantize_multiplier(2.0**31) == (1 << 30, 32)
    assert quantize_multiplier(2.0**31, single_rounding=True) == ((1 << 31) - 1, 30)
    assert quantize_multiplier(0.3, single_rounding=True) == quantize_multiplier(0.3)


def test_requant_carries_its_rounding():
    from tinytrain.quant import Requant, requantize

    r2, r1 = Requant.from_scales([0.5]), Requant.from_scales([0.5], single_rounding=True)
    assert not r2.single_rounding and r1.single_rounding and r1.multiplier == r2.multiplier
    acc = np.array([[3], [-3], [5], [-5]])
    # single rounding: ties toward +infinity (1.5 -> 2, -1.5 -> -1, 2.5 -> 3, -2.5 -> -2)
    assert requantize(acc, r1, 0, -128, 127).ravel().tolist() == [2, -1, 3, -2]


@settings(max_examples=300, deadline=None)
@given(acc=int32, scale=st.floats(2.0**-40, 2.0**20, allow_nan=False, width=32))
def test_fp32_rounding_is_onnxruntimes_float32_arithmetic(acc, scale):
    """multiply_by_float32_scale == nearbyint(float32(float32(acc) * scale)) (MLAS MlasRequantizeOutput)."""
    from tinytrain.quant import multiply_by_float32_scale

    m, shift = quantize_multiplier(scale)
    assert m & 0x7F == 0  # a float32 scale is exact in the 31-bit multiplier
    with np.errstate(over="ignore"):
        want = float(np.rint(np.float32(np.float32(acc) * np.float32(scale))))
    assert int(multiply_by_float32_scale(acc, m, shift)) == max(-(1 << 30), min(1 << 30, want))


def test_fp32_rounding_ties_and_float32_product():
    from tinytrain.quant import Requant, multiply_by_float32_scale, requantize

    r = Requant.from_scales([0.5], fp32=True)
    assert r.fp32 and not r.single_rounding and r.rounding == "fp32"
    acc = np.array([[3], [-3], [5], [-5]])
    assert requantize(acc, r, 0, -128, 127).ravel().tolist() == [2, -2, 2, -2]  # ties to even
    # 2^25 + 3 is not a float32: (float)acc rounds it to 2^25 + 4 first, as onnxruntime does (x 0.5: 2^24 + 2)
    assert int(multiply_by_float32_scale((1 << 25) + 3, *quantize_multiplier(0.5))) == (1 << 24) + 2
    # every accumulator in a range, against numpy's float32 (product roundings onto ties included)
    s = float(np.float32(0.1))
    acc = np.arange(-2_000_000, 2_000_000)
    got = requantize(acc, Requant.from_scales([s], fp32=True), 0, -128, 127)
    np.testing.assert_array_equal(got, np.clip(np.rint((acc.astype(np.float32) * np.float32(s)).astype(np.float32)),
                                               -128, 127))


def test_fp32_requant_needs_float32_scales():
    import pytest

    from tinytrain.quant import Requant

    with pytest.raises(ValueError, match="float32"):
        Requant.from_scales([0.1], fp32=True)  # 0.1 is not a float32 value
    with pytest.raises(ValueError, match="exclusive|single_rounding"):
        Requant((1 << 30,), (0,), True, True)
    with pytest.raises(ValueError, match="24-bit|2\\^23"):
        Requant((1 << 30 | 1,), (0,), False, True)


def test_activation_range_half_even():
    # float32(0.1) / float32(0.04) is 2.5 exactly: away from zero -> 3, to even (ONNX QuantizeLinear) -> 2
    assert activation_range(-128, 0.04, 0.0, 0.1) == (-128, -125)
    assert activation_range(-128, 0.04, 0.0, 0.1, half_even=True) == (-128, -126)
