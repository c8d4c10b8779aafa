"""The host build's own backward, update and elementwise kernels (``host`` in their templates, docs/design.md §4)
against plain C loops of their specs, bit for bit: each built without and with -march=native (the C paths, and the
AVX2 paths where the host has them), on sizes with rests and in the in-place layouts the planner allows."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import XORSHIFT64
from tinytrain.codegen.context import environment

RUNTIME = Path(__file__).resolve().parents[1] / "codegen" / "runtime"
MARCH = ["", "-march=native"]


def render(template: str, name: str, signature: str, **k) -> str:
    return environment().get_template(f"kernels/{template}.c.j2").render(name=name, k=k,
                                                                         signature=f"static void {name}({signature})")


def run_program(tmp_path: Path, source: str, march: str, *args) -> str:
    """Build ``source`` (with the runtime headers) as the host build does, plus sanitizers; run it; its output."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    (tmp_path / "main.c").write_text(source)
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O3", *([march] if march else []),
                        "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0 and "differ 0" in r.stdout, r.stdout + r.stderr
    return r.stdout


HEADER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_fixedpoint.h"
#include "tt_float.h"

""" + XORSHIFT64 + r"""

/* A gradient value: mostly ordinary, some +0, -0, NaN (its payload must pass the mask unchanged) and infinities. */
static float grad_value(void) {
    const uint32_t k = (uint32_t)(next() % 16);
    uint32_t bits = (uint32_t)next();
    if (k == 0) { bits = 0u; } else if (k == 1) { bits = 0x80000000u; } else if (k == 2) { bits |= 0x7F800001u; }
    else if (k == 3) { bits = 0xFF800000u; } else if (k > 3) { bits = (bits & 0x807FFFFFu) | (0x3Cu + k) << 23; }
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}
"""

MASKS_MAIN = HEADER + r"""
KERNELS

static long differ = 0, tested = 0;

static void compare(const char *what, int n, int layout, const float *got, const float *want) {
    tested++;
    if (memcmp(got, want, sizeof(float) * (size_t)n) != 0 && differ++ < 5) {
        printf("%s: n %d layout %d differ\n", what, n, layout);
    }
}

int main(void) {
    static const int sizes[] = {1, 7, 8, 9, 31, 32, 33, 63, 100, 448, 1029};
    enum { PAD = 40, MAXN = 1029 };
    static float arena[2 * MAXN + 2 * PAD], g[MAXN], want[MAXN];
    static int8_t y[MAXN];
    static uint8_t bits[MAXN / 8 + 1];
    static const int32_t bounds[][2] = {{-128, 127}, {-128, 5}, {-20, 127}, {-3, 3}, {0, 1}};
    for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int n = sizes[s];
        for (int layout = 0; layout < 4; layout++) {
            /* out apart from g, on g, starting 1 or 8 floats before it (elementwise min_read) */
            const int og = PAD, oo = layout == 0 ? PAD + MAXN + 3 : PAD - (int[]){0, 0, 1, 8}[layout];
            for (int b = 0; b < 5; b++) {
                for (int i = 0; i < n; i++) {
                    g[i] = grad_value();
                    y[i] = (int8_t)(next() % 5 == 0 ? bounds[b][(next() & 1)] : (int32_t)(next() & 0xFF) - 128);
                    want[i] = y[i] > bounds[b][0] && y[i] < bounds[b][1] ? g[i] : 0.0f;
                }
                memcpy(arena + og, g, sizeof(float) * (size_t)n);
                tt_clamp_mask(arena + oo, arena + og, y, n, bounds[b][0], bounds[b][1]);
                compare("clamp_mask", n, layout, arena + oo, want);
            }
            memset(bits, 0, sizeof bits);
            for (int i = 0; i < n; i++) {
                g[i] = grad_value();
                const int on = next() % 3 != 0;
                bits[i >> 3] |= (uint8_t)(on << (i & 7));
                want[i] = on ? g[i] : 0.0f;
            }
            memcpy(arena + og, g, sizeof(float) * (size_t)n);
            tt_clamp_mask_packed(arena + oo, arena + og, bits, n);
            compare("clamp_mask_packed", n, layout, arena + oo, want);
        }
    }
    static const int shapes[][2] = {{16, 448}, {4, 24}, {9, 7}, {1, 8}, {49, 20}, {3, 1}};
    static float gx[16 * 448], gm[448], mwant[16 * 448];
    static uint8_t mbits[16 * 448 / 8];
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int P = shapes[s][0], C = shapes[s][1];
        for (int c = 0; c < C; c++) {
            gm[c] = grad_value();
        }
        memset(mbits, 0, sizeof mbits);
        for (int i = 0; i < P * C; i++) {
            const int on = next() % 3 != 0;
            mbits[i >> 3] |= (uint8_t)(on << (i & 7));
            mwant[i] = on ? gm[i % C] / (float)P : 0.0f;
        }
        tt_mean_grad_masked(gx, gm, mbits, P, C);
        compare("mean_grad_masked", P * C, 0, gx, mwant);
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", MARCH)
def test_clamp_masks_equal_the_plain_selects(tmp_path, march):
    """kernels/clamp_mask.c.j2, clamp_mask_packed.c.j2 and mean_grad_masked.c.j2, host (tt_float.h
    tt_select_inside_f32, tt_select_bits_f32): every element g's very bits (NaN payloads, -0, infinities) or +0, as
    the select of ops/clamp_mask.py, with out apart from g, on it and starting before it; bounds at the int8 ends."""
    kernels = [
        render("clamp_mask", "tt_clamp_mask", "float *out, const float *g, const int8_t *y, int N, int32_t act_min, "
                                              "int32_t act_max", host=True),
        render("clamp_mask_packed", "tt_clamp_mask_packed", "float *out, const float *g, const uint8_t *bits, int N",
               host=True),
        render("mean_grad_masked", "tt_mean_grad_masked", "float *gx, const float *g, const uint8_t *bits, int P, int C",
               host=True),
    ]
    run_program(tmp_path, MASKS_MAIN.replace("KERNELS", "\n\n".join(kernels)), march)
