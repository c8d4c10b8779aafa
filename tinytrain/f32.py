"""float32 arithmetic as the emitted C performs it, for the fp32 backward's references (docs/design.md §3b).

numpy's float32 ``+ - * /`` are IEEE operations rounded to nearest even, as the C's; what numpy lacks is the
C's fused multiply-add ``tt_fmaf`` (codegen/runtime/tt_float_round.h), the C's own ``tt_expf`` / ``tt_logf``
(Cephes polynomials; numpy's exp / log differ in the last bit) and a sum in a stated order (``np.sum`` and ``@``
on float32 choose their own: pairwise, blocked, BLAS). So a reference loops over the summed index in the kernel's
order and uses these, vectorized over the indices that are not summed.
"""

from __future__ import annotations

import numpy as np

F32, F64 = np.float32, np.float64
_LOW29, _HALF = np.uint64((1 << 29) - 1), np.uint64(1 << 28)  # a float64's significand bits below a float32's; half
_TINY = np.uint64((1023 - 126) << 53) - np.uint64(1)  # (bits << 1) - 1 below it: 0 < |s| < 2^-126 (float32 subnormal)


def fmaf(a, b, c) -> np.ndarray:
    """float32 a * b + c rounded once (C fmaf; broadcasting like numpy)."""
    return fma_product(np.asarray(a, F32).astype(F64) * np.asarray(b, F32).astype(F64), c)


def fma_product(p: np.ndarray, c) -> np.ndarray:
    """float32 p + c rounded once, p the exact float64 product of two float32 numbers (a * b of two float32 is exact in
    float64: the callers convert the factors once and multiply in float64). p + c rounded to float64 and then to
    float32 is the correctly rounded sum unless the float64 sum lands exactly half-way between two float32 numbers
    (the only place a second rounding can go wrong; in the float32 subnormal range, where the half-way bits are
    elsewhere, every nonzero sum is checked); those few elements are rounded to odd instead (Boldo & Melquiond:
    TwoSum's error decides the last bit), as tt_fmaf's software form does (codegen/runtime/tt_float_round.h)."""
    s = np.atleast_1d(p + c)
    bits = s.view(np.uint64)
    tied = np.nonzero(((bits & _LOW29) == _HALF) | (((bits << np.uint64(1)) - np.uint64(1)) < _TINY))
    if tied[0].size:
        s[tied] = _to_odd(s[tied], _at(p, s.shape, tied), _at(np.asarray(c, F32), s.shape, tied).astype(F64))
    return s.astype(F32)


def _at(x: np.ndarray, shape: tuple[int, ...], at: tuple) -> np.ndarray:
    return (x if x.shape == shape else np.broadcast_to(x, shape))[at]


def _to_odd(s: np.ndarray, p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """p + c rounded to odd in float64, s that sum rounded to nearest."""
    bp = s - c
    e = (p - bp) + (c - (s - bp))  # s + e == p + c exactly (TwoSum)
    bits = s.view(np.int64)
    fix = (e != 0) & ((bits & 1) == 0) & np.isfinite(s)
    return np.where(fix, bits + np.where((e > 0) == (s > 0), 1, -1), bits).view(F64)


def ordered_sum(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """float32 sum over ``axis`` from +0, one addition at a time in index order."""
    x = np.moveaxis(np.asarray(x, F32), axis, 0)
    acc = np.zeros(x.shape[1:], F32)
    for row in x:
        acc = acc + row
    return acc


def _pow2f(n: np.ndarray) -> np.ndarray:
    return ((n.astype(np.int64) + 127) << 23).astype(np.uint32).view(F32)


def expf(x) -> np.ndarray:
    """tt_expf, float32, bit for bit: Cody-Waite reduction by ln 2, Cephes' degree-7 polynomial; 0 below -87."""
    x = np.asarray(x, F32)
    xc = np.minimum(x, F32(88.0))
    t = F32(1.44269504088896341) * xc + F32(0.5)
    n = np.trunc(t).astype(np.int32)
    n = n - (n.astype(F32) > t)
    nf = n.astype(F32)
    r = (xc - nf * F32(0.693359375)) - nf * F32(-2.12194440e-4)
    z = r * r
    p = F32(1.9875691500e-4) * r + F32(1.3981999507e-3)
    for k in (8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + F32(k)
    p = p * z + r + F32(1.0)
    return np.where(x < F32(-87.0), F32(0.0), p * _pow2f(np.clip(n, -126, 127))).astype(F32)


def logf(x) -> np.ndarray:
    """tt_logf of a normal x > 0, float32, bit for bit (Cephes logf: x = m 2^e, degree-9 polynomial)."""
    bits = np.asarray(x, F32).view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int32) - 126
    m = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(F32)
    low = m < F32(0.707106781186547524)
    e = e - low
    m = np.where(low, m + m - F32(1.0), m - F32(1.0)).astype(F32)
    z = m * m
    y = F32(7.0376836292e-2) * m - F32(1.1514610310e-1)
    for k in (1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1,
              -2.4999993993e-1, 3.3333331174e-1):
        y = y * m + F32(k)
    y = y * m * z
    ef = e.astype(F32)
    y = y + F32(-2.12194440e-4) * ef
    y = y + F32(-0.5) * z
    return ((m + y) + F32(0.693359375) * ef).astype(F32)
