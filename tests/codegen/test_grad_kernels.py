"""The pointwise gradient C kernels (kernels/conv2d_grad_input.c.j2, conv2d_grad_weight.c.j2) against one term at a time.

The kernel takes a pixel's nonzero terms four at a time and, within [L4, P4) / [L3, P3) / [L2, P2), four, three or two pixels
together where that is cheaper (each weight converted once for them all, an absent term adding an exact zero), a last
group of rows made up with factor-0 rows (runtime/tt_float.h tt_fma_tile*; here their C, their Arm assembly on the QEMU
cores in test_firmware_qemu.py). Its sums must equal, bit for bit, the plain loop
that adds (gz[p,o] * s[o]) * (float)(w[o,c] - zw[o]) for o = 0..Co-1 with one fused multiply-add each (tt_fmaf,
docs/design.md §3b), skipping zeros, into a +0: with gz masked by +0 and -0
(sparse, half zeros) and dense, zero points, split weights, input channels not multiples of 4, and in place in the
layouts the planner allows, with the ranges from codegen/bindings/conv2d.py pointwise_tile_range.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import XORSHIFT64, alternating
from tinytrain.codegen.bindings.conv2d import pointwise_tile_range
from tinytrain.codegen.context import environment

RUNTIME = Path(__file__).resolve().parents[2] / "codegen" / "runtime"  # tt_float.h: tt_fmaf

CHECK = r"""
/* Fill the inputs, compute the plain loop's sums into want, then run every kernel (KERNEL_CALLS) with gz at arena + oz
 * and gx at arena + og: the number of kernels whose gx differs from want in any bit. */
static int check(int P, int Ci, int Co, int og, int oz, int density, int Cs, int L4, int P4, int L3, int P3, int L2,
                 int P2,
                 float *arena, float *gz, float *want, float *scale, int8_t *w, int8_t *w_sram, int32_t *zp) {
    (void)Cs; (void)L4; (void)P4; (void)L3; (void)P3; (void)L2; (void)P2;
    for (int i = 0; i < Co * Ci; i++) {
        w[i] = (int8_t)(next() & 0xFF);
        w_sram[i] = (int8_t)(next() & 0xFF);  /* the rows o < Cs the kernel reads instead of w */
    }
    for (int o = 0; o < Co; o++) {
        scale[o] = (float)(next() % 1000 + 1) * 1e-5f;
        zp[o] = HAS_WZP ? (int32_t)(next() % 7) - 3 : 0;
    }
    for (int i = 0; i < P * Co; i++) {  /* masked by +0 and -0 */
        const float v = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
        gz[i] = (int)(next() % 100) < density ? v : ((next() & 1) ? 0.0f : -0.0f);
    }
    for (int p = 0; p < P; p++) {
        for (int c = 0; c < Ci; c++) {
            float x = 0.0f;
            for (int o = 0; o < Co; o++) {
                const int8_t *row = (SPLIT && o < Cs ? w_sram : w) + o * Ci;
                if (gz[p * Co + o] != 0.0f) {
                    x = tt_fmaf(gz[p * Co + o] * scale[o], (float)((int32_t)row[c] - zp[o]), x);
                }
            }
            want[p * Ci + c] = x;
        }
    }
    int differ = 0;
#define RUN(call)                                                                                                  \
    do {                                                                                                           \
        memcpy(arena + oz, gz, sizeof(float) * P * Co);                                                            \
        call;                                                                                                      \
        for (int i = 0; i < P * Ci; i++) {                                                                         \
            if (memcmp(arena + og + i, want + i, sizeof(float)) != 0) {                                            \
                printf("%s: gx[%d] = %.9g, want %.9g\n", #call, i, arena[og + i], want[i]);                      \
                differ++;                                                                                          \
                break;                                                                                             \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)
    KERNEL_CALLS;
#undef RUN
    return differ;
}
"""

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_float.h"

""" + XORSHIFT64 + r"""

KERNELS
""" + CHECK + r"""
int main(int argc, char **argv) {
    const int P = atoi(argv[1]), Ci = atoi(argv[2]), Co = atoi(argv[3]), og = atoi(argv[4]), oz = atoi(argv[5]);
    const int density = atoi(argv[6]), Cs = atoi(argv[7]), L4 = atoi(argv[8]), P4 = atoi(argv[9]);
    const int L3 = atoi(argv[10]), P3 = atoi(argv[11]), L2 = atoi(argv[12]), P2 = atoi(argv[13]);
    (void)argc;
    const int n = (og > oz ? og : oz) + P * (Ci > Co ? Ci : Co);
    float *arena = calloc((size_t)n, sizeof(float)), *gz = malloc(sizeof(float) * P * Co);
    float *want = malloc(sizeof(float) * P * Ci), *scale = malloc(sizeof(float) * Co);
    int8_t *w = malloc((size_t)Co * Ci), *w_sram = malloc((size_t)Co * Ci);
    int32_t *zp = malloc(sizeof(int32_t) * Co);
    const int differ = check(P, Ci, Co, og, oz, density, Cs, L4, P4, L3, P3, L2, P2, arena, gz, want, scale, w, w_sram,
                             zp);
    printf(differ ? "differ\n" : "same\n");
    free(arena); free(gz); free(want); free(scale); free(w); free(w_sram); free(zp);
    return differ;
}
"""


def grad_input_params(gx: str, gz: str, split: bool, has_wzp: bool) -> tuple[list[str], list[str]]:
    """An input-gradient kernel's leading parameters (gx, gz, the weight's rows, their scales and zero points) and the
    harness's arguments for them, gx and gz given as C expressions."""
    params = ["float *gx", "const float *gz", "const int8_t *weight"]
    args = [gx, gz, "SPLIT ? w_sram : w"]
    if split:
        params += ["const int8_t *weight_frozen", "int Cs"]
        args += ["w", "Cs"]
    params.append("const float *w_scale")
    args.append("scale")
    if has_wzp:
        params.append("const int32_t *w_zp")
        args.append("zp")
    return params, args


def kernel_source(split: bool, has_wzp: bool, tiles: tuple[int, ...], host: bool = False) -> tuple[str, str]:
    """The kernel's C (named after its tiles, or the host build's) and a call of it on check's arrays (CHECK)."""
    name = "tt_kernel" + "".join(f"_tiles{n}" for n in tiles) + ("_host" if host else "")
    params, args = grad_input_params("arena + og", "arena + oz", split, has_wzp)
    params += ["int P", "int Ci", "int Co"] + [f"int {b}{n}" for n in tiles for b in "LP"]
    args += ["P", "Ci", "Co"] + [f"{b}{n}" for n in tiles for b in "LP"]
    k = dict(variant="pointwise", split=split, has_wzp=has_wzp, tiles=list(tiles), block=False, host=host)
    text = environment().get_template("kernels/conv2d_grad_input.c.j2").render(
        name=name, k=k, signature=f"static void {name}({', '.join(params)})")
    return text, f"{name}({', '.join(args)})"


TILES = ((), (2,), (3,), (4,), (4, 2), (4, 3, 2))


def input_gradient_program(harness: str, split: bool, has_wzp: bool, host: bool = True) -> str:
    """``harness`` with the kernels of every TILES in it, and the host build's if ``host``, each run by check."""
    kernels, calls = zip(*(kernel_source(split, has_wzp, tiles) for tiles in TILES),
                         *([kernel_source(split, has_wzp, (), host=True)] if host else []))
    src = harness.replace("KERNELS", "\n\n".join(kernels)).replace("KERNEL_CALLS", "; ".join(f"RUN({c})" for c in calls))
    return f"#define SPLIT {int(split)}\n#define HAS_WZP {int(has_wzp)}\n" + src


# (P, Ci, Co): an expand (Ci < Co), a projection (Ci > Co), square, odd pixel counts; input channels that are not
# multiples of 4 (the tiles' last channels in C), an odd number of fours (the assembly's loop entered at its second
# body: 5, 7, 12) and fewer than 4; the host kernel's sixteen-channel blocks with and without a rest (40, 72; 24)
SHAPES = [(16, 24, 72), (17, 72, 24), (9, 40, 40), (6, 5, 3), (13, 7, 9), (8, 12, 20), (5, 3, 8)]


DEPTHWISE_SHAPES = [(3, 1, 4, 4), (3, 1, 8, 8), (3, 1, 5, 7), (3, 1, 1, 1), (5, 1, 4, 4), (5, 1, 3, 6), (7, 1, 4, 4),
                    (7, 1, 2, 3), (3, 2, 8, 8), (7, 2, 8, 8), (5, 2, 7, 5)]


def layouts(p: int, ci: int, co: int) -> dict[str, tuple[int, int]]:
    """(gx, gz) offsets in floats: apart, and in place as close as grad_input_min_read allows (g_x pixel q ends
    before g_z pixel q starts), and g_x reaching only the end of g_z."""
    tight = max((q + 1) * ci - q * co for q in range(p))
    return {"apart": (0, p * ci), "in place": (0, tight), "tail overlap": (0, max(tight, p * ci - 2 * co))}


@pytest.mark.parametrize("shape, variant", alternating(
    ["-".join(map(str, shape)) for shape in SHAPES], [(shape,) for shape in SHAPES],
    {"plain": (False, False), "split": (True, False), "wzp": (False, True), "split-wzp": (True, True)}))
def test_pointwise_input_gradient_equals_one_term_at_a_time(tmp_path, shape, variant):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    p, ci, co = shape
    split, has_wzp = variant
    (tmp_path / "main.c").write_text(input_gradient_program(HARNESS, split, has_wzp))
    exes = []
    for flags in ([], ["-march=native"]):  # the host kernel's C, and its vector path where the host has one
        exes.append(tmp_path / f"k{len(exes)}")
        r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-O2", *flags,
                            "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exes[-1]), "-lm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    for name, (og, oz) in layouts(p, ci, co).items():
        bounds = [b for n in (4, 3, 2) for b in pointwise_tile_range(og * 4, oz * 4, p, ci, co, n)]
        if name == "apart":
            assert bounds == [0, p, 0, p, 0, p]
        for exe in exes:
            for density in (30, 50, 80, 100):
                r = subprocess.run([str(exe), *map(str, (p, ci, co, og, oz, density, co // 2, *bounds))],
                                   capture_output=True, text=True)
                assert r.returncode == 0 and "same" in r.stdout, (exe.name, name, density, bounds, r.stdout + r.stderr)


WEIGHT_HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_float.h"

""" + XORSHIFT64 + r"""

KERNEL

int main(int argc, char **argv) {
    const int P = atoi(argv[1]), Ci = atoi(argv[2]), Co = atoi(argv[3]), c0 = atoi(argv[4]), Cs = atoi(argv[5]);
    const int density = atoi(argv[6]);
    (void)argc;
    const int32_t in_zp = -7;
    const float in_scale = 0.0213f;
    float *gz = malloc(sizeof(float) * P * Co), *gw = malloc(sizeof(float) * Cs * Ci);
    float *want = malloc(sizeof(float) * Cs * Ci);
    int8_t *inp = malloc((size_t)P * Ci);
    for (int i = 0; i < P * Ci; i++) {
        inp[i] = (int8_t)(next() & 0xFF);
    }
    for (int i = 0; i < P * Co; i++) {
        const float v = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
        gz[i] = (int)(next() % 100) < density ? v : 0.0f;
    }
    for (int s = 0; s < Cs; s++) {
        for (int c = 0; c < Ci; c++) {
            float w = 0.0f;
            for (int p = 0; p < P; p++) {
                const float g = gz[p * Co + c0 + s];
                if (g != 0.0f) {
                    w = tt_fmaf(g * in_scale, (float)((int32_t)inp[p * Ci + c] - in_zp), w);
                }
            }
            want[s * Ci + c] = w;
        }
    }
    tt_kernel(gw, gz, inp, P, Ci, Co, c0, Cs, in_zp, in_scale);
    const int differ = memcmp(gw, want, sizeof(float) * Cs * Ci) != 0;
    printf(differ ? "differ\n" : "same\n");
    free(gz); free(gw); free(want); free(inp);
    return differ;
}
"""


@pytest.mark.parametrize("host", [False, True, "native"], ids=["device", "host", "host-native"])
@pytest.mark.parametrize("rows", [1, 3, 4, 9])
def test_pointwise_weight_gradient_equals_one_term_at_a_time(tmp_path, rows, host):
    """kernels/conv2d_grad_weight.c.j2 (pointwise): the device form (four rows and two pixels at a time) and the
    host build's (four rows at a time, tt_fma_rows4_s8: its C, and with -march=native its vector path), with gz
    masked (half zeros, sparser, none) == the plain loop over pixels in order, skipping zero terms, bit for bit."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    k = dict(variant="pointwise", quads=rows >= 4 and not host, host=bool(host))
    text = environment().get_template("kernels/conv2d_grad_weight.c.j2").render(
        name="tt_kernel", k=k, signature="static void tt_kernel(float *gw, const float *gz, const int8_t *inp, int P, "
                                         "int Ci, int Co, int c0, int Cs, int32_t in_zp, float in_scale)")
    (tmp_path / "main.c").write_text(WEIGHT_HARNESS.replace("KERNEL", text))
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *(["-march=native"] if host == "native"
                                                                                   else []), "-ffp-contract=off",
                        "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{RUNTIME}",
                        str(tmp_path / "main.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # inputs in sixteens with and without a rest (the host's vector registers: 24, 40, 32), fewer than 16
    for p, ci, co in ((16, 24, 12), (17, 5, 10), (1, 8, 9), (6, 40, 13), (3, 32, 9)):
        if rows > co:
            continue
        for density in (10, 50, 100):
            r = subprocess.run([str(exe), *map(str, (p, ci, co, co - rows, rows, density))], capture_output=True,
                               text=True)
            assert r.returncode == 0 and "same" in r.stdout, ((p, ci, co), density, r.stdout + r.stderr)


FUSED_HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_fixedpoint.h"
#include "tt_float.h"

""" + XORSHIFT64 + r"""

KERNELS

int main(int argc, char **argv) {
    const int P = atoi(argv[1]), Ci = atoi(argv[2]), Co = atoi(argv[3]), c0 = atoi(argv[4]), Cs = atoi(argv[5]);
    const int density = atoi(argv[6]);
    (void)argc;
    const int32_t in_zp = -7;
    const float in_scale = 0.0213f, mu = 0.9f, lr_floor = 0.1f;
    const uint32_t seed = 11u, stream = 3u, step = 4u, warmup = 2u, steps = 9u;
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
        scale[s] = (float)(next() % 1000 + 1) * 1e-4f;
    }
    for (int i = 0; i < Cs * Ci; i++) {
        w[i] = w_want[i] = (int8_t)(next() & 0xFF);
        m[i] = m_want[i] = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1e-2f;
    }
    tt_grad(gw, gz, inp, P, Ci, Co, c0, Cs, in_zp, in_scale);
    tt_update(w_want, gw, scale, m_want, Cs, Ci, mu, seed, stream, step, warmup, steps, lr_floor);
    float *scratch = malloc(sizeof(float) * 5 * P);  /* the listed pixels */
    tt_fused(w, scale, m, Cs, Ci, mu, seed, stream, step, warmup, steps, lr_floor, gz, inp, P, Ci, Co, c0, in_zp,
             in_scale, scratch);
    free(scratch);
    const int differ = memcmp(w, w_want, (size_t)Cs * Ci) != 0 || memcmp(m, m_want, sizeof(float) * Cs * Ci) != 0;
    printf(differ ? "differ\n" : "same\n");
    free(gz); free(gw); free(scale); free(m); free(m_want); free(inp); free(w); free(w_want);
    return differ;
}
"""
UPDATE_PARAMS = ("float *momentum, int Cs, int E, float mu, uint32_t seed, uint32_t stream, uint32_t step, "
                 "uint32_t warmup, uint32_t steps, float lr_floor")


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "nearest"])
@pytest.mark.parametrize("momentum", [False, True], ids=["plain", "momentum"])
@pytest.mark.parametrize("scheduled", [False, True], ids=["constant", "cosine"])
def test_pointwise_weight_gradient_tiles_fused_with_update_equal_the_two_kernels(tmp_path, stochastic, momentum,
                                                                                  scheduled):
    """kernels/grad_weight_sgd_update_tiles.c.j2 (4 x 4 gradient elements in registers, then updated; zero gz terms
    added, a last tile overlapping the one before it) == the pointwise weight gradient (one row at a time, zero terms
    skipped) then the update over the whole selection: the same weights and momentum bit for bit, with gz masked by
    +0 and -0, rows and inputs not multiples of 4."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    env = environment()
    update = dict(ptype="int8_t", stochastic=stochastic, momentum=momentum, scheduled=scheduled, block=False,
                  host=False, remainder_bits=0)
    kernels = [
        env.get_template("kernels/conv2d_grad_weight.c.j2").render(
            name="tt_grad", k=dict(variant="pointwise", quads=False, host=False),
            signature="static void tt_grad(float *gw, const float *gz, const int8_t *inp, int P, int Ci, int Co, "
                      "int c0, int Cs, int32_t in_zp, float in_scale)"),
        env.get_template("kernels/sgd_update.c.j2").render(
            name="tt_update", k=update,
            signature=f"static void tt_update(int8_t *param, const float *grad, const float *scale, {UPDATE_PARAMS})"),
        env.get_template("kernels/grad_weight_sgd_update_tiles.c.j2").render(
            name="tt_fused", k=update,
            signature=f"static void tt_fused(int8_t *param, const float *scale, {UPDATE_PARAMS}, const float *gz, "
                      "const int8_t *inp, int P, int Ci, int Co, int c0, int32_t in_zp, float in_scale, float *scratch)"),
    ]
    (tmp_path / "main.c").write_text(FUSED_HARNESS.replace("KERNELS", "\n\n".join(kernels)))
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wshadow", "-Werror", "-O2",
                        "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe), "-lm"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for p, ci, co, c0, cs in ((16, 24, 12, 0, 12), (17, 6, 10, 3, 7), (1, 8, 9, 1, 4), (5, 4, 5, 0, 5),
                              (3, 13, 20, 2, 18)):
        for density in (0, 10, 50, 100):  # 4 rows' gz all zero at every pixel (0), most (10), few, none
            r = subprocess.run([str(exe), *map(str, (p, ci, co, c0, cs, density))], capture_output=True, text=True)
            assert r.returncode == 0 and "same" in r.stdout, ((p, ci, co, c0, cs), density, r.stdout + r.stderr)


DEPTHWISE_HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_float.h"

""" + XORSHIFT64 + r"""

KERNEL

int main(int argc, char **argv) {
    const int H = atoi(argv[1]), W = atoi(argv[2]), Ci = atoi(argv[3]), density = atoi(argv[4]);
    const int in_place = atoi(argv[5]), Cs = atoi(argv[6]), B = atoi(argv[7]);
    (void)argc; (void)Cs; (void)B;
    const int KH = KSIZE, KW = KSIZE, PT = DIL * (KSIZE / 2), PL = PT, n = H * W * Ci;
    const int Ho = (H + 2 * PT - DIL * (KH - 1) - 1) / STRIDE + 1, Wo = (W + 2 * PL - DIL * (KW - 1) - 1) / STRIDE + 1;
    const int nz = Ho * Wo * Ci;
    float *gz = malloc(sizeof(float) * nz), *gx = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    float *scale = malloc(sizeof(float) * Ci), *scratch = malloc(sizeof(float) * (B * (H * W + KH * KW)));
    int8_t *w = malloc((size_t)Ci * KH * KW), *w_sram = malloc((size_t)Ci * KH * KW);
    int32_t *zp = malloc(sizeof(int32_t) * Ci);
    for (int i = 0; i < Ci * KH * KW; i++) {
        w[i] = (int8_t)(next() & 0xFF);
        w_sram[i] = (int8_t)(next() & 0xFF);  /* the rows o < Cs the kernel reads instead of w */
    }
    for (int o = 0; o < Ci; o++) {
        scale[o] = (float)(next() % 1000 + 1) * 1e-5f;
        zp[o] = HAS_WZP ? (int32_t)(next() % 7) - 3 : 0;
    }
    for (int i = 0; i < nz; i++) {
        const float v = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
        gz[i] = (int)(next() % 100) < density ? v : ((next() & 1) ? 0.0f : -0.0f);  /* masked by +0 and -0 */
    }
    for (int iy = 0; iy < H; iy++) {  /* one term at a time, in order (i, j), zeros skipped */
        for (int ix = 0; ix < W; ix++) {
            for (int c = 0; c < Ci; c++) {
                const int8_t *row = (SPLIT && c < Cs ? w_sram : w) + c * KH * KW;
                float x = 0.0f;
                for (int i = 0; i < KH; i++) {
                    for (int j = 0; j < KW; j++) {
                        const int ty = iy + PT - i * DIL, tx = ix + PL - j * DIL, oy = ty / STRIDE, ox = tx / STRIDE;
                        if (ty < 0 || ty % STRIDE || oy >= Ho || tx < 0 || tx % STRIDE || ox >= Wo
                            || gz[(oy * Wo + ox) * Ci + c] == 0.0f) {
                            continue;
                        }
                        x = tt_fmaf(gz[(oy * Wo + ox) * Ci + c], (float)((int32_t)row[i * KW + j] - zp[c]) * scale[c], x);
                    }
                }
                want[(iy * W + ix) * Ci + c] = x;
            }
        }
    }
    float *out = gx;
    if (in_place) {  /* gx takes gz's very bytes (the same shape) */
        memcpy(gx, gz, sizeof(float) * n);
    }
    CALL;
    const int differ = memcmp(out, want, sizeof(float) * n) != 0;
    printf(differ ? "differ\n" : "same\n");
    free(gz); free(gx); free(want); free(scale); free(scratch); free(w); free(w_sram); free(zp);
    return differ;
}
"""


@pytest.mark.parametrize("ksize,stride,h,w,variant", alternating(
    [f"{k}-{s}-{h}-{w}" for k, s, h, w in DEPTHWISE_SHAPES], DEPTHWISE_SHAPES,
    {"plain": (False, False), "split-wzp": (True, True)}))
def test_depthwise_input_gradient_plane_equals_one_term_at_a_time(tmp_path, ksize, stride, h, w, variant):
    """kernels/conv2d_grad_input.c.j2 "plane" (one channel at a time, unrolled for the maps; gz in registers or in
    the blocked kernel's scratch, taps in registers or a table: bindings/conv2d.py PLANE_*) == the plain loop in order
    (i, j), zeros skipped, bit for bit: gz masked and dense; stride 1 blocked, in place over gz and apart; stride 2
    (gx apart from gz, the taps' table on the stack)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    from tinytrain.codegen.bindings.conv2d import PLANE_GZ_REGS, PLANE_TAPS_REGS

    split, has_wzp = variant
    ci = 13
    params, args = grad_input_params("out", "in_place ? gx : gz", split, has_wzp)
    params.append("int Ci")
    args.append("Ci")
    # every way a channel's gz and taps may be held: as the binding chooses, and each in registers or scratch
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    block = stride == 1
    shipped = (ho * wo <= PLANE_GZ_REGS, ksize * ksize <= PLANE_TAPS_REGS)
    ways = {shipped, (False, False), (True, True), (True, False), (False, True)} if block else {shipped, (True, True)}
    for regs, taps in ways:
        k = dict(variant="depthwise", kh=ksize, kw=ksize, sh=stride, sw=stride, dh=1, dw=1, pt=ksize // 2,
                 pl=ksize // 2, padded=True, mult=1, split=split, has_wzp=has_wzp, host=False, block=block, plane=True,
                 h=h, w=w, ho=ho, wo=wo, gz_regs=regs, taps_regs=taps, tiles=[])
        scratch = [] if (regs and taps) or not block else ["float *scratch"]
        text = environment().get_template("kernels/conv2d_grad_input.c.j2").render(
            name="tt_kernel", k=k, signature=f"static void tt_kernel({', '.join(params + scratch)})")
        args_k = args + (["scratch"] if scratch else [])
        src = DEPTHWISE_HARNESS.replace("KERNEL", text).replace("CALL", f"tt_kernel({', '.join(args_k)})")
        src = f"#define SPLIT {int(split)}\n#define HAS_WZP {int(has_wzp)}\n#define KSIZE {ksize}\n" \
            f"#define STRIDE {stride}\n#define DIL 1\n" + src
        (tmp_path / "main.c").write_text(src)
        exe = tmp_path / f"k{int(regs)}{int(taps)}"
        r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-O2",
                            "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for in_place in (0, 1) if block else (0,):
            for density in (40, 100):
                r = subprocess.run([str(exe), *map(str, (h, w, ci, density, in_place, 5, 1))],
                                   capture_output=True, text=True)
                assert r.returncode == 0 and "same" in r.stdout, (regs, taps, in_place, density, r.stdout + r.stderr)


def depthwise_program(ksize: int, stride: int, dilation: int, split: bool, has_wzp: bool, host: bool, block: bool,
                      gz: str) -> str:
    """DEPTHWISE_HARNESS with conv2d_grad_input.c.j2's depthwise kernel (multiplier 1, "same" padding) in it, called on
    the harness's arrays, gz the C expression of its input."""
    params, args = grad_input_params("out", gz, split, has_wzp)
    params += ["int H", "int W", "int Ci", "int Ho", "int Wo", "int Co"]
    args += ["H", "W", "Ci", "Ho", "Wo", "Ci"]
    pad = dilation * (ksize // 2)
    k = dict(variant="depthwise", kh=ksize, kw=ksize, sh=stride, sw=stride, dh=dilation, dw=dilation, pt=pad, pl=pad,
             padded=True, mult=1, split=split, has_wzp=has_wzp, host=host, block=block, plane=False, tiles=[])
    text = environment().get_template("kernels/conv2d_grad_input.c.j2").render(
        name="tt_kernel", k=k, signature=f"static void tt_kernel({', '.join(params)})")
    src = DEPTHWISE_HARNESS.replace("KERNEL", text).replace("CALL", f"tt_kernel({', '.join(args)})")
    return (f"#define SPLIT {int(split)}\n#define HAS_WZP {int(has_wzp)}\n#define KSIZE {ksize}\n"
            f"#define STRIDE {stride}\n#define DIL {dilation}\n" + src)


@pytest.mark.parametrize("ksize,stride,dilation,h,w", [(3, 2, 1, 8, 8), (7, 2, 1, 8, 8), (3, 1, 1, 5, 7),
                                                       (5, 2, 1, 7, 5), (3, 1, 2, 6, 6)])
@pytest.mark.parametrize("variant", [(False, False), (True, True)], ids=["plain", "split-wzp"])
def test_depthwise_input_gradient_gathered_equals_one_term_at_a_time(tmp_path, ksize, stride, dilation, h, w,
                                                                     variant):
    """kernels/conv2d_grad_input.c.j2 gathered in C order (multiplier 1: four channels at a time, zero terms added,
    13 channels leaving one alone) == the plain loop in order (i, j), zeros skipped, bit for bit, gz masked and
    dense."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    split, has_wzp = variant
    (tmp_path / "main.c").write_text(depthwise_program(ksize, stride, dilation, split, has_wzp, host=False,
                                                       block=False, gz="gz"))
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-O2",
                        "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for ci in (13, 4, 2):
        for density in (40, 100):
            r = subprocess.run([str(exe), *map(str, (h, w, ci, density, 0, 5, 1))], capture_output=True, text=True)
            assert r.returncode == 0 and "same" in r.stdout, (ci, density, r.stdout + r.stderr)


@pytest.mark.parametrize("ksize,stride,dilation,h,w,block", [(3, 1, 1, 4, 4, True), (3, 1, 1, 5, 7, False),
                                                             (5, 1, 1, 4, 4, True), (7, 1, 1, 4, 4, True),
                                                             (7, 2, 1, 8, 8, False), (3, 2, 1, 7, 8, False),
                                                             (5, 2, 1, 7, 5, False), (3, 1, 2, 6, 6, True)])
@pytest.mark.parametrize("variant", [(False, False), (True, True)], ids=["plain", "split-wzp"])
def test_depthwise_input_gradient_host_equals_one_term_at_a_time(tmp_path, ksize, stride, dilation, h, w, block,
                                                                  variant):
    """kernels/conv2d_grad_input.c.j2 host (a pixel's channels 32 and 8 at a time in AVX2 registers, the rest in C:
    tt_fma_taps_f32; zero terms added) == the plain loop in order (i, j), zeros skipped, bit for bit: gz masked by +0
    and -0 and dense, channel counts with and without rests; blocked in place over gz and apart, gathered; built
    with and without -march=native."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    split, has_wzp = variant
    (tmp_path / "main.c").write_text(depthwise_program(ksize, stride, dilation, split, has_wzp, host=True,
                                                       block=block, gz="in_place ? gx : gz"))
    for flags in ([], ["-march=native"]):
        exe = tmp_path / f"k{len(flags)}"
        r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-O2", *flags,
                            "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        for ci in (77, 40, 13, 3):
            for in_place in (0, 1) if block else (0,):
                for density in (40, 100):
                    r = subprocess.run([str(exe), *map(str, (h, w, ci, density, in_place, 5, 1))],
                                       capture_output=True, text=True)
                    assert r.returncode == 0 and "same" in r.stdout, (flags, ci, in_place, density,
                                                                      r.stdout + r.stderr)


MASK_BIAS_HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tt_float.h"
#include "tt_simd.h"

""" + XORSHIFT64 + r"""

MASK_KERNEL

UNPACKED_KERNEL

BIAS_KERNEL

int main(int argc, char **argv) {
    const int N = atoi(argv[1]), P = atoi(argv[2]), C = atoi(argv[3]);
    (void)argc;
    float *g = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    uint8_t *bits = malloc((size_t)(N + 7) / 8);
    for (int i = 0; i < N; i++) {
        g[i] = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f;
    }
    for (int b = 0; b < (N + 7) / 8; b++) {  /* whole bytes of ones and of zeros among random ones */
        const uint32_t r = (uint32_t)next();
        bits[b] = (uint8_t)(r % 4 == 0 ? 0xFF : (r % 4 == 1 ? 0x00 : r >> 8));
    }
    for (int i = 0; i < N; i++) {
        want[i] = ((bits[i >> 3] >> (i & 7)) & 1u) ? g[i] : 0.0f;
    }
    int differ = 0;
    tt_clamp_mask_packed_f32(out, g, bits, N);  /* apart */
    differ |= memcmp(out, want, sizeof(float) * N) != 0;
    memcpy(out, g, sizeof(float) * N);
    tt_clamp_mask_packed_f32(out, out, bits, N);  /* in place */
    differ |= memcmp(out, want, sizeof(float) * N) != 0;
    int8_t *y = malloc((size_t)N);
    static const int32_t ranges[][2] = {{-128, 127}, {-128, 5}, {-3, 127}, {-90, 60}, {0, 127}};
    for (int k = 0; k < 5; k++) {  /* the unpacked mask: y a saved int8 output, often at the clamp's ends */
        const int32_t lo = ranges[k][0], hi = ranges[k][1];
        for (int i = 0; i < N; i++) {
            const uint32_t r = (uint32_t)next();
            y[i] = (int8_t)(r % 4 == 0 ? lo : (r % 4 == 1 ? hi : (int32_t)(r >> 8) % (hi - lo + 1) + lo));
            want[i] = (y[i] > lo && y[i] < hi) ? g[i] : 0.0f;
        }
        tt_clamp_mask_f32(out, g, y, N, lo, hi);  /* apart */
        differ |= 4 * (memcmp(out, want, sizeof(float) * N) != 0);
        memcpy(out, g, sizeof(float) * N);
        tt_clamp_mask_f32(out, out, y, N, lo, hi);  /* in place */
        differ |= 4 * (memcmp(out, want, sizeof(float) * N) != 0);
    }
    free(y);
    float *x = malloc(sizeof(float) * P * C), *gb = malloc(sizeof(float) * C), *wb = malloc(sizeof(float) * C);
    for (int i = 0; i < P * C; i++) {
        x[i] = ((float)(int32_t)(next() % 2001) - 1000.0f) * 1.37e-3f * (float)(next() % 3);
    }
    for (int c = 0; c < C; c++) {
        float a = 0.0f;
        for (int p = 0; p < P; p++) {
            a += x[p * C + c];
        }
        wb[c] = a;
    }
    tt_bias_grad_f32(gb, x, P, C);
    differ |= 2 * (memcmp(gb, wb, sizeof(float) * C) != 0);
    printf(differ ? "differ %d\n" : "same\n", differ);
    free(g); free(out); free(want); free(bits); free(x); free(gb); free(wb);
    return differ;
}
"""


@pytest.mark.parametrize("host", [False, True, "native"], ids=["device", "host", "host-native"])
def test_clamp_masks_and_bias_grad_equal_the_plain_loops(tmp_path, host):
    """kernels/clamp_mask_packed.c.j2 and clamp_mask.c.j2 (in place: only the zeros written; apart; the unpacked one
    with tt_simd.h's portable tt_inside4, at clamp ranges with ends inside and at int8's; the host forms' C,
    tt_float.h tt_select_*, also built with -march=native) and bias_grad.c.j2 (eight, four, one channels at a time,
    a host build's 32 first, each sum in order p) == the plain loops, bit for bit, at sizes that leave every tail."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    env = environment()
    host, native = bool(host), host == "native"
    mask = env.get_template("kernels/clamp_mask_packed.c.j2").render(
        name="tt_clamp_mask_packed_f32", k={"host": host},
        signature="static void tt_clamp_mask_packed_f32(float *out, const float *g, const uint8_t *bits, int N)")
    bias = env.get_template("kernels/bias_grad.c.j2").render(
        name="tt_bias_grad_f32", k={"host": host}, signature="static void tt_bias_grad_f32(float *gb, const float *g, int P, int C)")
    unpacked = env.get_template("kernels/clamp_mask.c.j2").render(
        name="tt_clamp_mask_f32", k={"host": host},
        signature="static void tt_clamp_mask_f32(float *out, const float *g, const int8_t *y, int N, int32_t act_min, "
                  "int32_t act_max)")
    (tmp_path / "main.c").write_text(MASK_BIAS_HARNESS.replace("MASK_KERNEL", mask).replace("BIAS_KERNEL", bias)
                                     .replace("UNPACKED_KERNEL", unpacked))
    exe = tmp_path / "k"
    r = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *(["-march=native"] if native else []),
                        "-ffp-contract=off", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        f"-I{RUNTIME}", str(tmp_path / "main.c"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for n, p, c in ((1, 1, 1), (8, 3, 4), (61, 7, 8), (1000, 16, 13), (4101, 49, 19), (64, 5, 44), (64, 3, 77)):
        r = subprocess.run([str(exe), str(n), str(p), str(c)], capture_output=True, text=True)
        assert r.returncode == 0 and "same" in r.stdout, (n, p, c, r.stdout + r.stderr)
