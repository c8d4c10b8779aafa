"""tt_fmaf (codegen/runtime/tt_float.h) without a fused multiply-add instruction == the instruction, bit for bit.

The fp32 backward's sums take their terms with tt_fmaf (docs/design.md §3b). Cortex-M4F / M7 / M55 and an x86 host
built with -march=native have the instruction; any other build computes it in double rounded to odd. The two must
give the same float32 for every input: random bit patterns (NaNs, infinities, subnormals included), near-cancelling
sums, and sums that land within a hair of half a float32 ulp, where rounding a double sum once more (newlib's fmaf)
gives the wrong neighbour (made on purpose: products exactly half-way between two float32s, plus a hair).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import XORSHIFT64

RUNTIME = Path(__file__).resolve().parents[2] / "codegen" / "runtime"

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#undef __FP_FAST_FMAF  /* tt_float.h's software form; __builtin_fmaf stays the instruction */
#include "tt_float.h"

""" + XORSHIFT64 + r"""

static float bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static long bad;

static void check(float a, float b, float c) {
    const float x = tt_fmaf(a, b, c), y = __builtin_fmaf(a, b, c);
    if (memcmp(&x, &y, sizeof x) != 0 && !(x != x && y != y)) {
        if (bad++ < 5) {
            printf("tt_fmaf(%a, %a, %a) = %a, want %a\n", a, b, c, x, y);
        }
    }
}

int main(void) {
    for (long i = 0; i < 1000000; i++) {
        const float a = bits((uint32_t)next()), b = bits((uint32_t)next());
        check(a, b, bits((uint32_t)next()));
        check(a, b, -(a * b));
        check(a, b, -(a * b) * (1.0f + 0x1p-23f));
        /* a * b exact in 48 bits, c = -round(a * b): the sum is the product's low bits, or a hair off half an ulp */
        const float u = 1.0f + (float)(next() % (1u << 23)) * 0x1p-23f, v = 1.0f + (float)(next() % (1u << 12)) * 0x1p-23f;
        check(u, v, -(u * v));
        check(u, v, (float)((double)(next() % 100) * 0x1p-60));
        /* (1 + k 2^-23)(1 + j 2^-23) with k j = 2^22 * odd lies exactly half-way between two float32s; c a hair
         * off it (below a double's ulp) decides the rounding, which a double sum rounded once more gets wrong */
        const int e = (int)(next() % 23);
        const uint32_t k = (((uint32_t)next() % (1u << (22 - e))) | 1u) << e, j = ((uint32_t)next() % (1u << e)) | 1u;
        const float m = 1.0f + (float)k * 0x1p-23f, n = 1.0f + (float)(j << (22 - e)) * 0x1p-23f;
        const float hair = (float)((double)(next() % 1000 + 1) * 0x1p-80);
        check(m, n, next() & 1 ? hair : -hair);
    }
    printf("%ld differ\n", bad);
    return bad != 0;
}
"""


def test_software_fmaf_equals_the_instruction(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    probe = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True)
    if "__FP_FAST_FMAF " not in probe.stdout:
        pytest.skip("this host has no fused multiply-add instruction to compare with")
    (tmp_path / "main.c").write_text(HARNESS)
    exe = tmp_path / "fmaf"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-march=native", "-ffp-contract=off",
                        f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0 and "0 differ" in r.stdout, r.stdout
