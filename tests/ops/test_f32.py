"""tinytrain/f32.py == the C the kernels run (codegen/runtime/tt_float_round.h), bit for bit.

fmaf against tt_fmaf (the kernels' fused multiply-add) and glibc's fmaf on random inputs and adversarial ones: sums
that cancel, products exactly half-way between two float32 numbers plus or minus a hair (where a float64 sum rounded
once more to float32 gives the wrong neighbour), subnormal results. expf / logf against tt_expf / tt_logf over the
loss's range. The simulator's fp32 backward is built of these (docs/design.md §3b).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinytrain import f32

RUNTIME = Path(__file__).resolve().parents[2] / "codegen" / "runtime"

HARNESS = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "tt_float.h"

int main(void) {
    long n;
    if (fread(&n, sizeof n, 1, stdin) != 1) {
        return 1;
    }
    float *v = malloc(sizeof(float) * 3 * (size_t)n), *r = malloc(sizeof(float) * 4 * (size_t)n);
    if (fread(v, sizeof(float), 3 * (size_t)n, stdin) != 3 * (size_t)n) {
        return 1;
    }
    for (long i = 0; i < n; i++) {
        const float a = v[3 * i], b = v[3 * i + 1], c = v[3 * i + 2];
        r[4 * i] = tt_fmaf(a, b, c);
        r[4 * i + 1] = fmaf(a, b, c);
        r[4 * i + 2] = tt_expf(a);
        r[4 * i + 3] = tt_logf(fabsf(b) > 0x1p-126f ? fabsf(b) : 1.0f);
    }
    fwrite(r, sizeof(float), 4 * (size_t)n, stdout);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_float(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("f32")
    (d / "main.c").write_text(HARNESS)
    exe = d / "f32"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-ffp-contract=off", f"-I{RUNTIME}",
                        str(d / "main.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        v = np.stack([a, b, c], axis=1).astype(np.float32)
        out = subprocess.run([str(exe)], input=np.int64(len(a)).tobytes() + v.tobytes(), capture_output=True)
        assert out.returncode == 0
        return np.frombuffer(out.stdout, np.float32).reshape(-1, 4)

    return run


def _finite(rng, n: int, lo: int, hi: int) -> np.ndarray:
    """Random float32 with exponents in [lo, hi), random signs and significands."""
    bits = (rng.integers(lo + 127, hi + 127, n).astype(np.uint32) << 23) | rng.integers(0, 1 << 23, n).astype(np.uint32)
    return (bits | (rng.integers(0, 2, n).astype(np.uint32) << 31)).view(np.float32)


def _adversarial(rng, n: int) -> tuple[np.ndarray, ...]:
    """(1 + k 2^-23)(1 + j 2^-23) with k j = 2^22 * odd: exactly half-way between two float32s; c a hair off."""
    e = rng.integers(0, 23, n)
    k = ((rng.integers(0, 1 << 22, n) % (1 << (22 - e))) | 1) << e
    j = (rng.integers(0, 1 << 22, n) % (1 << e)) | 1
    a = (1 + k * 2.0 ** -23).astype(np.float32)
    b = (1 + (j << (22 - e)) * 2.0 ** -23).astype(np.float32)
    hair = (rng.integers(1, 1000, n) * 2.0 ** -80 * rng.choice([-1, 1], n)).astype(np.float32)
    return a, b, hair


def test_fmaf_equals_the_c(c_float):
    rng = np.random.default_rng(0)
    n = 200_000
    a, b = _finite(rng, n, -40, 40), _finite(rng, n, -40, 40)
    cases = [(a, b, _finite(rng, n, -80, 80)),                                      # random
             (a, b, -(a * b)),                                                      # cancelling
             (a, b, -(a * b) * np.float32(1 + 2.0 ** -23)),                         # nearly cancelling
             _adversarial(rng, n),                                                  # half-way plus a hair
             (_finite(rng, n, -75, -60), _finite(rng, n, -75, -60), _finite(rng, n, -149, -126)),  # subnormal
             (a, np.round(rng.normal(0, 40, n)).astype(np.float32), np.zeros(n, np.float32))]      # a first term
    for a_, b_, c_ in cases:
        got = f32.fmaf(a_, b_, c_)
        want = c_float(a_, b_, c_)
        assert np.array_equal(got.view(np.uint32), want[:, 0].view(np.uint32))
        assert np.array_equal(got.view(np.uint32), want[:, 1].view(np.uint32))  # glibc's fmaf: correctly rounded


def test_fmaf_broadcasts_and_sums_in_order():
    acc = f32.fmaf(np.float32(-1.0), np.full(4, 2.0, np.float32), f32.fmaf(np.float32(3.0), np.ones(4, np.float32), 0))
    assert acc.dtype == np.float32 and np.array_equal(acc, np.full(4, 1.0, np.float32))
    p = np.float64(np.float32(0.1)) * np.float64(np.float32(3.0))  # exact
    assert f32.fma_product(np.array([p]), np.float32(1.0))[0] == np.float32(1.3)
    x = np.array([[1e8], [1.0], [-1e8]], np.float32)
    assert f32.ordered_sum(x)[0] == np.float32(0.0)  # (1e8 + 1) - 1e8 in float32: the 1 is lost, in order


def test_expf_and_logf_equal_the_c(c_float):
    rng = np.random.default_rng(1)
    n = 200_000
    x = np.concatenate([rng.uniform(-100, 0, n), rng.uniform(-90, 90, n // 4)]).astype(np.float32)
    pos = np.concatenate([_finite(rng, n, -126, 128), rng.uniform(1, 30, n // 4).astype(np.float32)])
    want = c_float(x, pos, np.zeros_like(x))
    assert np.array_equal(f32.expf(x).view(np.uint32), want[:, 2].view(np.uint32))
    assert np.array_equal(f32.logf(np.abs(pos)).view(np.uint32), want[:, 3].view(np.uint32))
