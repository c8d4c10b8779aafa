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

RUNTIME = Path(__file__).resolve().parents[2] / "codegen" / "runtime"
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
#include "tt_simd.h"

""" + XORSHIFT64 + r"""

/* A gradient value: mostly ordinary, some +0, -0, NaN (its payload must pass the mask unchanged) and infinities. */
static inline float grad_value(void) {
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
                uint8_t packed[MAXN / 8 + 1], packed_want[MAXN / 8 + 1] = {0};
                for (int i = 0; i < n; i++) {
                    packed_want[i >> 3] |= (uint8_t)((y[i] > bounds[b][0] && y[i] < bounds[b][1]) << (i & 7));
                }
                tt_pack_clamp_mask(packed, y, n, bounds[b][0], bounds[b][1]);
                tested++;
                if (memcmp(packed, packed_want, (size_t)(n + 7) / 8) != 0 && differ++ < 5) {
                    printf("pack_clamp_mask: n %d differ\n", n);
                }
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
    the select of ops/clamp_mask.py, with out apart from g, on it and starting before it; bounds at the int8 ends.
    pack_clamp_mask.c.j2, host (tt_pack_inside_s8): the bits of the same comparisons, the last byte's unused ones 0."""
    kernels = [
        render("clamp_mask", "tt_clamp_mask", "float *out, const float *g, const int8_t *y, int N, int32_t act_min, "
                                              "int32_t act_max", host=True),
        render("clamp_mask_packed", "tt_clamp_mask_packed", "float *out, const float *g, const uint8_t *bits, int N",
               host=True),
        render("pack_clamp_mask", "tt_pack_clamp_mask", "uint8_t *bits, const int8_t *y, int N, int32_t act_min, "
                                                        "int32_t act_max", host=True),
        render("mean_grad_masked", "tt_mean_grad_masked", "float *gx, const float *g, const uint8_t *bits, int P, int C",
               host=True),
    ]
    run_program(tmp_path, MASKS_MAIN.replace("KERNELS", "\n\n".join(kernels)), march)


FUSED_MAIN = HEADER + r"""
KERNELS

int main(void) {
    /* (P, Ci, Co, c0, Cs): inputs in sixteens with and without a rest and fewer; rows a multiple of 4 and not */
    static const int shapes[][5] = {{16, 56, 40, 3, 30}, {16, 64, 9, 0, 9}, {5, 7, 6, 1, 5}, {17, 33, 4, 0, 4},
                                    {1, 16, 3, 2, 1}};
    const int32_t in_zp = -7;
    const float in_scale = 0.0213f, mu = 0.9f, lr_floor = 0.1f;
    const uint32_t seed = 11u, stream = 3u, step = 4u, warmup = 2u, steps = 9u;
    long tested = 0, differ = 0;
    for (unsigned sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int P = shapes[sh][0], Ci = shapes[sh][1], Co = shapes[sh][2], c0 = shapes[sh][3], Cs = shapes[sh][4];
        for (int density = 0; density <= 100; density += 25) {
            float *gz = malloc(sizeof(float) * P * Co), *gw = malloc(sizeof(float) * Cs * Ci);
            float *scale = malloc(sizeof(float) * Cs), *m = malloc(sizeof(float) * Cs * Ci);
            float *m_want = malloc(sizeof(float) * Cs * Ci);
            int8_t *inp = malloc((size_t)P * Ci), *w = malloc((size_t)Cs * Ci), *w_want = malloc((size_t)Cs * Ci);
            for (int i = 0; i < P * Ci; i++) {
                inp[i] = (int8_t)(next() & 0xFF);
            }
            for (int i = 0; i < P * Co; i++) {
                const float v = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
                gz[i] = (int)(next() % 100) < density ? v : ((next() & 1) ? 0.0f : -0.0f);
            }
            for (int s = 0; s < Cs; s++) {
                scale[s] = (float)(next() % 1000 + 1) * 1e-3f;
            }
            for (int i = 0; i < Cs * Ci; i++) {
                w[i] = w_want[i] = (int8_t)(next() & 0xFF);
                m[i] = m_want[i] = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1e-2f;
            }
            tt_grad(gw, gz, inp, P, Ci, Co, c0, Cs, in_zp, in_scale);
            tt_update(w_want, gw, scale, m_want, Cs, Ci, mu, seed, stream, step, warmup, steps, lr_floor, 0);
            tt_fused(w, scale, m, Cs, Ci, mu, seed, stream, step, warmup, steps, lr_floor, gz, inp, P, Ci, Co, c0,
                     in_zp, in_scale);
            tested++;
            if ((memcmp(w, w_want, (size_t)Cs * Ci) != 0 || memcmp(m, m_want, sizeof(float) * Cs * Ci) != 0)
                && differ++ < 5) {
                printf("shape %u density %d differ\n", sh, density);
            }
            free(gz); free(gw); free(scale); free(m); free(m_want); free(inp); free(w); free(w_want);
        }
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""
UPDATE_PARAMS = ("float *momentum, int Cs, int E, float mu, uint32_t seed, uint32_t stream, uint32_t step, "
                 "uint32_t warmup, uint32_t steps, float lr_floor")
GRAD_PARAMS = "const float *gz, const int8_t *inp, int P, int Ci, int Co, int c0, int Cs, int32_t in_zp, float in_scale"


@pytest.mark.parametrize("march", MARCH)
@pytest.mark.parametrize("update", [(True, False, False), (True, True, True), (False, False, False)],
                         ids=["stochastic", "stochastic-momentum-cosine", "nearest"])
def test_pointwise_weight_gradient_in_host_blocks_fused_with_update_equals_the_two_kernels(tmp_path, march, update):
    """kernels/grad_weight_sgd_update.c.j2 with host_rows (bindings/grad_weight_sgd_update.py: a host build's blocks
    of four rows on the stack) over the host gradient (conv2d_grad_weight.c.j2, four rows in tt_fma_rows4_s8) and the
    host update of a block (sgd_update.c.j2) == the device gradient then the device update over the whole selection:
    the same weights and momentum bit for bit, gz masked by +0 and -0, rows and inputs not multiples of 4 or 16."""
    from tinytrain.codegen.bindings.grad_weight_sgd_update import _BLOCK_GRAD_ARGS, _BLOCK_UPDATE_ARGS, HOST_BLOCK_ROWS

    stochastic, momentum, scheduled = update
    consts = dict(ptype="int8_t", stochastic=stochastic, momentum=momentum, scheduled=scheduled, remainder_bits=0)
    update_sig = f"int8_t *param, const float *grad, const float *scale, {UPDATE_PARAMS}, int i0"
    names = lambda sig: [p.split()[-1].lstrip("*") for p in sig.split(", ")]  # noqa: E731
    kernels = [
        render("conv2d_grad_weight", "tt_grad", f"float *gw, {GRAD_PARAMS}", variant="pointwise", quads=False,
               host=False),
        render("sgd_update", "tt_update", update_sig, **consts, block=False, host=False),
        render("conv2d_grad_weight", "tt_grad_host", f"float *gw, {GRAD_PARAMS}", variant="pointwise", host=True),
        render("sgd_update", "tt_update_block", update_sig, **consts, block=stochastic, host=stochastic),
        render("grad_weight_sgd_update", "tt_fused", f"int8_t *param, const float *scale, {UPDATE_PARAMS}, "
               f"{GRAD_PARAMS.replace(', int Cs', '')}", grad_kernel="tt_grad_host", update_kernel="tt_update_block",
               grad_args=[_BLOCK_GRAD_ARGS.get(n, n) for n in names(f"float *gw, {GRAD_PARAMS}")],
               update_args=[_BLOCK_UPDATE_ARGS.get(n, n) for n in names(update_sig)], host_rows=HOST_BLOCK_ROWS),
    ]
    source = "#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n" + FUSED_MAIN.replace("KERNELS",
                                                                                            "\n\n".join(kernels))
    run_program(tmp_path, source, march)


ADD_MAIN = HEADER.replace('#include "tt_float.h"', '#include "tt_rows.h"') + r"""
KERNELS

int main(void) {
    enum { MAXN = 1100 };
    static int8_t arena[3 * MAXN], want[MAXN];
    static int32_t term1[256], term2[256];
    static const int sizes[] = {1, 7, 8, 9, 16, 100, 1029, 1100};
    long tested = 0, differ = 0;
    for (int shift = -31; shift <= 1; shift++) {
        const int32_t multiplier = (int32_t)((1u << 30) + (uint32_t)(next() % (1u << 30)));
        const int32_t out_zp = (int32_t)(next() % 256) - 128, lo = -100 + (int32_t)(next() % 50), hi = 60;
        const int mag = shift > -2 ? 4 : 12 + (int)(next() % 18);  /* the terms' bits: outputs inside and past int8 */
        for (int v = 0; v < 256; v++) {
            term1[v] = (int32_t)(next() % (2u << mag)) - (1 << mag);
            term2[v] = (int32_t)(next() % (2u << mag)) - (1 << mag);
        }
        for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            const int n = sizes[s];
            for (int layout = 0; layout < 3; layout++) {  /* out apart, on in1, on in2 */
                int8_t *in1 = arena, *in2 = arena + MAXN, *out = layout == 0 ? arena + 2 * MAXN : arena + (layout - 1) * MAXN;
                for (int i = 0; i < n; i++) {
                    in1[i] = (int8_t)(next() & 0xFF);
                    in2[i] = (int8_t)(next() & 0xFF);
                }
                for (int sat = 0; sat < 2; sat++) {
                    for (int i = 0; i < n; i++) {
                        const int32_t raw = term1[(uint8_t)in1[i]] + term2[(uint8_t)in2[i]];
                        const int32_t r = tt_requantize_single_s8(raw, multiplier, shift) + out_zp;
                        want[i] = (int8_t)(sat ? tt_sat_s8(r) : tt_clamp(r, lo, hi));
                    }
                    static int8_t save1[MAXN], save2[MAXN];
                    memcpy(save1, in1, (size_t)n);
                    memcpy(save2, in2, (size_t)n);
                    if (sat) {
                        tt_add_sat(out, in1, in2, term1, term2, n, out_zp, multiplier, shift);
                    } else {
                        tt_add(out, in1, in2, term1, term2, n, out_zp, multiplier, shift, lo, hi);
                    }
                    tested++;
                    if (memcmp(out, want, (size_t)n) != 0 && differ++ < 5) {
                        printf("shift %d n %d layout %d sat %d differ\n", shift, n, layout, sat);
                    }
                    memcpy(in1, save1, (size_t)n);
                    memcpy(in2, save2, (size_t)n);
                }
            }
        }
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", MARCH)
def test_add_equals_the_single_rounding_per_element(tmp_path, march):
    """kernels/add.c.j2, host (tt_rows.h tt_add_single_s8_v: eight at a time, the product's high word
    from even and odd lanes) == tt_requantize_single_s8 of each element's terms, clamped or saturated, bit for bit:
    every output shift (those above -2 left to the C loop), outputs inside and past int8, in place over either input."""
    sig = ("int8_t *out, const int8_t *in1, const int8_t *in2, const int32_t *term1, const int32_t *term2, int N, "
           "int32_t out_zp, int32_t out_multiplier, int32_t out_shift")
    kernels = [render("add", "tt_add", sig + ", int32_t act_min, int32_t act_max", rq_out="tt_requantize_single",
                      sat=False, host=True),
               render("add", "tt_add_sat", sig, rq_out="tt_requantize_single", sat=True, host=True)]
    run_program(tmp_path, ADD_MAIN.replace("KERNELS", "\n\n".join(kernels)), march)


UPDATE_MAIN = HEADER + r"""
KERNELS

int main(void) {
    static const int shapes[][2] = {{448, 1}, {7, 1}, {1, 1}, {9, 56}, {3, 5}, {2, 33}};  /* (Cs, E): biases, weights */
    const float mu = 0.9f, lr_floor = 0.1f;
    const uint32_t seed = 11u, stream = 3u, warmup = 2u, steps = 9u;
    long tested = 0, differ = 0;
    for (unsigned sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int Cs = shapes[sh][0], E = shapes[sh][1], n = Cs * E;
        for (uint32_t step = 0; step < 12; step += 5) {
            PTYPE *p = malloc(sizeof(PTYPE) * n), *p_want = malloc(sizeof(PTYPE) * n);
            float *grad = malloc(sizeof(float) * n), *scale = malloc(sizeof(float) * Cs);
            float *m = malloc(sizeof(float) * n), *m_want = malloc(sizeof(float) * n);
            for (int s = 0; s < Cs; s++) {  /* steps of a few LSB, some past +-2^30, and 1 */
                scale[s] = s % 5 == 2 ? 1.0f : (float)(next() % 1000 + 1) * (s % 7 == 3 ? 1e7f : 1e-2f);
            }
            const int i0 = (int)(next() % 1000);
            const uint32_t key = tt_sr_key(seed, step, stream);
            for (int i = 0; i < n; i++) {
                const uint32_t r = (uint32_t)next();
                p[i] = p_want[i] = (PTYPE)(sizeof(PTYPE) == 1 ? (int32_t)(r & 0xFF) - 128 : (int32_t)r >> (r % 31));
                grad[i] = i % 11 == 5 ? grad_value() : ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
                if (i % 3 == 1) {  /* at scale 1, v + u exactly 0 or 1: the floor of an integer */
                    grad[i] = (float)(i & 1) - tt_sr_uniform(key, (uint32_t)(BLOCK ? i0 + i : i));
                }
                m[i] = m_want[i] = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1e-2f;
            }
            tt_device(p_want, grad, scale, m_want, Cs, E, mu, seed, stream, step, warmup, steps, lr_floor, i0);
            tt_host(p, grad, scale, m, Cs, E, mu, seed, stream, step, warmup, steps, lr_floor, i0);
            tested++;
            if ((memcmp(p, p_want, sizeof(PTYPE) * n) != 0 || memcmp(m, m_want, sizeof(float) * n) != 0)
                && differ++ < 5) {
                printf("Cs %d E %d step %u differ\n", Cs, E, step);
            }
            free(p); free(p_want); free(grad); free(scale); free(m); free(m_want);
        }
    }
    printf("tested %ld differ %ld\n", tested, differ);
    return differ != 0;
}
"""


@pytest.mark.parametrize("march", MARCH)
@pytest.mark.parametrize("ptype", ["int8_t", "int32_t"])
@pytest.mark.parametrize("variant", [(False, False, False), (True, False, False), (False, True, True)],
                         ids=["plain", "block", "momentum-cosine"])
def test_host_stochastic_update_equals_the_device_one(tmp_path, march, ptype, variant):
    """kernels/sgd_update.c.j2, host (each row's draws and clamps in one loop and its floors in another, tt_float.h
    tt_step_clamp / tt_floor_of_clamped; rows of one element, biases, all in the two loops) == the device form
    (tt_floor_clamped per element), stochastic rounding: the same parameters and momentum bit for bit, with NaN,
    infinite and huge steps, v + u exact integers (a floor that is its argument), int8 weights and int32 biases, a
    block's draws from i0 on."""
    block, momentum, scheduled = variant
    consts = dict(ptype=ptype, stochastic=True, momentum=momentum, scheduled=scheduled, block=block, remainder_bits=0)
    sig = f"{ptype} *param, const float *grad, const float *scale, {UPDATE_PARAMS}, int i0"
    kernels = [render("sgd_update", "tt_device", sig, **consts, host=False),
               render("sgd_update", "tt_host", sig, **consts, host=True)]
    source = ("#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n" + f"#define PTYPE {ptype}\n"
              + f"#define BLOCK {int(block)}\n"
              + UPDATE_MAIN.replace("KERNELS", "\n\n".join(kernels)))
    run_program(tmp_path, source, march)
